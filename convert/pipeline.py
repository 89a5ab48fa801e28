"""The main job: load the teacher → run a method → evaluate → export to ONNX → write the card.

The pipeline knows nothing about any method: a method (``methods/``) checks its options, plans, runs its mechanism
and describes itself for the card; this module adds what every card has (identity, model, teacher, utility,
export) and writes the ONNX student, ``<out>.card.json`` and ``<out>.card.md`` together or not at all.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from .accounting.plans import Plan
from .allocator import keep_freed_memory
from .errors import DpconvertError, InternalError
from .methods import METHODS, MethodOutput, choose_method
from .options import RunOptions
from .profiling import Profile, phase

log = logging.getLogger("dpconvert")


@dataclass
class ConvertResult:
    out: Path
    card_json: Path
    card_md: Path
    card: object  # PrivacyCard
    seconds: float
    rounds: list
    method: str
    profile: dict  # wall time per phase, items per second, peak memory (profiling.py)


def _methods_that(capability: str) -> str:
    """The registered methods with a capability (``Method.noise_free``, …), for an error that names the fix."""
    return " or ".join(m for m in METHODS if getattr(METHODS.get(m), capability))


def check_output_path(out: Path, force: bool = False) -> Path:
    """The student's path, checked before anything is loaded: an .onnx file in a folder we can write to, replacing an
    existing model (or its cards) only with ``force``."""
    from dpconvert.io.atomic import check_output
    from dpconvert.zoo_cards import card_paths

    out = Path(out)
    if out.is_dir():
        raise DpconvertError(f"`out` {out} is a folder", fix=f"give a file name such as {out / 'student.onnx'}", param="out")
    if out.suffix.lower() != ".onnx":
        raise DpconvertError(fix=f"`out` must end in .onnx (the student is exported to ONNX), got {out.name!r}", param="out")
    return check_output(out, force=force, also=card_paths(out))


def run_conversion(teacher_source: Union[str, Sequence[str]], out: Path, run: RunOptions, method_options=None, *, load_options=None,
                   on_plan: Optional[Callable[[Plan], None]] = None, on_progress: Optional[Callable[[dict], None]] = None) -> ConvertResult:
    """``method_options``: the method's options object, or a dict of them (checked by the method). Under torchrun
    every rank runs this; rank 0 alone evaluates and writes the outputs, and the other ranks return None.
    ``teacher_source``: one teacher, or several (files, folders, list files) whose rows DPDFD averages."""
    from dpconvert.distributed import current_world
    from dpconvert.io.teacher_set import expand_teacher_sources, load_teachers
    from dpconvert.io.teacher_runtime import use_teacher_runtime
    from dpconvert.io.teachers import LoadOptions

    start = time.perf_counter()
    out = check_output_path(out, run.force)
    signing_key = _signing_key(run.sign_key)  # an unreadable key fails now, not after the whole run
    name, reason = choose_method(run)
    method = METHODS.get(name)
    _check_capabilities(method, name, run, load_options)
    opts = method_options if isinstance(method_options, method.Options) else method.options(method_options)
    method.check(run, opts, out)
    reason = method.describe_choice(opts, reason)
    sources = expand_teacher_sources(teacher_source)
    if len(sources) > 1 and not method.several_teachers:
        raise DpconvertError(f"{len(sources)} teachers given: several teachers are distilled by {_methods_that('several_teachers')} only "
                             f"(method {name} uses one)", fix=f"give one teacher, or `method` {_methods_that('several_teachers')}", param="method")
    teacher_source = sources[0] if len(sources) == 1 else sources
    world = current_world()
    if world.distributed:
        method.check_distributed(run, opts)
    keep_freed_memory()  # convert/allocator.py: the release's chunks reuse the heap instead of faulting pages in again
    with Profile() as profile:
        with phase("load teacher"):
            load_options = load_options or LoadOptions(device=run.device)
            teacher = load_teachers(teacher_source, load_options)
            if method.queries_teacher:  # an export and a parity check buy nothing for a method that never asks
                use_teacher_runtime(teacher, load_options.teacher_runtime, run.device, getattr(opts, "amp", None))
        inherited = teacher_card(teacher_source, teacher, run)  # before the long work: a bad teacher card fails now
        if run.class_names is not None and len(run.class_names) != teacher.spec.num_classes:
            raise DpconvertError(f"`class_names` lists {len(run.class_names)} classes but the teacher has {teacher.spec.num_classes}",
                                 fix="list every class in label order", param="class_names")
        eval_ds = _eval_data(run, teacher.spec)
        planned: list = []
        from dpconvert.context import RunContext

        result = method.run(RunContext.build(run, teacher.spec, world), opts, teacher, _plan_relay(on_plan, planned, reason, teacher, inherited, run),
                            on_progress)
        _check_ran_the_plan(planned, result.mechanism)
        if not world.is_main:
            return None
        utility = None
        if eval_ds is not None:
            with phase("evaluation", items=2 * len(eval_ds)):
                utility = evaluate(teacher, result.student, eval_ds)
        card = _write_outputs(teacher_source, teacher, out, run, result, utility, reason, signing_key, profile, world, inherited, opts,
                              load_options)
    for w in card.data["warnings"]:
        log.warning("warning: %s", w)
    from dpconvert.zoo_cards import card_paths

    return ConvertResult(out, *card_paths(out), card, time.perf_counter() - start, result.rounds, name, profile.to_dict())


def _check_capabilities(method, name: str, run: RunOptions, load_options) -> None:
    """Settings that only some methods act on, given to one that would ignore them: an error, not a silent no-op."""
    if run.no_privacy and not method.noise_free:
        raise DpconvertError(f"`no_privacy` (a non-private comparison student) is a setting of {_methods_that('noise_free')} (method {name} "
                             "has no noise-free mode)", fix=f"drop it or use `method` {_methods_that('noise_free')}", param="no_privacy")
    runtime = getattr(load_options, "teacher_runtime", "auto")
    if runtime != "auto" and not method.queries_teacher:
        raise DpconvertError(f"`teacher_runtime` {runtime} sets what answers the queries of {_methods_that('queries_teacher')} (method "
                             f"{name} asks the teacher none: it answers the evaluation only, in torch)", fix="drop `teacher_runtime`",
                             param="teacher_runtime")


def _eval_data(run: RunOptions, spec):
    """The labelled evaluation images (`eval_data`), loaded before the long work; None without them."""
    if not run.eval_data:
        return None
    from dpconvert.io.data import load_data

    with phase("load data"):
        return load_data(run.eval_data, spec, require_labels=True, **run.data_format())


def teacher_card(source: str, teacher, run: RunOptions) -> Optional[tuple[dict, float]]:
    """The teacher's own privacy card, verified for this teacher, when the teacher is an ONNX model with a card
    (``teacher_card``, or the one embedded in it): its record-level guarantee passes on to the student where it holds
    (``auditing/teacher_guarantee.py``). An explicit ``teacher_card`` that does not verify is an error; an embedded
    one is passed over with a warning. Returns (the card, its recomputed ε)."""
    from dpconvert.auditing.card_checks import verify_teacher_card
    from dpconvert.auditing.teacher_guarantee import KINDS_WITH_CARDS
    from dpconvert.zoo_cards import PrivacyCard, extract_card
    from dpconvert.zoo_cards.onnx_meta import load_onnx

    explicit = run.teacher_card is not None
    if teacher.kind not in KINDS_WITH_CARDS:
        if explicit:
            raise DpconvertError(fix="`teacher_card` needs the teacher as the ONNX model its card describes (the card binds its graph's hash)", param="teacher_card")
        return None
    try:
        card = PrivacyCard.read(run.teacher_card) if explicit else extract_card(load_onnx(source), Path(source).name)
        if card is None:
            return None
        trusted = None
        if run.trusted_keys is not None:
            from dpconvert.zoo_cards.signing import load_trusted_keys

            trusted = load_trusted_keys(run.trusted_keys)
        data, eps = verify_teacher_card(card.data, teacher.graph_sha256, trusted)
    except DpconvertError as e:
        if explicit:
            raise
        teacher.warnings.append(f"the teacher's embedded privacy card is not passed on to the student ({e})")
        return None
    if teacher.normalisation_assumed and data["model"].get("mean"):  # the card says how the teacher's inputs are normalised
        import dataclasses

        m = data["model"]
        teacher.spec = dataclasses.replace(teacher.spec, mean=tuple(m["mean"]), std=tuple(m["std"]))
        teacher.warnings.remove(teacher.normalisation_assumed)
        teacher.normalisation_assumed = None
    return data, eps


def _signing_key(path: Optional[str]):
    if path is None:
        return None
    from dpconvert.zoo_cards.signing import load_private_key

    return load_private_key(path)


def _write_outputs(teacher_source, teacher, out: Path, run: RunOptions, r: MethodOutput, utility, reason: str, signing_key=None, profile=None,
                   world=None, inherited=None, method_opts=None, load_opts=None):
    from dpconvert.accounting.statements import PARITY_MAX_ABS_DIFF, PARITY_MIN_TOP1, WEAK_PARITY_PREFIX
    from dpconvert.command_line import command_for
    from dpconvert.io.export import OPSET, export_onnx, parity
    from dpconvert.release import release_card
    from dpconvert.zoo_cards import model_sha256
    from dpconvert.zoo_cards.onnx_meta import SHA256_METHOD, write_model_with_card

    spec = teacher.spec
    import torch

    student = r.student.cpu().to(memory_format=torch.contiguous_format).eval()
    warnings = list(teacher.warnings) + list(r.warnings)
    with phase("export"):
        proto = export_onnx(student, spec.shape)
    with phase("parity", items=len(r.probe)):
        par = parity(student, proto, r.probe.cpu())
    if par.max_abs_diff > PARITY_MAX_ABS_DIFF or par.top1_agreement < PARITY_MIN_TOP1:
        warnings.append(f"{WEAK_PARITY_PREFIX}: max |Δ| = {par.max_abs_diff:.2e}, top-1 agreement {par.top1_agreement:.3f}")
    identity = {
        "model": {
            "file": out.name, "sha256": model_sha256(proto), "sha256_method": SHA256_METHOD, "format": "onnx", "opset": OPSET,
            "input_shape": [None, *spec.shape], "mean": list(spec.mean), "std": list(spec.std), "num_classes": spec.num_classes,
            "class_names": list(run.class_names) if run.class_names else None, "num_params": int(sum(p.numel() for p in student.parameters())), "architecture": r.student_name,
        },
        "teacher": {"source": teacher.source if len(_as_list(teacher_source)) > 1 else teacher_source, "kind": teacher.kind, "sha256": teacher.sha256,
                    "weights_sha256": teacher.weights_sha256, **({"graph_sha256": teacher.graph_sha256} if teacher.graph_sha256 else {}),
                    "architecture": teacher.arch,
                    "trained_with_dp": True if inherited else None, **({"guarantee": _inherited_block(inherited, r, run)} if inherited else {}),
                    **({"members": teacher.member_block(), "disjoint_partitions": bool(r.mechanism.get("disjoint_partitions"))}
                       if hasattr(teacher, "member_block") else {})},
    }
    rest = {
        "utility": utility,
        **({"expected_utility": r.verdict} if r.verdict is not None else {}),
        "export": {"onnx_checker": "passed (full_check=True)", "parity": par.to_dict(), "onnxruntime_device": "cpu"},
        "audit": r.audit,
        "run": _run_block(run, profile, world, teacher.runtime),
    }
    card = release_card(identity=identity, accountant=r.accountant, delta=r.delta, target=run.eps, claims=r.claims,
                        mechanism={**r.mechanism, "method_choice": reason}, rest=rest, warnings=warnings,
                        command=command_for(teacher_source, out, run, method_opts, load_opts), seed=run.seed, signing_key=signing_key)
    write_model_with_card(str(out), proto, card, extra=r.extra_files)
    return card


def _inherited_block(teacher_card: tuple[dict, float], r: MethodOutput, run: RunOptions) -> dict:
    from dpconvert.auditing.teacher_guarantee import guarantee_block, run_records_epsilon

    return guarantee_block(*teacher_card, run_records_epsilon=run_records_epsilon(r.accountant, r.delta), run_delta=r.delta,
                           not_teacher_data=run.private_data_is_not_teacher_data)


def _plan_relay(on_plan, planned: list, reason: str, teacher, inherited, run: RunOptions):
    """What the method reports its plan to: kept for the check after the run, shown (with how the method was chosen,
    the teacher's input and, for a DP teacher, its records' guarantee) when the caller asked for it."""
    shape = "x".join(map(str, teacher.spec.shape))

    def relay(plan: Plan) -> None:
        planned.append(plan)
        if on_plan:
            on_plan(_with_teacher_records(replace(plan, method_choice=reason, teacher_input=f"{shape}, {teacher.spec.num_classes} classes"),
                                          inherited, run))
    return relay


def _check_ran_the_plan(planned: list, mechanism: dict) -> None:
    """What the plan said (``Plan.card_keys``) is what the mechanism block records; anything else is a bug, and
    nothing is written."""
    if not planned:
        raise InternalError("the method ran without reporting its plan first; nothing was written")
    plan = planned[-1]
    differ = {key: (getattr(plan, field), mechanism.get(key)) for field, key in plan.card_keys.items() if mechanism.get(key) != getattr(plan, field)}
    if differ:
        raise InternalError(f"the mechanism ran with other parameters than its plan (plan, ran): {differ}; nothing was written")


def _with_teacher_records(plan: Plan, teacher_card: Optional[tuple[dict, float]], run: RunOptions) -> Plan:
    """The plan, with what holds for the teacher's training records when the teacher carries a DP guarantee."""
    if teacher_card is None:
        return plan
    from dpconvert.auditing.teacher_guarantee import planned_records

    return replace(plan, teacher_records=planned_records(*teacher_card, plan, run.private_data is not None, run.private_data_is_not_teacher_data))


