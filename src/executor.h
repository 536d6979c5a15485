// Executor: the interpreter's worker side. It owns the tensor records and executes
// commands against the device: allocates outputs in the compute region, runs kernels from
// the op's kernel table, times them and records compute paths. It is also where DTE acts:
// it keeps the compute region under the budget by evicting tensors (swapping them to host
// memory or dropping them), chosen by evict::EvictionCost, and regenerates evicted inputs
// before an op runs (swap in, or recompute along the compute path, recursively). Only the
// worker thread (or, in synchronous mode, the thread holding the interpreter's sync lock)
// touches it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "alloc/tma.h"
#include "commands.h"
#include "device.h"
#include "evict/cost.h"
#include "evict/evicted_classes.h"
#include "mtc/evict_options.h"
#include "mtc/interpreter.h"
#include "tensor_record.h"

namespace mtc {

class TraceWriter;

struct ExecutorOptions {
  EvictOptions evict;
  std::shared_ptr<TraceWriter> trace;  // records the op stream when set
  // simulate: replay (mtc-replay): no kernel runs and no byte moves; an op costs its
  // OpDef::recorded_us and a swap bytes / bytes_per_us. The device is a virtual one.
  bool simulate = false;
  double bytes_per_us = 0;  // gamma to use instead of measuring it (0: measure)
  TmaConfig tma;            // planned offsets for transient tensors (off unless enabled)
};

// Pins: pins records for the life of an op's run, unpinning on every path out.
class Pins {
 public:
  ~Pins() {
    for (TensorRecord* r : pinned_) --r->pin_count;
  }
  void add(TensorRecord* r) {
    ++r->pin_count;
    pinned_.push_back(r);
  }
 private:
  absl::InlinedVector<TensorRecord*, 4> pinned_;
};

class Executor {
 public:
  Executor(Device& device, ExecutorOptions opts);
  ~Executor();

  absl::Status execute(Put& c);
  absl::Status execute(ApplyOp& c);
  absl::Status execute(Del& c);
  absl::Status execute(MakeGradient& c);
  absl::Status execute(Mark& c);
  absl::Status execute(GetValue& c);
  // close_trace: finishes the trace file, if one is being written.
  absl::Status close_trace();

  Device& device() { return device_; }
  const absl::node_hash_map<uint64_t, TensorRecord>& records() const { return records_; }
  uint64_t op_clock() const { return op_clock_; }
  // evict_stats: DTE's totals; on an asynchronous device it first waits for the op
  // timings still in flight, so compute and recompute times are complete.
  const EvictStats& evict_stats() {
    collect_timers(/*wait=*/true);
    return stats_;
  }
  const EvictOptions& evict_options() const { return opts_; }
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
  // free_compute: returns a block to the compute region (and tells TMA).
  void free_compute(alloc::Block b);
  // tma_stats: TMA's figures (all zero when TMA is off).
  alloc::TmaStats tma_stats() const { return tma_ ? tma_->stats() : alloc::TmaStats{}; }

