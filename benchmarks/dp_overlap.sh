#!/usr/bin/env bash
# How much of data parallel's gradient all-reduce the backward hides: mtc-train under
# `mpirun -np N` (N = 2 and 4) with small gradient buckets (each all-reduced as soon as the
# backward completes it, overlapping the rest of the backward) and with one bucket for the
# whole model (its all-reduce can start only when the backward has ended: nothing to hide
# it under). Prints one table, a line per run: ranks, bucket size, buckets, seconds per
# iteration, the all-reduces' time per iteration on the communicator's queue, the part of
# it the interpreter waited for after the backward (exposed), and the hidden share
# 1 - exposed / all-reduce time (summary fields dp_comm_sec, dp_exposed_sec, dp_hidden_share).
# On this CPU machine every rank's MPI thread competes with the ranks' kernels for two
# cores; the figures describe that, not a GPU with NCCL on its own stream.
# Exit: 0, or 2 on a usage error or a failed run.
set -euo pipefail

usage() {
  echo "usage: $0 [MTC_TRAIN] [--model resnet20] [--batch 64] [--iterations 10] [--small 256KiB]"
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
model=resnet20 batch=64 iterations=10 small=256KiB
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --small) small=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "dp_overlap.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) mtc_train=$1; shift ;;
  esac
done
need_mtc_train "$mtc_train"
need_counts batch iterations
command -v mpirun >/dev/null || { echo "dp_overlap.sh: no mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-5s %-9s %7s %9s %14s %14s %7s\n' ranks bucket buckets s/iter "allreduce ms" "exposed ms" hidden
for np in 2 4; do
  for bucket in "$small" 1GiB; do
    log=$tmp/run.txt
    if ! run_logged "$log" mpirun --oversubscribe -np "$np" "$mtc_train" --model="$model" --batch="$batch" \
        --iterations="$iterations" --warmup=2 --threads=1 --bucket_size="$bucket" --log_every=1000; then
      show_tail "mpirun -np $np mtc-train --bucket_size=$bucket failed" "$log"
      exit 2
    fi
    s=$(summary_line "$log")
    awk -v np="$np" -v b="$bucket" -v n="$iterations" -v buckets="$(field "$s" dp_buckets)" \
        -v t="$(field "$s" sec_per_iter)" -v c="$(field "$s" dp_comm_sec)" -v e="$(field "$s" dp_exposed_sec)" \
        -v h="$(field "$s" dp_hidden_share)" \
        'BEGIN { printf "%-5s %-9s %7s %9.4f %14.2f %14.2f %6.1f%%\n", np, b, buckets, t, 1e3 * c / n, 1e3 * e / n, 100 * h }'
  done
done
