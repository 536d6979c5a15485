#!/usr/bin/env bash
# What mtc-train's default threads buy on a small, shared machine (docs/cpu.md), in two
# tables:
#  1. One rank, with the machine otherwise idle and with one busy process (a shell loop)
#     holding a core: every core as kernel threads (--threads = nproc, what the default
#     was before) against the default (the cores idle at start-up). For reference, every
#     core with OpenMP's waiting threads sleeping at once (OMP_WAIT_POLICY=PASSIVE)
#     instead of spinning first. The runs are interleaved over --repeat rounds and each
#     keeps its least median_sec_per_iter.
#  2. ResNet-20, batch 64, `mpirun --oversubscribe -np 4` with every rank taking every core (--threads = nproc)
#     against the default (the cores divided among the ranks on the machine).
# Targets: idle, the default within 5% of every core (it is the same thread count); with
# the busy process, the default at least 1.3x faster than every core; under mpirun -np 4,
# the default at least 5x faster than every core per rank.
# Exit: 0 all PASS, 1 a FAIL, 2 usage error or a failed run.
set -euo pipefail

usage() {
  echo "usage: $0 [MTC_TRAIN] [--model resnet56] [--batch 64] [--iterations 6] [--repeat 3] [--skip-mpirun]"
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
model=resnet56 batch=64 iterations=6 repeat=3 skip_mpirun=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --skip-mpirun) skip_mpirun=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "cpu_defaults.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done
need_mtc_train "$mtc_train"
need_counts batch iterations repeat

tmp=$(mktemp -d)
busy_pid=
cleanup() {
  [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
common=(--model "$model" --batch "$batch" --iterations "$iterations" --warmup 1 --memory 1GiB --log_every 1000)
# one() puts the binary before these: env VAR... MTC_TRAIN [--threads N] "${common[@]}".

# one RESULT_VAR ENV... MTC_TRAIN [FLAGS...]: one run under `env`; its median_sec_per_iter.
one() {
  local log=$tmp/run.log
  if ! run_logged "$log" env "${@:2}" "${common[@]}"; then
    show_tail "cpu_defaults.sh: ${*:2} failed" "$log"
    exit 2
  fi
  printf -v "$1" '%s' "$(field "$(summary_line "$log")" median_sec_per_iter)"
}
least() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }

declare -A best=()
for ((round = 1; round <= repeat; round++)); do
  for load in idle busy; do
    if [ "$load" = busy ]; then
      bash -c 'while :; do :; done' &
      busy_pid=$!
    fi
    for policy in all default passive; do
      case $policy in
        all) one t -u OMP_NUM_THREADS -u OMP_WAIT_POLICY "$mtc_train" --threads "$(nproc)" ;;
        default) one t -u OMP_NUM_THREADS -u OMP_WAIT_POLICY "$mtc_train" ;;
        passive) one t -u OMP_NUM_THREADS OMP_WAIT_POLICY=PASSIVE "$mtc_train" --threads "$(nproc)" ;;
      esac
      best[$load.$policy]=$(least "${best[$load.$policy]:-}" "$t")
      echo "round $round/$repeat $load $policy: $t s/iter" >&2
    done
    if [ "$load" = busy ]; then
      kill "$busy_pid"
      wait "$busy_pid" 2>/dev/null || true
      busy_pid=
    fi
  done
done

ok=1
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
echo "one rank: $model batch $batch, $(nproc) cores, least median s/iter of $repeat rounds"
printf '%-6s %12s %12s %16s %14s %16s\n' load every-core default every/default passive passive/default
for load in idle busy; do
  printf '%-6s %12.4f %12.4f %16s %14.4f %16s\n' "$load" "${best[$load.all]}" "${best[$load.default]}" \
    "$(ratio "${best[$load.all]}" "${best[$load.default]}")" "${best[$load.passive]}" \
    "$(ratio "${best[$load.passive]}" "${best[$load.default]}")"
done
printf 'busy / idle: every core %sx, default %sx, passive %sx\n' \
  "$(ratio "${best[busy.all]}" "${best[idle.all]}")" "$(ratio "${best[busy.default]}" "${best[idle.default]}")" \
  "$(ratio "${best[busy.passive]}" "${best[idle.passive]}")"
verdict() { if [ "$1" = 1 ]; then echo "PASS: $2"; else echo "FAIL: $2"; ok=0; fi; }
verdict "$(awk -v a="${best[idle.default]}" -v b="${best[idle.all]}" 'BEGIN { print (a <= 1.05 * b) }')" \
  "idle: the default within 5% of every core"
verdict "$(awk -v a="${best[busy.default]}" -v b="${best[busy.all]}" 'BEGIN { print (1.3 * a <= b) }')" \
  "a busy core: the default at least 1.3x faster than every core"

if [ "$skip_mpirun" = 0 ]; then
  command -v mpirun >/dev/null || { echo "cpu_defaults.sh: no mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  declare -A np4=()
  for threads in "$(nproc)" 0; do
    log=$tmp/np4.log
    if ! run_logged "$log" timeout 900 mpirun --oversubscribe -np 4 "$mtc_train" --model resnet20 --batch 64 \
      --iterations 5 --warmup 1 --threads "$threads" --log_every 1000; then
      show_tail "cpu_defaults.sh: mpirun -np 4 --threads $threads failed" "$log"
      exit 2
    fi
    np4[$threads]=$(field "$(summary_line "$log")" median_sec_per_iter)
    per_rank=$(sed -n 's/^device: cpu (\([0-9]*\) threads.*/\1/p' "$log")
    echo "resnet20 batch 64, mpirun --oversubscribe -np 4, --threads $threads ($per_rank per rank): ${np4[$threads]} s/iter"
  done
  speedup=$(awk -v a="${np4[$(nproc)]}" -v b="${np4[0]}" 'BEGIN { print a / b }')
  printf 'default over every core per rank: %.1fx faster\n' "$speedup"
  verdict "$(awk -v s="$speedup" 'BEGIN { print (s >= 5) }')" "the default threads at least 5x faster under mpirun -np 4"
fi
[ "$ok" = 1 ]
