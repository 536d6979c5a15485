#!/usr/bin/env bash
# The TMA planner on transformer-sized traces (issue 20; docs/tma.md "Transformer-sized
# traces"), through the tools a user runs:
#   1. record: mtc-train --tma --tma_problem writes the buffers of one training iteration
#      as TMA planned them: the GPT (hidden 64, 4 heads, seq 64, batch 8) at 125, 375 and
#      750 layers (about 10,000, 30,000 and 60,000 buffers: repetition across layers, by
#      the model itself), and at 48 layers and vit_tiny (batch 32) as the bases of step 2;
#   2. generate (tma_trace_gen, seed 1): micro-batches in flight of the 48-layer GPT and of
#      vit_tiny at 10,000, 30,000 and 60,000 buffers, and instances packed by construction
#      (their lower bound is their optimum) at the same sizes;
#   3. plan each with mtc-plan --alignment 256 at --time-limit 1, 5 and 30 (one thread):
#      peak / lower bound, seconds, method, the planner's peak resident memory.
# Targets: every recorded and micro-batch instance at most 1.002x its lower bound within
# 1 s; every packed one at its optimum within 5 s; the planner's memory at most 200 MB on
# the 60,000-buffer instances. The last line is the verdict: PASS, or FAIL naming what
# missed (exit 1). --limits "1 5" runs fewer columns; --keep DIR keeps the instances.
set -euo pipefail

usage() {
  cat <<EOF
usage: $0 [--limits "1 5 30"] [--keep DIR] [--build DIR]
EOF
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
limits="1 5 30"
keep=
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --limits|--keep|--build)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; usage >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
for l in $limits; do
  [[ $l =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "--limits: '$l' is not a number of seconds" >&2; exit 2; }
done
for b in launch/mtc-train launch/mtc-plan benchmarks/tma_trace_gen; do
  [ -x "$build/$b" ] || { echo "no $build/$b: build it (ninja -C $build ${b##*/})" >&2; exit 2; }
done
if [ -n "$keep" ]; then
  mkdir -p "$keep"
  dir=$(cd "$keep" && pwd)
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi

# 1. Record.
record() {  # NAME MTC-TRAIN-FLAGS...
  local name=$1 log
  shift
  log=$dir/$name.train.log
  if ! "$build/launch/mtc-train" "$@" --tma --tma_warmup=2 --warmup=3 --iterations=1 --threads=2 \
      --log_every=1000 --tma_problem="$dir/$name.csv" >"$log" 2>&1 || [ ! -s "$dir/$name.csv" ]; then
    show_tail "recording $name failed" "$log"
    exit 1
  fi
}
gpt=(--model=gpt --hidden=64 --heads=4 --seq=64 --batch=8)
for layers in 125 375 750; do record "gpt$layers" "${gpt[@]}" --layers="$layers"; done
record gpt48 "${gpt[@]}" --layers=48
record vit --model=vit_tiny --batch=32
echo "recorded in $(date -u +%H:%M:%S): the GPT at 125, 375, 750 and 48 layers, vit_tiny"

# 2. Generate.
"$build/benchmarks/tma_trace_gen" --out "$dir" --base gpt48="$dir/gpt48.csv" --base vit="$dir/vit.csv"

# 3. Plan.
instances=(gpt125 gpt375 gpt750)
for n in 10000 30000 60000; do instances+=("gpt48-mb-$n" "vit-mb-$n"); done
for n in 10000 30000 60000; do instances+=("packed-$n"); done
fails=()
echo
printf '%-16s %7s %12s' instance buffers "lower bound"
for l in $limits; do printf ' | %6s %8s %-8s' "${l}s x" seconds method; done
printf ' | %s\n' "peak RSS MiB"
for x in "${instances[@]}"; do
  line=
  rss=0
  row=()
  for l in $limits; do
    log=$dir/$x.$l.log
    status=0
    run_logged "$log" "$build/launch/mtc-plan" --in="$dir/$x.csv" --alignment=256 --time_limit="$l" || status=$?
    if [ "$status" != 0 ] || ! line=$(summary_line "$log"); then
      show_tail "mtc-plan on $x (--time-limit $l) exited $status" "$log"
      fails+=("$x: mtc-plan --time-limit $l failed")
      row+=("$(printf ' | %6s %8s %-8s' - - -)")
      continue
    fi
    ratio=$(field "$line" ratio)
    sec=$(field "$line" seconds)
    r=$(field "$line" peak_rss_bytes)
    [ "$r" -le "$rss" ] || rss=$r
    row+=("$(printf ' | %6.4f %8.3f %-8s' "$ratio" "$sec" "$(field "$line" method)")")
    case "$x" in
      packed-*) if awk -v l="$l" 'BEGIN { exit !(l == 5) }' && [ "$(field "$line" peak)" != "$(field "$line" lower_bound)" ]; then
                  fails+=("$x: ${ratio}x at $l s (target: the optimum within 5 s)")
                fi ;;
      *) if awk -v l="$l" 'BEGIN { exit !(l == 1) }' && awk -v r="$ratio" 'BEGIN { exit !(r > 1.002) }'; then
           fails+=("$x: ${ratio}x at $l s (target: at most 1.002x within 1 s)")
         fi ;;
    esac
    if awk -v s="$sec" -v l="$l" 'BEGIN { exit !(s > l * 1.05 + 0.05) }'; then
      fails+=("$x: $sec s at --time-limit $l")
    fi
  done
  [ -n "$line" ] || continue
  printf '%-16s %7s %12s' "$x" "$(field "$line" buffers)" "$(field "$line" lower_bound)"
  printf '%s' "${row[@]}"
  printf ' | %.1f\n' "$(awk -v r="$rss" 'BEGIN { print r / 1048576 }')"
  case "$x" in *60000|gpt750) [ "$rss" -le 200000000 ] || fails+=("$x: the planner held $rss bytes (target 200 MB)") ;; esac
done

echo
if [ ${#fails[@]} -eq 0 ]; then
  echo "PASS"
  exit 0
fi
printf 'FAIL: %s\n' "${fails[@]}"
exit 1
