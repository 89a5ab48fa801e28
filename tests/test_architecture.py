"""The shape of the code: no import cycles, short functions, a CLI with grouped help, a Python API."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"dpconvert": ROOT / "convert", "dpconvert.generators": ROOT / "generators", "dpconvert.students": ROOT / "students",
            "dpconvert.zoo_cards": ROOT / "zoo_cards"}
SIZE_RULED = [*PACKAGES.values()]  # every module of the package: the pipeline, synth, the CLI, the kernel, the cards
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    mods = {}
    for base, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("").parts
            if rel[0] in ("generators", "students", "zoo_cards") and base == "dpconvert":
                continue  # (the folders are separate packages; nothing of theirs lives under convert/)
            parts = list(rel[:-1]) if rel[-1] == "__init__" else list(rel)
            mods[".".join([base, *parts])] = path
    return mods


def _imports(name: str, path: Path, known: set) -> set:
    """Every module this one imports, at module level or inside functions (lazy imports are dependencies too)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names]
            targets = [s for s in subs if s in known] or [mod]  # `from pkg import module` depends on that module only
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def test_no_import_cycles():
    mods = _modules()
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    # Tarjan's strongly connected components
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = [sorted(c) for c in sccs if len(c) > 1]
    assert cycles == [], cycles


def test_functions_are_short_everywhere():
    """No function over 60 lines in any module (``synth.synthesize`` once had 91, outside a rule that covered only the
    pipeline, the API, the methods and the CLI)."""
    long = []
    for folder in SIZE_RULED:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES and not _is_cli_signature(node):
                        long.append(f"{path.relative_to(ROOT)}:{node.name} ({lines} lines)")
    assert long == []


def _is_cli_signature(node) -> bool:
    """A Typer command's body is short; its options (one line each) are declarations, not logic."""
    body = node.body[-1].end_lineno - node.body[0].lineno + 1
    return body <= MAX_FUNCTION_LINES and any(isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "command" for d in node.decorator_list)


def test_convert_help_shows_grouped_panels(cli):
    code, out, _ = cli("convert", "--help")
    assert code == 0
    for panel in ("Teacher", "Privacy", "DPDFD", "Private-kNN", "Data", "Output"):
        assert panel in out


def test_every_cli_option_has_help():
    from typer.main import get_command

    from dpconvert.cli import app

    def walk(cmd, path):
        for p in getattr(cmd, "params", []):
            if p.param_type_name == "option" and not getattr(p, "hidden", False):
                assert p.help, f"{path} {p.opts}"
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(get_command(app), "dpconvert")


@pytest.mark.slow
def test_python_api(tmp_path):
    import dpconvert

    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", eps=1, batch_size=20000, epochs=1)
    assert r.out.exists() and r.card.epsilon <= 1 and r.method == "dpdfd"
    r = dpconvert.convert("builtin:digits", out=tmp_path / "n.onnx", noise_multiplier=5, batch_size=2000, epochs=1)
    assert r.card.data["accounting"]["calibrated"] is False and r.card.epsilon == pytest.approx(dpconvert.plan("dpdfd", noise_multiplier=5, batch_size=2000, input_size=(1, 8, 8)).epsilon)
    with pytest.raises(dpconvert.DpconvertError, match="`eps`.*`noise_multiplier`"):
        dpconvert.convert("builtin:digits", out=tmp_path / "x.onnx", eps=1, noise_multiplier=5)
    with pytest.raises(dpconvert.DpconvertError, match="`canaries` is not an option of method 'dpdfd'"):
        dpconvert.convert("builtin:digits", out=tmp_path / "x.onnx", canaries=10)
    assert [m.passed for m in dpconvert.audit(tmp_path)] == [True, True]
    assert not (tmp_path / "x.onnx").exists()


