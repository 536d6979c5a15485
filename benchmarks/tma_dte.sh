#!/usr/bin/env bash
# What TMA gives a model: mtc-train without eviction for the compute-region peak P, then
# --repeat interleaved rounds of: no budget without and with --tma; --budget at 35 and 25%
# of P with DTE alone and with DTE and TMA; and the same two budgets as the compute region's
# size (--memory, "35m" and "25m": the device holds no more, so a request that finds no
# large enough block forces an eviction even under m*), with DTE alone and with TMA.
# --warmup defaults to 6, so that every timed iteration comes after TMA's five traced ones.
# Prints one table, a line per configuration: time per iteration (least over the rounds of
# min_sec_per_iter), its drift-free time (the median over the rounds of wall time /
# compute_sec, over the plain no-budget run's; see dte_overhead.sh), evictions, those of
# them made for want of a large enough block (evict_fragmented), recomputes, TMA's hits as a
# share of the requests, and the compute region's high-water mark over its peak live bytes;
# and a verdict per target:
#   without a budget, TMA: at least 99% hits, high water at most 1.02x the peak live bytes,
#     and the same final loss as without TMA (tests/tma_train_test.cc checks every loss
#     and weight bit for bit);
#   at 35% and 25%, as --budget and as --memory: DTE with TMA makes fewer evictions than
#     DTE alone and takes less time per iteration (drift-free).
# Exit: 0 all PASS, 1 a FAIL, 2 usage error or a run failed.
set -euo pipefail

usage() {
  echo "usage: $0 [MTC_TRAIN] [--model resnet56] [--batch 64] [--threads 2] [--iterations 10] [--warmup 6] [--repeat 3]"
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
model=resnet56 batch=64 threads=2 iterations=10 warmup=6 repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --model|--batch|--threads|--iterations|--warmup|--repeat)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; usage >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done
need_counts batch threads iterations warmup repeat
need_mtc_train "$mtc_train"
if [ "$warmup" -lt 6 ]; then
  echo "note: --warmup $warmup leaves traced (unplanned) iterations among the timed ones" >&2
fi
export OMP_NUM_THREADS=$threads
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
common=(--model "$model" --batch "$batch" --iterations "$iterations" --warmup "$warmup"
        --threads "$threads" --data synthetic --log_every 1000)

# run NAME FLAGS...: one mtc-train run; prints its summary line, or exits 2 when it failed.
run() {
  local name=$1; shift
  echo "running $name: $mtc_train ${common[*]} $*" >&2
  if ! run_logged "$logs/$name.log" "$mtc_train" "${common[@]}" "$@"; then
    show_tail "$name failed" "$logs/$name.log"; exit 2
  fi
  summary_line "$logs/$name.log" || { show_tail "$name printed no summary line" "$logs/$name.log"; exit 2; }
}

first=$(run peak --evict_policy=none)
peak=$(field "$first" peak_compute_bytes)
configs=(none none+tma 35 35+tma 25 25+tma 35m 35m+tma 25m 25m+tma)
comm=$((16 * 1048576))  # the comm/gradient region of the --memory runs
declare -A best drift line
for ((round = 1; round <= repeat; round++)); do
  for c in "${configs[@]}"; do
    flags=()
    pct=${c%+tma}
    case "$c" in
      none*) flags+=(--evict_policy=none) ;;
      *m|*m+tma) flags+=(--memory="$((comm + peak * ${pct%m} / 100))B" --comm_memory="${comm}B" --evict_policy=mtc) ;;
      *) flags+=(--budget="$((peak * pct / 100))B" --evict_policy=mtc) ;;
    esac
    [[ $c != *+tma ]] || flags+=(--tma)
    l=$(run "$c-$round" "${flags[@]}")
    t=$(field "$l" min_sec_per_iter)
    if [ -z "${best[$c]:-}" ] || awk -v a="$t" -v b="${best[$c]}" 'BEGIN { exit !(a < b) }'; then
      best[$c]=$t
      line[$c]=$l
    fi
    drift[$c]+=" $(wall_over_compute "$l" "$iterations")"
  done
