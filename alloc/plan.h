// TMA planner: fixed byte offsets for buffers with known lifetimes (dynamic storage
// allocation), so that no two buffers live at the same time overlap in address and the
// peak (max of offset + size) is as small as can be found in the time allowed.
//
// Methods, run by plan() as time allows and the best kept (docs/tma.md):
//  - the MegTaiChi paper's simulation with its six rules (Alloc; Alloc & Division; Swell;
//    Free; Free & Merge; Overwrite & Free) over its topological order of events;
//  - greedy by size (largest first, lowest fitting offset; TFLite's heuristic), and the
//    skyline descent (the search's own order without backtracking: the buffer that can sit
//    lowest goes next); plan() skips these two when they could not finish in time;
//  - a branch-and-bound search (MiniMalloc-like: canonical lowest-offset placements,
//    pruned by the per-section live-bytes bound) that closes the gap to the lower bound
//    or stops at the time limit (up to 20,000 buffers).
// The lower bound is the maximum over time of the bytes live at once. No kernels, no
// CUDA, no runtime: the same code serves mtc-plan, the runtime's TMA and the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtc::alloc {

// PlanBuffer: one request, live over the half-open interval [lower, upper) of a clock
// (MiniMalloc's CSV columns id, lower, upper, size). lower < upper, size > 0. The id only
// names the buffer in messages; the CSV's ids, strings, are kept in CsvProblem::ids.
struct PlanBuffer {
  int64_t id = 0;
  int64_t lower = 0;
  int64_t upper = 0;
  size_t size = 0;
};

struct PlanOptions {
  // Stop searching after this many seconds and keep the best plan found so far.
  double time_limit_sec = 10.0;
  // Every offset is a multiple of this (the runtime passes kAlignment; mtc-plan 1).
  size_t alignment = 1;
  // The peak to aim for: the search stops as soon as a plan at or below it is found
  // (0: the lower bound). MiniMalloc's benchmarks give their best known capacity.
  size_t target_peak = 0;
  // Searches run at once (0: one per core); the searches of the preorders at each capacity
  // take turns on them (docs/tma.md). The runtime keeps 1; mtc-plan takes --threads.
  int threads = 1;
};

struct PlanResult {
  std::vector<size_t> offsets;  // offsets[i] for buffers[i]
  size_t peak = 0;              // max over i of offsets[i] + size
  size_t lower_bound = 0;       // max over time of live bytes
  std::string method;           // which method gave the kept plan: "rules", "greedy",
                                //   "skyline", "improved" (local improvement of the best
                                //   of those), "search" ("none" for no buffers)
  double seconds = 0;           // wall time of plan()
  bool optimal = false;         // peak == lower_bound, or the search proved no better exists
  int64_t search_nodes = 0;     // nodes the search visited (0: it did not run)
  int64_t improve_moves = 0;    // moves local improvement kept (0: it did not run or found none)
};

// check_buffers: InvalidArgument naming the first buffer with lower >= upper or size 0.
absl::Status check_buffers(const std::vector<PlanBuffer>& buffers);

// check_total_bytes: InvalidArgument when the sizes, each rounded up to the alignment, add
// up to more than INT64_MAX bytes, naming the buffer where they pass it. No plan peaks
// above that sum, so below it no offset or end overflows, and every one fits the int64 of
// MiniMalloc's CSV. plan() and read_minimalloc_csv check it.
absl::Status check_total_bytes(const std::vector<PlanBuffer>& buffers, size_t alignment = 1);

// lower_bound: the maximum over time of the total size of live buffers. O(n log n).
size_t lower_bound(const std::vector<PlanBuffer>& buffers);

// validate: OK when offsets has one entry per buffer, each a multiple of alignment, and
// no two buffers that overlap in time overlap in [offset, offset + size); otherwise
// InvalidArgument naming the first pair that collides (by id). O(n log n + collisions).
// `names`, when given (one per buffer), name the buffers in its messages in place of ids.
absl::Status validate(const std::vector<PlanBuffer>& buffers, const std::vector<size_t>& offsets,
                      size_t alignment = 1, const std::vector<std::string>& names = {});

