#!/usr/bin/env bash
# DTP gives the losses of one rank: for one model, every forced mode (--dtp=p1..p4) and
# --dtp=auto on 2 and 4 ranks, and on 4 ranks auto and p4 over a mesh of two groups of two
# (--dtp_group=2; models without batch norm: --sync_bn, which one rank's batch norm needs
# from the ranks, is refused on a mesh), train 10 iterations with the single-rank losses
# within a relative 1e-4 (models with batch norm with --sync_bn: without it each rank
# normalises its own rows, as data parallel does; tests/dtp_bn_stats.sh),
# with SGD and with AdamW, without and with a DTE budget on each rank (80% of what the
# single-rank run's peak holds beyond its parameters and optimizer state), which must
# make that run evict (the MLP: see `share`). A
# control run with a conversion's backward broken on purpose must fail the comparison.
# The settings keep the single-rank check itself stable (see dp_equivalence.sh): small
# steps, no momentum, since the ranks sum in another order; AdamW with an epsilon of
# 1e-3, since at 1e-8 its update is about lr * sign(g) for the tiny gradients, and a
# rounding difference flips them (ResNet-20: 3.2e-4 apart at 1e-8, 4.8e-5 at 1e-3).
# Usage: dtp_equivalence.sh MTC_TRAIN MPIRUN MODEL   (run by ctest: tests/dist_tests.cmake)
set -euo pipefail
train=$1
mpirun=$2
model=$3
# share: the budget: the parameters and optimizer state (never evicted) and this share
# of the rest of the single-rank peak. The MLP's memory is its weights
# and the weight gradient made next to them while the batch is pinned: no budget under
# its peak is workable, so it runs at its peak, where DTE is on and need not evict.
share=80
must_evict=1
# lr_sgd, lr_adamw: VGG-16's five max pools after ReLU route a gradient by which of nearly
# equal values is largest, so a rounding difference moves it discontinuously: at lr 1e-3
# data parallel itself (--sync_bn) parts from one rank by 6e-2 within 10 iterations. At
# 1e-5 the ranks stay within 2e-6 and the broken-backward control still parts by 3e-3.
# AdamW's step is about lr * sign(g) there whatever lr is, so a rerouted gradient still
# jumps (2.3e-4 at epsilon 1e-3); with epsilon 1 its step follows g as SGD's does (1.5e-5).
# lr_control: the control's step, at which a healthy run still agrees but the broken
# backward parts clearly (MLP and GPT: 1.4e-4 at 1e-3, past 1e-3 at 1e-2; ResNet-20,
# whose healthy run parts by 6.6e-4 at 1e-2, keeps 1e-3, where the broken one parts by 3.7e-3).
lr_sgd=0.001 lr_adamw=0.0001 eps_adamw=1e-3 lr_control=0.01 mesh=0 bn=()
case "$model" in
  mlp) common=(--model=mlp --batch=16) share=100 must_evict=0 mesh=1 ;;
  resnet20) common=(--model=resnet20 --batch=32) lr_control=0.001 bn=(--sync_bn) ;;
  vgg16) common=(--model=vgg16 --batch=4) lr_sgd=0.00001 lr_adamw=0.00001 eps_adamw=1 lr_control=0.00001 bn=(--sync_bn) ;;
  gpt) common=(--model=gpt --gpt_config=tiny --batch=8) mesh=1 ;;
  *) echo "unknown model $model"; exit 2 ;;
esac
common+=(--iterations=10 --warmup=0 --log_every=1 --threads=1 --seed=5)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/loss_compare.sh"

evictions() {
  grep '^summary' "$1" | tr ' ' '\n' | awk -F= '$1 == "evict_drop" || $1 == "evict_swap" { n += $2 } END { print n + 0 }'
}

