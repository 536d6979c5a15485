#!/usr/bin/env bash
# The Chrome trace under mpirun (docs/metrics.md): each rank writes its own file, whose
# comm track (thread 3, "comm") holds a span per collective with the time it ran on the
# MPI queue (data parallel's bucket all-reduces, at least one per iteration, and the
# start-up broadcast of the parameters), within the run's time; mtc-memplot draws each file.
# Usage: chrome_trace_np2.sh MTC_TRAIN MTC_MEMPLOT MPIEXEC   (run by ctest: dist_tests.cmake)
set -euo pipefail
train=$1
memplot=$2
mpirun=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
its=3
"$mpirun" --oversubscribe -np 2 "$train" --model resnet20 --batch 16 --iterations $its --warmup 0 --threads 1 \
  --progress plain --chrome_trace "$tmp/t.json" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "mtc-train under mpirun"; }
for r in 0 1; do
  f=$tmp/t.json.rank$r
  [ -s "$f" ] || fail "rank $r wrote no trace ($f)"
  grep -q "\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":$r,\"tid\":3,\"args\":{\"name\":\"comm\"}" "$f" ||
    fail "rank $r: no comm thread in the trace"
  spans=$(grep '"cat":"comm"' "$f" || true)
  buckets=$(grep -c '"name":"all_reduce (bucket) ' <<<"$spans" || true)
  [ "$buckets" -ge "$its" ] || fail "rank $r: $buckets bucket all-reduce spans, expected at least one per iteration ($its)"
  grep -q '"name":"broadcast ' <<<"$spans" || fail "rank $r: no span of the parameters' broadcast"
  # Every comm span on thread 3 of this rank, with a duration, inside the trace's time.
  awk -v r="$r" '
    { if (!match($0, /"ts":[0-9.]+/)) { print "no ts: " $0; bad = 1; next }
      ts = substr($0, RSTART + 5, RLENGTH - 5) + 0
      if (!match($0, /"dur":[0-9.]+/)) { print "no dur: " $0; bad = 1; next }
      dur = substr($0, RSTART + 6, RLENGTH - 6) + 0
      if ($0 !~ "\"pid\":" r ",\"tid\":3") { print "not on thread 3 of pid " r ": " $0; bad = 1 }
      if (ts < 0 || dur < 0) { print "negative time: " $0; bad = 1 } }
    END { exit bad }' <<<"$spans" || fail "rank $r: a comm span is malformed"
  echo "rank $r: $(wc -l <<<"$spans") comm spans, $buckets bucket all-reduces"
  "$memplot" --in "$f" --out "$tmp/m$r.svg" >"$tmp/plot.out" 2>&1 || { cat "$tmp/plot.out"; fail "mtc-memplot on rank $r's trace"; }
  grep -q "$its iteration marks shown" "$tmp/plot.out" || { cat "$tmp/plot.out"; fail "rank $r: the picture lacks iterations"; }
done
echo PASS
