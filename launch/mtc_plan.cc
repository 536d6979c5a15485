// mtc-plan: the TMA planner (alloc/plan.h) on MiniMalloc's CSV format. Reads buffers
// (id,lower,upper,size; lifetimes [lower, upper)), plans their offsets, validates the plan,
// prints the peak against the lower bound, the time and the process's peak resident
// memory, and writes the CSV back with an offset column. Bad input (a malformed CSV, an --in or --out that cannot serve, sizes
// whose plan could not be written back) exits 2 before any planning. See docs/tma.md.
#include <sys/resource.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "alloc/plan.h"
#include "cli.h"

ABSL_FLAG(std::string, in, "", "the problem: a MiniMalloc CSV with columns id, lower, upper, size");
ABSL_FLAG(std::string, out, "",
          "where to write the plan (the input's columns and an offset column); left empty, none is written");
ABSL_FLAG(std::string, time_limit, "10", "seconds the planner may take (the search stops there)");
ABSL_FLAG(std::string, target_peak, "0",
          "bytes: stop as soon as a plan peaks at or below this (0: aim at the lower bound)");
ABSL_FLAG(std::string, alignment, "1", "bytes: every offset is a multiple of this");
ABSL_FLAG(std::string, threads, "1", "searches run at once, the preorders' searches taking turns on them (0: one per core)");
ABSL_FLAG(std::string, method, "all",
          "all (plan(): every method, the best kept), or one heuristic alone: rules, greedy (ties: the "
          "longest lived first), greedy_end (ties: the latest end first), greedy_start (ties: the "
          "earliest start first), skyline; the greedy ones alone make no repairs");

namespace mtc {
namespace {

constexpr int kBadInput = 2;  // bad flags or a malformed file
constexpr int kFailed = 1;    // the run failed (could not write the plan after checking it could)
[[noreturn]] void fail(int status, const std::string& what) { cli::fail("mtc-plan", status, what); }

uint64_t parse_count(const char* flag, const std::string& text, uint64_t min) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < min) {
    fail(kBadInput, absl::StrCat("--", flag, " '", text, "': expected a whole number of bytes >= ", min));
  }
  return v;
}