// plan: runs the methods above within options.time_limit_sec and returns the plan with
// the least peak (validated); it returns early at the goal (the lower bound, or
// target_peak when higher). InvalidArgument for bad buffers (check_buffers,
// check_total_bytes) or options (alignment 0, a negative time limit or thread count).
absl::StatusOr<PlanResult> plan(const std::vector<PlanBuffer>& buffers,
                                const PlanOptions& options = {});

// The methods one by one, for tests and benchmarks, on buffers that pass check_buffers
// and check_total_bytes.
// Each returns offsets (valid, aligned) and runs to the end, however long that takes
// (plan_skyline: unless given a time limit).
std::vector<size_t> plan_paper_rules(const std::vector<PlanBuffer>& buffers, size_t alignment = 1);
// plan_greedy_by_size: largest first, each at the lowest offset where it fits; buffers of
// one size the longest lived first (TFLite's), the latest to end first, or the earliest to
// start first (Note [Greedy's ties] in plan.cc). plan() runs all three, on 1,000 buffers or
// more with repairs: at the end of each size, where the placed buffers stand above their
// own lower bound, a search re-plans a window of time around those on top (Note [Greedy's
// repairs]).
enum class GreedyTies { kLongestFirst, kLatestEndFirst, kEarliestStartFirst };
std::vector<size_t> plan_greedy_by_size(const std::vector<PlanBuffer>& buffers, size_t alignment = 1,
                                        GreedyTies ties = GreedyTies::kLongestFirst, bool repair = false);
// plan_improved: local improvement (Note [Local improvement] in plan.cc) of the valid plan
// `start` for `time_limit_sec` seconds or max_moves moves (0: no limit), whichever ends
// first; moves_kept (when given) set to the moves it kept. A valid plan whose peak is at
// most start's; with max_moves reached first, the same plan on every run.
std::vector<size_t> plan_improved(const std::vector<PlanBuffer>& buffers, const std::vector<size_t>& start,
                                  size_t alignment, double time_limit_sec, int64_t max_moves = 0,
                                  int64_t* moves_kept = nullptr);
// plan_skyline: the skyline descent with the search's first preorder (see docs/tma.md).
// Given a time limit (seconds), the buffers still unplaced when it passes go at their
// floors in rank order: a valid plan whatever the limit (plan() keeps what it gives).
std::vector<size_t> plan_skyline(const std::vector<PlanBuffer>& buffers, size_t alignment = 1,
                                 double time_limit_sec = -1);

// peak_of: max over i of offsets[i] + buffers[i].size (0 for none).
size_t peak_of(const std::vector<PlanBuffer>& buffers, const std::vector<size_t>& offsets);

// MiniMalloc CSV: a header naming id, lower, upper and size (any order; an offset column
// is read too when present), then one buffer per line. Ids are strings, unique; lower,
// upper, size and offset are int64. Errors name the file and the line, among them sizes
// that fail check_total_bytes at `alignment` and an offset + size past INT64_MAX.
struct CsvProblem {
  std::vector<PlanBuffer> buffers;  // id: the id's value when it is an integer, else the buffer's index
  std::vector<size_t> offsets;      // filled only when the file has an offset column
  std::vector<std::string> ids;     // the id column as written (trimmed), one per buffer
};
absl::StatusOr<CsvProblem> read_minimalloc_csv(const std::string& path, size_t alignment = 1);
// write_minimalloc_csv: id,lower,upper,size,offset; written to PATH.tmp, flushed to disk
// and renamed over PATH, so a failure leaves no half-written file. `ids`, when given, are
// written in place of the buffers' integer ids. InvalidArgument, before anything is
// written, for a value read_minimalloc_csv could not take back: an offset + size past
// INT64_MAX, an id that is empty, has a comma, a line break or surrounding spaces.
absl::Status write_minimalloc_csv(const std::string& path, const std::vector<PlanBuffer>& buffers,
                                  const std::vector<size_t>& offsets,
                                  const std::vector<std::string>& ids = {});

}  // namespace mtc::alloc
