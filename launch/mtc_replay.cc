// mtc-replay: replays a trace recorded by `mtc-train --record-trace` through DTE's eviction
// and allocator code on a virtual device, at one or more memory limits, and prints per
// limit the overhead (compute + recompute + swap) / compute, the peak, whether it ran out
// of memory or past the overhead cap, the evictions by cause and the peak pinned bytes.
// A limit is a byte budget m* on the trace's compute region (`--limit budget`), or the
// compute region itself made that small (`--limit region`: no budget, so fragmentation
// can bind). See docs/trace-format.md and docs/dte.md.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli.h"
#include "mtc/runtime.h"
#include "trace/replay.h"

ABSL_FLAG(std::string, trace, "", "the trace file (JSON lines, from mtc-train --record-trace)");
ABSL_FLAG(std::string, budget, "",
          "comma-separated budgets m*: bytes with a unit (100MiB), a percentage of the trace's compute region "
          "(30%), a percentage of the trace's unlimited peak (35%peak), or none");
ABSL_FLAG(std::string, policy, "mtc", "eviction policy: mtc|dtr|lru|largest|capuchin");
ABSL_FLAG(std::string, mode, "both", "evictions allowed: both|drop|swap");
ABSL_FLAG(int, skip, 1, "iterations run but not counted (warm-up), as mtc-train's --warmup");
ABSL_FLAG(double, beta, mtc::EvictOptions{}.beta, "policy mtc: beta, the factor per recompute in beta^ret (>= 1)");
ABSL_FLAG(int, beta_max_power, static_cast<int>(mtc::EvictOptions{}.beta_max_power),
          "policy mtc: the most recomputes beta^ret counts (>= 0)");
ABSL_FLAG(bool, tune, mtc::EvictOptions{}.tune,
          "policy mtc: choose the score by replaying the --skip warm-up iterations under each candidate, as the "
          "runtime does after its first two (docs/dte.md, \"Tuning the score\")");
ABSL_FLAG(std::string, limit, "budget,region",
          "what each --budget limits, one or both, comma-separated: budget (a byte budget m* on the trace's compute "
          "region) | region (the compute region itself that size, no budget: fragmentation can bind)");
ABSL_FLAG(bool, move_when_cheaper, mtc::EvictOptions{}.move_when_cheaper,
          "a request that finds the free bytes only in pieces moves tensors together when the copy costs under a "
          "quarter of evicting (false: evict, and move only once nothing more can be evicted; docs/dte.md, "
          "\"Compaction\")");
ABSL_FLAG(bool, plan_regeneration, mtc::EvictOptions{}.plan_regeneration,
          "recompute the dropped tensors an op needs in the order they were first made, each held until its last "
          "reader among them (false: each input down its own chain; docs/dte.md, \"Planned regeneration\")");
ABSL_FLAG(std::string, jitter, "0",
          "replay a copy of the trace with every op's time scaled by 1 + a*u, u uniform in [-1, 1], drawn in the "
          "trace's order (0: the recorded times); eviction is chaotic, and copies show how far a figure moves "
          "(docs/dte.md, \"At the low end\")");
ABSL_FLAG(int, jitter_seed, 1, "the seed of --jitter's draws (>= 1)");
ABSL_FLAG(int, max_recomputes_per_op, static_cast<int>(mtc::EvictOptions{}.max_recomputes_per_op),
          "stop an op once one tensor has been recomputed this many times to make its inputs resident (a recompute "
          "storm; the row says oom; 0: never)");
ABSL_FLAG(std::string, max_overhead, "4",
          "stop a replay once recomputing and swapping have taken more than (this - 1) x the trace's compute time, "
          "and say so (0: no cap)");

