#!/usr/bin/env bash
# DTE at the low end, replayed: for each model, mtc-train records a trace of 4 iterations
# (no eviction, --record_trace), then mtc-replay replays it at 50, 30, 20, 15 and 10% of its
# unlimited peak, with the byte budget and with the compute region itself as the limit
# (--limit budget,region), under mtc's policy and the dtr baseline, in modes both (the
# default) and drop. The first two iterations are warm-up (--skip 2), where policy mtc
# tunes its score as the runtime does (docs/dte.md, "Tuning the score"); the last two count. Per cell: the overhead ((compute + recompute + swap) / compute), or
# oom, or cap (the replay passed --max_overhead, 4x by default, and stopped), and the peak
# pinned MiB; each replay's wall time.
# Verdicts (docs/dte.md, "At the low end"), per mode:
#   - mtc at or below dtr's overhead in every cell where dtr trains;
#   - mtc never out of memory (or capped) where dtr, or mtc at a smaller budget, trains;
#   - mtc with the region as the limit within 5% of its byte-budget figure wherever that
#     figure is under 2x;
#   - every replay under 60 s.
# --models "NAME:BATCH[:FLAG,FLAG...]..." (extra mtc-train flags, comma-separated; default:
# the models of docs/dte.md's table); --keep DIR keeps the traces and logs; --traces DIR re-reads traces an
# earlier --keep left (MODEL.jsonl); --replay_flags "FLAG ..." adds flags to every mtc-replay
# call (--plan_regeneration=false, for one: docs/dte.md, "Planned regeneration").
# --copies N also replays N copies of each trace with every op's time moved by up to
# --jitter (0.1: 10%; mtc-replay --jitter, seeds 1..N), each with its own table and verdicts,
# and ends with the count of cells that miss each verdict over the traces and their copies:
# eviction is chaotic, and a verdict that holds on one recording may not on the next.
# Exit: 0 PASS; 1 FAIL; 2 usage error, a missing binary or a run that failed.
set -euo pipefail

usage() {
  cat <<EOF
usage: $0 [--models "NAME:BATCH[:FLAG,FLAG...] ..."] [--modes "both drop"]
          [--budgets "50 30 20 15 10"] [--max_overhead 4] [--threads 2] [--keep DIR | --traces DIR]
          [--replay_flags "FLAG ..."] [--copies 0] [--jitter 0.1]
EOF
}

cd "$(dirname "$0")/.."
. benchmarks/lib.sh
mtc_train=build/launch/mtc-train mtc_replay=build/launch/mtc-replay
models="resnet32:256 resnet56:128 vit_tiny:256 gpt:32:--gpt_config=tiny,--layers=12,--hidden=256,--heads=4,--seq=128,--vocab=256"
models+=" densenet121_cifar:64 googlenet_cifar:64 unet:128 lstm:64:--layers=2,--hidden=256,--seq=64,--vocab=256"
models+=" treelstm:64:--hidden=256,--seq=64,--vocab=256"
modes="both drop" budgets="50 30 20 15 10"
max_overhead=4 threads=2 keep="" traces="" replay_flags="" copies=0 jitter=0.1
while [ $# -gt 0 ]; do
  case "$1" in
    --models|--modes|--budgets|--max_overhead|--threads|--keep|--traces|--replay_flags|--copies|--jitter)
      [ $# -ge 2 ] || { echo "dte_low_budget.sh: $1 needs a value" >&2; usage >&2; exit 2; }
      declare "${1#--}=$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "dte_low_budget.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
need_counts threads
[[ $copies =~ ^[0-9]+$ ]] || { echo "dte_low_budget.sh: --copies '$copies': expected a count >= 0" >&2; exit 2; }
[[ $jitter =~ ^0?\.[0-9]+$ ]] && awk -v j="$jitter" 'BEGIN { exit !(j > 0) }' ||
  { echo "dte_low_budget.sh: --jitter '$jitter': expected a number in (0, 1), e.g. 0.1" >&2; exit 2; }
for m in $modes; do
  case "$m" in both|drop|swap) ;; *) echo "dte_low_budget.sh: --modes: '$m': expected both, drop or swap" >&2; exit 2 ;; esac