def _as_list(source) -> list:
    return [source] if isinstance(source, str) else list(source)


def _run_block(run: RunOptions, profile, world=None, teacher_runtime: Optional[str] = None) -> dict:
    """How the run went: device, threads, processes, time per phase, peak memory (rank 0's). With private data the
    timings and item counts scale with the private set (its size could be read back from them), so they stay on the
    operator's console."""
    import torch

    block = {"device": run.device, "torch_threads": torch.get_num_threads(), **({"teacher_runtime": teacher_runtime} if teacher_runtime else {})}
    if world is not None and world.distributed:
        block["processes"] = {"world_size": world.size, "backend": world.backend, "launcher": "torchrun"}
    if run.private_data:
        return {**block, "timings": "not recorded: with private data they depend on its size (shown on the console only)"}
    return {**block, **(profile.to_dict() if profile is not None else {})}


def evaluate(teacher, student, ds) -> dict:
    """Accuracy of teacher and student on labelled data (outside the DP mechanism). The student is evaluated on its
    own device (a method may train it on the CPU whatever the teacher's device)."""
    import torch

    student.eval()
    device = next(student.parameters()).device
    with torch.no_grad():
        s = torch.cat([student(x.to(device)).argmax(1).cpu() for x in ds.x.split(1024)])
    with torch.inference_mode():
        t = torch.cat([teacher(x).argmax(1).cpu() for x in ds.x.split(1024)])
    return {
        "evaluation_data": ds.description,
        "examples": len(ds),
        "teacher_accuracy": float((t == ds.y).float().mean()),
        "student_accuracy": float((s == ds.y).float().mean()),
        "agreement": float((s == t).float().mean()),
        "covered_by_guarantee": False,
        "note": "computed outside the DP mechanism; if the evaluation data is private, these numbers are not protected",
    }
