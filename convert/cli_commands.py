"""Commands beyond inspect, registered on the same Typer app."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from .cli import app
from .console import out


# ------------------------------------------------------------------ plan
@app.command()
def plan(
    method: Annotated[str, typer.Option("--method", help="dpdfd or pknn.")] = "dpdfd",
    eps: Annotated[Optional[float], typer.Option("--eps", help="Target ε (calibrates the noise).")] = None,
    delta: Annotated[float, typer.Option("--delta", help="Target δ.")] = 1e-5,
    n: Annotated[Optional[int], typer.Option("--n", help="Private set size, if known (checks δ ≤ 1/n).")] = None,
    steps: Annotated[int, typer.Option("--steps", help="DPDFD: number of noisy releases T.")] = 720,
    batch_size: Annotated[int, typer.Option("--batch-size", help="DPDFD: rows per release B (only the record-level bound depends on it).")] = 256,
    noise_multiplier: Annotated[Optional[float], typer.Option("--noise-multiplier", help="DPDFD: use this σ and compute ε instead of calibrating.")] = None,
    k: Annotated[int, typer.Option("--k", help="Private-kNN: neighbours.")] = 300,
    sampling_rate: Annotated[float, typer.Option("--sampling-rate", help="Private-kNN: Poisson sampling rate γ.")] = 0.15,
    sigma1: Annotated[float, typer.Option("--sigma1", help="Private-kNN: screening noise.")] = 75.0,
    threshold: Annotated[Optional[float], typer.Option("--threshold", help="Private-kNN: screening threshold (default 0.6k).")] = None,
    sigma2: Annotated[Optional[float], typer.Option("--sigma2", help="Private-kNN: argmax noise (calibrated to --eps when omitted).")] = None,
    num_classes: Annotated[int, typer.Option("--num-classes", help="Private-kNN: classes.")] = 10,
    queries: Annotated[int, typer.Option("--queries", help="Private-kNN: queries screened.")] = 1000,
    answered: Annotated[Optional[int], typer.Option("--answered", help="Private-kNN: queries answered (default: all).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Plan a privacy budget: the noise for a target ε, and ε by each accountant."""
    from .errors import DpconvertError
    from .planning import plan_dpdfd, plan_pknn

    if method == "dpdfd":
        result = plan_dpdfd(eps=eps, delta=delta, steps=steps, batch_size=batch_size, noise_multiplier=noise_multiplier, n=n)
    elif method == "pknn":
        result = plan_pknn(eps=eps, delta=delta, k=k, sampling_rate=sampling_rate, sigma1=sigma1,
                           threshold=threshold if threshold is not None else 0.6 * k, sigma2=sigma2, num_classes=num_classes,
                           queries=queries, answered=queries if answered is None else answered, n=n)
    else:
        raise DpconvertError(f"unknown --method {method!r}; choose dpdfd or pknn")
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print_plan(result)


def print_plan(result: dict) -> None:
    from rich.table import Table

    table = Table(title=f"privacy plan ({result['method']}, scope {result['scope']}, δ={result['delta']:g})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    if result["method"] == "dpdfd":
        sig = f"{result['sigma']:.4f}" + (" (calibrated)" if result["calibrated"] else "")
        rows = [("noise multiplier σ", sig), ("noisy releases T", str(result["steps"])), ("batch size B", str(result["batch_size"]))]
    else:
        sig = f"{result['sigma2']:.4f}" + (" (calibrated)" if result["calibrated"] else "")
        rows = [("k", str(result["k"])), ("sampling rate γ", f"{result['sampling_rate']:g}"), ("σ1 (screening)", f"{result['sigma1']:g}"),
                ("threshold", f"{result['threshold']:g}"), ("σ2 (argmax)", sig), ("queries asked / answered", f"{result['queries_asked']} / {result['queries_answered']}")]
    for name, value in result["accountants"].items():
        rows.append((f"ε ({name})", f"{value:.4f}"))
    rows.append(("ε reported", f"{result['epsilon']:.4f}"))
    if "replace_one_epsilon" in result:
        rows.append(("ε, replace-one answer", f"{result['replace_one_epsilon']:.4f}"))
    if "record_level_epsilon" in result:
        rows.append(("ε, record-level worst case", f"{result['record_level_epsilon']:.4f}"))
    for r in rows:
        table.add_row(*r)
    out.print(table)
    out.print(f"adjacency: {result['adjacency']}")
