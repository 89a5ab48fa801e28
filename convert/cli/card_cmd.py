"""``dpconvert card show | verify | export | keygen | sign``: one privacy card."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpconvert.errors import DpconvertError

from .app import _exit_usage, card_app
from .console import out
from .generated import build, given, own, params_of


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


def _verify_params() -> list:
    from dpconvert.auditing.audit import Policy

    return [own("file", type=Path, argument=True, default=..., help="A model file, a data set (.npz) or its *.card.json."),
            *params_of(Policy, only={"max_eps", "max_delta", "require_scope", "allow_seeded_noise", "trusted_keys", "require_signature"})]


VERIFY = _verify_params()


def _card_verify(values: dict) -> None:
    """Run the audit checks on one model or data set, and list every check."""
    from dpconvert.auditing.audit import Policy, audit_model, discover

    from .render import print_audit

    try:
        (target,) = discover([str(values["file"])])
        result = audit_model(target, Policy(**given(VERIFY, values, Policy)))
    except DpconvertError as e:
        _exit_usage(str(e))
    print_audit([result])
    for c in result.checks:
        out.print(f"{'ok ' if c.ok else 'FAIL'} {c.name}" + (f": {c.detail}" if c.detail else ""), markup=False)
    if not result.passed:
        raise typer.Exit(1)


build(card_app, "verify", VERIFY, _card_verify, _card_verify.__doc__)


EXPORT = [own("file", type=Path, argument=True, default=..., help="An ONNX model with its card, or a *.card.json."),
          own("out_path", "--out", "-o", type=Path, default=..., help="Where to write the model card (e.g. README.md of a Hub repository)."),
          own("fmt", "--format", default="hf", help="hf: a Hugging Face model card (YAML front matter + Markdown). Default: hf."),
          own("license", default="other", help="The license identifier for the front matter (e.g. apache-2.0). Default: other."),
          own("force", type=bool, default=False, help="Replace OUT if it exists.")]


def _card_export(values: dict) -> None:
    """Write a model card for where people look: a Hugging Face README with the privacy section and metrics.
    `dpconvert audit` fails a README that was edited afterwards: it is a copy of the card."""
    from dpconvert.io.atomic import AtomicOutputs
    from dpconvert.zoo_cards.hf import check_license, render_hf_model_card
    from dpconvert.zoo_cards.read import read_card

    file, out_path, license = values["file"], values["out_path"], values["license"]
    if values["fmt"] != "hf":
        raise DpconvertError(f"unknown --format {values['fmt']!r}", fix="choose hf")
    check_license(license)
    if out_path.exists() and not values["force"]:
        raise DpconvertError(f"{out_path} exists", fix="give --force to replace it, or another --out")
    card = read_card(file)
    if card.kind != "model":
        raise DpconvertError(f"{file}: a data set's card has no Hugging Face model card", fix="publish the .npz with its .card.json")
    with AtomicOutputs() as o:
        o.write(out_path, render_hf_model_card(card, license=license))
    out.print(f"wrote {out_path}", markup=False)


build(card_app, "export", EXPORT, _card_export, _card_export.__doc__)


@card_app.command("keygen")
def card_keygen(path: Annotated[Path, typer.Argument(help="Where to write the private key (mode 0600); the public key goes to PATH.pub.")]) -> None:
    """Create an Ed25519 key pair for signing cards. Keep PATH secret (a CI secret); publish PATH.pub to auditors."""
    from dpconvert.zoo_cards.signing import generate_key

    priv, pub, kid = generate_key(path)
    out.print(f"private key {priv} (keep secret), public key {pub}, key id {kid}", markup=False)


SIGN = [own("model", type=Path, argument=True, default=...,
             help="An .onnx model written by dpconvert, or a data set (.npz) written by dpconvert synth."),
         own("key", type=Path, default=..., help="The Ed25519 private key (dpconvert card keygen).")]


def _card_sign(values: dict) -> None:
    """Sign a card: every copy (the embedded one, OUT.card.json, OUT.card.md, a Hub README beside it) is rewritten together."""
    from dpconvert.zoo_cards.signing import load_private_key, sign_model

    signed = sign_model(values["model"], load_private_key(values["key"]))
    out.print(f"signed {values['model']} with key {signed.data['signature']['key_id']}", markup=False)


build(card_app, "sign", SIGN, _card_sign, _card_sign.__doc__)
