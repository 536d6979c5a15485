// Trace replay: reads a JSON-lines trace (docs/trace-format.md) and runs it through the
// executor's own eviction and allocator code on a virtual device: regions of the recorded
// sizes at made-up addresses, no kernels, no bytes moved. An op costs its recorded time,
// a swap bytes / gamma. mtc-replay prints, per budget, the overhead
// (compute + recompute + swap) / compute, the peak and whether it ran out of memory.
#pragma once

#include <cstdint>
#include <deque>
#include <istream>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "mtc/evict_options.h"
#include "mtc/interpreter.h"
#include "mtc/tensor.h"
#include "trace/trace_writer.h"

namespace mtc {

class OpDef;

// TraceEvent: one line of a trace after the header.
struct TraceEvent {
  enum class Kind : uint8_t { kPut, kOp, kRelease, kShare, kGradient, kRead, kMark };
  Kind kind;
  uint64_t id = 0;                       // put, release, share (the new handle), gradient, read
  uint64_t of = 0;                       // share: the tensor the new handle names
  TensorDesc desc;                       // put
  bool persistent = false;               // put
  bool recomputable = true;              // op: false for "recompute":false
  std::shared_ptr<const OpDef> op;       // op: carries name, recorded time, outputs, mutation
  std::vector<uint64_t> in, out;         // op
  std::vector<std::pair<int, int>> aliases;  // op: (output, input) sharing storage
  std::string mark;                      // mark
  int64_t index = 0;                     // mark
  int64_t line = 0;                      // the line of the file (1: the header); 0: none
};

struct Trace {
  TraceHeader header;
  std::vector<TraceEvent> events;
  // Complete iterations: the "iteration" marks, less the last one when the trace ends
  // inside that iteration.
  int iterations = 0;
  // Whether the trace ends inside its last iteration (a run killed mid-iteration):
  // replay() stops at that iteration's mark, so it is neither run nor counted.
  bool last_iteration_complete = true;
  int cut_iteration = 0;  // that iteration (1 for the first "iteration" mark), when not complete
  std::string cut_short;  // why it counts as incomplete, when it does
};

// load_trace: parses FILE; a malformed line is InvalidArgument naming the file, the line
// number and what was expected: a last line cut short (no newline, not valid JSON), a
// tensor id that no earlier line made or that a line released, another format version.
// Whether the last iteration is complete is decided as docs/trace-format.md says.
absl::StatusOr<Trace> load_trace(const std::string& path);
// parse_trace: the same from a stream; errors name `name` where load_trace names the file.
absl::StatusOr<Trace> parse_trace(std::istream& in, const std::string& name);

struct ReplayResult {
  size_t budget_bytes = 0;  // 0: none
  size_t region_bytes = 0;  // the compute region replayed
  bool out_of_memory = false;
  bool capped = false;      // stopped by EvictOptions::max_overhead_us
  std::string error;        // why it stopped, when it did
  int counted_iterations = 0;
  double compute_us = 0, recompute_us = 0, swap_us = 0, search_us = 0, move_us = 0;  // counted iterations
  size_t peak_bytes = 0;    // compute region, whole replay
  size_t peak_pinned_bytes = 0;  // resident and pinned at once, whole replay
  double total_compute_us = 0;   // every iteration's program ops, counted or not
  EvictStats stats;         // counted iterations
  // tuned: policy mtc chose its score by replaying the warm-up iterations (Note [Tuning
  // the score] in replay.cc); score: the one it kept; tuning: what each candidate replayed
  // (describe_tuning's line, as mtc-train prints it).
  bool tuned = false;
  EvictOptions score;
  std::string tuning;
  double overhead() const {
    return compute_us > 0 ? (compute_us + recompute_us + swap_us + move_us) / compute_us : 0;
  }
  // failed: it ran out of memory or passed the cap (what tuning never keeps).
  bool failed() const { return out_of_memory || capped; }
};

// replay: runs the trace under `evict` (its budget_bytes is m*; 0: the region's size) on
// a compute region of region_bytes (0: the trace's). Iterations 1..skip are run but not
// counted (warm-up, as mtc-train's); a last iteration the trace ends inside is not run.
// Under policy mtc with evict.tune (and not reproducible) and skip >= 1, the score is
// first tuned over iterations 1..skip (tune_score) and the whole trace replayed under the
// one kept. Running out of memory, or past evict.max_overhead_us, is a result, not an
// error; a trace that names unknown tensors is an error naming the event's line.
absl::StatusOr<ReplayResult> replay(const Trace& trace, const EvictOptions& evict, int skip,
                                    size_t region_bytes = 0);

// score_candidates: the scores tuning tries, given first: in drop mode given, given
// without beta^ret, DTR's weighting (no beta^ret, no free neighbours: there the dtr
// policy's score); with swaps allowed given, DTR's weighting, given without beta^ret, and
// the dtr policy itself (Note [Tuning the score]); duplicates left out; tune off.
std::vector<EvictOptions> score_candidates(const EvictOptions& given);

// kScoreTuneIterations: the runtime tunes its score once this many iterations are done.
// The first alone did not foretell the rest: the optimizer's state appears at its end, and a score
// that trained ViT-tiny's first iteration at 20% of its peak ran out of memory in the
// second (docs/dte.md, "Tuning the score").
inline constexpr int kScoreTuneIterations = 2;

// kTuneVariants, kTuneJitter: tuning replays each candidate on the recorded iterations
// and on kTuneVariants copies whose op times are each scaled by a factor drawn uniformly
// from [1 - kTuneJitter, 1 + kTuneJitter] (jittered, seeds 1..kTuneVariants): op times
// move by about that much from one iteration to the next, and a score that wins only at
// the recorded times foretells nothing (Note [Tuning the score]).
inline constexpr int kTuneVariants = 4;
inline constexpr double kTuneJitter = 0.1;

// jittered: a copy of trace whose every op time is scaled by 1 + amp·u, u uniform in
// [-1, 1], drawn in event order from a generator seeded with `seed`; nothing else differs.
Trace jittered(const Trace& trace, double amp, uint64_t seed);

// TunedCandidate: one candidate score and its replays of the tuning iterations: [0] on the
// recorded op times, then one per jittered copy (the same copies for every candidate).
struct TunedCandidate {
  EvictOptions score;
  std::vector<ReplayResult> replays;
  int failed() const;                // replays out of memory or capped
  double mean_overhead() const;      // over the replays that trained; 0 if none did
};

struct ScoreTuning {
  EvictOptions chosen;  // the candidate keep_candidate picked (given when none competes)
  std::vector<TunedCandidate> tried;  // in score_candidates' order
};

// keep_candidate: the index tune_score keeps among score_candidates' order. Only the
// candidates that failed (out of memory or capped) in the fewest replays compete, none
// that failed in all. The last that competes is kept unless an earlier one beats it, and
// that one unless a still earlier one beats it, and so on. a beats b: a's mean overhead is
// more than 2% below b's and a has less overhead in every replay but at most one, the
// replays paired by copy (one where only b failed is a win for a, one where only a failed
// rules a out). tried.size() when none competes.
size_t keep_candidate(std::span<const TunedCandidate> tried);

// tune_score: replays iterations 1..iterations of trace, counting the last, under each of
// score_candidates(given), on the trace and on kTuneVariants jittered copies of it, and
// keeps the one keep_candidate picks (given, tune off, when none competes). Note [Tuning
// the score]
absl::StatusOr<ScoreTuning> tune_score(const Trace& trace, const EvictOptions& given, int iterations,
                                       size_t region_bytes = 0);

// describe_score: "beta 1.25^min(ret, 4), free neighbours counted" and the like.
std::string describe_score(const EvictOptions& o);

// describe_tuning: the one line mtc-train prints: "kept SCORE in S s (replayed, mean of 5:
// SCORE: 1.187x; SCORE: 1.203x (1 of 5 oom/cap); SCORE: oom/cap; ...)", each candidate's
// mean overhead over its replays that trained; sec being the time the tuning took.
std::string describe_tuning(const ScoreTuning& t, double sec);

// tunes_score: whether policy o tunes its score (policy mtc, tune on, not reproducible:
// the replay reads measured times). The runtime also needs a synchronous device.
inline bool tunes_score(const EvictOptions& o) {
  return o.policy == EvictPolicy::kMtc && o.tune && !o.reproducible;
}

}  // namespace mtc
