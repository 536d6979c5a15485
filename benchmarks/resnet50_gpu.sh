#!/usr/bin/env bash
# ResNet-50 at 224x224, batch 64, fp32, on one GPU: mtc-train --device cuda beside PyTorch
# (benchmarks/torch_peer.py --device cuda, TF32 off) in one run, --repeat interleaved
# rounds. Prints per round and the best of each: seconds per training iteration (the
# least of the timed iterations' for mtc, the mean for torch, which times them as a block),
# their ratio, and peak device memory: mtc's compute and comm regions' peaks
# (peak_compute_bytes + peak_comm_bytes) beside torch.cuda.max_memory_allocated().
# Target: mtc at most 1.2x PyTorch's time (PASS / FAIL line).
# Needs a GPU: run it on the device machine (docs/cuda.md says how to build there).
# Exit: 0 PASS, 1 FAIL, 2 usage error, no GPU, or a failed run.
set -euo pipefail

usage() {
  echo "usage: $0 [MTC_TRAIN] [--batch 64] [--image-size 224] [--iterations 20] [--warmup 5] [--repeat 2] [--python python3]"
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
batch=64 image_size=224 iterations=20 warmup=5 repeat=2 python=python3
while [ $# -gt 0 ]; do
  case "$1" in
    --batch|--image-size|--iterations|--warmup|--repeat|--python)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; usage >&2; exit 2; }
      v=${1#--}; declare "${v//-/_}=$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "resnet50_gpu.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done
need_mtc_train "$mtc_train"
need_counts batch image_size iterations warmup repeat
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "resnet50_gpu.sh: $python has no torch with a GPU: this benchmark needs one" >&2
  exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
best_mtc="" best_torch="" mem_mtc="" mem_torch=""
printf '%-6s %12s %12s %8s %16s %16s\n' round "mtc s/iter" "torch s/iter" ratio "mtc peak MiB" "torch peak MiB"
for round in $(seq 1 "$repeat"); do
  if ! run_logged "$tmp/mtc.txt" "$mtc_train" --device=cuda --model=resnet50 --batch="$batch" \
      --image_size="$image_size" --iterations="$iterations" --warmup="$warmup" --log_every=1000; then
    show_tail "mtc-train --device cuda failed" "$tmp/mtc.txt"
    exit 2
  fi
  if ! run_logged "$tmp/torch.txt" "$python" benchmarks/torch_peer.py --device=cuda --model=resnet50 \
      --batch="$batch" --image_size="$image_size" --iterations="$iterations" --warmup="$warmup"; then
    show_tail "torch_peer.py --device cuda failed" "$tmp/torch.txt"
    exit 2
  fi
  m=$(summary_line "$tmp/mtc.txt")
  t=$(summary_line "$tmp/torch.txt")
  ms=$(field "$m" min_sec_per_iter)
  ts=$(field "$t" sec_per_iter)
  mm=$(( $(field "$m" peak_compute_bytes) + $(field "$m" peak_comm_bytes) ))
  tm=$(field "$t" peak_compute_bytes)
  awk -v r="$round" -v a="$ms" -v b="$ts" -v c="$mm" -v d="$tm" \
    'BEGIN { printf "%-6s %12.4f %12.4f %8.3f %16.1f %16.1f\n", r, a, b, a / b, c / 1048576, d / 1048576 }'
  best_mtc=$(awk -v a="$ms" -v b="${best_mtc:-1e30}" 'BEGIN { print (a < b ? a : b) }')
  best_torch=$(awk -v a="$ts" -v b="${best_torch:-1e30}" 'BEGIN { print (a < b ? a : b) }')
  mem_mtc=$mm mem_torch=$tm
done
awk -v a="$best_mtc" -v b="$best_torch" -v c="$mem_mtc" -v d="$mem_torch" 'BEGIN {
  r = a / b
  printf "best   %12.4f %12.4f %8.3f %16.1f %16.1f\n", a, b, r, c / 1048576, d / 1048576
  printf "%s: mtc takes %.3fx PyTorch'"'"'s time per iteration (target at most 1.2x)\n", (r <= 1.2 ? "PASS" : "FAIL"), r
  exit (r <= 1.2 ? 0 : 1) }'