done
d0=$(median_of "${drift[none]}")

echo
echo "$model, batch $batch, $threads threads, $iterations iterations after $warmup warm-up, best of $repeat rounds; P = $peak bytes"
printf '%-9s %9s %6s %8s %6s %8s %7s %10s\n' config s/iter drift evicts frag recomp hits% highwater/P
for c in "${configs[@]}"; do
  l=${line[$c]}
  awk -v s="${best[$c]}" -v m="$(median_of "${drift[$c]}")" -v m0="$d0" -v c="$c" \
      -v e="$(( $(field "$l" evict_drop) + $(field "$l" evict_swap) ))" -v f="$(field "$l" evict_fragmented)" \
      -v r="$(field "$l" recomputes)" \
      -v h="$(field "$l" tma_hits)" -v x="$(field "$l" tma_misses)" \
      -v w="$(field "$l" high_water_compute_bytes)" -v p="$(field "$l" peak_compute_bytes)" \
      'BEGIN { printf "%-9s %9.4f %6.3f %8d %6d %8d %7s %10.4f\n", c, s, m / m0, e, f, r,
               (h + x > 0 ? sprintf("%.2f", 100 * h / (h + x)) : "-"), w / p }'
done
echo "(35, 25: --budget at that % of P; 35m, 25m: a compute region of that size." \
     "s/iter: least min_sec_per_iter over the rounds; drift: median of wall / compute_sec over the" \
     "plain no-budget run's; evicts, frag, recomp: over the timed iterations (frag: evictions for want" \
     "of a large enough block); hits%: TMA's hits / requests" \
     "in planned iterations; highwater/P: high_water_compute_bytes / peak_compute_bytes)"
echo

ok=1  # verdict (lib.sh) clears it on a FAIL
l=${line[none+tma]}
h=$(field "$l" tma_hits) x=$(field "$l" tma_misses)
verdict "no budget, TMA hits (target >= 99%)" "$(awk -v h="$h" -v x="$x" 'BEGIN { printf "%.2f%%", h + x ? 100 * h / (h + x) : 0 }')" \
  "$(awk -v h="$h" -v x="$x" 'BEGIN { print (h + x > 0 && h / (h + x) >= 0.99) }')"
w=$(field "$l" high_water_compute_bytes) p=$(field "$l" peak_compute_bytes)
verdict "no budget, TMA high water / peak live bytes (target <= 1.02)" "$(awk -v w="$w" -v p="$p" 'BEGIN { printf "%.4f", w / p }')" \
  "$(awk -v w="$w" -v p="$p" 'BEGIN { print (w <= 1.02 * p) }')"
a=$(field "${line[none]}" final_loss) b=$(field "$l" final_loss)
verdict "no budget, final loss without and with TMA (target: equal)" "$a $b" "$([ "$a" = "$b" ] && echo 1 || echo 0)"
for pct in 35 25 35m 25m; do
  if [[ $pct == *m ]]; then label="${pct%m}% region"; else label="$pct% budget"; fi
  e0=$(( $(field "${line[$pct]}" evict_drop) + $(field "${line[$pct]}" evict_swap) ))
  e1=$(( $(field "${line[$pct+tma]}" evict_drop) + $(field "${line[$pct+tma]}" evict_swap) ))
  verdict "$label: evictions, DTE+TMA against DTE alone (target: fewer)" "$e1 vs $e0" "$([ "$e1" -lt "$e0" ] && echo 1 || echo 0)"
  m0=$(median_of "${drift[$pct]}") m1=$(median_of "${drift[$pct+tma]}")
  verdict "$label: drift-free time, DTE+TMA / DTE alone (target: < 1)" "$(awk -v a="$m1" -v b="$m0" 'BEGIN { printf "%.3f", a / b }')" \
    "$(awk -v a="$m1" -v b="$m0" 'BEGIN { print (a < b) }')"
done
if [ "$ok" = 1 ]; then echo "all targets: PASS"; exit 0; fi
echo "some target: FAIL"
exit 1
