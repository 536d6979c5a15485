#!/usr/bin/env bash
# What a user meets when starting mtc-train under mpirun on a small machine:
#   - --record_trace F: each rank writes its own file (F.rank<R>, or %r in the name), every
#     one a complete trace that mtc-replay reads; a path that cannot be written is refused
#     before training, with status 2, one error line, and nothing left behind;
#   - a bad flag or data path: status 2 and the error line printed once (by rank 0), not
#     once per rank;
#   - default threads: at most the cores divided among the ranks on the machine, and
#     --memory auto likewise divided.
# Usage: mpirun_front_door.sh MTC_TRAIN MTC_REPLAY MPIRUN   (run by ctest: tests/dist_tests.cmake)
set -uo pipefail
train=$1
replay=$2
mpirun=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
failed() { echo "FAILED: $*"; status=1; }
run2() { timeout 300 "$mpirun" --oversubscribe -np 2 "$train" "$@"; }
common=(--model=mlp --batch=8 --iterations=2 --warmup=1 --memory=256MiB)

# Each rank its own trace.
run2 "${common[@]}" --threads=1 --record_trace="$tmp/t.jsonl" >"$tmp/out" 2>&1 || failed "the traced run: $(cat "$tmp/out")"
for r in 0 1; do
  f=$tmp/t.jsonl.rank$r
  if [ ! -s "$f" ]; then failed "rank $r wrote no $f"; continue; fi
  marks=$(grep -c '"mark":"iteration"' "$f")
  [ "$marks" -eq 3 ] || failed "$f has $marks iteration marks, expected 3 (one rank's, not two ranks' mixed)"
  "$replay" --trace="$f" --budget=50%peak >"$tmp/replay" 2>&1 || failed "mtc-replay on $f: $(cat "$tmp/replay")"
done
[ ! -e "$tmp/t.jsonl" ] || failed "a shared $tmp/t.jsonl was written"
ls "$tmp"/*.partial >/dev/null 2>&1 && failed "partial files left: $(ls "$tmp")"
run2 "${common[@]}" --threads=1 --record_trace="$tmp/r%r.jsonl" >"$tmp/out" 2>&1 || failed "the %r run: $(cat "$tmp/out")"
[ -s "$tmp/r0.jsonl" ] && [ -s "$tmp/r1.jsonl" ] || failed "--record_trace r%r.jsonl wrote $(ls "$tmp")"
echo "traces: one per rank ($(ls "$tmp" | tr '\n' ' '))"

# Paths that cannot be written, refused before training with nothing left behind.
mkdir "$tmp/empty"
for bad in "$tmp/empty/missing/t.jsonl" "$tmp/empty"; do
  run2 "${common[@]}" --threads=1 --record_trace="$bad" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  lines=$(grep -c '^mtc-train: error: ' "$tmp/err")
  [ "$rc" -eq 2 ] || failed "--record_trace $bad: exit status $rc, expected 2"
  [ "$lines" -eq 1 ] || failed "--record_trace $bad: $lines error lines, expected 1: $(cat "$tmp/err")"
  grep -q '^iter ' "$tmp/out" && failed "--record_trace $bad: training ran"
  [ -z "$(ls -A "$tmp/empty")" ] || failed "--record_trace $bad left $(ls -A "$tmp/empty")"
done
echo "unwritable trace paths: refused, status 2, one line"

# A bad flag or data path: one line for the whole job.
for bad in --batch=x --data=cifar10:"$tmp/none.bin"; do
  run2 "$bad" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  lines=$(grep -c '^mtc-train: error: ' "$tmp/err")
  [ "$rc" -eq 2 ] || failed "$bad: exit status $rc, expected 2"
  [ "$lines" -eq 1 ] || failed "$bad: $lines error lines from 2 ranks, expected 1: $(cat "$tmp/err")"
  echo "$bad under mpirun: status $rc, $lines error line"
done

# Default threads and memory: divided among the ranks on the machine.
cores=$(nproc)
want=$((cores / 2))
[ "$want" -ge 1 ] || want=1
timeout 300 "$mpirun" --oversubscribe --bind-to none -np 2 "$train" --model=mlp --batch=8 --iterations=1 \
  --warmup=0 >"$tmp/out" 2>&1 || failed "the default run: $(cat "$tmp/out")"
device=$(grep '^device: ' "$tmp/out")
echo "$device"
# At most the rank's share of the cores (fewer when other processes keep some busy).
got=$(sed -n 's/^device: cpu (\([0-9]*\) threads.*/\1/p' <<<"$device")
[ -n "$got" ] && [ "$got" -ge 1 ] && [ "$got" -le "$want" ] ||
  failed "expected 1 to $want threads per rank on $cores cores: $device"
one=$(env -u OMPI_COMM_WORLD_SIZE "$train" --model=mlp --batch=8 --iterations=1 --warmup=0 --threads=1 2>&1 |
  grep -o 'arena [0-9.]* [GM]iB')
two=$(echo "$device" | grep -o 'arena [0-9.]* [GM]iB')
echo "--memory auto: alone $one, each of 2 ranks $two"
awk -v a="$one" -v b="$two" 'BEGIN {
  split(a, x, " "); split(b, y, " "); ax = x[2] * (x[3] == "GiB" ? 1024 : 1); by = y[2] * (y[3] == "GiB" ? 1024 : 1)
  exit !(by > 0.45 * ax && by < 0.55 * ax) }' || failed "--memory auto: each of 2 ranks should take half of $one, took $two"
exit $status
