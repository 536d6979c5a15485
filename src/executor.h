// Executor: the interpreter's worker side. It executes commands against the device: an
// ApplyOp in the steps of docs/design.md (pin the inputs and regenerate evicted ones,
// allocate the outputs in the compute region, run the kernel from the op's kernel table
// and time it, record the outputs' compute paths). DTE's decisions and bookkeeping are
// the eviction engine's (evict/engine.h), which keeps the tensor records; the executor
// calls it at those steps and serves it as its evict::Host: memory, copies, and the op
// runs of recomputes. Only the worker thread (or, in synchronous mode, the thread
// holding the interpreter's sync lock) touches it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "alloc/tma.h"
#include "commands.h"
#include "device.h"
#include "evict/engine.h"
#include "evict/record.h"
#include "mtc/evict_options.h"
#include "mtc/interpreter.h"

namespace mtc {

class TraceWriter;
class ChromeTrace;

struct ExecutorOptions {
  EvictOptions evict;
  std::shared_ptr<TraceWriter> trace;  // records the op stream when set
  // simulate: replay (mtc-replay): no kernel runs and no byte moves; an op costs its
  // OpDef::recorded_us and a swap bytes / bytes_per_us. The device is a virtual one.
  bool simulate = false;
  double bytes_per_us = 0;  // gamma to use instead of measuring it (0: measure)
  TmaConfig tma;            // planned offsets for transient tensors (off unless enabled)
  std::shared_ptr<ChromeTrace> chrome;  // the timeline, when set
};

class Executor final : private evict::Host {
 public:
  Executor(Device& device, ExecutorOptions opts);
  ~Executor() override;

  absl::Status execute(Put& c);
  absl::Status execute(ApplyOp& c);
  absl::Status execute(Del& c);
  absl::Status execute(MakeGradient& c);
  absl::Status execute(Mark& c);
  absl::Status execute(GetValue& c);
  // set_observer: f is told of each program op's run and time (Interpreter::set_op_observer).
  void set_observer(OpObserver f) { observer_ = std::move(f); }
  // close_trace: finishes the trace file and the Chrome trace, those being written.
  absl::Status close_trace();
  // score_tuning: what tuning DTE's score after the first two iterations found, in one
  // line (describe_tuning; Note [Tuning the score] in src/trace/replay.cc); "" until then,
  // or when it did not tune.
  const std::string& score_tuning() const { return tuning_; }

  Device& device() { return device_; }
  const absl::node_hash_map<uint64_t, TensorRecord>& records() const { return engine_.records(); }
  uint64_t op_clock() const { return engine_.clock(); }
  // evict_stats: DTE's totals; on an asynchronous device it first waits for the op
  // timings still in flight, so compute and recompute times are complete.
  const EvictStats& evict_stats() {
    collect_timers(/*wait=*/true);
    return engine_.stats();
  }
  const EvictOptions& evict_options() const { return opts_; }
  // pinned_bytes: the resident bytes pinned by the ops being run (and their
  // regenerations), now and at most.
  const PinnedBytes& pinned_bytes() const { return engine_.pinned(); }
  size_t budget() const;  // m*, bytes

  // Request: what an allocation is for; the out-of-memory message accounts by it.
  enum class Request : uint8_t { kOther, kOutput, kScratch };
  // allocate: a block of the compute region, evicting unpinned tensors while the request
  // would exceed the budget or finds no free block. `who` names the request in errors,
  // which say which limit bound (the budget m* or the region) and where the held bytes
  // are. Best fit (or TMA's planned offset); `lowest`: first fit, for persistent tensors,
  // which docs/design.md keeps packed at the region's low end.
  absl::StatusOr<alloc::Block> allocate(size_t bytes, const std::function<std::string()>& who,
                                        bool lowest = false, Request request = Request::kOther);
  // comm_span: a collective's run on the Chrome trace's comm track (KernelContext::comm_span).
  void comm_span(const char* name, size_t bytes, std::chrono::steady_clock::time_point start,
                 std::chrono::steady_clock::time_point end);
  // free_compute: returns a block to the compute region (and tells TMA).
  void free_compute(alloc::Block b) override;
  // tma_stats: TMA's figures (all zero when TMA is off).
  alloc::TmaStats tma_stats() const { return tma_ ? tma_->stats() : alloc::TmaStats{}; }

