"""``dpconvert card show | verify | export | keygen | sign``: one privacy card."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dpconvert.errors import DpconvertError

from .app import _exit_usage, card_app
from .console import out


@card_app.command("show")
def card_show(
    file: Annotated[Path, typer.Argument(help="A model (.onnx), a data set (.npz), a *.card.json or a Hub README.md.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON instead of Markdown.")] = False,
) -> None:
    """Pretty-print a card (it is not verified here: `dpconvert card verify` or `audit` does that)."""
    from dpconvert.zoo_cards import render_markdown
    from dpconvert.zoo_cards.read import read_card

    card = read_card(file)
    if as_json:
        print(card.to_json())
        return
    from rich.markdown import Markdown

    out.print(Markdown(render_markdown(card).split("---\n", 2)[-1]), soft_wrap=False)  # wrapped at the terminal's width, never cut


@card_app.command("verify")
def card_verify(
    file: Annotated[Path, typer.Argument(help="A model file, a data set (.npz) or its *.card.json.")],
    max_eps: Annotated[Optional[float], typer.Option("--max-eps", help="Fail if ε exceeds this.")] = None,
    max_delta: Annotated[Optional[float], typer.Option("--max-delta", help="Fail if δ exceeds this (default: the ceiling, 1e-4).")] = None,
    require_scope: Annotated[Optional[str], typer.Option("--require-scope", help="Require this scope: record or query.")] = None,
    allow_seeded_noise: Annotated[bool, typer.Option("--allow-seeded-noise", help="Let a card with seeded (not secret) noise pass.")] = False,
    trusted_keys: Annotated[Optional[Path], typer.Option("--trusted-keys", help="A folder of *.pub keys whose signatures are accepted.")] = None,
    require_signature: Annotated[bool, typer.Option("--require-signature", help="Fail unless signed by a key in --trusted-keys.")] = False,
) -> None:
    """Run the audit checks on one model or data set, and list every check."""
    from dpconvert.auditing.audit import Policy, audit_model, discover

    from .render import print_audit

    try:
        (target,) = discover([str(file)])
        policy = Policy(max_eps=max_eps, max_delta=max_delta, require_scope=require_scope, allow_seeded_noise=allow_seeded_noise,
                        trusted_keys=str(trusted_keys) if trusted_keys else None, require_signature=require_signature)
        result = audit_model(target, policy)
    except DpconvertError as e:
        _exit_usage(str(e))
    print_audit([result])
    for c in result.checks:
        out.print(f"{'ok ' if c.ok else 'FAIL'} {c.name}" + (f": {c.detail}" if c.detail else ""), markup=False)
    if not result.passed:
        raise typer.Exit(1)


@card_app.command("export")
def card_export(
    file: Annotated[Path, typer.Argument(help="An ONNX model with its card, or a *.card.json.")],
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Where to write the model card (e.g. README.md of a Hub repository).")],
    fmt: Annotated[str, typer.Option("--format", help="hf: a Hugging Face model card (YAML front matter + Markdown).")] = "hf",
    license: Annotated[str, typer.Option("--license", help="The license identifier for the front matter (e.g. apache-2.0).")] = "other",
    force: Annotated[bool, typer.Option("--force", help="Replace OUT if it exists.")] = False,
) -> None:
    """Write a model card for where people look: a Hugging Face README with the privacy section and metrics.
    `dpconvert audit` fails a README that was edited afterwards: it is a copy of the card."""
    from dpconvert.io.atomic import AtomicOutputs
    from dpconvert.zoo_cards.hf import check_license, render_hf_model_card
    from dpconvert.zoo_cards.read import read_card

    if fmt != "hf":
        raise DpconvertError(f"unknown --format {fmt!r}; choose hf")
    check_license(license)
    if out_path.exists() and not force:
        raise DpconvertError(f"{out_path} exists; give --force to replace it, or another --out")
    card = read_card(file)
    if card.kind != "model":
        raise DpconvertError(f"{file}: a data set's card has no Hugging Face model card; publish the .npz with its .card.json")
    with AtomicOutputs() as o:
        o.write(out_path, render_hf_model_card(card, license=license))
    out.print(f"wrote {out_path}", markup=False)


@card_app.command("keygen")
def card_keygen(path: Annotated[Path, typer.Argument(help="Where to write the private key (mode 0600); the public key goes to PATH.pub.")]) -> None:
    """Create an Ed25519 key pair for signing cards. Keep PATH secret (a CI secret); publish PATH.pub to auditors."""
    from dpconvert.zoo_cards.signing import generate_key

    priv, pub, kid = generate_key(path)
    out.print(f"private key {priv} (keep secret), public key {pub}, key id {kid}", markup=False)


@card_app.command("sign")
def card_sign(
    model: Annotated[Path, typer.Argument(help="An .onnx model written by dpconvert, or a data set (.npz) written by dpconvert synth.")],
    key: Annotated[Path, typer.Option("--key", help="The Ed25519 private key (dpconvert card keygen).")],
) -> None:
    """Sign a card: every copy (the embedded one, OUT.card.json, OUT.card.md, a Hub README beside it) is rewritten together."""
    from dpconvert.zoo_cards.signing import load_private_key, sign_model

    signed = sign_model(model, load_private_key(key))
    out.print(f"signed {model} with key {signed.data['signature']['key_id']}", markup=False)
