#!/usr/bin/env bash
# SPOS under mpirun -np 4 (issue 18): every rank draws the same path (--comm_check would
# stop the job if the ranks all-reduced unlike gradients), data parallel all-reduces only
# the path's parameters (dp_reduced_bytes under the supernet's parameter bytes per
# iteration), and with a DTE budget of 40 MiB (of an unlimited peak of about 63 MiB) every
# rank evicts, stays within the budget, and the losses equal the unlimited run's bit for
# bit (same ranks, same reductions: only the memory differs).
# Usage: spos_dp.sh MTC_TRAIN MPIRUN   (run by ctest: tests/dist_tests.cmake)
set -euo pipefail
train=$1
mpirun=$2
common=(--model=spos --batch=32 --image_size=64 --iterations=6 --warmup=0 --log_every=1 --threads=1 --lr=0.01 --momentum=0
        --seed=3 --spos_pool=3 --memory=512MiB --sync_bn --comm_check)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

for run in none budget; do
  extra=()
  [ "$run" = budget ] && extra=(--budget=40MiB)
  timeout 300 "$mpirun" --oversubscribe -np 4 "$train" "${common[@]}" "${extra[@]}" >"$tmp/$run.txt" 2>&1 ||
    { cat "$tmp/$run.txt"; fail "the $run run"; }
  grep -E '^(ranks|model|budget|memory rank)' "$tmp/$run.txt"
done

# The same losses, bit for bit (the printed six digits), and a path per iteration.
a=$(grep '^iter ' "$tmp/none.txt" | awk '{print $2, $4}')
b=$(grep '^iter ' "$tmp/budget.txt" | awk '{print $2, $4}')
echo "losses (unlimited, 40 MiB):"
paste <(echo "$a") <(echo "$b" | awk '{print $2}')
[ "$(wc -l <<<"$a")" = 6 ] || fail "expected 6 losses, got: $a"
[ "$a" = "$b" ] || fail "the losses under the budget differ from the unlimited run's"
[ "$(grep -c ' | path ' "$tmp/none.txt")" = 6 ] || fail "expected a path on every progress line"

# Every rank within the budget, below its unlimited peak.
for r in 0 1 2 3; do
  p0=$(sed -n "s/^memory rank $r: .* m2 [0-9.]* MiB, peak \([0-9.]*\) MiB.*/\1/p" "$tmp/none.txt")
  p1=$(sed -n "s/^memory rank $r: .* m2 [0-9.]* MiB, peak \([0-9.]*\) MiB.*/\1/p" "$tmp/budget.txt")
  [ -n "$p0" ] && [ -n "$p1" ] || fail "no memory line for rank $r"
  awk -v a="$p0" -v b="$p1" 'BEGIN { exit !(b <= 40.0 && a > 50.0) }' ||
    fail "rank $r: peak $p1 MiB under the budget (expected <= 40), $p0 MiB unlimited (expected > 50)"
done
s=$(grep '^summary ' "$tmp/budget.txt")
ev=$(( $(field "$s" evict_drop) + $(field "$s" evict_swap) ))
[ "$ev" -gt 0 ] || fail "no evictions under the budget: $s"
echo "rank 0 under the budget: $(field "$s" evict_drop) drops, $(field "$s" evict_swap) swaps, $(field "$s" recomputes) recomputes"

# Only the path's parameters all-reduced.
s=$(grep '^summary ' "$tmp/none.txt")
pb=$(sed -n 's/^state .* param_bytes=\([0-9]*\).*/\1/p' "$tmp/none.txt")
rb=$(field "$s" dp_reduced_bytes)
[ -n "$pb" ] && [ -n "$rb" ] || fail "no param_bytes or dp_reduced_bytes"
awk -v r="$rb" -v p="$pb" 'BEGIN { printf "all-reduced per iteration: %.1f MiB of the supernet'"'"'s %.1f MiB (%.1f%%)\n", r / 6 / 1048576, p / 1048576, 100 * r / 6 / p; exit !(r > 0 && r / 6 < 0.75 * p) }' ||
  fail "dp_reduced_bytes $rb over 6 iterations: expected under 0.75 of the parameters' $pb bytes per iteration"
echo PASS
