"""``dpconvert plan``: the privacy plan a conversion would run, by the same method objects."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from dpconvert.options import DEFAULT_DELTA

from .app import method_help, A, D, P, S, _given, app


@app.command()
def plan(
    method: Annotated[str, typer.Option("--method", help=method_help(auto=False) + " Planned by the same code convert runs.")] = "dpdfd",
    eps: Annotated[Optional[float], typer.Option("--eps", help="Target ε (calibrates the noise).")] = None,
    delta: Annotated[Optional[float], typer.Option("--delta", help=f"Target δ (default: DPDFD ≤ 1/(B·T), the protected answers; else {DEFAULT_DELTA:g}).")] = None,
    n: Annotated[Optional[int], typer.Option("--n", help="Private set size, if known (checks δ ≤ 1/n).")] = None,
    steps: Annotated[Optional[int], typer.Option("--steps", "--releases", help=f"DPDFD: number of noisy releases T (default {D.releases}, as convert).")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="DPDFD: rows per release B (default: convert's for --input-size; only the record-level bound and the default δ depend on it).")] = None,
    input_size: Annotated[str, typer.Option("--input-size", help="DPDFD: the teacher's input size C,H,W (convert's defaults for B follow from it).")] = "1,28,28",
    noise_multiplier: Annotated[Optional[float], typer.Option("--noise-multiplier", help="DPDFD and DP-SGD: use this σ and compute ε instead of calibrating.")] = None,
    accounting: Annotated[Optional[str], typer.Option("--accounting", help="DPDFD: per-answer (default; no input answered twice: the ε of one release for any --steps) or composed.")] = None,
    k: Annotated[Optional[int], typer.Option("--k", help=f"Private-kNN: neighbours (default {P.k}).")] = None,
    sampling_rate: Annotated[Optional[float], typer.Option("--sampling-rate", help=f"Private-kNN: Poisson sampling rate γ (default {P.sampling_rate}); DP-SGD: lot rate q (default {S.sampling_rate}).")] = None,
    sigma1: Annotated[Optional[float], typer.Option("--sigma1", help=f"Private-kNN: screening noise σ1 (default {P.sigma1}).")] = None,
    threshold: Annotated[Optional[float], typer.Option("--threshold", help=f"Private-kNN: screening threshold (default {P.threshold_ratio}·k).")] = None,
    sigma2: Annotated[Optional[float], typer.Option("--sigma2", help="Private-kNN: argmax noise (default: calibrated to --eps).")] = None,
    num_classes: Annotated[int, typer.Option("--num-classes", help="Private-kNN: classes.")] = 10,
    queries: Annotated[Optional[int], typer.Option("--queries", help="Private-kNN: queries screened (with --public-data: the number of public images; default as convert: 5000 from a query generator).")] = None,
    query_generator: Annotated[Optional[str], typer.Option("--query-generator", help="Private-kNN: prior or dpgan (planned with the GAN's events, as convert).")] = None,
    generator_eps: Annotated[Optional[float], typer.Option("--generator-eps", help="Private-kNN with --query-generator dpgan: the GAN's share of ε (default half).")] = None,
    answered: Annotated[Optional[int], typer.Option("--answered", help="Private-kNN: queries answered (default: all).")] = None,
    epochs: Annotated[Optional[int], typer.Option("--epochs", help=f"DP-SGD: epochs of ⌊1/q⌋ steps (default {S.epochs}).")] = None,
    clip: Annotated[Optional[float], typer.Option("--clip", help=f"DP-SGD: per-example gradient norm bound (default {S.clip:g}).")] = None,
    sigma: Annotated[Optional[float], typer.Option("--sigma", help="DP-SGD: use this noise multiplier and compute ε.")] = None,
    count_sigma: Annotated[Optional[float], typer.Option("--count-sigma", help=f"DP-SGD: noise of the record count (default {S.count_sigma:g}).")] = None,
    relevance_share: Annotated[Optional[float], typer.Option("--relevance-share", help=f"AdLM: ε₁/ε for the relevance release (default {A.relevance_share:g}).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Plan a privacy budget: the noise for a target ε, and ε by each accountant (DPDFD: what convert runs by default)."""
    from dpconvert.api import plan as make_plan
    from dpconvert.io.spec import parse_size

    from .render import print_plan

    result = make_plan(method, eps=eps, delta=delta, n=n, noise_multiplier=noise_multiplier, num_classes=num_classes, queries=queries,
                       answered=answered, input_size=parse_size(input_size),
                       **_given(releases=steps, batch_size=batch_size, accounting=accounting, k=k, sampling_rate=sampling_rate, sigma1=sigma1,
                                threshold=threshold, sigma2=sigma2, epochs=epochs, clip=clip, sigma=sigma, count_sigma=count_sigma,
                                query_generator=query_generator, generator_eps=generator_eps, relevance_share=relevance_share))
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print_plan(result)
