"""Teacher answers per second: torch (as ``dpconvert`` loads a teacher) against onnxruntime (as ``--teacher-runtime
auto`` exports it, ``convert/io/teacher_runtime.py``), at the product's rows per call, 2 threads, the best of 5 calls.

    python benchmarks/teacher_runtime_speed.py --json benchmarks/results/teacher_runtime_speed.json
    python benchmarks/teacher_runtime_speed.py --teachers builtin:digits      # what the smoke test runs

Teachers: the built-in digits CNN, the ResNet-34 and the published CIFAR-10 model of RESULTS table 15 (skipped where
their files are absent: ``benchmarks/train_fmnist_teachers.py``, ``benchmarks/published_cifar10_teacher.py``), and the
two Fashion-MNIST CNN architectures (untrained: speed does not depend on the weights).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _results import report

RUNS = Path(__file__).resolve().parent / "runs"
S = 0.0039215686
FILES = {"builtin:digits": {}, str(RUNS / "fmnist_resnet34_64.safetensors"): {},
         str(RUNS / "cifar10_published.pt"): dict(input_size=(3, 32, 32), mean=(0, 0, 0), std=(S, S, S))}
ARCHITECTURES = ("wide_cnn", "datalens_cnn")  # fmnist_cnn and fmnist_cnn2 of table 15, at 1×28×28


def rows_per_second(teacher, n: int, calls: int = 5) -> float:
    x = torch.randn(n, *teacher.spec.shape)
    teacher(x)  # warm-up
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        teacher(x)
        best = min(best, time.perf_counter() - t0)
    return n / best


def teachers(names: list[str]):
    from dpconvert.io.spec import InputSpec
    from dpconvert.io.teachers import LoadOptions, Teacher, _torch_forward, load_teacher
    from dpconvert.students import create_student

    for name in names:
        if name in ARCHITECTURES:
            spec = InputSpec(1, 28, 28, 10)
            module = create_student(name, spec).eval()
            yield name, lambda m=module, s=spec, n=name: Teacher(_torch_forward(m, "cpu", channels_last=True), s, "safetensors", n, n, module=m)
        elif name.startswith("builtin:") or Path(name).exists():
            yield Path(name).name, lambda n=name: load_teacher(n, LoadOptions(**FILES.get(n, {})))
        else:
            print(f"{name}: absent, skipped")


def main() -> None:
    from dpconvert.distill.models import rows_per_call
    from dpconvert.io.teacher_runtime import use_teacher_runtime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ",".join([*FILES, *ARCHITECTURES])
    ap.add_argument("--teachers", default=default)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    for name, make in teachers(args.teachers.split(",")):
        teacher = make()
        n = rows_per_call(int(torch.tensor(teacher.spec.shape).prod()))
        before = rows_per_second(teacher, n)
        runtime = use_teacher_runtime(teacher, "auto", "cpu")
        after = rows_per_second(teacher, n)
        report({"job": "teacher runtime speed", "teacher": name, "rows_per_call": n, "torch_rows_per_s": round(before),
                "runtime": runtime, "runtime_rows_per_s": round(after), "speed_up": round(after / before, 2), "threads": 2,
                "command": "python benchmarks/teacher_runtime_speed.py" + (f" --teachers {args.teachers}" if args.teachers != default else "")},
               args.json)


if __name__ == "__main__":
    main()