 private:
  // OpFrame: an op being run, by execute(ApplyOp) or, nested in it, by rerun (a
  // recompute); what the out-of-memory message counts as the op's own demand. On the
  // stack of frames_.
  struct OpFrame {
    std::span<TensorRecord* const> inputs;
    const OpDef* op = nullptr;            // recorded_scratch(): a replayed op's scratch to come
    std::span<const TensorDesc> outputs;  // all its outputs
    size_t outputs_held = 0;              // of those, allocated so far
    size_t scratch_held = 0;              // scratch allocated so far
  };
  // out_of_memory: the error of a request of `size` (rounded) bytes that eviction could not
  // make room for, naming the limit that bound and the advice for it.
  absl::Status out_of_memory(size_t size, const std::function<std::string()>& who, Request request) const;
  // run: executes path's op on resident inputs into `outs`, timing it: *us is the host
  // time; on an asynchronous device it is 0, and the op's time reaches path->compute_us
  // and the stats when its timer is collected. `key`: run_key's, for the same views.
  absl::Status run(const std::shared_ptr<ComputePath>& path, std::span<const TensorView> ins,
                   std::span<const TensorView> outs, uint64_t key, bool recomputing, double* us);
  // run_key: op_time_key of an op run, computed once for room_for_scratch and run, where
  // they read it (a real device with eviction on, or asynchronous kernels); else 0.
  uint64_t run_key(const OpDef& op, std::span<const TensorView> ins, std::span<const TensorView> outs) const;
  std::byte* data(const TensorRecord& r) override {
    return r.in_comm ? device_.comm_ptr(r.block) : device_.compute_ptr(r.block);
  }

  // evict::Host: what the engine asks of the executor.
  alloc::Region& compute_region() override { return device_.compute_region(); }
  alloc::Region& comm_region() override { return device_.comm_region(); }
  std::byte* compute_ptr(alloc::Block b) override { return device_.compute_ptr(b); }
  absl::StatusOr<alloc::Block> claim(size_t bytes, const std::function<std::string()>& who,
                                     evict::Claim why) override;
  // DTE's copies (swaps, compaction's moves), each a span on the Chrome trace's copy track.
  absl::Status copy_to_device(void* dst, const void* src, size_t bytes) override;
  absl::Status copy_to_host(void* dst, const void* src, size_t bytes) override;
  absl::Status copy_on_device(void* dst, const void* src, size_t bytes) override;
  std::byte* alloc_host(size_t bytes) override { return device_.alloc_host(bytes); }
  void free_host(std::byte* p) override { device_.free_host(p); }
  absl::Status swap_out(void* host, const void* src, size_t bytes) override;
  absl::Status swap_in(void* dst, const void* host, size_t bytes) override;
  bool copies_async() const override { return device_.copies_async(); }
  absl::Status synchronize() override { return device_.synchronize(); }
  absl::StatusOr<alloc::Block> move_compute(alloc::Block b, size_t offset) override;
  absl::Status rerun(const std::shared_ptr<ComputePath>& path, std::span<TensorRecord* const> ins,
                     Pins& pins, evict::Rerun& out) override;
  const char* op_name(const ComputePath& path) override;

