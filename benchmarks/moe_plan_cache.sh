#!/usr/bin/env bash
# TMA's plan cache under a mixture of experts: moe_gpt (mtc-train --model moe_gpt --tma),
# whose routing gives every iteration other token counts per expert, so an iteration's
# shapes (TMA's signature) seldom recur. Runs, one after another, with the exact counts
# (--moe_bucket 0), counts rounded up to --bucket tokens, and every expert padded to its
# capacity (a bucket of 1<<20 >= C); with --dropless, the capacity run is left out (there
# is none). Prints for each, over the timed iterations (all after TMA's five traced ones):
# the share of iterations that had a plan (tma_cache_hits / tma_cache_lookups), the share
# of compute-region requests placed at their planned offset, the plans made and held,
# the padding rows per iteration, the time per iteration, and high water over peak live
# bytes. Reported, not judged: the issue asks for the hit rates with and without
# bucketing.
# Exit: 0, or 2 on a usage error or a failed run.
set -euo pipefail

usage() {
  echo "usage: $0 [MTC_TRAIN] [--batch 8] [--iterations 60] [--warmup 5] [--threads 2] [--experts 4] [--top_k 2] [--bucket 16] [--dropless]"
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
batch=8 iterations=60 warmup=5 threads=2 experts=4 top_k=2 bucket=16 dropless=0
while [ $# -gt 0 ]; do
  case "$1" in
    --batch|--iterations|--warmup|--threads|--experts|--top_k|--bucket)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; usage >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    --dropless) dropless=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done
need_counts batch iterations warmup threads experts top_k bucket
need_mtc_train "$mtc_train"
if [ "$warmup" -lt 5 ]; then
  echo "--warmup $warmup: expected at least 5, so that the timed iterations come after TMA's five traced ones" >&2
  exit 2
fi
work_dir "$0" ""
moe=(--moe_experts "$experts" --moe_top_k "$top_k")
[ "$dropless" = 1 ] && moe+=(--moe_dropless)
runs=("0" "$bucket")
[ "$dropless" = 1 ] || runs+=("$((1 << 20))")
echo "moe_gpt (tiny), batch $batch, $experts experts, top-$top_k$([ "$dropless" = 1 ] && echo ", dropless"), $iterations timed iterations"
printf '%-12s %10s %10s %8s %8s %12s %12s %10s\n' bucket planned placed plans held "padded/it" "s/iter" "hw/peak"
for b in "${runs[@]}"; do
  log=$tmp/moe-$b.log
  if ! run_logged "$log" "$mtc_train" --model moe_gpt --batch "$batch" --iterations "$iterations" \
      --warmup "$warmup" --threads "$threads" --tma "${moe[@]}" --moe_bucket "$b" --log_every 1; then
    show_tail "mtc-train failed" "$log"
    exit 2
  fi
  line=$(summary_line "$log")
  name=$b
  [ "$b" = 0 ] && name="exact"
  [ "$b" = $((1 << 20)) ] && name="capacity"
  # Padding rows per iteration, from the progress lines of the timed iterations.
  padded=$(awk -v w="$warmup" '/^iter / && $2 > w { for (i = 1; i <= NF; ++i) if ($i == "padded") { s += $(i + 1); n++ } }
                              END { printf "%.1f", n ? s / n : 0 }' "$log")
  awk -v name="$name" -v h="$(field "$line" tma_cache_hits)" -v l="$(field "$line" tma_cache_lookups)" \
      -v rh="$(field "$line" tma_hits)" -v rm="$(field "$line" tma_misses)" -v p="$(field "$line" tma_plans)" \
      -v c="$(field "$line" tma_plans_cached)" -v pad="$padded" -v s="$(field "$line" min_sec_per_iter)" \
      -v hw="$(field "$line" high_water_compute_bytes)" -v pk="$(field "$line" peak_compute_bytes)" \
      'BEGIN { printf "%-12s %10.3f %10.3f %8d %8d %12s %12.4f %10.3f\n", name, (l > 0 ? h / l : 0),
               (rh + rm > 0 ? rh / (rh + rm) : 0), p, c, pad, s, (pk > 0 ? hw / pk : 0) }'
done