namespace mtc {
namespace {

constexpr int kBadValue = 2;
[[noreturn]] void fail(int status, const std::string& what) { cli::fail("mtc-replay", status, what); }

// parse_budgets: every budget of the list, each checked before any replay runs.
std::vector<Budget> parse_budgets(const std::string& list) {
  if (list.empty()) fail(kBadValue, "--budget is required: e.g. --budget 80%peak,50%peak,35%peak,25%peak");
  std::vector<Budget> out;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    absl::StatusOr<Budget> b = parse_budget(std::string(item));
    if (!b.ok()) fail(kBadValue, absl::StrCat("--budget: ", b.status().message()));
    out.push_back(*b);
  }
  return out;
}

int run() {
  const std::string path = absl::GetFlag(FLAGS_trace);
  if (path.empty()) fail(kBadValue, "--trace is required: a file written by mtc-train --record-trace");
  const std::vector<Budget> budgets = parse_budgets(absl::GetFlag(FLAGS_budget));
  EvictOptions ev;
  auto policy = parse_evict_policy(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) fail(kBadValue, absl::StrCat("--policy: ", policy.status().message()));
  auto mode = parse_evict_mode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) fail(kBadValue, absl::StrCat("--mode: ", mode.status().message()));
  ev.policy = *policy;
  ev.mode = *mode;
  ev.beta = absl::GetFlag(FLAGS_beta);
  if (!(ev.beta >= 1) || !std::isfinite(ev.beta)) {
    fail(kBadValue, absl::StrCat("--beta ", ev.beta, ": expected a number >= 1"));
  }
  if (absl::GetFlag(FLAGS_beta_max_power) < 0) {
    fail(kBadValue, absl::StrCat("--beta_max_power ", absl::GetFlag(FLAGS_beta_max_power), ": expected a count >= 0"));
  }
  ev.beta_max_power = static_cast<uint32_t>(absl::GetFlag(FLAGS_beta_max_power));
  ev.tune = absl::GetFlag(FLAGS_tune);
  ev.move_when_cheaper = absl::GetFlag(FLAGS_move_when_cheaper);
  ev.plan_regeneration = absl::GetFlag(FLAGS_plan_regeneration);
  if (absl::GetFlag(FLAGS_max_recomputes_per_op) < 0) {
    fail(kBadValue, absl::StrCat("--max_recomputes_per_op ", absl::GetFlag(FLAGS_max_recomputes_per_op),
                                 ": expected a count >= 0"));
  }
  ev.max_recomputes_per_op = static_cast<uint32_t>(absl::GetFlag(FLAGS_max_recomputes_per_op));
  const int skip = absl::GetFlag(FLAGS_skip);
  if (skip < 0) fail(kBadValue, absl::StrCat("--skip ", skip, ": expected a count >= 0"));
  bool by_budget = false, by_region = false;
  for (absl::string_view l : absl::StrSplit(absl::GetFlag(FLAGS_limit), ',')) {
    if (l == "budget") {
      by_budget = true;
    } else if (l == "region") {
      by_region = true;
    } else {
      fail(kBadValue, absl::StrCat("--limit: '", l, "': expected budget, region, or both comma-separated"));
    }
  }
  double max_overhead = 0;
  if (!absl::SimpleAtod(absl::GetFlag(FLAGS_max_overhead), &max_overhead) || !std::isfinite(max_overhead) ||
      !(max_overhead == 0 || max_overhead > 1)) {
    fail(kBadValue, absl::StrCat("--max_overhead '", absl::GetFlag(FLAGS_max_overhead),
                                 "': expected a number above 1 (a multiple of the compute time), or 0 for no cap"));
  }

  double jitter = 0;
  if (!absl::SimpleAtod(absl::GetFlag(FLAGS_jitter), &jitter) || !(jitter >= 0 && jitter < 1)) {
    fail(kBadValue, absl::StrCat("--jitter '", absl::GetFlag(FLAGS_jitter),
                                 "': expected a number in [0, 1) (0.1: op times moved by up to 10%)"));
  }
  const int jitter_seed = absl::GetFlag(FLAGS_jitter_seed);
  if (jitter_seed < 1) fail(kBadValue, absl::StrCat("--jitter_seed ", jitter_seed, ": expected a seed >= 1"));

  absl::StatusOr<Trace> trace = load_trace(path);
  if (!trace.ok()) fail(kBadValue, std::string(trace.status().message()));
  if (jitter > 0) *trace = jittered(*trace, jitter, static_cast<uint64_t>(jitter_seed));
  if (trace->iterations <= skip) {
    fail(kBadValue, absl::StrCat("trace ", path, " has ", trace->iterations, " iteration marks; --skip ", skip,
                                 " leaves none to count: expected a longer trace or a smaller --skip"));
  }

  // Budgets that need no replay to resolve are checked against the region now, before any
  // replay; shares of the peak cannot exceed it.
  for (const Budget& b : budgets) {
    if (b.kind == Budget::Kind::kPeakShare) continue;
    absl::StatusOr<size_t> m = resolve_budget(b, trace->header.compute_bytes);
    if (!m.ok()) fail(kBadValue, absl::StrCat("--budget: ", m.status().message(), " (the trace's compute region)"));
  }

