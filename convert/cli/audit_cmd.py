"""``dpconvert audit``: verify cards, recompute ε, enforce a policy, write JSON/Markdown/HTML reports."""

from __future__ import annotations

from pathlib import Path

import typer

from dpconvert.errors import DpconvertError

from .app import _exit_usage, app
from .console import out
from .generated import build, given, own, params_of

OUTPUT = "Reports"


MIA = "Membership inference (empirical)"


def _audit_params() -> list:
    from dpconvert.auditing.audit import Policy
    from dpconvert.io.teachers import LoadOptions

    return [own("paths", argument=True, default=..., type=list[str],
                help="Model files, *.card.json cards, or directories (zoos) scanned recursively."),
            *params_of(Policy),
            own("json_path", "--json", type=Path, panel=OUTPUT, help="Write the full report as JSON to this file."),
            own("markdown_path", "--markdown", type=Path, panel=OUTPUT, help="Append the result table as Markdown to this file (e.g. $GITHUB_STEP_SUMMARY)."),
            own("html_path", "--html", type=Path, panel=OUTPUT,
                help="Write a self-contained HTML report: sortable table, ε-vs-accuracy plot, membership-inference points."),
            own("members", panel=MIA, help="Data the model was trained on (labelled)."),
            own("non_members", panel=MIA, help="Data it was not trained on (labelled)."),
            own("teacher", panel=MIA, help="Also attack this teacher, side by side."),
            own("limit", type=int, panel=MIA, help="At most this many members and non-members."),
            own("plot", type=Path, panel=MIA, help="Write the ROC curves to this PNG."),
            own("reference_models", type=int, default=0, panel=MIA,
                help="Train N cheap reference students on random halves of members ∪ non-members (LiRA with per-example "
                     "calibration). Default: 0."),
            own("reference_epochs", type=int, default=3, panel=MIA, help="Epochs per reference student. Default: 3."),
            own("inversion", type=bool, default=False, panel=MIA,
                help="Also run a model-inversion attack: one image per class recovered from the model (and --teacher) by black-box "
                     "gradient ascent, scored by its distance to the nearest --members record of its class."),
            own("write_card", type=bool, default=False, panel=MIA,
                help="Record the results in each model's card (audit block, labelled empirical)."),
            *params_of(LoadOptions, only={"arch", "num_classes", "input_size", "mean", "std"}, panel=MIA)]


AUDIT = _audit_params()


def _audit(values: dict) -> None:
    """Verify privacy cards, recompute ε and enforce a policy. Exit 0 = all pass, 1 = a failure, 2 = usage error.

    With --members/--non-members, also run membership-inference attacks (empirical evidence, not a guarantee)."""
    from dpconvert.auditing.audit import Policy, audit as run_audit
    from dpconvert.auditing.report import AuditReport
    from dpconvert.io.atomic import check_output

    from .render import print_audit

    paths, members, non_members = values["paths"], values["members"], values["non_members"]
    inversion, json_path, markdown_path, html_path = values["inversion"], values["json_path"], values["markdown_path"], values["html_path"]
    try:
        for param, path in (("json", json_path), ("html", html_path), ("markdown", markdown_path)):
            if path is not None:  # a report that cannot be written fails now, not after auditing a zoo
                check_output(path, param=param, force=True)
        policy = Policy(**given(AUDIT, values, Policy))
        results = run_audit(paths, policy)
        if (members is None) != (non_members is None) and not (inversion and members is not None):
            raise DpconvertError(fix="membership inference needs both --members and --non-members")
        if inversion and members is None:
            raise DpconvertError("--inversion scores the recovered images against the private records", fix="give --members")
    except DpconvertError as e:
        _exit_usage(str(e))
    print_audit(results, roots=paths)
    inverted = _inversion(values, results) if inversion else {}
    mia = _membership(values, results) if members is not None and non_members is not None else {}
    report = AuditReport(results, policy, mia, paths, inversion=inverted)
    report.write(json_path, markdown_path, html_path)
    if not report.passed:
        raise typer.Exit(1)


def _inversion(values: dict, results) -> dict:
    """--inversion: one image per class recovered from each model (and --teacher), scored against --members."""
    from dpconvert.auditing.inversion import inversion_audit
    from dpconvert.io.teachers import LoadOptions

    from .render import inversion_table

    try:
        load = LoadOptions(**given(AUDIT, values, LoadOptions))
        inverted = {r.path: inversion_audit(r.path, values["members"], teacher=values["teacher"], load_options=load) for r in results
                    if not r.path.endswith(".card.json")}
    except DpconvertError as e:
        _exit_usage(str(e))
    inversion_table(inverted)
    return inverted


def _membership(values: dict, results) -> dict:
    """--members and --non-members: membership-inference attacks on each model (empirical evidence, not a guarantee)."""
    from dpconvert.auditing.membership import membership_audits, record_in_card
    from dpconvert.io.teachers import LoadOptions

    from .render import membership_table

    members, non_members = values["members"], values["non_members"]
    try:
        mia = membership_audits(results, members, non_members, teacher=values["teacher"], limit=values["limit"], plot=values["plot"],
                                reference_models=values["reference_models"], reference_epochs=values["reference_epochs"],
                                load_options=LoadOptions(**given(AUDIT, values, LoadOptions)),
                                on_progress=lambda i, n: out.print(f"reference model {i}/{n} trained"))
    except DpconvertError as e:
        _exit_usage(str(e))
    membership_table(mia)
    if values["write_card"]:
        for path, entry in mia.items():
            record_in_card(path, entry, members, non_members)
    return mia


build(app, "audit", AUDIT, _audit, _audit.__doc__)
