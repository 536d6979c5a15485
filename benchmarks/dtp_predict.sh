#!/usr/bin/env bash
# DTP's cost model against the clock: for every op that DTP dispatches in the 12-layer GPT
# (GPT-2 small) and VGG-16, under each forced mode (p1..p4) and --dtp=auto, on N CPU ranks
# (default 4), the forward time the model predicts for the op and its conversions
# (`pred_fwd_us`, at the rates fitted to the op times of iterations 2 to --dtp_warmup) beside the time measured
# for them after the warm-up (`meas_fwd_us`, the mean over the timed iterations), read
# from mtc-train --dtp_report's summary table (docs/dtp.md, "Reading the report").
# Collectives are priced by the alpha-beta fit that mtc-bench-comm writes for the same
# ranks, measured first (or --comm FILE).
# Prints one table per model (every row of every mode) and the median absolute relative
# error per model and mode, per model, and over both. Target: median at most 25% per model.
# Rows with no measured time are shown with '-' and left out of the medians: the
# optimizer's steps write their inputs in place and have no output to time them by (their
# time is in the rates' fit all the same). --logs DIR re-reads the logs an earlier run left
# with --keep DIR instead of running anything.
# --noise runs every mode a second time (after the first runs of every mode) and prints how
# far the two runs' measured times part, row for row (median |meas1 - meas2| / meas2): the
# noise floor of the measurement the prediction is judged against.
# Exit: 0 PASS; 1 FAIL; 2 usage error, a missing binary or a run that failed.
set -euo pipefail

usage() {
  cat <<EOF
usage: $0 [--ranks 4] [--models "gpt vgg16"] [--modes "p1 p2 p3 p4 auto"] [--gpt_batch 8] [--seq 64]
          [--vgg_batch 16] [--warmup 3] [--dtp_warmup 3] [--iterations 3] [--memory 3GiB] [--comm FILE] [--target 25]
          [--noise] [--keep DIR | --logs DIR]
EOF
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train
bench_comm=build/benchmarks/mtc-bench-comm
ranks=4 models="gpt vgg16" modes="p1 p2 p3 p4 auto" gpt_batch=8 seq=64 vgg_batch=16 warmup=3 dtp_warmup=3 iterations=3
memory=3GiB comm="" target=25 keep="" logs="" noise=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --gpt_batch) gpt_batch=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --vgg_batch) vgg_batch=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --dtp_warmup) dtp_warmup=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    --comm) comm=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    --noise) noise=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "dtp_predict.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
need_counts ranks gpt_batch seq vgg_batch iterations
if [[ ! $dtp_warmup =~ ^[0-9]+$ ]] || [ "$dtp_warmup" -lt 2 ]; then
  echo "dtp_predict.sh: --dtp_warmup must be a whole number of at least 2, got '$dtp_warmup'" >&2
  exit 2
fi
if [[ ! $warmup =~ ^[0-9]+$ ]] || [ "$warmup" -lt "$dtp_warmup" ]; then
  echo "dtp_predict.sh: --warmup must be at least --dtp_warmup ($dtp_warmup: the planner fits its rates at the end of that iteration), got '$warmup'" >&2
  exit 2
fi
for m in $models; do
  case "$m" in gpt|vgg16) ;; *) echo "dtp_predict.sh: --models: unknown model '$m', expected gpt or vgg16" >&2; exit 2 ;; esac
done
for m in $modes; do
  case "$m" in p1|p2|p3|p4|auto) ;; *) echo "dtp_predict.sh: --modes: unknown mode '$m', expected p1..p4 or auto" >&2; exit 2 ;; esac
done
if [ -n "$logs" ]; then
  [ -z "$keep" ] || { echo "dtp_predict.sh: --logs and --keep together: expected one of them" >&2; exit 2; }
  [ -d "$logs" ] || { echo "dtp_predict.sh: --logs $logs: no such folder" >&2; exit 2; }
  tmp=$logs
else
  need_mtc_train "$mtc_train"
  mpirun=$(command -v mpirun) || { echo "dtp_predict.sh: mpirun not found (openmpi-bin)" >&2; exit 2; }
  work_dir dtp_predict.sh "$keep"
fi
if [ -n "$comm" ] && [ ! -r "$comm" ]; then echo "dtp_predict.sh: --comm $comm: cannot read the file" >&2; exit 2; fi

if [ -n "$logs" ]; then
  echo "re-reading the logs in $logs"
elif [ -z "$comm" ]; then
  [ -x "$bench_comm" ] || { echo "dtp_predict.sh: no $bench_comm: build it (ninja -C build mtc_bench_comm) or pass --comm FILE" >&2; exit 2; }
  comm=$tmp/comm_model.json
  echo "collectives: mtc-bench-comm on $ranks ranks (8 B to 128 MiB) -> the alpha-beta fit the model prices them with"
  if ! run_logged "$tmp/comm.txt" "$mpirun" --oversubscribe -np "$ranks" "$bench_comm" --backend mpi --max_bytes 128MiB \
      --iters 10 --warmup_iters 3 --out "$comm"; then
    show_tail "mtc-bench-comm failed" "$tmp/comm.txt"; exit 2
  fi
  grep '^# fit' "$tmp/comm.txt" || true
fi

# rows LOG: the report's summary rows as tab-separated fields
#   row, op, signature, pred_fwd_us, meas_fwd_us, calls
# (the signature holds spaces: it is what stands before the three numbers, which are
# followed by two spaces and the inputs).
rows() {
  sed -nE 's/^dtp summary: +([0-9]+) +([^ ]+) +(.*[^ ]) +([0-9.]+|inf) +([0-9.]+) +([0-9]+)  .*$/\1\t\2\t\3\t\4\t\5\t\6/p' "$1"
}

