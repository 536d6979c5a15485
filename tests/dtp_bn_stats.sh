#!/usr/bin/env bash
# Batch norm's statistics under DTP follow data parallel's: by default each rank
# normalises the rows it holds by their own statistics (as data parallel and PyTorch's
# DistributedDataParallel do), and with --sync_bn by the whole batch's, in both. On 4
# ranks, ResNet-20 (19 batch norms) trained 10 iterations:
# - --dtp=p1 and --dtp=auto give data parallel's losses within a relative 1e-4 (on this
#   model and batch auto keeps every batch norm on the split batch; the run prints its
#   modes);
# - with --sync_bn, --dtp=p1 and --dtp=auto give data parallel's with --sync_bn;
# - the control: the two statistics part by more than 1e-4 at the first iteration
#   already, so the comparisons can fail;
# - --sync_bn on a mesh of two groups is refused (exit 2): its statistics would be each
#   group's, not the whole batch's.
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
modes() {  # modes LOG: auto's mode counts
  grep '^state ' "$1" | tr ' ' '\n' | grep '^ops_p' | tr '\n' ' '
  echo
}

status=0
for sync in "" --sync_bn; do
  what=${sync:-"each rank's statistics"}
  dp=$tmp/dp${sync:+_sync}.txt
  # shellcheck disable=SC2086 # sync is one flag or none
  run "$dp" $sync
  # shellcheck disable=SC2086
  run "$tmp/p1.txt" --dtp=p1 $sync
  compare_losses "$tmp/p1.txt" "$dp" "p1 against data parallel, $what" || status=1
  # shellcheck disable=SC2086
  run "$tmp/auto.txt" --dtp=auto $sync
  modes "$tmp/auto.txt"
  compare_losses "$tmp/auto.txt" "$dp" "auto against data parallel, $what" || status=1
done

# The control: the whole batch's statistics give another first loss.
a=$(grep '^iter 1 ' "$tmp/dp_sync.txt" | awk '{print $4}')
b=$(grep '^iter 1 ' "$tmp/dp.txt" | awk '{print $4}')
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; r = d / b
  printf "control, the whole batch'"'"'s statistics: iter 1 loss %s against %s, relative difference %.2e (must exceed 1e-4)\n", a, b, r
  exit !(r > 1e-4) }' || status=1

# --sync_bn on a mesh: refused before training, exit 2, the flags named.
rc=0
"$mpirun" --oversubscribe -np 4 "$train" "${common[@]}" --dtp=auto --dtp_group=2 --sync_bn >"$tmp/mesh.txt" 2>&1 || rc=$?
if [ $rc = 2 ] && grep -q -- '--sync_bn with --dtp_group=2 of 4 ranks' "$tmp/mesh.txt" && ! grep -q '^iter ' "$tmp/mesh.txt"; then
  echo "--sync_bn with --dtp_group=2: refused (exit 2)"
else
  echo "--sync_bn with --dtp_group=2: expected exit 2 naming the flags before any iteration, got exit $rc:"
  tail -5 "$tmp/mesh.txt"
  status=1
fi
exit $status
