"""``dpconvert plan``: the privacy plan a conversion would run, by the same method objects.

Generated from the same declarations as ``convert`` (``generated.py``): it accepts every method option convert takes,
so a conversion's flags can be pasted here; its help lists those that change the plan (``plan=True``).
"""

from __future__ import annotations

import json

from dpconvert.methods import METHODS, method_order
from dpconvert.options import DEFAULT_DELTA, RunOptions

from .app import app, method_help
from .generated import build, given, own, params_of, retitled

METHOD_OPTIONS = tuple(METHODS.get(name).Options for name in method_order())


def _plan_params() -> list:
    params = [own("method", default="dpdfd", help=method_help(auto=False) + " Planned by the same code convert runs. Default: dpdfd."),
              *params_of(RunOptions, only={"eps", "delta", "noise_multiplier"}, panel=None),
              own("n", type=int, help="Private set size, if known (checks δ ≤ 1/n)."),
              own("input_size", default="1,28,28", help="The teacher's input size C,H,W (DPDFD's B and default δ follow from it, as in convert). "
                  "Default: 1,28,28."),
              own("num_classes", type=int, default=10, help="The teacher's classes. Default: 10."),
              own("queries", type=int, help="Queries a query-labelling method answers (Private-kNN: the public images' count). Default: as "
                  "convert (5000 from a query generator)."),
              own("answered", type=int, help="Private-kNN: ε if only this many queries pass the screening. Default: all."),
              *params_of(*METHOD_OPTIONS, skip=frozenset({"queries"}), plan_only=True),
              *params_of(RunOptions, only={"teacher_card", "private_data_is_not_teacher_data"}, panel=None),
              own("as_json", "--json", type=bool, default=False, help="Print JSON.")]
    retitled(params, "delta", default_text=f"DPDFD ≤ 1/(B·T), the protected answers; else {DEFAULT_DELTA:g}")
    return params


PLAN = _plan_params()


def _plan(values: dict) -> None:
    from dpconvert.api import plan as make_plan
    from dpconvert.io.spec import parse_size

    from .render import print_plan

    result = make_plan(values["method"], n=values["n"], num_classes=values["num_classes"], queries=values["queries"], answered=values["answered"],
                       input_size=parse_size(values["input_size"]), **given(PLAN, values, RunOptions), **given(PLAN, values, *METHOD_OPTIONS))
    if values["as_json"]:
        print(json.dumps(result.to_dict(), indent=2))
        return
    print_plan(result)


build(app, "plan", PLAN, _plan,
      "Plan a privacy budget: the noise for a target ε, and ε by each accountant (DPDFD: what convert runs by default).")
