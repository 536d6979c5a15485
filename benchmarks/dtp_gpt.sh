#!/usr/bin/env bash
# DTP on the 12-layer GPT (GPT-2 small: 12 layers, hidden 768, 12 heads, vocabulary 50257,
# tied head) at a fixed sequence length on N CPU ranks (default 4), AdamW: for --dtp=off
# (data parallel), p1, p2, p3 and p4 side by side in one run, the samples per second, each
# rank's training state by kind (parameters, gradients, optimizer state: mtc-train's
# `state` line) with its ratio to p1's, and the largest compute-region peak of any rank.
# Then the same model with an arena per rank too small for its whole AdamW state:
# --dtp=off must stop before training with an out-of-memory message (status 2), p3 and p4
# must train; p2 is shown as it goes (it keeps each gathered weight until the backward
# has used it, so its peak holds the whole model's weights once: 1418 MiB at 3GiB).
# These are the inputs of DTP's cost model (issue 16).
# On this machine the N ranks share two cores: the times describe that, not a GPU cluster.
# Exit: 0; 1 when a check fails; 2 on a usage error or a run that failed unexpectedly.
set -euo pipefail

usage() {
  echo "usage: $0 [--ranks 4] [--seq 64] [--batch 8] [--iterations 3] [--memory 3GiB] [--small_memory 1400MiB]"
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
ranks=4 seq=64 batch=8 iterations=3 memory=3GiB small_memory=1400MiB
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    --small_memory) small_memory=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "dtp_gpt.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
need_mtc_train "$mtc_train"
mpirun=$(command -v mpirun) || { echo "dtp_gpt.sh: mpirun not found (openmpi-bin)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--model=gpt --gpt_config=small --seq="$seq" --batch="$batch" --optimizer=adamw --lr=1e-4
        --iterations="$iterations" --warmup=1 --threads=1 --log_every=1000)

# state_field LOG KEY: KEY=value of the run's `state` line.
state_field() { sed -n "s/^state .* $2=\([^ ]*\).*/\1/p" "$1" | tail -n 1; }

echo "GPT-2 small (seq $seq, global batch $batch, AdamW) on $ranks ranks, --memory $memory each"
printf "%-5s %11s %10s %12s %12s %12s %12s %9s %14s\n" dtp sec/iter samples/s "params MiB" "grads MiB" \
  "optim MiB" "state MiB" "vs p1" "peak m2 MiB"
declare -A state
for mode in p1 off p2 p3 p4; do
  log=$tmp/$mode.txt
  if ! run_logged "$log" "$mpirun" --oversubscribe -np "$ranks" "$mtc_train" "${common[@]}" --memory="$memory" \
      --dtp="$mode"; then
    show_tail "--dtp=$mode failed" "$log"; exit 2
  fi
  line=$(summary_line "$log") || { show_tail "--dtp=$mode printed no summary" "$log"; exit 2; }
  state[$mode]=$(state_field "$log" state_bytes)
  mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
  printf "%-5s %11.3f %10.2f %12s %12s %12s %12s %9.3f %14s\n" "$mode" "$(field "$line" sec_per_iter)" \
    "$(field "$line" samples_per_sec)" "$(mib "$(state_field "$log" param_bytes)")" \
    "$(mib "$(state_field "$log" grad_bytes)")" "$(mib "$(state_field "$log" optim_bytes)")" \
    "$(mib "${state[$mode]}")" "$(awk -v a="${state[$mode]}" -v b="${state[p1]}" 'BEGIN { printf "%.3f", a / b }')" \
    "$(max_peak "$log")"
done
ok=1
limit=$(awk -v r="$ranks" 'BEGIN { printf "%.4f", 1 / r + 0.05 }')
for mode in p2 p3 p4; do
  r=$(awk -v a="${state[$mode]}" -v b="${state[p1]}" 'BEGIN { printf "%.4f", a / b }')
  if awk -v r="$r" -v l="$limit" 'BEGIN { exit !(r <= l) }'; then v=ok; else v=FAIL; ok=0; fi
  echo "state under $mode: $r of p1's (at most 1/$ranks + 0.05 = $limit): $v"
done

echo
echo "--memory $small_memory per rank, below the AdamW state of one rank holding the whole model:"
for mode in off p2 p3 p4; do
  log=$tmp/small-$mode.txt
  set +e
  run_logged "$log" "$mpirun" --oversubscribe -np "$ranks" "$mtc_train" "${common[@]}" --memory="$small_memory" \
    --dtp="$mode"
  rc=$?
  set -e
  if [ "$mode" = off ]; then
    msg=$(grep -m1 'out of memory before training' "$log" || true)
    if [ $rc = 2 ] && [ -n "$msg" ]; then
      echo "off: status 2 before training: ${msg#mtc-train: error: }"
    else
      echo "off: expected status 2 with an out-of-memory message, got status $rc: FAIL"; ok=0
    fi
  elif [ $rc = 0 ]; then
    line=$(summary_line "$log") || { show_tail "--dtp=$mode printed no summary" "$log"; exit 2; }
    echo "$mode: trains: final_loss $(field "$line" final_loss), sec/iter $(field "$line" sec_per_iter)," \
         "state $(awk -v b="$(state_field "$log" state_bytes)" 'BEGIN { printf "%.1f", b / 1048576 }') MiB per rank," \
         "peak m2 $(max_peak "$log") MiB"
  elif [ "$mode" = p2 ]; then
    echo "p2: does not train at this size (status $rc): $(grep -m1 'error' "$log" | cut -c1-300)"
  else
    show_tail "--dtp=$mode at --memory $small_memory failed (status $rc)" "$log"; ok=0
  fi
done
[ $ok = 1 ] || exit 1
