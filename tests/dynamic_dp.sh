#!/usr/bin/env bash
# The dynamic models under mpirun -np 4 (issue 18), data parallel, with --comm_check (the
# job stops if the ranks all-reduce unlike gradients), unlimited and with a DTE budget
# under which every rank evicts and stays, and the losses equal the unlimited run's bit
# for bit (same ranks, same reductions: only the memory differs).
#   spos: every rank draws the same path; data parallel all-reduces only the path's
#     parameters (dp_reduced_bytes under 0.75 of the supernet's per iteration); 64x64,
#     budget 40 MiB of an unlimited peak of about 63 MiB.
#   moe_gpt: each rank routes its own tokens, and every expert runs on every rank, also on
#     no tokens, so data parallel all-reduces every parameter every iteration
#     (dp_reduced_bytes = 6 x the parameters' bytes); budget 5 MiB of about 9 MiB. And N
#     ranks compute what one rank computes with --moe_groups N (each group routed with
#     its own capacity and load-balancing loss): 10 losses within a relative 1e-4, top-1
#     and top-2 with a capacity that drops, and top-2 dropless, for 4 data-parallel ranks
#     and for the experts spread over 2 and 4 ranks (--moe_expert_parallel). SGD, whose
#     step follows the gradient's scale (AdamW's does not): with the experts' gradients
#     not divided by the ranks, 4 expert-parallel ranks part from one rank by 1.5e-4.
# Usage: dynamic_dp.sh MTC_TRAIN MPIRUN MODEL   (run by ctest: tests/dist_tests.cmake)
set -euo pipefail
train=$1
mpirun=$2
model=$3
case "$model" in
  spos) common=(--model=spos --batch=32 --image_size=64 --lr=0.01 --momentum=0 --spos_pool=3 --memory=512MiB --sync_bn)
        budget=40 unlimited_above=50 ;;
  moe_gpt) common=(--model=moe_gpt --batch=128 --optimizer=adamw --lr=1e-3 --moe_top_k=2 --memory=256MiB)
           budget=5 unlimited_above=8 ;;
  *) echo "dynamic_dp.sh: model '$model': expected spos or moe_gpt" >&2; exit 2 ;;
esac
common+=(--iterations=6 --warmup=0 --log_every=1 --threads=1 --seed=3 --comm_check)
tmp=$(mktemp -d)
. "$(dirname "$0")/loss_compare.sh"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

for run in none budget; do
  extra=()
  [ "$run" = budget ] && extra=(--budget="${budget}MiB")
  timeout 300 "$mpirun" --oversubscribe -np 4 "$train" "${common[@]}" "${extra[@]}" >"$tmp/$run.txt" 2>&1 ||
    { cat "$tmp/$run.txt"; fail "the $run run"; }
  grep -E '^(ranks|model|budget|memory rank)' "$tmp/$run.txt"
done

# The same losses, bit for bit (the printed six digits), and a path per iteration.
a=$(grep '^iter ' "$tmp/none.txt" | awk '{print $2, $4}')
b=$(grep '^iter ' "$tmp/budget.txt" | awk '{print $2, $4}')
echo "losses (unlimited, $budget MiB):"
paste <(echo "$a") <(echo "$b" | awk '{print $2}')
[ "$(wc -l <<<"$a")" = 6 ] || fail "expected 6 losses, got: $a"
[ "$a" = "$b" ] || fail "the losses under the budget differ from the unlimited run's"
if [ "$model" = spos ]; then
  [ "$(grep -c ' | path ' "$tmp/none.txt")" = 6 ] || fail "expected a path on every progress line"
else
  [ "$(grep -c ' | experts ' "$tmp/none.txt")" = 6 ] || fail "expected the routing on every progress line"
fi

