#!/usr/bin/env bash
# Data-free DPDFD at GPU scale, in one go, for a lent GPU's few minutes ("Data-free students worth shipping", item 6).
#
#   bash benchmarks/gpu_rows.sh [OUT_DIR]          (default OUT_DIR: benchmarks/results/gpu)
#
# Needs, prepared on a CPU machine and carried with the working tree (benchmarks/runs/ is git-ignored):
#   benchmarks/runs/cifar10_published.pt, benchmarks/runs/natural_eval.npz   (python benchmarks/published_cifar10_teacher.py)
#   benchmarks/runs/fmnist_cnn2.safetensors, benchmarks/runs/fmnist_eval_last5k.npz   (optional: the Fashion-MNIST row;
#   python benchmarks/train_fmnist_teachers.py --which cnn2, and the eval split as benchmarks/run_pknn.py prepares it)
# On a lent device, carry those four files by name (~8 MB; benchmarks/runs/ as a whole holds an 82 MB ResNet, over the
# 64 MiB a run may carry).
# Dry run on a CPU (checks the script, not the numbers): sed 's/--device cuda/--device cpu/; s/20000000/4000/g' first.
# Each row is the command a user types, at ε = 1 with seeded noise (so a seed reproduces it), timed by the summary; every
# card lands in OUT_DIR with its JSON summary. A row that would run past its time budget is cut by `timeout` and says so.
set -u
OUT=${1:-benchmarks/results/gpu}
mkdir -p "$OUT"
RUNS=benchmarks/runs
S=0.0039215686
CIFAR="$RUNS/cifar10_published.pt --input-size 3,32,32 --mean 0,0,0 --std $S,$S,$S"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"

ONLY=${ONLY:-}  # a pattern: only the rows whose name matches it (benchmarks/device_check.sh runs two)

row() {  # row NAME SECONDS ARGS...: one conversion, its card and summary JSON in OUT
  local name=$1 budget=$2
  shift 2
  [[ -z "$ONLY" || "$name" =~ $ONLY ]] || return 0
  echo "== $name (budget ${budget}s): dpconvert $*"
  local t0=$SECONDS
  timeout "$budget" python -m dpconvert "$@" --device cuda --seeded-noise --force --out "$OUT/$name.onnx" --json > "$OUT/$name.json" \
    2> "$OUT/$name.log" || echo "   $name: exit $? (timeout 124 = cut at ${budget}s)"
  echo "   $name: $((SECONDS - t0)) s"
  [ -s "$OUT/$name.json" ] || return 0  # cut by the timeout: no summary to read
  python - "$OUT/$name.json" <<'EOF' || true
import json, sys
card = json.load(open(sys.argv[1]))
u, v, m = card.get("utility") or {}, card.get("expected_utility") or {}, card["mechanism"]
print(f"   rows {m['batch_size'] * m['releases']:,}  agreement/accuracy {u.get('student_accuracy')}  verdict weak={v.get('weak')} "
      f"classes {v.get('classes_covered')}/{v.get('num_classes')}")
EOF
}

if [ -f "$RUNS/cifar10_published.pt" ]; then
  row cifar_natural_rows_20m 150 $CIFAR --eps 1 --prior natural_crops --batch-size 20000000 --epochs 2 --eval-data "$RUNS/natural_eval.npz"
  row cifar_natural_images_20m 150 $CIFAR --eps 1 --prior natural_crops --prior-images 50000 --batch-size 20000000 --eval-data "$RUNS/natural_eval.npz"
  row cifar_fields_rows_20m 120 $CIFAR --eps 1 --prior centred_fields --batch-size 20000000 --epochs 2 --eval-data "$RUNS/natural_eval.npz"
fi
if [ -f "$RUNS/fmnist_cnn2.safetensors" ]; then
  row fmnist_fields_images_20m 150 "$RUNS/fmnist_cnn2.safetensors" --eps 1 --prior-images 50000 --batch-size 20000000 \
    --eval-data "$RUNS/fmnist_eval_last5k.npz"
fi
echo "cards and summaries in $OUT"
