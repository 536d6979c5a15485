#!/usr/bin/env bash
# comm/'s collectives on this machine, through mtc-bench-comm (docs/comm.md):
#   mpirun --oversubscribe -np N build/benchmarks/mtc-bench-comm for N = 2 and 4 (--ranks),
#   sizes 16 B to 16 MiB in steps of 4x, every collective (all_reduce, all_gather,
#   reduce_scatter, all_to_all, broadcast), f32, backend auto (nccl with GPUs, else mpi).
# Prints, per world size, mtc-bench-comm's tables (size, count, type, time in us of the
# slowest rank, algbw and busbw in GB/s, as nccl-tests) and its alpha-beta fits, and
# writes each world size's fits to OUT_DIR/comm_model.npN.json (the cost model's input).
# Flags after -- go to every mtc-bench-comm run (e.g. -- --backend mpi --type i32).
# Exit: 0 every run completed, 1 a run failed, 2 usage error or a missing binary.
set -euo pipefail

usage() {
  cat <<EOF2
usage: $0 [MTC_BENCH_COMM] [--ranks "2 4"] [--max-bytes 16MiB] [--iters 20] [--out-dir DIR] [-- FLAGS...]
MTC_BENCH_COMM defaults to build/benchmarks/mtc-bench-comm, --out-dir to build/comm_bench.
EOF2
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
bench=build/benchmarks/mtc-bench-comm
ranks="2 4"
max_bytes=16MiB
iters=20
out_dir=build/comm_bench
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks|--max-bytes|--iters|--out-dir)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; usage >&2; exit 2; }
      v=${1#--}; declare "${v//-/_}=$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) bench=$1; shift ;;
  esac
done
need_counts iters
for n in $ranks; do
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || { echo "--ranks must list whole numbers >= 1, got '$ranks'" >&2; exit 2; }
done
if [ ! -x "$bench" ]; then
  echo "no mtc-bench-comm at $bench: build it (ninja -C build mtc_bench_comm) or pass its path" >&2
  exit 2
fi
command -v mpirun >/dev/null || { echo "no mpirun on PATH: install Open MPI (scripts/run.sh does)" >&2; exit 2; }
# Open MPI refuses to run as root unless told twice.
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mkdir -p "$out_dir"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=()
for n in $ranks; do
  log=$tmp/np$n.log
  echo "== $n ranks =="
  status=0
  run_logged "$log" mpirun --oversubscribe -np "$n" "$bench" --min_bytes 16 --max_bytes "$max_bytes" \
    --iters "$iters" --out "$out_dir/comm_model.np$n.json" "${extra[@]}" || status=$?
  if [ "$status" != 0 ]; then
    show_tail "mtc-bench-comm with $n ranks exited $status" "$log"
    fails+=("$n ranks: mtc-bench-comm exited $status")
    continue
  fi
  grep -v '^# wrote' "$log"
  echo "fits: $out_dir/comm_model.np$n.json"
  echo
done

if [ ${#fails[@]} -eq 0 ]; then
  exit 0
fi
printf 'FAIL: %s\n' "${fails[@]}"
exit 1
