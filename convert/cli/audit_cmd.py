"""``dpconvert audit``: verify cards, recompute ε, enforce a policy, write JSON/Markdown/HTML reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dpconvert.errors import DpconvertError
from dpconvert.accounting.statements import DELTA_CEILING

from .app import Arch, InputSize, Mean, NumClasses, Std, _load_options, _exit_usage, app
from .console import out


MIA = "Membership inference (empirical)"


@app.command()
def audit(
    paths: Annotated[list[str], typer.Argument(help="Model files, *.card.json cards, or directories (zoos) scanned recursively.")],
    max_eps: Annotated[Optional[float], typer.Option("--max-eps", help="Fail models whose ε exceeds this.", rich_help_panel="Policy")] = None,
    max_delta: Annotated[Optional[float], typer.Option("--max-delta", help=f"Fail models whose δ exceeds this (default: the ceiling {DELTA_CEILING:g}).", rich_help_panel="Policy")] = None,
    require_scope: Annotated[Optional[str], typer.Option("--require-scope", help="Require this scope: record or query.", rich_help_panel="Policy")] = None,
    max_record_eps: Annotated[Optional[float], typer.Option("--max-record-eps", help="Fail models whose record-level ε exceeds this.", rich_help_panel="Policy")] = None,
    min_accuracy: Annotated[Optional[float], typer.Option("--min-accuracy", help="Fail models whose card reports lower student accuracy.", rich_help_panel="Policy")] = None,
    allow_missing: Annotated[bool, typer.Option("--allow-missing", help="Models without a card pass (reported as 'no DP guarantee').", rich_help_panel="Policy")] = False,
    allow_seeded_noise: Annotated[bool, typer.Option("--allow-seeded-noise", help="Let models whose DP noise was seeded (--seeded-noise: reproducible, not secret) pass; by default they fail.", rich_help_panel="Policy")] = False,
    trusted_keys: Annotated[Optional[Path], typer.Option("--trusted-keys", help="A folder of *.pub Ed25519 keys (or one key): signatures by these keys are verified, others fail.", rich_help_panel="Policy")] = None,
    require_signature: Annotated[bool, typer.Option("--require-signature", help="Fail models whose card is not signed by a key in --trusted-keys.", rich_help_panel="Policy")] = False,
    max_per_image_eps: Annotated[Optional[float], typer.Option("--max-per-image-eps", help="Fail DPDFD models on public-image queries whose ε for all the answers about one source image exceeds this.", rich_help_panel="Policy")] = None,
    require_secret_noise: Annotated[bool, typer.Option("--require-secret-noise", hidden=True, help="Kept for old CI configs: secret noise is now always required unless --allow-seeded-noise.")] = False,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the full report as JSON to this file.")] = None,
    markdown_path: Annotated[Optional[Path], typer.Option("--markdown", help="Append the result table as Markdown to this file (e.g. $GITHUB_STEP_SUMMARY).")] = None,
    html_path: Annotated[Optional[Path], typer.Option("--html", help="Write a self-contained HTML report: sortable table, ε-vs-accuracy plot, membership-inference points.")] = None,
    members: Annotated[Optional[str], typer.Option("--members", help="Data the model was trained on (labelled).", rich_help_panel=MIA)] = None,
    non_members: Annotated[Optional[str], typer.Option("--non-members", help="Data it was not trained on (labelled).", rich_help_panel=MIA)] = None,
    teacher: Annotated[Optional[str], typer.Option("--teacher", help="Also attack this teacher, side by side.", rich_help_panel=MIA)] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="At most this many members and non-members.", rich_help_panel=MIA)] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write the ROC curves to this PNG.", rich_help_panel=MIA)] = None,
    reference_models: Annotated[int, typer.Option("--reference-models", help="Train N cheap reference students on random halves of members ∪ non-members (LiRA with per-example calibration).", rich_help_panel=MIA)] = 0,
    reference_epochs: Annotated[int, typer.Option("--reference-epochs", help="Epochs per reference student.", rich_help_panel=MIA)] = 3,
    inversion: Annotated[bool, typer.Option("--inversion", help="Also run a model-inversion attack: one image per class recovered from the "
                                            "model (and --teacher) by black-box gradient ascent, scored by its distance to the nearest "
                                            "--members record of its class.", rich_help_panel=MIA)] = False,
    write_card: Annotated[bool, typer.Option("--write-card", help="Record the results in each model's card (audit block, labelled empirical).", rich_help_panel=MIA)] = False,
    arch: Arch = None, num_classes: NumClasses = None, input_size: InputSize = None, mean: Mean = None, std: Std = None,
) -> None:
    """Verify privacy cards, recompute ε and enforce a policy. Exit 0 = all pass, 1 = a failure, 2 = usage error.

    With --members/--non-members, also run membership-inference attacks (empirical evidence, not a guarantee)."""
    from dpconvert.auditing.audit import Policy, audit as run_audit

    from dpconvert.auditing.report import AuditReport

    from .render import membership_table, print_audit

    from dpconvert.io.atomic import check_output

    try:
        for param, path in (("json", json_path), ("html", html_path), ("markdown", markdown_path)):
            if path is not None:  # a report that cannot be written fails now, not after auditing a zoo
                check_output(path, param=param, force=True)
        policy = Policy(max_eps, max_delta, require_scope, max_record_eps, min_accuracy, allow_missing, allow_seeded_noise, require_signature,
                        str(trusted_keys) if trusted_keys else None, max_per_image_eps)
        results = run_audit(paths, policy)
        if (members is None) != (non_members is None) and not (inversion and members is not None):
            raise DpconvertError("membership inference needs both --members and --non-members")
        if inversion and members is None:
            raise DpconvertError("--inversion scores the recovered images against the private records: give --members")
    except DpconvertError as e:
        _exit_usage(str(e))
    print_audit(results, roots=paths)
    mia, inverted = {}, {}
    if inversion:
        from dpconvert.auditing.inversion import inversion_audit

        from .render import inversion_table

        try:
            load = _load_options(arch, num_classes, None, input_size, mean, std, None, False)
            inverted = {r.path: inversion_audit(r.path, members, teacher=teacher, load_options=load) for r in results
                        if not r.path.endswith(".card.json")}
        except DpconvertError as e:
            _exit_usage(str(e))
        inversion_table(inverted)
    if members is not None and non_members is not None:
        try:
            from dpconvert.auditing.membership import membership_audits

            mia = membership_audits(results, members, non_members, teacher=teacher, limit=limit, plot=plot, reference_models=reference_models,
                                    load_options=_load_options(arch, num_classes, None, input_size, mean, std, None, False),
                                    reference_epochs=reference_epochs, on_progress=lambda i, n: out.print(f"reference model {i}/{n} trained"))
        except DpconvertError as e:
            _exit_usage(str(e))
        membership_table(mia)
        if write_card:
            from dpconvert.auditing.membership import record_in_card

            for path, entry in mia.items():
                record_in_card(path, entry, members, non_members)
    report = AuditReport(results, policy, mia, paths, inversion=inverted)
    report.write(json_path, markdown_path, html_path)
    if not report.passed:
        raise typer.Exit(1)