status=0
for opt in sgd adamw; do
  o=(--optimizer=$opt)
  if [ $opt = sgd ]; then o+=(--lr=$lr_sgd --momentum=0); else o+=(--lr=$lr_adamw --adam_eps=$eps_adamw --weight_decay=0.01); fi
  for b in none budget; do
    extra=()
    if [ $b = budget ]; then
      peak=$(grep '^summary' "$tmp/one.txt" | tr ' ' '\n' | awk -F= '$1 == "peak_compute_bytes" { print $2 }' || true)
      kept=$(grep '^state ' "$tmp/one.txt" | tr ' ' '\n' | awk -F= '$1 == "param_bytes" || $1 == "optim_bytes" { n += $2 } END { print n }' || true)
      [ -n "$peak" ] && [ -n "$kept" ] || { echo "no peak or state figures in the run:"; cat "$tmp/one.txt"; exit 1; }
      extra=(--budget=$(((kept + (peak - kept) * share / 100) / 1024 + 1))KiB)
    fi
    "$train" "${common[@]}" "${o[@]}" "${extra[@]}" >"$tmp/one.txt" 2>&1 || { cat "$tmp/one.txt"; exit 1; }
    if [ $b = budget ]; then
      echo "$opt: budget ${extra[0]#--budget=} on each rank; one rank evicts $(evictions "$tmp/one.txt") tensors"
      [ $must_evict = 0 ] || [ "$(evictions "$tmp/one.txt")" -gt 0 ] || { echo "the budget made no evictions"; exit 1; }
    fi
    for np in 2 4; do
      modes=(p1 p2 p3 p4 auto)
      if [ $np = 4 ] && [ $mesh = 1 ]; then modes+=("auto --dtp_group=2" "p4 --dtp_group=2"); fi
      for mode in "${modes[@]}"; do
        what="$opt $b np=$np --dtp=$mode"
        # shellcheck disable=SC2086 # mode carries its --dtp_group flag
        if ! "$mpirun" --oversubscribe -np $np "$train" "${common[@]}" "${o[@]}" "${extra[@]}" "${bn[@]}" --dtp=$mode \
            >"$tmp/dtp.txt" 2>&1; then
          echo "$what: the run failed"; tail -5 "$tmp/dtp.txt"; status=1; continue
        fi
        compare_losses "$tmp/dtp.txt" "$tmp/one.txt" "$what" || status=1
      done
    done
    if [ $opt = sgd ] && [ $b = none ]; then
      # The control: with all_gather's backward broken on purpose (a local slice instead
      # of the reduce_scatter, testing only), P2's weight gradients miss the other
      # ranks' share: the comparison must fail, where the healthy run at the same step
      # passes.
      ctl=(--optimizer=sgd --lr=$lr_control --momentum=0)
      "$train" "${common[@]}" "${ctl[@]}" >"$tmp/ctl_one.txt" 2>&1 || { cat "$tmp/ctl_one.txt"; exit 1; }
      "$mpirun" --oversubscribe -np 2 "$train" "${common[@]}" "${ctl[@]}" "${bn[@]}" --dtp=p2 >"$tmp/ctl_ok.txt" 2>&1 || {
        tail -5 "$tmp/ctl_ok.txt"; exit 1; }
      compare_losses "$tmp/ctl_ok.txt" "$tmp/ctl_one.txt" "control: healthy, lr $lr_control np=2 p2" || status=1
      "$mpirun" --oversubscribe -np 2 -x MTC_TESTING_BREAK_CONVERT_BACKWARD=all_gather "$train" "${common[@]}" \
        "${ctl[@]}" "${bn[@]}" --dtp=p2 >"$tmp/broken.txt" 2>&1 || { tail -5 "$tmp/broken.txt"; exit 1; }
      if compare_losses "$tmp/broken.txt" "$tmp/ctl_one.txt" "control: broken backward, np=2 p2" >"$tmp/ctl.txt"; then
        cat "$tmp/ctl.txt"; echo "the broken backward went unnoticed"; status=1
      else
        echo "$(tail -n 1 "$tmp/ctl.txt" | sed 's/: FAIL$//'): noticed, as it must be"
      fi
    fi
  done
done
exit $status
