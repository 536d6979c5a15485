// mtc-replay: replays a trace recorded by `mtc-train --record-trace` through DTE's eviction
// and allocator code on a virtual device, at one or more budgets, and prints per budget the
// overhead (compute + recompute + swap) / compute, the peak and whether it ran out of
// memory. See docs/trace-format.md.
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
  const int skip = absl::GetFlag(FLAGS_skip);
  if (skip < 0) fail(kBadValue, absl::StrCat("--skip ", skip, ": expected a count >= 0"));

  absl::StatusOr<Trace> trace = load_trace(path);
  if (!trace.ok()) fail(kBadValue, std::string(trace.status().message()));
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
  if (!trace->last_iteration_complete) {
    std::printf("note: trace ends inside iteration %d: that iteration is not counted (%s)\n", trace->cut_iteration,
                trace->cut_short.c_str());
  }
  std::printf("policy %s, mode %s, gamma %.0f MB/s\n", evict_policy_name(ev.policy), evict_mode_name(ev.mode),
              trace->header.bytes_per_us);
  std::printf("%-8s %10s %9s %10s %4s %8s %8s %10s %11s %9s\n", "budget", "MiB", "overhead", "peak_MiB", "oom",
              "drop/it", "swap/it", "recomp/it", "swapMiB/it", "search%");
  for (const Budget& b : budgets) {
    EvictOptions o = ev;
    absl::StatusOr<size_t> m = resolve_budget(b, trace->header.compute_bytes, base->peak_bytes);
    if (!m.ok()) fail(kBadValue, absl::StrCat("--budget: ", m.status().message()));
    o.budget_bytes = *m;
    absl::StatusOr<ReplayResult> r = replay(*trace, o, skip);
    if (!r.ok()) fail(kBadValue, absl::StrCat("trace ", path, ": ", r.status().message()));
    const double n = std::max(1, r->counted_iterations);
    std::printf("%-8s %10.1f %9s %10.1f %4s %8.1f %8.1f %10.1f %11.1f %9.3f\n", b.text.c_str(),
                o.budget_bytes / 1048576.0,
                r->out_of_memory || !r->error.empty() ? "-" : absl::StrFormat("%.3f", r->overhead()).c_str(),
                r->peak_bytes / 1048576.0, r->out_of_memory ? "yes" : "no", r->stats.evict_drop / n,
                r->stats.evict_swap / n, r->stats.recomputes / n, r->stats.swapped_out_bytes / n / 1048576.0,
                r->compute_us > 0 ? 100.0 * r->search_us / (r->compute_us + r->recompute_us + r->swap_us) : 0.0);
    if (!r->error.empty()) std::printf("  stopped: %s\n", r->error.c_str());
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