int run() {
  const std::string in = absl::GetFlag(FLAGS_in);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (in.empty()) fail(kBadInput, "--in is required: a CSV with columns id,lower,upper,size");
  double time_limit = 0;
  const std::string tl = absl::GetFlag(FLAGS_time_limit);
  if (!absl::SimpleAtod(tl, &time_limit) || !std::isfinite(time_limit) || time_limit < 0) {
    fail(kBadInput, absl::StrCat("--time-limit '", tl, "': expected a number of seconds >= 0"));
  }
  alloc::PlanOptions options;
  options.time_limit_sec = time_limit;
  options.target_peak = parse_count("target-peak", absl::GetFlag(FLAGS_target_peak), 0);
  options.alignment = parse_count("alignment", absl::GetFlag(FLAGS_alignment), 1);
  const std::string threads = absl::GetFlag(FLAGS_threads);
  if (!absl::SimpleAtoi(threads, &options.threads) || options.threads < 0 || options.threads > 1024) {
    fail(kBadInput, absl::StrCat("--threads '", threads, "': expected a count from 1 to 1024, or 0 for one per core"));
  }
  const std::string method = absl::GetFlag(FLAGS_method);
  if (method != "all" && method != "rules" && method != "greedy" && method != "greedy_end" &&
      method != "greedy_start" && method != "skyline") {
    fail(kBadInput,
         absl::StrCat("--method '", method, "': expected all, rules, greedy, greedy_end, greedy_start or skyline"));
  }

  struct stat st;
  if (::stat(in.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      fail(kBadInput,
           absl::StrCat("--in ", in, ": not found, expected a CSV file with columns id,lower,upper,size"));
    }
  } else if (S_ISDIR(st.st_mode)) {
    fail(kBadInput, absl::StrCat("--in ", in, ": is a directory, expected a CSV file"));
  }
  // The plan is written to a temporary beside --out and renamed; a place that cannot take
  // it is refused now, before any planning.
  if (!out.empty()) {
    const absl::Status writable = cli::check_output_file("out", out);
    if (!writable.ok()) fail(kBadInput, std::string(writable.message()));
  }

  // The reader refuses sizes whose plans could reach past what a CSV integer holds.
  absl::StatusOr<alloc::CsvProblem> problem = alloc::read_minimalloc_csv(in, options.alignment);
  if (!problem.ok()) fail(kBadInput, std::string(problem.status().message()));
  const std::vector<alloc::PlanBuffer>& buffers = problem->buffers;
  std::printf("mtc-plan: %s: %zu buffers\n", in.c_str(), buffers.size());
  if (!problem->offsets.empty()) {
    const absl::Status given = alloc::validate(buffers, problem->offsets, options.alignment, problem->ids);
    std::printf("input offsets: peak %zu bytes, %s\n", alloc::peak_of(buffers, problem->offsets),
                given.ok() ? "valid" : absl::StrCat("invalid: ", given.message()).c_str());
  }

  alloc::PlanResult result;
  if (method == "all") {
    absl::StatusOr<alloc::PlanResult> r = alloc::plan(buffers, options);
    if (!r.ok()) fail(absl::IsInvalidArgument(r.status()) ? kBadInput : kFailed, std::string(r.status().message()));
    result = *std::move(r);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    using alloc::GreedyTies;
    if (method == "rules") {
      result.offsets = alloc::plan_paper_rules(buffers, options.alignment);
    } else if (method == "skyline") {
      result.offsets = alloc::plan_skyline(buffers, options.alignment);
    } else {  // greedy, greedy_end, greedy_start
      const GreedyTies ties = method == "greedy_end"     ? GreedyTies::kLatestEndFirst
                              : method == "greedy_start" ? GreedyTies::kEarliestStartFirst
                                                         : GreedyTies::kLongestFirst;
      result.offsets = alloc::plan_greedy_by_size(buffers, options.alignment, ties);
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.peak = alloc::peak_of(buffers, result.offsets);
    result.lower_bound = alloc::lower_bound(buffers);
    result.method = method;
    result.optimal = result.peak == result.lower_bound;
  }
  const absl::Status valid = alloc::validate(buffers, result.offsets, options.alignment, problem->ids);
  if (!valid.ok()) fail(kFailed, absl::StrCat("the ", result.method, " plan does not validate: ", valid.message()));
  const double ratio = result.lower_bound > 0 ? static_cast<double>(result.peak) / result.lower_bound : 1.0;
  const bool reached = options.target_peak == 0 || result.peak <= options.target_peak;
  std::printf("lower bound %zu bytes, peak %zu bytes (%.4fx), method %s%s, %.3f s, %lld search nodes, %lld moves "
              "of local improvement kept\n",
              result.lower_bound, result.peak, ratio, result.method.c_str(), result.optimal ? ", optimal" : "",
              result.seconds, static_cast<long long>(result.search_nodes), static_cast<long long>(result.improve_moves));
  if (!reached) {
    std::printf("target peak %zu bytes not reached within %.3g s\n", options.target_peak, time_limit);
  }
  if (!out.empty()) {
    const absl::Status w = alloc::write_minimalloc_csv(out, buffers, result.offsets, problem->ids);
    if (!w.ok()) fail(kFailed, std::string(w.message()));
    std::printf("wrote %s\n", out.c_str());
  }
  // The process's peak resident set (reading the CSV, planning, writing): what planning a
  // trace of this size holds at most (getrusage's ru_maxrss, KiB on Linux).
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const long long peak_rss = static_cast<long long>(usage.ru_maxrss) * 1024;
  std::printf("memory: peak resident %.1f MiB (this process)\n", static_cast<double>(peak_rss) / (1 << 20));
  std::printf("summary buffers=%zu lower_bound=%zu peak=%zu ratio=%.6f method=%s optimal=%d seconds=%.4f "
              "target_peak=%zu reached=%d search_nodes=%lld peak_rss_bytes=%lld improve_moves=%lld\n",
              buffers.size(), result.lower_bound, result.peak, ratio, result.method.c_str(), result.optimal ? 1 : 0,
              result.seconds, options.target_peak, reached ? 1 : 0, static_cast<long long>(result.search_nodes),
              peak_rss, static_cast<long long>(result.improve_moves));
  return 0;
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  mtc::cli::parse_flags("mtc-plan", "mtc_plan",
                        "plans fixed offsets for buffers with known lifetimes (MiniMalloc's CSV) and "
                        "writes them back.\n"
                        "  mtc-plan --in=A.1048576.csv --out=A.plan.csv --time-limit=10 --target-peak=1048576",
                        argc, argv);
  return mtc::run();
}
