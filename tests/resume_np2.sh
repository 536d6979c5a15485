#!/usr/bin/env bash
# Checkpoints under mpirun -np 2 (data parallel, synchronised batch norm): 3 iterations,
# a checkpoint (rank 0 writes it), and a job resumed from it for 3 more give the losses of
# iterations 4-6 and the final tensors (parameters, running statistics, momentum) of one
# 6-iteration job, bit for bit (mtc-ckpt --compare). A 2-rank job resumes a checkpoint a
# single rank saved, too (the global batch is the same, split over the ranks).
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
run whole 2 --iterations=6 --save="$tmp/whole.st"
run part 2 --iterations=3 --save="$tmp/part.st"
run rest 2 --iterations=6 --resume="$tmp/part.st" --save="$tmp/rest.st"
want=$(grep '^iter [4-6] ' "$tmp/whole.txt" | awk '{print $2, $4}')
got=$(grep '^iter ' "$tmp/rest.txt" | awk '{print $2, $4}')
echo "losses of iterations 4-6 (one job, resumed):"
paste <(echo "$want") <(echo "$got" | awk '{print $2}')
[ "$(wc -l <<<"$want")" = 3 ] || fail "expected 3 losses from the whole job, got: $want"
[ "$want" = "$got" ] || fail "the resumed job's losses differ"
"$ckpt" --in="$tmp/whole.st" --compare="$tmp/rest.st" | tail -n 1
# A single rank's checkpoint, resumed on 2 ranks: it loads and trains on.
run one 1 --iterations=3 --save="$tmp/one.st"
run two 2 --iterations=5 --resume="$tmp/one.st"
[ "$(grep -c '^iter ' "$tmp/two.txt")" = 2 ] || fail "expected iterations 4 and 5 after resuming on 2 ranks"
echo PASS