done
for b in $budgets; do
  [[ $b =~ ^[0-9]+$ ]] && [ "$b" -ge 1 ] && [ "$b" -le 100 ] ||
    { echo "dte_low_budget.sh: --budgets: '$b': expected a whole percentage in [1, 100]" >&2; exit 2; }
done
[ -x "$mtc_replay" ] || { echo "dte_low_budget.sh: no $mtc_replay: build mtc first" >&2; exit 2; }
if [ -n "$traces" ]; then
  [ -z "$keep" ] || { echo "dte_low_budget.sh: --traces and --keep together: expected one of them" >&2; exit 2; }
  [ -d "$traces" ] || { echo "dte_low_budget.sh: --traces $traces: no such folder" >&2; exit 2; }
  tmp=$traces
else
  need_mtc_train "$mtc_train"
  work_dir dte_low_budget.sh "$keep"
fi
budget_list=$(for b in $budgets; do printf '%s%%peak,' "$b"; done)
budget_list=${budget_list%,}

ok=1
worst_s=0
declare -A misses=()  # MODE,VERDICT -> cells that missed it, over the traces and their copies
cells() { awk '{ print gsub(/%peak/, "") }' <<<"$1"; }  # the cells a verdict's list names
none() { [ -z "$1" ] && echo 1 || echo 0; }              # 1 when a verdict's list is empty
for spec in $models; do
  IFS=: read -r model batch extra <<<"$spec"
  [ -n "$batch" ] || { echo "dte_low_budget.sh: --models: '$spec': expected NAME:BATCH" >&2; exit 2; }
  trace=$tmp/$model.jsonl
  if [ -z "$traces" ]; then
    flags=(--model "$model" --batch "$batch" --iterations 4 --warmup 0 --threads "$threads" --log_every 100)
    case "$model" in
      gpt|lstm|treelstm) ;;  # synthetic tokens
      *) flags+=(--data synthetic) ;;
    esac
    # shellcheck disable=SC2206
    [ -z "${extra:-}" ] || flags+=(${extra//,/ })
    run_logged "$tmp/$model.log" "$mtc_train" "${flags[@]}" --record_trace "$trace" ||
      { show_tail "$model: recording the trace failed" "$tmp/$model.log"; exit 2; }
  fi
  [ -r "$trace" ] || { echo "dte_low_budget.sh: no trace $trace" >&2; exit 2; }
  for copy in $(seq 0 "$copies"); do
    copy_flags=() name=$model
    [ "$copy" = 0 ] || { copy_flags=(--jitter "$jitter" --jitter_seed "$copy"); name="$model copy $copy"; }
    for mode in $modes; do
      declare -A cell=() pinned=()
      for policy in mtc dtr; do
        start=$(date +%s.%N)
        # shellcheck disable=SC2086  # --replay_flags: one word per flag
        out=$("$mtc_replay" --trace "$trace" --budget "$budget_list" --limit budget,region --mode "$mode" \
          --policy "$policy" --max_overhead "$max_overhead" --skip 2 "${copy_flags[@]}" $replay_flags) ||
          { echo "$out" >&2; exit 2; }
        secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
        worst_s=$(awk -v a="$worst_s" -v b="$secs" 'BEGIN { print (b > a) ? b : a }')
        # Rows: budget limit MiB overhead peak stop ... pinnedMiB (column 12).
        while read -r b lim _ ovh _ stop _ _ _ _ _ pin _; do
          [ "$stop" = no ] && v=$ovh || v=$stop
          cell[$policy,$lim,$b]=$v
          pinned[$policy,$lim,$b]=$pin
        done < <(awk '$2 == "budget" || $2 == "region"' <<<"$out")
        echo "$name $mode: $policy replayed every cell in $secs s"
      done
      printf '\n%s (batch %s), mode %s: overhead (or oom / cap), peak pinned MiB\n' "$name" "$batch" "$mode"
      printf '%-8s | %-16s %-16s | %-16s %-16s\n' "budget" "mtc budget" "mtc region" "dtr budget" "dtr region"
      for b in $budgets; do
        k=${b}%peak
        printf '%-8s | %-16s %-16s | %-16s %-16s\n' "$k" \
          "${cell[mtc,budget,$k]} (${pinned[mtc,budget,$k]})" "${cell[mtc,region,$k]} (${pinned[mtc,region,$k]})" \
          "${cell[dtr,budget,$k]} (${pinned[dtr,budget,$k]})" "${cell[dtr,region,$k]} (${pinned[dtr,region,$k]})"
      done
      # The verdicts, over the cells of this model and mode.
      worse="" starved="" apart=""
      smaller_ok=0  # mtc trained at a smaller budget (the budgets go down)
      for b in $(tr ' ' '\n' <<<"$budgets" | sort -g); do
        k=${b}%peak
        for lim in budget region; do
          m=${cell[mtc,$lim,$k]} d=${cell[dtr,$lim,$k]}
          if [[ $m =~ ^[0-9.]+$ && $d =~ ^[0-9.]+$ ]] &&
            awk -v m="$m" -v d="$d" 'BEGIN { exit !(m > d * 1.0005) }'; then
            worse+=" $k/$lim ($m > $d)"
          fi
          if [[ ! $m =~ ^[0-9.]+$ ]] && [[ $d =~ ^[0-9.]+$ ]]; then starved+=" $k/$lim (dtr $d)"; fi
        done
        m=${cell[mtc,budget,$k]}
        if [[ $m =~ ^[0-9.]+$ ]]; then
          smaller_ok=1
        elif [ $smaller_ok = 1 ]; then
          starved+=" $k/budget (a smaller budget trained)"
        fi
        r=${cell[mtc,region,$k]}
        if [[ $m =~ ^[0-9.]+$ ]] && awk -v m="$m" 'BEGIN { exit !(m < 2) }'; then
          if [[ ! $r =~ ^[0-9.]+$ ]] || awk -v m="$m" -v r="$r" 'BEGIN { exit !(r > m * 1.05) }'; then
            apart+=" $k ($r against $m)"
          fi
        fi
      done
      verdict "$name $mode: mtc at or below dtr where dtr trains" "${worse:- every cell}" "$(none "$worse")"
      verdict "$name $mode: mtc trains where dtr or a smaller budget does" "${starved:- every cell}" "$(none "$starved")"
      verdict "$name $mode: the region within 5% of the budget under 2x" "${apart:- every cell}" "$(none "$apart")"
      misses[$mode,dtr]=$((${misses[$mode,dtr]:-0} + $(cells "$worse")))
      misses[$mode,oom]=$((${misses[$mode,oom]:-0} + $(cells "$starved")))
      misses[$mode,region]=$((${misses[$mode,region]:-0} + $(cells "$apart")))
      unset cell pinned
    done
  done
done
if [ "$copies" -gt 0 ]; then
  for mode in $modes; do
    echo "mode $mode, cells missing each verdict over the traces and $copies copies of each:" \
      "above dtr ${misses[$mode,dtr]}, out of memory where dtr or a smaller budget trains ${misses[$mode,oom]}," \
      "the region more than 5% above the budget ${misses[$mode,region]}"
  done
fi
verdict "the slowest replay of all budgets and limits" "${worst_s} s (target: each under 60 s)" \
  "$(awk -v s="$worst_s" 'BEGIN { print (s < 60) ? 1 : 0 }')"
[ $ok = 1 ] || exit 1
