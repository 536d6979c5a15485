# shellcheck shell=bash
# compare_losses A B WHAT [verbose]: the "iter N loss X" lines of two mtc-train runs, A
# against B (the single-rank reference), side by side: both must have 10 loss lines, and
# every loss must be within a relative 1e-4 of B's. Prints one line naming WHAT with the
# largest relative difference (and, verbose, every iteration); status 1 past the limit.
# Sourced by dp_equivalence.sh and dtp_equivalence.sh.
compare_losses() {
  local a=$1 b=$2 what=$3 verbose=${4:-}
  local pa pb
  pa=$(grep '^iter ' "$a" | awk '{print $2, $4}')
  pb=$(grep '^iter ' "$b" | awk '{print $4}')
  [ "$(wc -l <<<"$pa")" -eq 10 ] && [ "$(wc -l <<<"$pb")" -eq 10 ] || {
    echo "$what: expected 10 loss lines from each run"; cat "$a" "$b"; return 1; }
  paste -d' ' <(echo "$pa") <(echo "$pb") | awk -v what="$what" -v verbose="$verbose" '
    { d = $2 - $3; if (d < 0) d = -d; m = $3 < 0 ? -$3 : $3; if (m < 1e-12) m = 1e-12; r = d / m; if (r > worst) worst = r
      if (verbose != "") printf "iter %2d  %.6f against %.6f  relative difference %.2e\n", $1, $2, $3, r
      else if (r > 1e-4) printf "  iter %d: %.6f against %.6f\n", $1, $2, $3
      if (r > 1e-4) bad = 1 }
    END { printf "%-34s largest relative difference %.2e (allowed 1e-4)%s\n", what, worst, bad ? ": FAIL" : ""
          exit bad }'
}