 private:
  // OpFrame: an op being run, by execute(ApplyOp) or, nested in it, by recompute; what
  // the out-of-memory message counts as the op's own demand. On the stack of frames_.
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
  absl::Status ensure_resident(TensorRecord& r);
  absl::Status make_resident(std::span<TensorRecord* const> ins, Pins& pins);  // Note [Regeneration order]
  absl::Status recompute(TensorRecord& r);
  // run: executes path's op on resident inputs into `outs`, timing it: *us is the host
  // time; on an asynchronous device it is 0, and the op's time reaches path->compute_us
  // and the stats when its timer is collected.
  absl::Status run(const std::shared_ptr<ComputePath>& path, std::span<const TensorView> ins,
                   std::span<const TensorView> outs, bool recomputing, double* us);
  bool evict_one(bool fragmented);
  void consider(TensorRecord* r, bool fragmented, TensorRecord*& best, evict::Score& best_score);
  // waiting_pins: how many of r's pins are waiting pins (Note [Regeneration order]).
  uint32_t waiting_pins(const TensorRecord& r) const;
  void unwait(const TensorRecord& r);
  bool droppable(const TensorRecord& r) const;
  void drop(TensorRecord& r);
  bool feeds_dropped(const TensorRecord& r) const;  // Note [Fake delete]
  bool feeds(const TensorRecord& r, bool count_evictable, bool otherwise) const;
  void rebuild_classes();
  absl::Status swap_out(TensorRecord& r);
  void set_resident(TensorRecord& r, alloc::Block b);
  void release_storage(TensorRecord& r);
  void add_candidate(TensorRecord& r);
  void remove_candidate(TensorRecord& r);
  void erase_record(uint64_t id);  // and, in cascade, inputs nothing needs any more
  // cut_producer: r stops being recomputable (it became a gradient, or was mutated in
  // place); its sources lose it as a user and are erased if nothing else needs them.
  void cut_producer(TensorRecord& r);
  std::byte* data(const TensorRecord& r) const {
    return r.in_comm ? device_.comm_ptr(r.block) : device_.compute_ptr(r.block);
  }
  absl::Status snapshot_before_mutation(TensorRecord& x);  // Note [Copy on mutate]
  void measure_bandwidth();
  void note_swap_copy(size_t bytes, double us);
  std::unique_ptr<std::byte[]> take_host_buffer(size_t bytes);
  void give_host_buffer(size_t bytes, std::unique_ptr<std::byte[]> b);
  TensorRecord* find(uint64_t id) {
    auto it = records_.find(id);
    return it == records_.end() ? nullptr : &it->second;
  }

  Device& device_;
  EvictOptions opts_;
  std::shared_ptr<TraceWriter> trace_;
  bool simulate_;
  evict::EvictionCost cost_;
  evict::EvictedClasses classes_;
  absl::node_hash_map<uint64_t, TensorRecord> records_;
  std::vector<TensorRecord*> candidates_;  // resident, evictable, not below the size floor
  std::vector<OpFrame*> frames_;           // the ops being run, innermost last
  // Regenerated inputs waiting for their op's other inputs, with how many of their pins
  // are such waiting pins (Note [Regeneration order] in executor.cc).
  absl::flat_hash_map<const TensorRecord*, uint32_t> waiting_pins_;
  std::mt19937_64 sample_rng_{0x5eed};
  double bytes_per_us_ = 0;  // gamma: host <-> device copy bandwidth (see note_swap_copy)
  bool refine_gamma_ = false;  // gamma was measured at start-up, so swaps may refine it
  double copied_bytes_ = 0, copied_us_ = 0;  // real swap copies so far, both directions
  uint64_t op_clock_ = 0;    // ApplyOps executed so far: the staleness clock
  static constexpr uint64_t kSnapshotIdBase = uint64_t{1} << 62;  // above any handle's id
  uint64_t next_snapshot_ = 0;
  EvictStats stats_;
  // Op timings in flight on an asynchronous device (Device::start_timer): the compute
  // path whose compute_us they set, and whether the run was a recompute.
  struct PendingTimer {
    std::weak_ptr<ComputePath> path;
    bool recompute = false;
  };
  absl::flat_hash_map<uint64_t, PendingTimer> pending_timers_;
  std::vector<std::pair<uint64_t, double>> timers_done_;
  void collect_timers(bool wait);
  std::multimap<size_t, std::unique_ptr<std::byte[]>> host_pool_;  // Note in take_host_buffer
  size_t host_pool_bytes_ = 0;
  absl::InlinedVector<size_t, 2> last_scratch_;  // the scratch requests of the last kernel run
  size_t swapped_now_ = 0, swapped_high_ = 0;  // bytes swapped out at present, at most
  std::unique_ptr<alloc::Tma> tma_;  // null when TMA is off
  uint64_t op_key_ = 0;              // what is allocating now, for TMA's signatures
  bool saw_iteration_mark_ = false;  // TMA's boundaries: "iteration" marks, else "step"
};

}  // namespace mtc
