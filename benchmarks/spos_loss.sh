#!/usr/bin/env bash
# Does the SPOS supernet's loss fall, in mtc and in PyTorch? `mtc-train --model spos` and
# its PyTorch peer (spos_torch.py: the official supernet, the same initialisation,
# optimiser and kind of data) train --iterations iterations of AdamW on the first
# --overfit_batches synthetic batches (N(0,1) images, uniform labels) in turn, with the
# path of each iteration drawn three ways: a fresh uniform draw from the 4^20 paths
# (SPOS's sampler), one of 8 paths drawn once (--spos_pool 8), and one fixed path. The
# runs alternate mtc, PyTorch, mode by mode, for each of --seeds seeds (initialisation,
# data and paths). Prints per mode and runtime the first loss, the mean of the last five
# and their ratio, each the mean over the seeds; a loss "falls" when the mean ratio is
# under 0.7.
# Verdicts: mtc's loss falls with the fixed path and with 8 recurring paths, and in every
# mode where PyTorch's falls. Exit: 0 PASS, 1 FAIL, 2 usage error or a failed run.
set -euo pipefail

usage() {
  echo "usage: $0 [MTC_TRAIN] [--batch 8] [--iterations 50] [--overfit_batches 2] [--lr 1e-3] [--threads 2] [--image_size 32] [--seeds 3] [--keep DIR]"
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
batch=8 iterations=50 overfit_batches=2 lr=1e-3 threads=2 image_size=32 seeds=3 keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --batch|--iterations|--overfit_batches|--lr|--threads|--image_size|--seeds|--keep)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; usage >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done
need_counts batch iterations overfit_batches threads image_size seeds
if [ "$iterations" -lt 10 ]; then echo "--iterations $iterations: expected at least 10" >&2; exit 2; fi
need_mtc_train "$mtc_train"
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "torch is missing for $python: install it with scripts/deps.sh --torch (Debian's python3-torch)" >&2
  exit 2
fi
work_dir "$0" "$keep"

path=3,0,1,2,2,1,0,3,3,2,1,0,0,1,2,3,1,1,2,0
common=(--batch "$batch" --iterations "$iterations" --image_size "$image_size" --overfit_batches "$overfit_batches"
        --lr "$lr" --threads "$threads")
# falls_stats LOG: "FIRST LAST5 RATIO" from the `iter N loss X` lines.
falls_stats() {
  awk '/^iter [0-9]+ loss / { l[++n] = $4 }
       END { if (n < 5) exit 1; s = 0; for (i = n - 4; i <= n; ++i) s += l[i];
             printf "%.4f %.4f %.3f", l[1], s / 5, (l[1] > 0 ? s / 5 / l[1] : 0) }' "$1"
}
echo "spos, batch $batch, image $image_size, $iterations iterations of AdamW lr $lr on the first $overfit_batches synthetic batches in turn, seeds 0-$((seeds - 1))"
printf '%-10s | %-28s | %-28s\n' "path" "mtc: first, last 5, ratio" "PyTorch: first, last 5, ratio"
ok=1
declare -A mtc_ratio torch_ratio
for mode in uniform pool8 fixed; do
  case "$mode" in
    uniform) m_extra=(); t_extra=() ;;
    pool8) m_extra=(--spos_pool 8); t_extra=(--pool 8) ;;
    fixed) m_extra=(--spos_path "$path"); t_extra=(--path "$path") ;;
  esac
  : >"$tmp/mtc_$mode.stats"; : >"$tmp/torch_$mode.stats"
  for ((seed = 0; seed < seeds; ++seed)); do
    log=$tmp/mtc_$mode.$seed.log
    if ! run_logged "$log" "$mtc_train" --model spos "${common[@]}" --seed "$seed" --optimizer adamw --warmup 0 \
        --log_every 1 "${m_extra[@]}"; then
      show_tail "mtc-train ($mode, seed $seed) failed" "$log"; exit 2
    fi
    falls_stats "$log" >>"$tmp/mtc_$mode.stats" || { show_tail "mtc-train ($mode) printed no losses" "$log"; exit 2; }
    echo >>"$tmp/mtc_$mode.stats"
    log=$tmp/torch_$mode.$seed.log
    if ! run_logged "$log" "$python" benchmarks/spos_torch.py "${common[@]}" --seed "$seed" "${t_extra[@]}"; then
      show_tail "spos_torch.py ($mode, seed $seed) failed" "$log"; exit 2
    fi
    falls_stats "$log" >>"$tmp/torch_$mode.stats" || { show_tail "spos_torch.py ($mode) printed no losses" "$log"; exit 2; }
    echo >>"$tmp/torch_$mode.stats"
  done
  mean3() { awk '{ a += $1; b += $2; c += $3 } END { printf "%.4f %.4f %.3f", a / NR, b / NR, c / NR }' "$1"; }
  m=$(mean3 "$tmp/mtc_$mode.stats") t=$(mean3 "$tmp/torch_$mode.stats")
  mtc_ratio[$mode]=${m##* } torch_ratio[$mode]=${t##* }
  printf '%-10s | %-28s | %-28s\n' "$mode" "$m" "$t"
done
falls() { awk -v r="$1" 'BEGIN { print (r < 0.7) ? 1 : 0 }'; }
for mode in fixed pool8; do
  verdict "mtc's loss falls with the $mode path(s) (ratio; target < 0.7)" "${mtc_ratio[$mode]}" "$(falls "${mtc_ratio[$mode]}")"
done
for mode in uniform pool8 fixed; do
  if [ "$(falls "${torch_ratio[$mode]}")" = 1 ]; then
    verdict "$mode: PyTorch's loss falls (${torch_ratio[$mode]}), so must mtc's" "${mtc_ratio[$mode]}" \
      "$(falls "${mtc_ratio[$mode]}")"
  else
    echo "$mode: PyTorch's loss does not fall either (${torch_ratio[$mode]}); mtc's ratio ${mtc_ratio[$mode]}"
  fi
done
[ "$ok" = 1 ]
