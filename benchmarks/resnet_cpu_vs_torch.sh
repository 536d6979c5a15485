#!/usr/bin/env bash
# mtc-train against its PyTorch peer (torch_peer.py) on the CPU: same model, batch, threads
# and iterations, run one after the other; prints both summary lines side by side and the
# ratio mtc/torch of sec_per_iter, PASS when it is at most 1.5. Exit: 0 PASS, 1 FAIL,
# 2 when a run failed or printed no summary line, or torch is missing.
set -euo pipefail

usage() {
  cat <<EOF
usage: $0 [MTC_TRAIN] [--model resnet56] [--batch 64] [--threads 2] [--iterations 20]
          [--warmup 3] [--seed 0] [--torch-only]
MTC_TRAIN defaults to build/launch/mtc-train. PYTHON (default /usr/bin/python3, which has
Debian's python3-torch) runs the peer. TARGET (default 1.5) is the largest passing ratio.
EOF
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
model=resnet56 batch=64 threads=2 iterations=20 warmup=3 seed=0 torch_only=0
python=${PYTHON:-/usr/bin/python3}
target=${TARGET:-1.5}
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --torch-only) torch_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done

# The peer needs torch: say so in one line rather than end in a ModuleNotFoundError.
# Debian's python3-torch installs for /usr/bin/python3, which need not be the python3
# first on PATH, hence that default.
if ! command -v "$python" >/dev/null; then
  echo "no Python at $python (PYTHON): unset it to use /usr/bin/python3" >&2
  exit 2
fi
if ! "$python" -c 'import torch' >/dev/null 2>&1; then
  echo "torch is missing for $python: install it with scripts/deps.sh --torch (Debian's python3-torch)" >&2
  exit 2
fi
if [ "$torch_only" = 0 ] && [ ! -x "$mtc_train" ]; then
  echo "no mtc-train at $mtc_train: build it (scripts/run.sh), pass its path, or use --torch-only" >&2
  exit 2
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
common=(--model "$model" --batch "$batch" --iterations "$iterations" --warmup "$warmup"
        --threads "$threads" --seed "$seed" --data synthetic)
export OMP_NUM_THREADS=$threads

# run NAME CMD...: runs one side, keeps its output, echoes its summary line.
run() {
  local name=$1; shift
  echo "running $name: $*" >&2
  if ! run_logged "$logs/$name.log" "$@"; then
    show_tail "$name failed" "$logs/$name.log"
    exit 2
  fi
  if ! summary_line "$logs/$name.log"; then
    show_tail "$name printed no 'summary ...' line" "$logs/$name.log"
    exit 2
  fi
}

keys=(model batch iterations sec_per_iter samples_per_sec final_loss peak_compute_bytes)
torch_line=$(run torch "$python" benchmarks/torch_peer.py "${common[@]}")
if [ "$torch_only" = 1 ]; then
  echo "$torch_line"
  for k in "${keys[@]}"; do printf '  %-20s %s\n' "$k" "$(field "$torch_line" "$k")"; done
  exit 0
fi
mtc_line=$(run mtc "$mtc_train" "${common[@]}")

printf '\n%-20s %16s %16s\n' "" "mtc" "torch"
for k in "${keys[@]}"; do
  printf '%-20s %16s %16s\n' "$k" "$(field "$mtc_line" "$k")" "$(field "$torch_line" "$k")"
done
mtc_sec=$(field "$mtc_line" sec_per_iter)
torch_sec=$(field "$torch_line" sec_per_iter)
verdict=$(awk -v m="$mtc_sec" -v t="$torch_sec" -v g="$target" \
  'BEGIN { r = m / t; printf "%.3f %s", r, (r <= g ? "PASS" : "FAIL") }')
echo "(peak_compute_bytes: mtc's compute-region peak; torch's peak RSS growth, an upper bound)"
echo
echo "ratio mtc/torch sec_per_iter = ${verdict% *} (target <= $target): ${verdict#* }"
[ "${verdict#* }" = PASS ]
