# shellcheck shell=bash
# Shell functions the benchmark scripts share; source it (". benchmarks/lib.sh"). It
# defines functions only and changes no option or variable of the script that sources it,
# except verdict, which clears the caller's `ok` on a FAIL, and work_dir, which sets `tmp`
# and the EXIT trap.

# run_logged LOG CMD...: runs CMD with its stdout and stderr in LOG; returns CMD's status.
run_logged() {
  local log=$1; shift
  "$@" >"$log" 2>&1
}

# summary_line LOG: prints the last line of LOG that starts with 'summary ' (the line
# docs/metrics.md defines); status 1 when there is none.
summary_line() {
  local line
  line=$(grep '^summary ' "$1" | tail -n 1 || true)
  [ -n "$line" ] || return 1
  echo "$line"
}

# field LINE KEY: the value of KEY=value in a summary line (empty when KEY is absent).
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# show_tail WHAT LOG: "WHAT; the end of its output:" and LOG's last 20 lines, on stderr.
show_tail() {
  echo "$1; the end of its output:" >&2
  tail -n 20 "$2" >&2
}

# failure_kind STATUS LOG: OOM when a run that exited with STATUS (non-zero) ran out of
# device memory (mtc-train's status 2 with a memory message), else FAIL.
failure_kind() {
  if [ "$1" = 2 ] && grep -qiE 'out of memory|cannot allocate|--memory' "$2"; then
    echo OOM
  else
    echo FAIL
  fi
}

# need_mtc_train PATH: exits 2 with a hint when PATH is not an executable mtc-train.
need_mtc_train() {
  if [ ! -x "$1" ]; then
    echo "no mtc-train at $1: build it (scripts/run.sh, or ninja -C build mtc-train) or pass its path" >&2
    exit 2
  fi
}

# need_counts NAME...: exits 2 unless each variable NAME holds a whole number, at least 1
# (at least 0 for warmup); the message names the flag --NAME.
need_counts() {
  local n min
  for n in "$@"; do
    min=1
    if [ "$n" = warmup ]; then min=0; fi
    if [[ ! ${!n} =~ ^[0-9]+$ ]] || [ "${!n}" -lt "$min" ]; then
      echo "--$n must be an integer >= $min, got '${!n}'" >&2
      exit 2
    fi
  done
}

# stat_key STAT: the summary field that --stat STAT compares (min: min_sec_per_iter,
# median: median_sec_per_iter, mean: sec_per_iter); exits 2 for anything else.
stat_key() {
  case "$1" in
    min|median) echo "${1}_sec_per_iter" ;;
    mean) echo sec_per_iter ;;
    *) echo "--stat must be min, median or mean, got '$1'" >&2; exit 2 ;;
  esac
}

# median_of "V1 V2 ...": the median of the numbers (the mean of the middle two for an even
# count); status 1 when there are none.
median_of() {
  tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; printf "%.6f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# wall_over_compute LINE ITERATIONS: a summary line's wall time over its compute_sec
# (sec_per_iter x ITERATIONS / compute_sec), 0 when compute_sec is 0. The program's own ops
# are the same work under every budget, so this is the run's time measured on its own
# clock: a machine whose speed drifts scales both sides alike.
wall_over_compute() {
  awk -v s="$(field "$1" sec_per_iter)" -v n="$2" -v c="$(field "$1" compute_sec)" \
    'BEGIN { printf "%.6f", (c > 0 ? s * n / c : 0) }'
}

# verdict NAME VALUE PASS?: prints "NAME: VALUE PASS" when PASS? is 1, else "... FAIL" and
# sets the caller's variable ok to 0 (one line per target of a benchmark).
verdict() {
  local v=FAIL
  if [ "$3" = 1 ]; then v=PASS; else ok=0; fi
  echo "$1: $2 $v"
}

# work_dir SCRIPT KEEP: sets the caller's `tmp` to the folder the runs' logs go to: KEEP
# (made when missing, and kept) or, when KEEP is empty, a new temporary folder removed at
# exit. Exits 2 when KEEP cannot be made, naming SCRIPT's --keep.
work_dir() {
  if [ -n "$2" ]; then
    mkdir -p "$2" || { echo "$1: --keep $2: cannot make the folder" >&2; exit 2; }
    tmp=$2
  else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
  fi
}

# max_peak LOG: the largest compute-region peak in MiB over the ranks' `memory rank` lines
# ("m2 ..., peak X MiB").
max_peak() { sed -n 's/^memory rank .*; m2 [^,]*, peak \([0-9.]*\) MiB.*/\1/p' "$1" | sort -g | tail -n 1; }

# mode_counts LOG: "P1 P2 P3 P4", the ops DTP ran in each mode (the last `state` line's
# ops_p1..ops_p4).
mode_counts() {
  sed -n 's/^state .* ops_p1=\([0-9]*\) ops_p2=\([0-9]*\) ops_p3=\([0-9]*\) ops_p4=\([0-9]*\).*/\1 \2 \3 \4/p' "$1" |
    tail -n 1
}
