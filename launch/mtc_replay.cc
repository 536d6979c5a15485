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
          "comma-separated budgets m*: a fraction in (0, 1] of the trace's unlimited peak (0.35), "
          "a byte size (100MiB), or none");
ABSL_FLAG(std::string, policy, "mtc", "eviction policy: mtc|dtr|lru|largest|capuchin");
ABSL_FLAG(std::string, mode, "both", "evictions allowed: both|drop|swap");
ABSL_FLAG(int, skip, 1, "iterations run but not counted (warm-up), as mtc-train's --warmup");

namespace mtc {
namespace {

constexpr int kBadValue = 2;
[[noreturn]] void fail(int status, const std::string& what) { cli::fail("mtc-replay", status, what); }

struct Budget {
  std::string text;
  double fraction = 0;  // of the unlimited peak, when > 0
  size_t bytes = 0;     // else this; 0 with fraction 0: none
};

std::vector<Budget> parse_budgets(const std::string& list) {
  if (list.empty()) fail(kBadValue, "--budget is required: e.g. --budget 0.8,0.5,0.35,0.25");
  std::vector<Budget> out;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    Budget b{std::string(item)};
    const std::string t = b.text;
    if (t == "none") {
    } else if (!t.empty() && t.find_first_not_of("0123456789.") == std::string::npos && t.find('.') != std::string::npos) {
      if (!absl::SimpleAtod(t, &b.fraction) || !(b.fraction > 0 && b.fraction <= 1)) {
        fail(kBadValue, absl::StrCat("--budget '", t, "': a fraction must be in (0, 1]"));
      }
    } else {
      absl::StatusOr<size_t> v = parse_bytes(t);
      if (!v.ok() || *v == 0) {
        fail(kBadValue, absl::StrCat("--budget '", t, "': expected a fraction in (0, 1] such as 0.35, a byte size such as 100MiB, or none"));
      }
      b.bytes = *v;
    }
    out.push_back(b);
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

  // The unlimited run: the reference peak for fractional budgets.
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
  std::printf("policy %s, mode %s, gamma %.0f MB/s\n", evict_policy_name(ev.policy), evict_mode_name(ev.mode),
              trace->header.bytes_per_us);
  std::printf("%-8s %10s %9s %10s %4s %8s %8s %10s %11s %9s\n", "budget", "MiB", "overhead", "peak_MiB", "oom",
              "drop/it", "swap/it", "recomp/it", "swapMiB/it", "search%");
  for (const Budget& b : budgets) {
    EvictOptions o = ev;
    o.budget_bytes = b.fraction > 0 ? static_cast<size_t>(b.fraction * peak) : b.bytes;
    if (o.budget_bytes > trace->header.compute_bytes) {
      fail(kBadValue, absl::StrCat("--budget ", b.text, " is ", o.budget_bytes, " bytes, above the trace's compute region of ",
                                   trace->header.compute_bytes, " bytes"));
    }
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
                         "  mtc-replay --trace=resnet56.jsonl --budget=0.8,0.5,0.35,0.25 --policy=mtc", argc, argv);
  return mtc::run();
}
