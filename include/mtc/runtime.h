// Runtime: a device, its arena and the interpreter that runs on it, for one rank.
// Ops that take no tensor inputs (zeros, from_vector, ...) run on the current runtime:
// the one created last, or the one made current.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mtc/interpreter.h"

namespace mtc {

enum class DeviceType : uint8_t;
class Device;

struct RuntimeOptions {
  std::string device = "cpu";  // cpu | cuda
  int device_ordinal = 0;
  // memory_bytes: the arena, m = m1 + m2. 0 picks a default: a quarter of physical memory
  // on the CPU (capped at 16 GiB), 90% of free device memory on a GPU.
  size_t memory_bytes = 0;
  // memory_share: processes sharing this device (ranks on one node's CPU, or on one GPU);
  // the default memory_bytes is divided by it, so that together they take the default.
  int memory_share = 1;
  // comm_bytes: m1, the comm/gradient region. 0 picks 1/16 of the arena.
  size_t comm_bytes = 0;
  // num_threads: CPU kernel threads; 0: OMP_NUM_THREADS, else every core this process may
  // run on (its CPU affinity) divided by memory_share.
  int num_threads = 0;
  bool synchronous = false;
  uint64_t seed = 0;  // seeds random ops (dropout) and parameter initialisation
  // DTE. evict.budget_bytes is m* in bytes; budget_fraction, when > 0, sets it instead as a
  // fraction of the compute region once the region's size is known. create() refuses an
  // m* above the compute region.
  EvictOptions evict;
  double budget_fraction = 0;
  // trace_path: record the executed op stream there (docs/trace-format.md); empty: none.
  std::string trace_path;
  // chrome_trace_path: write the run's timeline there as a Chrome trace (op spans, the
  // regions' bytes, the budget, evictions; docs/metrics.md); empty: none.
  std::string chrome_trace_path;
  int chrome_trace_pid = 0;  // the process id its events carry (the rank)
  TmaConfig tma;  // planned offsets for transient tensors (docs/tma.md)
};

class Runtime {
 public:
  static absl::StatusOr<std::unique_ptr<Runtime>> create(const RuntimeOptions& opts);
  ~Runtime();

  Interpreter& interpreter() { return *interp_; }
  const std::shared_ptr<Interpreter>& interpreter_ptr() { return interp_; }
  Device& device();
  const RuntimeOptions& options() const { return opts_; }
  // budget_bytes: m* as resolved at creation (a fraction made bytes); 0: no budget.
  size_t budget_bytes() const { return budget_bytes_; }

  // current: the runtime for ops without tensor inputs. Aborts if none exists.
  static Runtime& current();
  void make_current();
  // next_seed: a fresh seed for one random op, from a counter-based stream of opts.seed.
  uint64_t next_seed();
  // seed_counter / set_seed_counter: how many seeds next_seed has given (a checkpoint
  // saves it, so that a resumed run's random ops draw what the whole run's would).
  uint64_t seed_counter() const { return seed_counter_.load(); }
  void set_seed_counter(uint64_t n) { seed_counter_.store(n); }

 private:
  explicit Runtime(const RuntimeOptions& o) : opts_(o) {}
  RuntimeOptions opts_;
  std::shared_ptr<Device> device_;
  std::shared_ptr<Interpreter> interp_;
  std::atomic<uint64_t> seed_counter_{0};
  size_t budget_bytes_ = 0;
};

// parse_bytes: "512MiB", "2GiB", "1.5G", "1000000" -> bytes; an error names the text.
absl::StatusOr<size_t> parse_bytes(const std::string& text);

// Budget: DTE's m* as written in a tool's --budget, the same syntax in every tool:
//   none          no budget: evict only when an allocation does not fit the region
//   300MiB, 1B    bytes; the unit is required (B, KiB, MiB, GiB, TiB; K, M, G, T)
//   30%           a share of the compute region m2
//   30%peak       a share of the run's peak without eviction (mtc-replay, which knows it)
// A bare number ("0.3", "1") is refused: it could mean bytes or a fraction.
struct Budget {
  enum class Kind { kNone, kBytes, kRegionShare, kPeakShare };
  Kind kind = Kind::kNone;
  size_t bytes = 0;   // kBytes
  double share = 0;   // kRegionShare, kPeakShare: in (0, 1]
  std::string text;   // as written
};
// parse_budget: one budget; InvalidArgument naming the text and the accepted forms.
absl::StatusOr<Budget> parse_budget(const std::string& text);
// resolve_budget: m* in bytes (0: none) for a compute region of `region` bytes and, for
// kPeakShare, a peak of `peak` bytes (0: not known, an error). An m* above the region is
// InvalidArgument: the region bounds every allocation, so such a budget means nothing.
absl::StatusOr<size_t> resolve_budget(const Budget& b, size_t region, size_t peak = 0);

}  // namespace mtc
