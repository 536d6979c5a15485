// Interpreter: one per rank. User threads enqueue commands (Put, ApplyOp, Del, GetValue)
// into a multi-producer single-consumer queue; one worker thread executes them against
// the device. apply() infers output shapes on the caller's thread and returns handles at
// once. An error raised in the worker is kept and surfaces at the next synchronising call
// (get_value, sync, memory_stats) with the op's name and shapes.
//
// Set MTC_INTERP_SYNC=1 (or InterpreterOptions::synchronous) to execute each command on
// the calling thread as it is issued: the debugging mode.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mtc/evict_options.h"
#include "mtc/tensor.h"

namespace mtc {

class OpDef;
class Device;
struct Command;
class Executor;

class TraceWriter;
class ChromeTrace;

// TmaConfig: TMA, planned offsets for the compute region's transient tensors
// (docs/tma.md). Iteration boundaries are "iteration" marks, else the optimizer's "step".
struct TmaConfig {
  bool enabled = false;
  int warmup_iterations = 5;         // iterations traced before the first plan
  double plan_time_limit_sec = 1.0;  // the planner's limit per signature
  int max_plans = 32;                // plans kept; past it the least recently seen goes
  // problem_path: when set, each plan's problem (its transient buffers) and the offsets
  // planned for them are written there as a MiniMalloc CSV, for mtc-plan and the planner's
  // benchmarks: the first plan to PATH, the k-th to PATH.k (mtc-train --tma_problem).
  std::string problem_path;
};

// TmaFigures: what TMA has done since the interpreter started.
struct TmaFigures {
  uint64_t iterations = 0, planned_iterations = 0;
  uint64_t hits = 0, misses = 0;           // requests in planned iterations
  uint64_t plans = 0, plan_failures = 0;   // plans made; iterations whose plan fitted no free block whole
  uint64_t cache_hits = 0, cache_lookups = 0;  // iterations after the warm-up
  double plan_sec = 0;
  double max_plan_sec = 0;  // the longest one plan took
  size_t last_plan_peak = 0, last_plan_lower_bound = 0;
  uint64_t plans_evicted = 0;  // for TmaConfig::max_plans, least recently seen first
  size_t plans_cached = 0;     // plans held now
  size_t cache_bytes = 0;      // host memory they hold now
};

struct InterpreterOptions {
  bool synchronous = false;  // execute on the calling thread (MTC_INTERP_SYNC=1 forces it)
  EvictOptions evict;        // DTE: budget and policy
  std::shared_ptr<TraceWriter> trace;  // records the op stream (mtc-train --record-trace)
  TmaConfig tma;
  std::shared_ptr<ChromeTrace> chrome;  // the timeline (mtc-train --chrome_trace)
};

// EvictStats: what DTE has done since the interpreter started (totals; subtract two
// readings for one iteration's figures). Times in microseconds, sizes in bytes.
struct EvictStats {
  uint64_t ops = 0;              // ops run for the program (not recomputes)
  double compute_us = 0;         // time in those runs
  uint64_t evict_drop = 0;       // tensors dropped (to be recomputed)
  uint64_t evict_swap = 0;       // tensors swapped out to host memory
  uint64_t evict_fragmented = 0; // of those two, made for a request that was within the
                                 // budget but found no free block large enough
  uint64_t recomputes = 0;       // op runs that regenerated dropped tensors
  uint64_t recompute_cycles = 0; // tensors recomputed a second time for one op, then kept
                                 // (Note [Recompute cycles], evict/engine.cc)
  double recompute_us = 0;       // time in those runs
  uint64_t swapped_out_bytes = 0, swapped_in_bytes = 0;
  double swap_us = 0;            // time copying to and from host memory
  uint64_t searches = 0;         // eviction searches
  double search_us = 0;          // time choosing what to evict
  uint64_t compactions = 0;      // requests met by moving resident tensors together
  uint64_t moved_bytes = 0;      // bytes those moves copied within the device
  double move_us = 0;            // time in those copies (Note [Compaction], evict/engine.cc)
};

// MemoryStats: the compute (m2) and comm/gradient (m1) regions, in bytes.
struct RegionFigures {
  size_t capacity = 0, allocated = 0, peak_allocated = 0, high_water = 0, largest_free = 0;
  double fragmentation = 0;
};
struct MemoryStats {
  RegionFigures compute;
  RegionFigures comm;
};

// OpObserver: told of each op run for the program (not a recompute), on the worker thread:
// the op, its inputs' and outputs' descriptions, its output ids and its measured time in
// microseconds (on an asynchronous device, when its timer is collected). DTP's rate fit
// reads the op times through it.
using OpObserver = std::function<void(const OpDef& op, std::span<const TensorDesc> in,
                                      std::span<const TensorDesc> out, std::span<const uint64_t> out_ids, double us)>;

class Interpreter : public std::enable_shared_from_this<Interpreter> {
 public:
  static std::shared_ptr<Interpreter> create(std::shared_ptr<Device> device,
                                             InterpreterOptions opts = {});
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // put: a new tensor holding a copy of `data` (desc.bytes() bytes). persistent tensors
  // (parameters, optimizer state) are never evicted.
  Tensor put(const TensorDesc& desc, const void* data, bool persistent = false);
  // apply: enqueues op on inputs and returns its outputs. A shape error is kept (and the
  // outputs are poisoned) until the next synchronising call reports it.
  TensorList apply(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs);
  // make_gradient: t is a parameter's gradient from now on: it moves to the comm/gradient
  // region when it fits, is never evicted, and the graph it was computed from may go.
  void make_gradient(const Tensor& t);
  // mark: a program boundary for the trace ("iteration", "forward", "backward", "step").
  // Free when nothing needs it (no trace, no TMA, DTE's score not tuned).
  void mark(const char* label, int64_t index = 0);
  // close_trace: finishes the trace file and the Chrome trace (renames FILE.partial to
  // FILE); OK without them.
  absl::Status close_trace();
  // get_value: copies a tensor to host memory (bytes must equal its size). Synchronises.
  absl::Status get_value(const Tensor& t, void* dst, size_t bytes);
  // sync: waits until every command issued so far has run; returns (and clears) the first
  // error since the last synchronising call.
  absl::Status sync();
  // memory_stats: synchronises, then reads the regions' statistics.
  absl::StatusOr<MemoryStats> memory_stats();
  // evict_stats: synchronises, then reads DTE's totals.
  absl::StatusOr<EvictStats> evict_stats();
  // dte_tuning: synchronises, then says what tuning DTE's score found, in one line
  // ("" before the third iteration, or when the score was not tuned: docs/dte.md).
  absl::StatusOr<std::string> dte_tuning();
  // tma_stats: synchronises, then reads TMA's totals (zero when TMA is off).
  absl::StatusOr<TmaFigures> tma_stats();
  // reset_peak: synchronises, then restarts peak tracking from current use.
  absl::Status reset_peak();
  // set_op_observer: synchronises, then installs f (an empty f removes it).
  absl::Status set_op_observer(OpObserver f);
  // record_error: keeps `s` (if it is the first) for the next synchronising call.
  void record_error(absl::Status s);
  // del: the last handle to tensor `id` went away (called by TensorRef).
  void del(uint64_t id);

