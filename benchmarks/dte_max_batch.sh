#!/usr/bin/env bash
# How much larger a batch DTE lets through a fixed arena: the largest batch of CIFAR
# ResNet-110 for which mtc-train completes 1 + --iterations iterations (--warmup 1,
# --iterations 1 by default), under each of --policies in turn: none (no eviction) first,
# then by default mtc, with no --budget (evict only when an allocation does not fit the
# compute region). A policy P+tma adds --tma with --tma_warmup 2 (TMA plans an iteration
# shape at its second sighting, so it takes effect from the third iteration: give it
# --iterations 4 or more). Each search doubles the batch until a run fails, then bisects
# between the last success and that failure until they are within --resolution percent of
# each other (2; 0 bisects to the exact batch); the searches after none's start at its
# maximum. A run counts as completed when it exits 0 with a summary line; out of memory,
# any other failure and a run past --run-timeout count as not completed (failures other
# than out of memory are reported). Prints each maximum, its samples/s (of that run's
# timed iterations) and its ratio to none's; PASS when the last policy's ratio >= 4.
# Exit: 0 PASS, 1 FAIL, 2 usage error or batch 1 does not complete without eviction.
set -euo pipefail

usage() {
  cat <<EOF
usage: $0 [MTC_TRAIN] [--model resnet110] [--memory 1GiB] [--comm_memory auto] [--threads 2]
          [--seed 0] [--max-batch 4096] [--run-timeout 600] [--resolution 2]
          [--policies "none mtc"] [--iterations 1] [--min-batch 1] [-- MTC_TRAIN_FLAGS...]
MTC_TRAIN defaults to build/launch/mtc-train. --min-batch: none's search starts there (2 for
a model whose batch norm sees 1x1 maps). --max-batch caps the searches (a maximum
at the cap is a lower bound). --run-timeout is in seconds per mtc-train run. Bisection
stops once the failing batch is within --resolution percent above the largest success.
--policies: none first, then any of none|mtc|dtr|lru|largest|capuchin, each optionally +tma.
Flags after -- go to every run. TARGET (default 4) is the smallest passing ratio of the last
policy to none.
EOF
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
model=resnet110 memory=1GiB comm_memory=auto threads=2 seed=0 max_batch=4096 run_timeout=600
resolution=2 policies="none mtc" iterations=1 min_batch=1
extra=()
target=${TARGET:-4}
while [ $# -gt 0 ]; do
  case "$1" in
    --model|--memory|--comm_memory|--threads|--seed|--max-batch|--run-timeout|--resolution|--policies|--iterations|--min-batch)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; usage >&2; exit 2; }
      v=${1#--}; declare "${v//-/_}=$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done
for n in threads max_batch run_timeout iterations min_batch; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || { echo "--${n//_/-} must be a positive integer, got '${!n}'" >&2; exit 2; }
done
[[ $resolution =~ ^[0-9]+$ ]] || { echo "--resolution must be a whole number of percent, got '$resolution'" >&2; exit 2; }
need_mtc_train "$mtc_train"
read -r -a policy_list <<<"$policies"
if [ "${#policy_list[@]}" -lt 2 ] || [ "${policy_list[0]}" != none ]; then
  echo "--policies '$policies': expected none first, then at least one policy to compare with it" >&2
  exit 2
fi
for p in "${policy_list[@]:1}"; do
  [[ ${p%+tma} =~ ^(none|mtc|dtr|lru|largest|capuchin)$ ]] ||
    { echo "--policies: unknown policy '$p': expected none|mtc|dtr|lru|largest|capuchin, each optionally +tma" >&2; exit 2; }
done

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
common=(--model "$model" --memory "$memory" --comm_memory "$comm_memory" --threads "$threads"
        --seed "$seed" --iterations "$iterations" --warmup 1 --data synthetic "${extra[@]}")
export OMP_NUM_THREADS=$threads
other_failures=0

# completes POLICY BATCH: status 0 when two iterations at BATCH complete under POLICY;
# one progress line on stderr either way.
completes() {
  local policy=$1 batch=$2 rc=0 kind t0=$SECONDS log=$logs/$1-$2.log flags
  flags=(--evict_policy="${policy%+tma}")
  [ "$policy" = "${policy%+tma}" ] || flags+=(--tma --tma_warmup=2)
  run_logged "$log" timeout "$run_timeout" "$mtc_train" "${common[@]}" --batch "$batch" "${flags[@]}" || rc=$?
  if [ "$rc" = 0 ] && summary_line "$log" >/dev/null; then
    printf '  %-8s batch %5d: ok (%d s)\n' "$policy" "$batch" $((SECONDS - t0)) >&2
    return 0
  fi
  if [ "$rc" = 124 ]; then
    kind="TIMEOUT after $run_timeout s"
  elif [ "$rc" = 0 ]; then
    kind="FAIL: no summary line"
  else
    kind=$(failure_kind "$rc" "$log")
    [ "$kind" = OOM ] || kind="FAIL (exit $rc)"
  fi
  printf '  %-8s batch %5d: %s (%d s)\n' "$policy" "$batch" "$kind" $((SECONDS - t0)) >&2
  if [ "$kind" != OOM ]; then
    show_tail "  $policy at batch $batch did not run out of memory but failed" "$log"
    other_failures=$((other_failures + 1))
  fi
  return 1
}

# largest POLICY START: the largest batch in [1, max_batch] that completes under POLICY,
# doubling from START and then bisecting down to --resolution; 0 when batch 1 does not
# complete. Sets largest_result and largest_failed (the smallest failing batch, 0 if none).
largest() {
  local policy=$1 b=$2 lo=0 hi=0 mid
  while :; do
    if completes "$policy" "$b"; then
      lo=$b
      [ "$b" -lt "$max_batch" ] || break
      b=$((2 * b > max_batch ? max_batch : 2 * b))
    else
      hi=$b
      break
    fi
  done
  if [ "$hi" -gt 0 ]; then
    while [ $((hi - lo)) -gt 1 ] && [ $((100 * (hi - lo))) -gt $((resolution * lo)) ]; do
      mid=$(((lo + hi) / 2))
      if completes "$policy" "$mid"; then lo=$mid; else hi=$mid; fi
    done
  fi
  largest_result=$lo
  largest_failed=$hi
}

echo "$model, --memory $memory, --comm_memory $comm_memory, $threads threads; $((iterations + 1)) iterations per" \
     "run; batch capped at $max_batch" >&2
largest none "$min_batch"
none_max=$largest_result none_failed=$largest_failed
if [ "$none_max" = 0 ]; then
  echo "batch $min_batch does not complete without eviction, nothing to compare against; its last line:" \
       "$(tail -n 1 "$logs/none-$min_batch.log")" >&2
  exit 2
fi
maxima=("$none_max") failed=("$none_failed")
for p in "${policy_list[@]:1}"; do
  largest "$p" "$none_max"
  maxima+=("$largest_result") failed+=("$largest_failed")
done

# show MAX FAILED: the maximum, marked when it is the cap (a lower bound), and the
# smallest batch that failed when that is more than one above it.
show() {
  if [ "$1" -ge "$max_batch" ]; then echo ">= $1 (the --max-batch cap)"
  elif [ "$2" -gt $(($1 + 1)) ]; then echo "$1 (batch $2 did not complete)"
  else echo "$1"; fi
}
echo
echo "$model at --memory $memory: largest batch completing $((iterations + 1)) iterations"
printf '  %-10s %-40s %12s %10s\n' policy "largest batch" "samples/s" "/ none"
for i in "${!policy_list[@]}"; do
  p=${policy_list[$i]} m=${maxima[$i]} sps=-
  if [ "$m" -gt 0 ] && [ -f "$logs/$p-$m.log" ]; then sps=$(field "$(summary_line "$logs/$p-$m.log")" samples_per_sec); fi
  printf '  %-10s %-40s %12s %10s\n' "$p" "$(show "$m" "${failed[$i]}")" "$sps" \
    "$(awk -v m="$m" -v n="$none_max" 'BEGIN { printf "%.2f", m / n }')"
done
if [ "$other_failures" -gt 0 ]; then
  echo "  ($other_failures runs failed otherwise than out of memory; see above)"
fi
last=${policy_list[${#policy_list[@]} - 1]}
verdict=$(awk -v m="${maxima[${#maxima[@]} - 1]}" -v n="$none_max" -v t="$target" \
  'BEGIN { r = m / n; printf "%.2f %s", r, (r >= t ? "PASS" : "FAIL") }')
echo "ratio $last/none = ${verdict% *} (target >= $target): ${verdict#* }"
[ "${verdict#* }" = PASS ]
