#!/usr/bin/env bash
# TMA's plan cache under a dynamic model: the SPOS supernet (mtc-train --model spos) runs,
# each iteration, one of --pool paths drawn once (--spos_pool), with --tma, so every path
# recurs and TMA plans each one at its second sighting. Prints, over the timed iterations
# (all after TMA's five traced ones): the share of iterations whose path had a plan
# (tma_cache_hits / tma_cache_lookups), the share of compute-region requests placed at
# their planned offset, the plans made, held and evicted and the host bytes the cache
# holds, and the compute region's high-water mark over its peak live bytes. With
# --max_plans below --pool the cache evicts (least recently seen first) and the first
# figure falls; the verdicts apply to the default, a cache as large as the pool:
#   at least 90% of the iterations planned, and high water at most 1.05x the peak.
# Exit: 0 PASS, 1 FAIL, 2 usage error or a failed run.
set -euo pipefail

usage() {
  echo "usage: $0 [MTC_TRAIN] [--pool 8] [--max_plans 32] [--batch 16] [--iterations 200] [--warmup 5] [--threads 2] [--image_size 32]"
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
pool=8 max_plans=32 batch=16 iterations=200 warmup=5 threads=2 image_size=32
while [ $# -gt 0 ]; do
  case "$1" in
    --pool|--max_plans|--batch|--iterations|--warmup|--threads|--image_size)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; usage >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done
need_counts pool max_plans batch iterations warmup threads image_size
need_mtc_train "$mtc_train"
if [ "$warmup" -lt 5 ]; then
  echo "--warmup $warmup: expected at least 5, so that the timed iterations come after TMA's five traced ones" >&2
  exit 2
fi
work_dir "$0" ""
log=$tmp/spos.log
if ! run_logged "$log" "$mtc_train" --model spos --image_size "$image_size" --batch "$batch" \
    --iterations "$iterations" --warmup "$warmup" --threads "$threads" --tma --tma_max_plans "$max_plans" \
    --spos_pool "$pool" --log_every "$iterations"; then
  show_tail "mtc-train failed" "$log"
  exit 2
fi
line=$(summary_line "$log")
hits=$(field "$line" tma_cache_hits) lookups=$(field "$line" tma_cache_lookups)
req_hits=$(field "$line" tma_hits) req_misses=$(field "$line" tma_misses)
peak=$(field "$line" peak_compute_bytes) high=$(field "$line" high_water_compute_bytes)
echo "spos, batch $batch, image $image_size, $iterations timed iterations, a pool of $pool paths, at most $max_plans plans"
echo "plans made $(field "$line" tma_plans), held $(field "$line" tma_plans_cached), evicted $(field "$line" tma_plans_evicted), cache $(field "$line" tma_cache_bytes) bytes"
planned=$(awk -v h="$hits" -v l="$lookups" 'BEGIN { printf "%.3f", (l > 0 ? h / l : 0) }')
placed=$(awk -v h="$req_hits" -v m="$req_misses" 'BEGIN { printf "%.3f", (h + m > 0 ? h / (h + m) : 0) }')
ratio=$(awk -v a="$high" -v b="$peak" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
echo "requests at their planned offset: $placed of $((req_hits + req_misses))"
ok=1
verdict "iterations whose path had a plan ($hits of $lookups; target >= 0.90)" "$planned" \
  "$(awk -v x="$planned" 'BEGIN { print (x >= 0.90) ? 1 : 0 }')"
verdict "high water / peak live bytes ($high / $peak; target <= 1.05)" "$ratio" \
  "$(awk -v x="$ratio" 'BEGIN { print (x <= 1.05) ? 1 : 0 }')"
[ "$ok" = 1 ]
