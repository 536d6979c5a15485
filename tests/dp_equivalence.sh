#!/usr/bin/env bash
# Data-parallel training gives the losses of one rank training on the whole batch:
# `mpirun -np 4 mtc-train --batch 32` (8 samples per rank, synchronised batch norm)
# against one rank with --batch 32 (plain batch norm), CIFAR ResNet-20, 10 iterations,
# every loss within a relative 1e-4; once without and once with a DTE budget (which must
# make evictions). A control run without --sync_bn must differ (per-rank statistics),
# so the comparison is shown to see what it checks.
#
# The step is small on purpose (lr 0.001, no momentum): the ranks sum in another order
# than one rank does, and on random labels SGD amplifies such rounding differences
# quickly. At lr 0.05 with momentum 0.9, two runs of ONE rank whose batch norms differ only
# in summation order part by 1e-2 within 8 iterations; at lr 0.002 with momentum, one
# rank built with and without -march=x86-64-v3 (FMA) parts by 1.1e-4. At this setting the
# two builds stay within 3.5e-6, while a 4x error in the gradients (a sum instead of a
# mean) moves the losses by 2.7e-2.
# Usage: dp_equivalence.sh MTC_TRAIN MPIRUN   (run by ctest: tests/dist_tests.cmake)
set -euo pipefail
train=$1
mpirun=$2
common=(--model=resnet20 --batch=32 --iterations=10 --warmup=0 --log_every=1 --threads=1 --lr=0.001 --momentum=0 --seed=3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/loss_compare.sh"

for mode in none budget; do
  extra=()
  # The budget: well under the compute region's peak for either run, so DTE evicts.
  [ "$mode" = budget ] && extra=(--memory=256MiB --budget=12MiB)
  echo "== $mode"
  "$mpirun" --oversubscribe -np 4 "$train" "${common[@]}" "${extra[@]}" --sync_bn >"$tmp/dp.txt" 2>&1 || {
    cat "$tmp/dp.txt"; exit 1; }
  "$train" "${common[@]}" "${extra[@]}" >"$tmp/one.txt" 2>&1 || { cat "$tmp/one.txt"; exit 1; }
  grep -E '^(ranks|data parallel|memory rank)' "$tmp/dp.txt"
  compare_losses "$tmp/dp.txt" "$tmp/one.txt" "4 ranks against 1" verbose
  if [ "$mode" = none ]; then
    # The control: per-rank statistics give another first loss already.
    "$mpirun" --oversubscribe -np 4 "$train" "${common[@]}" --iterations=1 >"$tmp/ctl.txt" 2>&1 || {
      cat "$tmp/ctl.txt"; exit 1; }
    a=$(grep '^iter 1 ' "$tmp/ctl.txt" | awk '{print $4}')
    b=$(grep '^iter 1 ' "$tmp/one.txt" | awk '{print $4}')
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; r = d / b
      printf "control without --sync_bn: iter 1 loss %s against %s, relative difference %.2e (must exceed 1e-4)\n", a, b, r
      exit !(r > 1e-4) }'
  fi
  if [ "$mode" = budget ]; then
    for f in "$tmp/dp.txt" "$tmp/one.txt"; do
      drops=$(grep '^summary' "$f" | tr ' ' '\n' | grep '^evict_drop=' | cut -d= -f2)
      swaps=$(grep '^summary' "$f" | tr ' ' '\n' | grep '^evict_swap=' | cut -d= -f2)
      echo "evictions in $(basename "$f"): drop $drops swap $swaps"
      [ $((drops + swaps)) -gt 0 ] || { echo "the budget made no evictions"; exit 1; }
    done
  fi
done