def test_ruff_is_clean():
    """The lint configured in pyproject.toml ([tool.ruff]) passes: CI runs it through this test."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_library_never_speaks_in_flags():
    """Outside ``convert/cli/`` no string literal (docstrings aside) names a ``--flag``: the library names its parameters
    in backticks, and the CLI renders them as its flags (``cli/flags.py``), so a Python user is never told to type one."""
    import ast
    import re
    from pathlib import Path

    flag = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
    root = Path(__file__).resolve().parents[1]
    hits = []
    for folder in ("convert", "zoo_cards", "generators", "students"):
        for f in (root / folder).rglob("*.py"):
            rel = f.relative_to(root)
            if rel.parts[:2] == ("convert", "cli") or f.name == "train_digits_teacher.py":  # the CLI, and a script's own argparse
                continue
            tree = ast.parse(f.read_text())
            docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                    and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            hits += [f"{rel}:{n.lineno}" for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and flag.search(n.value)]
    assert not hits, hits


MAX_KERNEL_MODULE_LINES, MAX_KERNEL_FUNCTION_LINES = 400, 60


def test_methods_and_mechanisms_stay_small():
    """No module in ``convert/mechanisms`` or ``convert/methods`` over 400 lines, no function there over 60: a method is
    its options, its plan and its card blocks; a mechanism one release (the DPDFD engine once grew to 819 lines)."""
    big = []
    for folder in ("convert/mechanisms", "convert/methods"):
        for path in sorted((ROOT / folder).glob("*.py")):
            text = path.read_text()
            if len(text.splitlines()) > MAX_KERNEL_MODULE_LINES:
                big.append(f"{path.relative_to(ROOT)} ({len(text.splitlines())} lines)")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_KERNEL_FUNCTION_LINES:
                    big.append(f"{path.relative_to(ROOT)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert big == []


def test_distillation_is_post_processing_of_the_release():
    """``convert/distill`` (query choice, student and generator training) imports nothing that reads private data, draws
    DP noise or holds a release: the DPDFD engine in ``mechanisms/`` calls the teacher and hands it released rows only.
    (tests/test_per_answer.py checks the same at run time with a teacher that raises outside the release.)"""
    mods = _modules()
    forbidden = {m for m in mods if m.startswith(("dpconvert.mechanisms", "dpconvert.io", "dpconvert.methods", "dpconvert.pipeline"))}
    leaks = {m: sorted(_imports(m, p, set(mods)) & forbidden) for m, p in mods.items() if m.startswith("dpconvert.distill")}
    assert {m: i for m, i in leaks.items() if i} == {}
    assert len(leaks) >= 6  # the package exists and was scanned


def _calls_outside_kernel(predicate) -> list:
    """``file:line`` of every AST node outside ``convert/mechanisms/`` (and the RunContext that builds the run's noise
    stream) for which ``predicate(node)`` holds."""
    hits = []
    for folder in ("convert", "generators", "students", "zoo_cards"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("convert", "mechanisms") or rel == Path("convert/context.py"):
                continue
            hits += [f"{rel}:{n.lineno}" for n in ast.walk(ast.parse(path.read_text())) if predicate(n)]
    return hits


def _called(node, names) -> bool:
    f = getattr(node, "func", None) if isinstance(node, ast.Call) else None
    return (isinstance(f, ast.Name) and f.id in names) or (isinstance(f, ast.Attribute) and f.attr in names)


def test_only_the_privacy_kernel_opens_private_data_or_draws_dp_noise():
    """The privacy kernel is ``convert/mechanisms/``: the private records are a handle (``PrivateRecords``) that only
    a mechanism opens, and the DP noise stream (``NoiseStream``) is made once per run by the RunContext and drawn from
    only by a mechanism. Methods, query sources, training loops and the CLI pass the handles along."""
    opened = _calls_outside_kernel(lambda n: _called(n, {"open_records"}))
    read_directly = _calls_outside_kernel(lambda n: _called(n, {"load_data"}) and any(
        isinstance(a, ast.Attribute) and a.attr == "private_data" for a in [*n.args, *[k.value for k in n.keywords]]))
    noise_made = _calls_outside_kernel(lambda n: _called(n, {"secret_generator", "mechanism_rng", "noise_stream"}))
    noise_drawn = _calls_outside_kernel(lambda n: isinstance(n, ast.Attribute) and n.attr == "generator" and (
        (isinstance(n.value, ast.Name) and n.value.id == "noise") or (isinstance(n.value, ast.Attribute) and n.value.attr == "noise")))
    assert (opened, read_directly, noise_made, noise_drawn) == ([], [], [], [])


def test_errors_carry_the_parameter_to_fix(tmp_path):
    """A library error names the parameter to change (``param``) besides its one-line message, for Python callers and
    tools; the CLI renders the same name as its flag."""
    import dpconvert

    with pytest.raises(dpconvert.DpconvertError) as e:
        dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", eps=-1)
    assert e.value.param == "eps" and "`eps`" in str(e.value)
    with pytest.raises(dpconvert.DpconvertError) as e:
        dpconvert.plan("dpsgd", releases=3)
    assert e.value.param == "releases"
    with pytest.raises(dpconvert.DpconvertError) as e:  # the parameter the fix changes, not the first one the message names
        dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", method="adlm", noise_multiplier=1.0, private_data="digits")
    assert e.value.param == "noise_multiplier" and e.value.fix == "drop `noise_multiplier`"


def test_an_error_is_its_fields():
    """``problem``, ``fix`` and ``param`` are what the raise gave: the message is "problem; fix", and nothing is parsed
    back out of it (the message reads the same to a person; a tool reads the fields)."""
    import pickle

    from dpconvert.errors import DpconvertError, OptionError

    e = DpconvertError("x.pt holds a pickled module", fix="save a state_dict instead, or pass `trust_pickle`", param="trust_pickle")
    assert (str(e), e.problem, e.fix, e.param) == ("x.pt holds a pickled module; save a state_dict instead, or pass `trust_pickle`",
                                                   "x.pt holds a pickled module", "save a state_dict instead, or pass `trust_pickle`", "trust_pickle")
    rule = OptionError(fix="`epochs` must be >= 1", param="epochs")
    assert (str(rule), rule.problem, rule.fix, rule.exit_code, isinstance(rule, ValueError)) == ("`epochs` must be >= 1", "", "`epochs` must be >= 1", 2, True)
    bare = DpconvertError("a.onnx: no such file; `eps` is not parsed from here")
    assert (bare.fix, bare.param) == (None, None)  # no fix, no parameter read out of the prose
    back = pickle.loads(pickle.dumps(rule))
    assert (type(back), back.fix, back.param) == (OptionError, rule.fix, "epochs")
    with pytest.raises(TypeError):
        DpconvertError()
    assert "import re" not in (ROOT / "convert" / "errors.py").read_text()


def _text(node) -> str:
    """A string literal's text with each f-string field as X (… for text built at run time, '' for no text)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    if isinstance(node, ast.BinOp):  # "give " + " and ".join(...)
        return _text(node.left) + _text(node.right)
    return "…" if node is not None else ""