  Device& device() { return *device_; }
  bool tracing() const { return tracing_; }
  bool synchronous() const { return synchronous_; }
  uint64_t commands_executed() const { return executed_.load(std::memory_order_relaxed); }

 private:
  Interpreter(std::shared_ptr<Device> device, InterpreterOptions opts);
  bool tracing_ = false;
  bool marks_ = false;  // marks are executed: a trace, TMA or DTE's tuning needs them
  void enqueue(Command&& c);
  void worker_loop();
  Tensor make_handle(TensorDesc d);
  TensorList poisoned(std::span<const TensorDesc> descs);

  std::shared_ptr<Device> device_;
  bool synchronous_;
  std::atomic<uint64_t> next_id_{1};
  std::unique_ptr<Executor> executor_;  // worker-owned: tensor records, the kernels' context

  // The queue: producers push under mu_; the worker swaps the whole deque out.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command>* queue_ = nullptr;  // owned; pointer so the header needs no Command
  bool stop_ = false;          // guarded by mu_
  bool worker_waiting_ = false;  // guarded by mu_
  std::thread worker_;
  std::mutex sync_mu_;          // serialises synchronous-mode execution from many threads
  std::atomic<uint64_t> executed_{0};

  std::mutex error_mu_;
  absl::Status first_error_;   // guarded by error_mu_
};

}  // namespace mtc
