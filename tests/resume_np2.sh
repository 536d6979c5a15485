#!/usr/bin/env bash
# Checkpoints under mpirun -np 1 and -np 2 (data parallel, synchronised batch norm): 10
# iterations, a checkpoint (rank 0 writes it), and a job resumed from it for 10 more give
# the losses of iterations 11-20 and the final tensors (parameters, running statistics,
# momentum) of one 20-iteration job, bit for bit (mtc-ckpt --compare). A 2-rank job
# resumes a checkpoint a single rank saved, too (the global batch is the same, split over
# the ranks).
# Usage: resume_np2.sh MTC_TRAIN MTC_CKPT MPIRUN   (run by ctest: tests/dist_tests.cmake)
set -euo pipefail
train=$1
ckpt=$2
mpirun=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--model=resnet20 --batch=8 --warmup=0 --log_every=1 --memory=256MiB --threads=1 --momentum=0.9 --sync_bn --seed=5)
run() {  # run NAME RANKS ARGS...
  local name=$1 np=$2; shift 2
  timeout 300 "$mpirun" --oversubscribe -np "$np" "$train" "${common[@]}" "$@" >"$tmp/$name.txt" 2>&1 ||
    { cat "$tmp/$name.txt"; fail "the $name run"; }
}
for np in 1 2; do
  run "whole$np" "$np" --iterations=20 --save="$tmp/whole$np.st"
  run "part$np" "$np" --iterations=10 --save="$tmp/part$np.st"
  run "rest$np" "$np" --iterations=20 --resume="$tmp/part$np.st" --save="$tmp/rest$np.st"
  want=$(grep '^iter ' "$tmp/whole$np.txt" | awk '$2 > 10 {print $2, $4}')
  got=$(grep '^iter ' "$tmp/rest$np.txt" | awk '{print $2, $4}')
  echo "$np rank(s): losses of iterations 11-20 (one job, resumed):"
  paste <(echo "$want") <(echo "$got" | awk '{print $2}')
  [ "$(wc -l <<<"$want")" = 10 ] || fail "expected 10 losses after iteration 10 from the whole job, got: $want"
  [ "$want" = "$got" ] || fail "$np rank(s): the resumed job's losses differ"
  "$ckpt" --in="$tmp/whole$np.st" --compare="$tmp/rest$np.st" | tail -n 1
done
# A single rank's checkpoint, resumed on 2 ranks: it loads and trains on.
run one 1 --iterations=3 --save="$tmp/one.st"
run two 2 --iterations=5 --resume="$tmp/one.st"
[ "$(grep -c '^iter ' "$tmp/two.txt")" = 2 ] || fail "expected iterations 4 and 5 after resuming on 2 ranks"
echo PASS