# Every rank within the budget, below its unlimited peak.
for r in 0 1 2 3; do
  p0=$(sed -n "s/^memory rank $r: .* m2 [0-9.]* MiB, peak \([0-9.]*\) MiB.*/\1/p" "$tmp/none.txt")
  p1=$(sed -n "s/^memory rank $r: .* m2 [0-9.]* MiB, peak \([0-9.]*\) MiB.*/\1/p" "$tmp/budget.txt")
  [ -n "$p0" ] && [ -n "$p1" ] || fail "no memory line for rank $r"
  awk -v a="$p0" -v b="$p1" -v m="$budget" -v u="$unlimited_above" 'BEGIN { exit !(b <= m && a > u) }' ||
    fail "rank $r: peak $p1 MiB under the budget (expected <= $budget), $p0 MiB unlimited (expected > $unlimited_above)"
done
s=$(grep '^summary ' "$tmp/budget.txt")
ev=$(( $(field "$s" evict_drop) + $(field "$s" evict_swap) ))
[ "$ev" -gt 0 ] || fail "no evictions under the budget: $s"
echo "rank 0 under the budget: $(field "$s" evict_drop) drops, $(field "$s" evict_swap) swaps, $(field "$s" recomputes) recomputes"

# SPOS: only the path's parameters all-reduced; moe_gpt: all of them.
s=$(grep '^summary ' "$tmp/none.txt")
pb=$(sed -n 's/^state .* param_bytes=\([0-9]*\).*/\1/p' "$tmp/none.txt")
rb=$(field "$s" dp_reduced_bytes)
[ -n "$pb" ] && [ -n "$rb" ] || fail "no param_bytes or dp_reduced_bytes"
awk -v r="$rb" -v p="$pb" 'BEGIN { printf "all-reduced per iteration: %.2f MiB of the model'"'"'s %.2f MiB (%.1f%%)\n", r / 6 / 1048576, p / 1048576, 100 * r / 6 / p }'
if [ "$model" = spos ]; then
  awk -v r="$rb" -v p="$pb" 'BEGIN { exit !(r > 0 && r / 6 < 0.75 * p) }' ||
    fail "dp_reduced_bytes $rb over 6 iterations: expected under 0.75 of the parameters' $pb bytes per iteration"
else
  [ "$rb" = $((6 * pb)) ] || fail "dp_reduced_bytes $rb over 6 iterations: expected every parameter's $pb bytes each"
fi
if [ "$model" = moe_gpt ]; then
  for moe in "--moe_top_k=1 --moe_capacity=1" "--moe_top_k=2 --moe_capacity=0.5" "--moe_top_k=2 --moe_dropless"; do
    read -r -a m <<<"$moe"
    eq=(--model=moe_gpt --batch=32 --optimizer=sgd --lr=2 --momentum=0 --iterations=10 --warmup=0 --log_every=1
        --threads=1 --seed=5 --memory=256MiB "${m[@]}")
    for np in 2 4; do
      timeout 300 "$train" "${eq[@]}" --moe_groups="$np" >"$tmp/eq1.txt" 2>&1 ||
        { cat "$tmp/eq1.txt"; fail "1 rank, $moe"; }
      grep -q 'dropped [1-9]' "$tmp/eq1.txt" || [ "$moe" = "--moe_top_k=2 --moe_dropless" ] ||
        fail "$moe: no token was dropped, so the groups' capacities were not tested"
      kinds=(expert_parallel)
      [ "$np" = 4 ] && kinds+=(data_parallel)
      for kind in "${kinds[@]}"; do
        extra=(--comm_check)
        [ "$kind" = expert_parallel ] && extra+=(--moe_expert_parallel)
        timeout 300 "$mpirun" --oversubscribe -np "$np" "$train" "${eq[@]}" "${extra[@]}" >"$tmp/eqn.txt" 2>&1 ||
          { cat "$tmp/eqn.txt"; fail "$np ranks, $kind, $moe"; }
        compare_losses "$tmp/eqn.txt" "$tmp/eq1.txt" "$np ranks ($kind) against $np groups, ${moe//--moe_/}" ||
          fail "$np ranks ($kind) differ from one rank with $np groups ($moe)"
      done
    done
  done
fi
echo PASS