# run_mode LOG MODE: the model (args) under --dtp=MODE with the report, into LOG; with
# --logs, LOG must be there already. Exits 2 when the run fails or the log is missing.
run_mode() {
  local log=$1 mode=$2
  if [ -n "$logs" ]; then
    [ -r "$log" ] || { echo "dtp_predict.sh: --logs: no $log" >&2; exit 2; }
  elif ! run_logged "$log" "$mpirun" --oversubscribe -np "$ranks" "$mtc_train" "${args[@]}" --memory="$memory" \
      --threads=1 --warmup="$warmup" --iterations="$iterations" --log_every=1000 --dtp="$mode" --dtp_warmup="$dtp_warmup" --dtp_report \
      --dtp_comm="$comm"; then
    show_tail "$model --dtp=$mode failed ($log)" "$log"; exit 2
  fi
}

all_errs=""
ok=1
for model in $models; do
  if [ "$model" = gpt ]; then
    args=(--model=gpt --gpt_config=small --seq="$seq" --batch="$gpt_batch" --optimizer=adamw --lr=1e-4)
    title="12-layer GPT (GPT-2 small, seq $seq, global batch $gpt_batch, AdamW)"
  else
    args=(--model=vgg16 --batch="$vgg_batch" --optimizer=sgd --lr=1e-3 --momentum=0.9)
    title="VGG-16 (CIFAR, global batch $vgg_batch, SGD with momentum)"
  fi
  echo
  echo "== $title on $ranks ranks, --memory $memory each =="
  printf "%-5s %4s %-16s %-46s %12s %12s %8s %7s\n" mode row op signature pred_fwd_us meas_fwd_us calls err%
  model_errs=""
  declare -A mode_median=() mode_count=()
  for mode in $modes; do
    log=$tmp/$model-$mode.txt
    run_mode "$log" "$mode"
    grep -q '^dtp planner: .*rates=fitted' "$log" ||
      { show_tail "$model --dtp=$mode: the planner did not fit its rates" "$log"; exit 2; }
    errs=""
    while IFS=$'\t' read -r row op sig pred meas calls; do
      [ "$calls" -gt 0 ] || continue
      err=$(awk -v p="$pred" -v m="$meas" 'BEGIN { if (m <= 0) print "-"; else printf "%.1f", 100 * (p > m ? p - m : m - p) / m }')
      printf "%-5s %4s %-16s %-46s %12.1f %12.1f %8s %7s\n" "$mode" "$row" "$op" "$sig" "$pred" "$meas" "$calls" "$err"
      [ "$err" = - ] || errs+="$err "
    done < <(rows "$log")
    [ -n "$errs" ] || { show_tail "$model --dtp=$mode: no measured row in the report" "$log"; exit 2; }
    mode_median[$mode]=$(median_of "$errs")
    mode_count[$mode]=$(wc -w <<<"$errs")
    model_errs+="$errs"
  done
  for mode in $modes; do
    echo "$model $mode: median |pred - meas| / meas = ${mode_median[$mode]}% over ${mode_count[$mode]} measured rows"
  done
  if [ $noise = 1 ]; then
    # The same runs again, then the rows both runs measured (same row, op and signature:
    # auto may decide otherwise in the second run) compared.
    noise_errs="" again_errs=""
    for mode in $modes; do
      log=$tmp/$model-$mode.txt again=$tmp/$model-$mode-again.txt
      run_mode "$again" "$mode"
      pairs=$(awk -F'\t' '
        NR == FNR { if ($6 > 0 && $5 > 0) first[$1 FS $2 FS $3] = $5; next }
        $6 > 0 && $5 > 0 && (($1 FS $2 FS $3) in first) {
          m1 = first[$1 FS $2 FS $3]; d = m1 > $5 ? m1 - $5 : $5 - m1; e = $4 > $5 ? $4 - $5 : $5 - $4
          printf "%.1f %.1f\n", 100 * d / $5, 100 * e / $5
        }' <(rows "$log") <(rows "$again"))
      [ -n "$pairs" ] || { echo "$model $mode: no row measured in both runs"; continue; }
      n_errs=$(awk '{ printf "%s ", $1 }' <<<"$pairs")
      p_errs=$(awk '{ printf "%s ", $2 }' <<<"$pairs")
      echo "$model $mode: run to run |meas1 - meas2| / meas2 = $(median_of "$n_errs")%;" \
        "the second run's own prediction error $(median_of "$p_errs")% (over $(wc -l <<<"$pairs") rows)"
      noise_errs+="$n_errs" again_errs+="$p_errs"
    done
    if [ -n "$noise_errs" ]; then
      echo "$model: the measurement's own noise, median run to run over every mode: $(median_of "$noise_errs")%;" \
        "the second runs' prediction error: $(median_of "$again_errs")%"
    fi
  fi
  med=$(median_of "$model_errs")
  verdict "$model: median error over every op and mode (target <= $target%)" "$med%" \
    "$(awk -v m="$med" -v t="$target" 'BEGIN { print (m <= t) ? 1 : 0 }')"
  all_errs+="$model_errs"
  unset mode_median mode_count
done
echo "both models: median error $(median_of "$all_errs")% over $(wc -w <<<"$all_errs") rows"
[ $ok = 1 ] || exit 1
