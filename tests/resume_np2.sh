#!/usr/bin/env bash
# Checkpoints under mpirun -np 1 and -np 2 (data parallel, synchronised batch norm): 10
# iterations, a checkpoint (rank 0 writes it), and a job resumed from it for 10 more give
# the losses of iterations 11-20 and the final tensors (parameters, running statistics,
# momentum) of one 20-iteration job, bit for bit (mtc-ckpt --compare). A 2-rank job
# resumes a checkpoint a single rank saved, too (the global batch is the same, split over
# the ranks). Then ranks with tensors of their own, on 2 ranks: DTP's p4 (split
# parameters) and expert parallelism (each rank's experts, AdamW): each rank writes its
# rank file, and 3 iterations + resume + 3 equal 6 bit for bit (losses and the assembled
# tensors); the p4 checkpoint resumes on one rank and on 2 ranks under p3 (the whole
# tensors re-split), and a run killed while saving keeps the previous save loadable.
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
# resumed NAME NP HALF ARGS...: HALF iterations, a save, a job resumed for HALF more, on NP
# ranks, against one job of 2 * HALF: the same losses after HALF, the same tensors.
resumed() {
  local name=$1 np=$2 half=$3; shift 3
  run "${name}_whole" "$np" "$@" --iterations=$((2 * half)) --save="$tmp/${name}_whole.st"
  run "${name}_part" "$np" "$@" --iterations="$half" --save="$tmp/${name}_part.st"
  run "${name}_rest" "$np" "$@" --iterations=$((2 * half)) --resume="$tmp/${name}_part.st" --save="$tmp/${name}_rest.st"
  want=$(grep '^iter ' "$tmp/${name}_whole.txt" | awk -v h="$half" '$2 > h {print $2, $4}')
  got=$(grep '^iter ' "$tmp/${name}_rest.txt" | awk '{print $2, $4}')
  echo "$name on $np rank(s): losses after iteration $half (one job, resumed):"
  paste <(echo "$want") <(echo "$got" | awk '{print $2}')
  [ "$(wc -l <<<"$want")" = "$half" ] || fail "$name: expected $half losses after iteration $half, got: $want"
  [ "$want" = "$got" ] || fail "$name on $np rank(s): the resumed job's losses differ"
  "$ckpt" --in="$tmp/${name}_whole.st" --compare="$tmp/${name}_rest.st" | tail -n 1
}
for np in 1 2; do resumed "dp$np" "$np" 10; done
# A single rank's checkpoint, resumed on 2 ranks: it loads and trains on.
run one 1 --iterations=3 --save="$tmp/one.st"
run two 2 --iterations=5 --resume="$tmp/one.st"
[ "$(grep -c '^iter ' "$tmp/two.txt")" = 2 ] || fail "expected iterations 4 and 5 after resuming on 2 ranks"
# Ranks with tensors of their own: rank files, bit for bit.
ranked() {  # ranked NAME ARGS...: 3 + resume + 3 against 6 on 2 ranks, each rank its file
  local name=$1; shift
  resumed "$name" 2 3 "$@"
  for r in 0 1; do
    [ -s "$tmp/${name}_part.st.iter3.rank$r" ] || fail "$name: rank $r wrote no rank file"
  done
}
common=(--model=resnet20 --batch=8 --warmup=0 --log_every=1 --memory=256MiB --threads=1 --momentum=0.9 --seed=5)
ranked p4 --dtp=p4
common=(--model=moe_gpt --batch=4 --warmup=0 --log_every=1 --memory=256MiB --threads=1 --seed=5 --optimizer=adamw --lr=1e-3)
ranked ep --moe_expert_parallel
# The p4 checkpoint on one rank, and re-split under p3: the whole tensors load, and the
# next loss is the 2-rank p4 run's within float rounding.
common=(--model=resnet20 --batch=8 --warmup=0 --log_every=1 --memory=256MiB --threads=1 --momentum=0.9 --seed=5)
want=$(grep '^iter 4 ' "$tmp/p4_whole.txt" | awk '{print $4}')
for how in "1" "2 --dtp=p3"; do
  set -- $how
  np=$1; shift
  run "p4_on_$np$*" "$np" "$@" --iterations=4 --resume="$tmp/p4_part.st"
  got=$(grep '^iter 4 ' "$tmp/p4_on_$np$*.txt" | awk '{print $4}')
  awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-5 * (a < 0 ? -a : a)) }' ||
    fail "the p4 checkpoint on $np rank(s) $*: iteration 4's loss $got, expected $want within 1e-5"
  echo "p4 checkpoint resumed on $np rank(s) $*: iteration 4 loss $got (2-rank p4: $want)"
done
# Killed while rank 0 writes the main file of the second save: the first still loads.
timeout 300 "$mpirun" --oversubscribe -np 2 "$train" "${common[@]}" --dtp=p4 --iterations=4 --save_every=2 \
  --save="$tmp/kill.st" --fail_mode=kill_while_saving --fail_rank=0 --fail_iteration=4 >"$tmp/kill.txt" 2>&1 &&
  fail "the run meant to be killed while saving finished"
shown=$("$ckpt" --in="$tmp/kill.st")  # kept first: `| grep -q` under pipefail fails when grep stops early
grep -q '^metadata iteration = 2$' <<<"$shown" || fail "after the kill, the checkpoint is not the first save's"
run kill_resume 2 --dtp=p4 --iterations=4 --resume="$tmp/kill.st"
[ "$(grep -c '^iter ' "$tmp/kill_resume.txt")" = 2 ] || fail "expected iterations 3 and 4 after resuming the killed run's save"
echo "killed while saving iteration 4: the save of iteration 2 resumes"
echo PASS
