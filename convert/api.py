"""The Python API: ``dpconvert.convert``, ``dpconvert.plan``, ``dpconvert.audit``. The CLI is a thin layer over these.

    import dpconvert
    r = dpconvert.convert("builtin:digits", out="student.onnx", eps=1, batch_size=20_000, epochs=1)
    r.card.epsilon, r.out
    dpconvert.convert("builtin:digits", out="s.onnx", noise_multiplier=5)          # ε computed from σ
    dpconvert.convert("teacher.safetensors", out="s.onnx", method="pknn", private_data="train/", public_data="pub.npz")
    dpconvert.plan("dpdfd", eps=1, input_size=(1, 8, 8)).sigma      # what convert runs for an 8×8 teacher
    [m.passed for m in dpconvert.audit(["models/"], max_eps=2)]

Errors are ``DpconvertError`` with one line that names the parameter to fix (in backticks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

from .accounting.plans import Plan
from .options import RunOptions, resolve_device


def convert(teacher: str | Sequence[str], *, out: str | Path, device: str = "cpu", loader=None,
            on_plan: Optional[Callable[[Plan], None]] = None, on_progress: Optional[Callable[[dict], None]] = None, **options):
    """Convert ``teacher`` into a DP student at ``out`` (ONNX) with its privacy card; returns a ``ConvertResult``.

    ``teacher``: a file (.pt/.pth/.pt2/.safetensors/.onnx), ``timm:NAME`` or ``builtin:digits``; or a list of several
    teachers (files, folders of them, ``.txt`` list files) for DPDFD, which averages their rows (with
    ``disjoint_partitions`` N, teachers trained on disjoint parts of the private data, ``eps`` is record-level); ``loader``: a
    ``LoadOptions`` for files that need an architecture, class count or input spec.

    ``options``: any field of ``dpconvert.options.RunOptions`` by its own name, with its default there (``method``,
    ``eps``, ``delta``, ``noise_multiplier``, ``seed``, ``student``, ``eval_data``, ``private_data``, ``public_data``,
    ``seeded_noise``, ``force``, ``teacher_card``, ``sign_key``, …; paths may be ``Path`` objects), and the chosen
    method's own options (``DpdfdOptions``: releases, batch_size, clip, epochs, distill_loss, generator, prior,
    prior_pool, public_targets, save_generator; ``PknnOptions``: k, sampling_rate, sigma1, threshold, sigma2, rounds,
    queries, features, epochs, labels, knn, canaries, query_generator, generator_eps, …; ``DpsgdOptions``;
    ``AdlmOptions``). ``eps`` and ``noise_multiplier`` are exclusive (neither: ε = 1). ``method``: ``auto`` (DP-SGD
    with ``private_data``, DPDFD otherwise) or any name in ``dpconvert.methods.METHODS``.

    Under ``torchrun`` every process calls this; they form one conversion (``distributed.py``) and only rank 0 writes
    and returns the result (the others return None).
    """
    import dataclasses

    run_fields = {f.name for f in dataclasses.fields(RunOptions) if f.init} - {"device"}
    given = {k: str(v) if isinstance(v, Path) else v for k, v in options.items() if k in run_fields}
    method_options = {k: v for k, v in options.items() if k not in run_fields}
    force = bool(given.get("force", False))
    from .pipeline import check_output_path

    RunOptions(**given)  # bad options fail here, in a second, before torch is even imported …
    check_output_path(Path(out), force)  # … and so does an output that could not be written

    from .distributed import finish, init_from_env
    from .io.teachers import LoadOptions
    from .pipeline import run_conversion

    world, device = init_from_env(resolve_device(device))
    run = RunOptions(**given, device=device)  # built from what was given (dataclasses.replace would pass the resolved δ as given)
    if not world.is_main:  # one progress display and one plan table: rank 0's
        on_plan = on_progress = None
    loader = LoadOptions(device=device) if loader is None else dataclasses.replace(loader, device=device)
    try:
        result = run_conversion(teacher, Path(out), run, method_options, load_options=loader, on_plan=on_plan, on_progress=on_progress)
    except BaseException:
        finish(failed=True)
        raise
    finish()
    return result


def plan(method: Optional[str] = None, *, eps: Optional[float] = None, delta: Optional[float] = None, noise_multiplier: Optional[float] = None,
         n: Optional[int] = None, input_size: tuple[int, int, int] = (1, 28, 28), num_classes: int = 10, queries: Optional[int] = None,
         answered: Optional[int] = None, device: str = "cpu", teacher_card: Optional[str] = None, private_data_is_not_teacher_data: bool = False,
         **method_options) -> Plan:
    """The privacy plan of a conversion (``method``: a registered method's name; None: the data-free one): σ for a target ε (or ε for a given σ), ε by every accountant, the record-level
    worst case — computed by the same method object ``convert`` runs, so the plan is the run's. A typed ``Plan``
    (``accounting/plans.py``: ``.epsilon``, ``.sigma``, …; ``.to_dict()`` is what ``dpconvert plan --json`` prints).

    ``method_options`` are the method's own options, as ``convert`` takes them (``DpdfdOptions``: releases,
    batch_size, accounting, …; ``PknnOptions``: k, sampling_rate, sigma1, threshold, sigma2, queries, …;
    ``DpsgdOptions``: epochs, sampling_rate, clip, sigma, count_sigma; ``AdlmOptions``: relevance_share, …).
    ``input_size``, ``num_classes`` and ``device``: the teacher's, for what the defaults follow from (DPDFD's B and δ).
    ``queries``: how many queries a query-labelling method answers (Private-kNN: the public images' count).
    ``answered`` (Private-kNN): ε if only that many queries pass the screening (default: all, as σ2 is calibrated).
    ``n``: the private-set size, if known, to check δ ≤ 1/n.
    ``teacher_card``: a DP teacher's privacy card: the plan adds what holds for the teacher's training records
    (``teacher_records``: its guarantee, composed with this run's where the run reads private records itself, unless
    ``private_data_is_not_teacher_data``), as the card of the conversion will.
    """
    import dataclasses

    from .errors import DpconvertError
    from .io.spec import InputSpec
    from .methods import METHODS, data_free_method

    method = method or data_free_method()
    m = METHODS.get(method)
    if noise_multiplier is not None and not m.takes_noise_multiplier:
        raise DpconvertError(f"`noise_multiplier` is the σ of DPDFD and DP-SGD; method {method} takes its own noise options", fix="give `eps` instead", param="noise_multiplier")
    run = RunOptions(method=method, eps=eps, delta=delta, noise_multiplier=noise_multiplier, device=device)
    opts = m.options(method_options)
    result = m.plan(run, opts, InputSpec(*input_size, num_classes), queries=queries)
    result = m.realised_plan(result, opts, num_classes, answered, n)
    if teacher_card is not None:
        from .auditing.card_checks import verify_teacher_card
        from .auditing.teacher_guarantee import planned_records
        from .zoo_cards import PrivacyCard

        card, eps_t = verify_teacher_card(PrivacyCard.read(teacher_card).data, None)  # the graph is bound when convert loads the teacher
        result = dataclasses.replace(result, teacher_records=planned_records(card, eps_t, result, m.reads_private_records(opts),
                                                                           private_data_is_not_teacher_data))
    return result


def audit(paths, **policy) -> list:
    """Audit models, cards or zoo directories; returns one ``ModelAudit`` per model (``.passed``, ``.checks``).

    ``policy``: max_eps, max_delta, require_scope, max_record_eps, min_accuracy, allow_missing, allow_seeded_noise,
    trusted_keys (a folder of *.pub keys), require_signature.
    """
    from .auditing.audit import Policy, audit as run_audit

    return run_audit([str(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)], Policy(**policy))