  // The unlimited run: the reference peak for budgets given as a share of it.
  EvictOptions none = ev;
  none.policy = EvictPolicy::kNone;
  none.budget_bytes = 0;
  absl::StatusOr<ReplayResult> base = replay(*trace, none, skip);
  if (!base.ok()) fail(kBadValue, absl::StrCat("trace ", path, ": ", base.status().message()));
  if (base->out_of_memory || !base->error.empty()) {
    fail(kBadValue, absl::StrCat("trace ", path, ": does not fit its own compute region without a budget: ", base->error));
  }
  const double peak = static_cast<double>(base->peak_bytes);
  std::printf("trace: %s: %zu events, %d iterations (%d counted), %s, unlimited peak %.1f MiB, compute %.1f ms/iter\n",
              path.c_str(), trace->events.size(), trace->iterations, base->counted_iterations,
              trace->header.device.c_str(), peak / 1048576.0, base->compute_us / base->counted_iterations * 1e-3);
  if (jitter > 0) {
    std::printf("copy: every op's time scaled by 1 + %g*u, u uniform in [-1, 1], seed %d\n", jitter, jitter_seed);
  }
  if (!trace->last_iteration_complete) {
    std::printf("note: trace ends inside iteration %d: that iteration is not counted (%s)\n", trace->cut_iteration,
                trace->cut_short.c_str());
  }
  std::printf("policy %s, mode %s, gamma %.0f MB/s", evict_policy_name(ev.policy), evict_mode_name(ev.mode),
              trace->header.bytes_per_us);
  if (max_overhead > 0) {
    std::printf(", overhead cap %gx (a replay stops once recompute and swap pass %.1f ms)", max_overhead,
                (max_overhead - 1) * base->total_compute_us * 1e-3);
  }
  std::printf("\n");
  std::printf("%-8s %-6s %10s %9s %10s %5s %8s %8s %10s %9s %9s %10s %11s %9s %11s\n", "budget", "limit", "MiB",
              "overhead", "peak_MiB", "stop", "drop/it", "swap/it", "recomp/it", "evB/it", "evF/it", "pinnedMiB",
              "swapMiB/it", "search%", "moveMiB/it");
  for (const Budget& b : budgets) {
    absl::StatusOr<size_t> m = resolve_budget(b, trace->header.compute_bytes, base->peak_bytes);
    if (!m.ok()) fail(kBadValue, absl::StrCat("--budget: ", m.status().message()));
    for (int as_region = 0; as_region < 2; ++as_region) {
      if (as_region ? !by_region : !by_budget) continue;
      EvictOptions o = ev;
      o.budget_bytes = as_region ? 0 : *m;
      o.max_overhead_us = max_overhead > 0 ? (max_overhead - 1) * base->total_compute_us : 0;
      absl::StatusOr<ReplayResult> r = replay(*trace, o, skip, as_region ? *m : 0);
      if (!r.ok()) fail(kBadValue, absl::StrCat("trace ", path, ": ", r.status().message()));
      const double n = std::max(1, r->counted_iterations);
      const bool stopped = r->out_of_memory || r->capped || !r->error.empty();
      const uint64_t evictions = r->stats.evict_drop + r->stats.evict_swap;
      std::printf("%-8s %-6s %10.1f %9s %10.1f %5s %8.1f %8.1f %10.1f %9.1f %9.1f %10.1f %11.1f %9.3f %11.1f\n",
                  b.text.c_str(), as_region ? "region" : "budget", *m / 1048576.0,
                  stopped ? "-" : absl::StrFormat("%.3f", r->overhead()).c_str(), r->peak_bytes / 1048576.0,
                  r->out_of_memory ? "oom" : r->capped ? "cap" : !r->error.empty() ? "error" : "no",
                  r->stats.evict_drop / n, r->stats.evict_swap / n, r->stats.recomputes / n,
                  (evictions - r->stats.evict_fragmented) / n, r->stats.evict_fragmented / n,
                  r->peak_pinned_bytes / 1048576.0, r->stats.swapped_out_bytes / n / 1048576.0,
                  r->compute_us > 0 ? 100.0 * r->search_us / (r->compute_us + r->recompute_us + r->swap_us) : 0.0,
                  r->stats.moved_bytes / n / 1048576.0);
      if (!r->error.empty()) std::printf("  stopped: %s\n", r->error.c_str());
      if (r->tuned) std::printf("  score: %s\n", r->tuning.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  mtc::cli::parse_flags("mtc-replay", "mtc_replay",
                         "replays an mtc trace through DTE at several budgets and prints overhead, peak and "
                         "out-of-memory.\n"
                         "  mtc-replay --trace=resnet56.jsonl --budget=80%peak,50%peak,35%peak,25%peak --policy=mtc", argc, argv);
  return mtc::run();
}
