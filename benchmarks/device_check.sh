#!/usr/bin/env bash
# The one prepared script for a lent GPU's first call (≤ 9 minutes): what no CPU machine here can check.
#
#   bash benchmarks/device_check.sh [OUT_DIR]        (default OUT_DIR: $OUT on a device machine, else /tmp/device_check)
#
# 1. tests/test_cuda.py: each method end to end on --device cuda (DPDFD with the prior and with a generator,
#    Private-kNN), each card audited;
# 2. torchrun with NCCL (--device cuda, one process per GPU), only with 2 or more GPUs: NCCL refuses two ranks on one;
# 3. the two natural-crop CIFAR-10 rows of benchmarks/gpu_rows.sh (20 M rows each, ≤ 150 s each), when their files were
#    carried (see that script's header).
# Each step has its own timeout, so one that hangs leaves the others their time. Exit status: the number of steps that
# failed.
set -u
OUT=${1:-${OUT:-/tmp/device_check}}
mkdir -p "$OUT"
failed=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" | tee -a "$OUT/device.txt"
python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" || { echo "torch sees no CUDA device: every step below would skip"; exit 1; }

echo "== 1. tests/test_cuda.py"
timeout 200 python -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -15 | tee "$OUT/test_cuda.txt"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "   FAILED"; failed=$((failed + 1)); }

GPUS=$(nvidia-smi -L | wc -l)
echo "== 2. torchrun, NCCL, $GPUS GPU(s)"
if [ "$GPUS" -ge 2 ]; then
  timeout 150 torchrun --standalone --nproc_per_node "$GPUS" --no-python dpconvert builtin:digits --device cuda --batch-size 30000 \
    --epochs 3 --seeded-noise --eval-data builtin:digits --force --out "$OUT/nccl.onnx" > "$OUT/nccl.txt" 2>&1
  rc=$?
  tail -5 "$OUT/nccl.txt"
  python -c "import json,sys; print('processes', json.load(open(sys.argv[1]))['run']['processes'])" "$OUT/nccl.onnx.card.json" || rc=1
  [ "$rc" = 0 ] && dpconvert audit "$OUT/nccl.onnx" > /dev/null || { echo "   FAILED (rc $rc)"; failed=$((failed + 1)); }
else
  echo "   skipped: fewer than 2 GPUs (run on a multi-GPU kind for this step)"
fi

echo "== 3. GPU rows (natural crops, CIFAR-10)"
ONLY=cifar_natural bash benchmarks/gpu_rows.sh "$OUT/rows"
echo "failed steps: $failed; outputs in $OUT"
exit "$failed"
