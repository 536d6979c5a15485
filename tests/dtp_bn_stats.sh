#!/usr/bin/env bash
# --dtp_bn_stats=shard: under DTP, batch norm over a batch split across the ranks
# normalises each rank's rows by their own statistics, as data parallel does without
# --sync_bn. On 4 ranks, ResNet-20 (19 batch norms) trained 10 iterations with
# --dtp=p1 --dtp_bn_stats=shard must give data parallel's losses within a relative 1e-4,
# and --dtp=auto with it too (on this model and batch auto keeps every batch norm on the
# split batch; the run prints its modes). The control: --dtp=p1 with the default
# (--dtp_bn_stats=batch, the whole batch's statistics) must part from data parallel by
# more than 1e-4 at the first iteration already, so the comparison can fail.
# Usage: dtp_bn_stats.sh MTC_TRAIN MPIRUN   (run by ctest: tests/dist_tests.cmake)
set -euo pipefail
train=$1
mpirun=$2
common=(--model=resnet20 --batch=32 --iterations=10 --warmup=0 --log_every=1 --threads=1 --lr=0.001 --momentum=0
  --seed=3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/loss_compare.sh"

run() {  # run OUT FLAGS...: mtc-train on 4 ranks
  local out=$1
  shift
  "$mpirun" --oversubscribe -np 4 "$train" "${common[@]}" "$@" >"$out" 2>&1 || { echo "mtc-train $* failed:"; cat "$out"; exit 1; }
}

run "$tmp/dp.txt"
status=0
run "$tmp/p1.txt" --dtp=p1 --dtp_bn_stats=shard
grep '^dtp: batch norm' "$tmp/p1.txt" || { echo "no 'dtp: batch norm' line in the p1 run"; status=1; }
compare_losses "$tmp/p1.txt" "$tmp/dp.txt" "p1, shard statistics, against DP" || status=1
run "$tmp/auto.txt" --dtp=auto --dtp_bn_stats=shard
grep '^state ' "$tmp/auto.txt" | tr ' ' '\n' | grep '^ops_p' | tr '\n' ' '
echo
compare_losses "$tmp/auto.txt" "$tmp/dp.txt" "auto, shard statistics, against DP" || status=1

# The control: the whole batch's statistics give another first loss.
run "$tmp/ctl.txt" --dtp=p1 --iterations=1
a=$(grep '^iter 1 ' "$tmp/ctl.txt" | awk '{print $4}')
b=$(grep '^iter 1 ' "$tmp/dp.txt" | awk '{print $4}')
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; r = d / b
  printf "control, p1 with the whole batch'"'"'s statistics: iter 1 loss %s against %s, relative difference %.2e (must exceed 1e-4)\n", a, b, r
  exit !(r > 1e-4) }' || status=1
exit $status
