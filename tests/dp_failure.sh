#!/usr/bin/env bash
# One rank of four fails mid-training (killed, an error, an uncaught exception): the
# job must end within 60 s with a non-zero status and a message naming the failed rank.
# Usage: dp_failure.sh MTC_TRAIN MPIRUN   (run by ctest: tests/dist_tests.cmake)
set -uo pipefail
train=$1
mpirun=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for mode in kill error exception; do
  start=$(date +%s%N)
  timeout 120 "$mpirun" --oversubscribe -np 4 "$train" --model=resnet20 --batch=16 --iterations=1000 --threads=1 \
    --fail_rank=2 --fail_iteration=3 --fail_mode="$mode" >"$tmp/out.txt" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  named=$(grep -cE 'rank 2([^0-9]|$)' "$tmp/out.txt")
  printf '%-9s exit status %3d after %d.%03d s; lines naming rank 2: %d\n' "$mode" "$rc" $((ms / 1000)) $((ms % 1000)) "$named"
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$ms" -ge 60000 ] || [ "$named" -eq 0 ]; then
    echo "FAILED: expected a non-zero exit within 60 s and a message naming rank 2; the output:"
    cat "$tmp/out.txt"
    status=1
  else
    grep -E 'rank 2([^0-9]|$)' "$tmp/out.txt" | head -2 | sed 's/^/    /'
  fi
done
exit $status