def _error_calls() -> list:
    """(file:line, problem text, fix text or None, param node or None, the enclosing function's parameters) of every
    ``DpconvertError(...)``/``OptionError(...)`` the library builds."""
    found = []
    for folder in ("convert", "zoo_cards", "generators", "students"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            tree = ast.parse(path.read_text())
            for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]:
                args = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)} if not isinstance(fn, ast.Module) else set()
                for n in ast.walk(fn):
                    if isinstance(n, ast.Call) and _called(n, {"DpconvertError", "OptionError"}):
                        kw = {k.arg: k.value for k in n.keywords}
                        found.append((f"{rel}:{n.lineno}", _text(n.args[0]) if n.args else "", _text(kw["fix"]) if "fix" in kw else None,
                                      kw.get("param"), args, _called(n, {"OptionError"})))
    return list({where: (where, *rest) for where, *rest in found}.values())  # innermost function wins (walked last)


def _declared_parameters() -> set:
    """Every parameter a user can set: the declared options of every options class, every parameter of every CLI
    command, and the public API's arguments."""
    import inspect

    import typer

    import dpconvert
    from dpconvert.auditing.audit import Policy
    from dpconvert.cli.app import app
    from dpconvert.io.teachers import LoadOptions
    from dpconvert.methods import METHODS
    from dpconvert.option_fields import option_specs
    from dpconvert.options import RunOptions

    options = {s.name for cls in (RunOptions, LoadOptions, Policy, *(METHODS.get(m).Options for m in METHODS)) for s in option_specs(cls)}
    api = {p for f in ("convert", "plan", "audit", "synthesize", "load_teacher", "load_data") for p in inspect.signature(getattr(dpconvert, f)).parameters}
    commands, cli = [typer.main.get_command(app)], set()
    while commands:
        command = commands.pop()
        cli |= {p.name for p in command.params}
        commands += list(getattr(command, "commands", {}).values())  # a group's subcommands (Typer may vendor its own click)
    return options | api | cli