  Device& device_;
  EvictOptions opts_;
  std::shared_ptr<TraceWriter> trace_;
  // tune_trace_: the first kScoreTuneIterations iterations, recorded in memory for tuning
  // DTE's score; iteration_marks_: the "iteration" marks executed so far.
  std::shared_ptr<TraceWriter> tune_trace_;
  int iteration_marks_ = 0;
  std::string tuning_;
  void tune_score_now();
  // room_for_scratch: before op's kernel runs, while its inputs may still move, a block for
  // each scratch request it made last time (the recorded ones in a replay) is taken and
  // given back. Note [Room for scratch]
  void room_for_scratch(const OpDef& op, uint64_t key);  // key: run_key's
  void remember_scratch(uint64_t key);  // scratch_sizes_[key] = last_scratch_
  // traced: f(writer) for the trace file and the in-memory record, those being written.
  template <class F>
  void traced(F&& f) {
    if (trace_) f(*trace_);
    if (tune_trace_) f(*tune_trace_);
  }
  std::shared_ptr<ChromeTrace> chrome_;
  // close_chrome: the budget line's last point, the regions' counters unhooked, the file
  // finished (close_trace, the destructor).
  absl::Status close_chrome();
  uint64_t chrome_evictions_ = 0;  // drops + swaps last written to the Chrome trace
  // chrome_tensors: writes the "tensors" counter (the compute region's tensors by kind)
  // when it or the region's allocated bytes changed since the last one written.
  void chrome_tensors();
  std::optional<std::pair<evict::TensorBytes, size_t>> chrome_tensors_;
  bool simulate_;
  std::vector<OpFrame*> frames_;  // the ops being run, innermost last
  // Op timings in flight on an asynchronous device (Device::start_timer): the compute
  // path whose compute_us they set, and whether the run was a recompute.
  struct PendingTimer {
    std::weak_ptr<ComputePath> path;
    bool recompute = false;
    uint64_t key = 0;   // op_time_key of the run
    double work = 0;    // its cost's flops plus bytes (the fallback rate's unit)
    // For the observer, when one is set: the op and its descriptions and output ids.
    std::shared_ptr<const OpDef> op;
    absl::InlinedVector<TensorDesc, 4> in, out;
    absl::InlinedVector<uint64_t, 2> out_ids;
  };
  absl::flat_hash_map<uint64_t, PendingTimer> pending_timers_;
  std::vector<std::pair<uint64_t, double>> timers_done_;
  void collect_timers(bool wait);
  // Note [Provisional op times]: on an asynchronous device, an op's time until its own
  // timing arrives: the last measured run with the same key (the op and its input and
  // output shapes), else its work at the rate measured so far.
  static uint64_t op_time_key(const OpDef& op, std::span<const TensorView> ins, std::span<const TensorView> outs);
  double provisional_us(uint64_t key, double work) const;
  static constexpr size_t kMaxOpTimes = size_t{1} << 16;
  // key -> the scratch requests of the op's last run (eviction on, a real device; cleared
  // past kMaxOpTimes keys): what room_for_scratch makes room for.
  absl::flat_hash_map<uint64_t, absl::InlinedVector<size_t, 2>> scratch_sizes_;
  absl::flat_hash_map<uint64_t, double> op_times_;  // key -> last measured microseconds
  double timed_us_ = 0, timed_work_ = 0;            // the measured runs' totals
  double last_provisional_us_ = 0;                  // the last op run's, for its path
  OpObserver observer_;      // empty unless set
  uint64_t last_timer_ = 0;  // the timer of the last op run (the observer's, asynchronous)
  absl::InlinedVector<size_t, 2> last_scratch_;  // the scratch requests of the last kernel run
  std::unique_ptr<alloc::Tma> tma_;  // null when TMA is off
  uint64_t op_key_ = 0;              // what is allocating now, for TMA's signatures
  bool saw_iteration_mark_ = false;  // TMA's boundaries: "iteration" marks, else "step"
  // DTE. Declared last: its constructor may measure gamma through this executor's
  // memory (and TMA), which must be set up by then.
  evict::Engine engine_;
};

}  // namespace mtc