# a fix hidden in the problem text: "…; give `x`" instead of fix="give `x`" (a detector for the test, never for the library)
_FIX_IN_PROSE = re.compile(r"(?:; |: |\. )\(?(?:give|drop|use|add|lower|raise|choose|pass|set|remove|run|install|re-save)\b")


def test_every_error_states_its_fix_and_param_explicitly():
    """Each error passes ``fix=`` when its text names a parameter, ``param=`` naming one the text names, a parameter a
    user can set (a declared option, a public API argument or an argument of the raising function); an option error
    always states its fix; and no problem text hides a fix clause that ``fix`` should carry."""
    calls = _error_calls()
    assert len(calls) > 200  # the scan found the library's errors
    declared = _declared_parameters()
    no_fix = [f"{w}: {p}" for w, p, fix, param, args, is_option in calls if fix is None and ("`" in p or is_option)]
    no_param = [f"{w}: {p} | {fix}" for w, p, fix, param, args, _ in calls if param is None and re.search(r"`[a-z_][a-z0-9_]*`", p + (fix or ""))]
    literal = [(w, param.value, p + " " + (fix or ""), args) for w, p, fix, param, args, _ in calls if isinstance(param, ast.Constant)]
    not_named = [f"{w}: {name}" for w, name, text, _ in literal if f"`{name}`" not in text and "…" not in text]
    not_settable = [f"{w}: {name}" for w, name, _, args in literal if name not in declared | args]
    hidden = [f"{w}: {p}" for w, p, *_ in calls if _FIX_IN_PROSE.search(p)]
    assert (no_fix, no_param, not_named, not_settable, hidden) == ([], [], [], [], [])


def test_only_the_card_blocks_module_writes_a_guarantee_or_accounting_block():
    """Methods and ``synth`` hand over their accountant and their claims; every ε on a card, its accounting block and
    the check that ε spent is within the target are written once (``accounting/card_blocks.py``)."""
    written_elsewhere = []
    for path in sorted((ROOT / "convert").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel == Path("convert/accounting/card_blocks.py") or rel.parts[:2] in {("convert", "auditing"), ("convert", "cli")}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            keys = {k.value for k in getattr(node, "keys", []) if isinstance(node, ast.Dict) and isinstance(k, ast.Constant)}
            if {"covers", "not_covered"} & keys or ({"libraries", "state"} <= keys) or _called(node, {"library_versions"}):
                written_elsewhere.append(f"{rel}:{node.lineno}")
    assert written_elsewhere == []


@pytest.mark.parametrize("module", ["pipeline.py", "api.py"])
def test_the_pipeline_and_the_api_name_no_method(module):
    """The pipeline and the Python API ask a method what it can do (``Method.noise_free``, ``several_teachers``,
    ``describe_choice``, ``reads_private_records``, ``realised_plan``) instead of branching on its name ("One place
    per concept, round 3")."""
    from dpconvert.methods import METHODS

    text = (ROOT / "convert" / module).read_text()
    literals = {n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not literals & (set(METHODS.names()) | {"dpgan"})


def test_a_plan_is_read_by_attribute_never_by_key():
    """The plan is a typed dataclass (``accounting/plans.py``) from the method that makes it to the mechanism, the plan
    table, the teacher's guarantee and the audit: no ``plan["…"]`` or ``plan.get("…")`` in the library."""
    keyed = []
    for folder in PACKAGES.values():
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                target = node.value if isinstance(node, ast.Subscript) else node.func.value if (
                    isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get") else None
                key = node.slice if isinstance(node, ast.Subscript) else (node.args[0] if isinstance(node, ast.Call) and node.args else None)
                if isinstance(target, ast.Name) and "plan" in target.id and isinstance(key, ast.Constant) and isinstance(key.value, str):
                    keyed.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert keyed == []
