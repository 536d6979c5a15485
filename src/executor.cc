// Executes interpreter commands against a device. An ApplyOp runs in the steps of
// docs/design.md ("An op, from the user to the device"); DTE acts in them through its
// engine (evict/engine.h), and this file serves the engine as its evict::Host. See
// executor.h.
#include "executor.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "mtc/status.h"
#include "trace/chrome_trace.h"
#include "trace/replay.h"
#include "trace/trace_writer.h"

namespace mtc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPutKey = 1;  // TMA's op key of a Put (ops are keyed by their schema's address)
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// ScratchContext: kernel scratch carved from the compute region (evicting if it must),
// freed after the kernel.
class ScratchContext final : public KernelContext {
 public:
  ScratchContext(Executor& ex, const OpDef& op, bool recomputing)
      : ex_(ex), op_(op), recomputing_(recomputing) {}
  ~ScratchContext() override {
    for (const alloc::Block& b : blocks_) ex_.free_compute(b);
  }
  absl::StatusOr<void*> scratch(size_t bytes) override {
    auto b = ex_.allocate(bytes, [&] { return absl::StrCat("op ", op_.name(), ": scratch space"); },
                          /*lowest=*/false, Executor::Request::kScratch);
    if (!b.ok()) return b.status();
    blocks_.push_back(*b);
    sizes_.push_back(bytes);
    return static_cast<void*>(ex_.device().compute_ptr(*b));
  }
  const absl::InlinedVector<size_t, 2>& sizes() const { return sizes_; }
  Device& device() override { return ex_.device(); }
  bool recomputing() const override { return recomputing_; }
  void comm_span(const char* name, size_t bytes, std::chrono::steady_clock::time_point start,
                 std::chrono::steady_clock::time_point end) override {
    ex_.comm_span(name, bytes, start, end);
  }

 private:
  Executor& ex_;
  const OpDef& op_;
  bool recomputing_;
  absl::InlinedVector<alloc::Block, 2> blocks_;
  absl::InlinedVector<size_t, 2> sizes_;
};

}  // namespace

Executor::Executor(Device& device, ExecutorOptions o)
    : device_(device),
      opts_(o.evict),
      trace_(std::move(o.trace)),
      chrome_(std::move(o.chrome)),
      simulate_(o.simulate),
      tma_(o.tma.enabled ? std::make_unique<alloc::Tma>(alloc::TmaOptions{
                               .warmup_iterations = o.tma.warmup_iterations,
                               .plan_time_limit_sec = o.tma.plan_time_limit_sec,
                               .max_plans = static_cast<size_t>(o.tma.max_plans),
                               .problem_path = o.tma.problem_path})
                         : nullptr),
      engine_(*this, evict::EngineOptions{.evict = o.evict,
                                          .simulate = o.simulate,
                                          .bytes_per_us = o.bytes_per_us,
                                          .trace = trace_ != nullptr}) {
  if (!simulate_ && tunes_score(opts_) && !device_.async_kernels()) {
    tune_trace_ = TraceWriter::in_memory();  // Note [Tuning the score] in src/trace/replay.cc
  }
  traced([&](TraceWriter& w) {
    w.header(TraceHeader{device_type_name(device_.type()), device_.compute_region().capacity(),
                         device_.comm_region().capacity(), opts_.budget_bytes, engine_.bytes_per_us()});
  });
  if (chrome_) {
    // Every allocation and free moves its region's counter; the budget is a line of its own.
    for (auto [region, name] : {std::pair{&device_.compute_region(), "compute region"},
                                std::pair{&device_.comm_region(), "comm region"}}) {
      chrome_->counter(name, "allocated", static_cast<double>(region->stats().allocated));
      region->set_on_change([c = chrome_.get(), name](size_t bytes) {
        c->counter(name, "allocated", static_cast<double>(bytes));
      });
    }
    chrome_->counter("budget", "m*", static_cast<double>(opts_.budget_bytes));
    chrome_->counter("evictions", "drop + swap", 0);
  }
}

Executor::~Executor() {
  if (trace_) trace_->close().IgnoreError();  // close_trace reports; this only tidies up
  close_chrome().IgnoreError();
  engine_.release_all();
}

namespace {
// traced_copy: copy(), and a span of it on the Chrome trace's copy track when one is written.
template <typename F>
absl::Status traced_copy(ChromeTrace* chrome, const char* what, F&& copy) {
  if (chrome == nullptr) return copy();
  const auto t0 = Clock::now();
  absl::Status s = copy();
  chrome->span(what, "copy", t0, us_since(t0), 2);
  return s;
}
}  // namespace

absl::Status Executor::copy_to_device(void* dst, const void* src, size_t bytes) {
  return traced_copy(chrome_.get(), "host to device", [&] { return device_.copy_to_device(dst, src, bytes); });
}

absl::Status Executor::copy_to_host(void* dst, const void* src, size_t bytes) {
  return traced_copy(chrome_.get(), "device to host", [&] { return device_.copy_to_host(dst, src, bytes); });
}

absl::Status Executor::swap_out(void* host, const void* src, size_t bytes) {
  return traced_copy(chrome_.get(), "device to host", [&] { return device_.swap_out(host, src, bytes); });
}

absl::Status Executor::swap_in(void* dst, const void* host, size_t bytes) {
  return traced_copy(chrome_.get(), "host to device", [&] { return device_.swap_in(dst, host, bytes); });
}

absl::Status Executor::copy_on_device(void* dst, const void* src, size_t bytes) {
  return traced_copy(chrome_.get(), "on device", [&] { return device_.copy_on_device(dst, src, bytes); });
}

void Executor::chrome_tensors() {
  if (!chrome_) return;
  const evict::TensorBytes t = engine_.tensor_bytes();
  const size_t allocated = device_.compute_region().stats().allocated;
  if (chrome_tensors_ == std::pair{t, allocated}) return;
  chrome_tensors_ = std::pair{t, allocated};
  chrome_->counters("tensors", {{"persistent", static_cast<double>(t.persistent)},
                                {"transient", static_cast<double>(allocated - std::min(allocated, t.persistent))},
                                {"swapped", static_cast<double>(t.swapped)},
                                {"dropped", static_cast<double>(t.dropped)}});
}

void Executor::comm_span(const char* name, size_t bytes, std::chrono::steady_clock::time_point start,
                         std::chrono::steady_clock::time_point end) {
  if (!chrome_) return;
  chrome_->span(absl::StrCat(name, " ", alloc::format_bytes(bytes)), "comm", start,
                std::chrono::duration<double, std::micro>(end - start).count(), 3);
}

absl::Status Executor::close_chrome() {
  if (!chrome_) return absl::OkStatus();
  chrome_->counter("budget", "m*", static_cast<double>(opts_.budget_bytes));  // the line runs to the end
  device_.compute_region().set_on_change(nullptr);
  device_.comm_region().set_on_change(nullptr);
  return chrome_->close();  // idempotent: later events are dropped
}

absl::Status Executor::close_trace() {
  absl::Status s = trace_ ? trace_->close() : absl::OkStatus();
  s.Update(close_chrome());
  return s;
}

size_t Executor::budget() const {
  const size_t cap = device_.compute_region().capacity();
  return opts_.budget_bytes == 0 ? cap : std::min(opts_.budget_bytes, cap);
}

// ---- an op ----

absl::Status Executor::execute(ApplyOp& c) {
  const OpDef& op = *c.op;
  engine_.tick();
  // The schema's name: one per op kind.
  op_key_ = alloc::program_op_key(reinterpret_cast<uintptr_t>(op.name()));

  // 1. DTP chooses the op's mode. Nothing to do here: DTP's dispatch (src/dist/dtp.h) ran
  //    on the user's thread, so this op already runs on this rank's shards, and the
  //    conversions its mode needed came before it as ops of their own.

  // 2. Pin the inputs; DTE brings back any that were evicted (swap in, or recompute).
  Pins pins(engine_.pinned());
  absl::InlinedVector<TensorRecord*, 4> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    TensorRecord* r = engine_.find(c.inputs[i]);
    if (r == nullptr || r->state == StorageState::kMissing) {
      return absl::FailedPreconditionError(absl::StrCat(
          "op ", op.name(), ": input ", i, " was never produced (an earlier op failed)"));
    }
    ins.push_back(r);
  }
  auto context = [&] {
    absl::InlinedVector<TensorDesc, 4> d;
    for (auto* r : ins) d.push_back(r->desc);
    return op_context(op, d);
  };
  OpFrame frame{ins, &op, c.output_descs};
  frames_.push_back(&frame);
  absl::Cleanup pop_frame = [&] { frames_.pop_back(); };
  if (absl::Status s = engine_.make_resident(ins, pins); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(context(), ": regenerating an input: ", s.message()));
  }
  for (TensorRecord* r : ins) r->last_access = engine_.clock();

  // 3. Allocate the outputs in the compute region (TMA's planned offset or best fit; DTE
  //    evicts until each fits: see allocate).
  auto path = std::make_shared<ComputePath>();
  path->op = c.op;
  path->inputs = c.inputs;
  for (TensorRecord* r : ins) path->input_versions.push_back(r->version);

  absl::InlinedVector<alloc::Block, 2> out_blocks;
  absl::InlinedVector<TensorView, 2> out_views;
  auto free_outputs = [&] {
    for (const alloc::Block& b : out_blocks) free_compute(b);
  };
  for (size_t i = 0; i < c.output_descs.size(); ++i) {
    auto b = allocate(c.output_descs[i].bytes(), [&] {
      return absl::StrCat(context(), ": output ", i, " ", c.output_descs[i].str());
    }, /*lowest=*/false, Request::kOutput);
    if (!b.ok()) {
      free_outputs();
      return b.status();
    }
    out_blocks.push_back(*b);
    out_views.push_back(TensorView{device_.compute_ptr(*b), &c.output_descs[i]});
  }
  // An input about to be mutated in place that DTE may still recompute from keeps its
  // old value in a snapshot (Note [Copy on mutate], evict/engine.cc).
  const uint64_t mutated = op.mutates_inputs();
  if (mutated != 0 && opts_.policy != EvictPolicy::kNone) {
    for (size_t i = 0; i < ins.size(); ++i) {
      if ((mutated >> i) & 1) {
        if (absl::Status s = engine_.snapshot_before_mutation(*ins[i]); !s.ok()) {
          free_outputs();
          return absl::Status(s.code(), absl::StrCat(context(), ": ", s.message()));
        }
      }
    }
  }

  // 4. Run the kernel, timed. The inputs' views are taken now: allocating the outputs, a
  //    snapshot and the room for the kernel's scratch may have moved them (Note
  //    [Compaction], evict/engine.cc).
  absl::InlinedVector<TensorView, 4> in_views;
  for (TensorRecord* r : ins) in_views.push_back(TensorView{nullptr, &r->desc});
  const uint64_t key = run_key(op, in_views, out_views);
  room_for_scratch(op, key);
  for (size_t i = 0; i < ins.size(); ++i) in_views[i].data = data(*ins[i]);
  double us = 0;
  if (absl::Status s = run(path, in_views, out_views, key, /*recomputing=*/false, &us); !s.ok()) {
    free_outputs();
    return absl::Status(s.code(), absl::StrCat(context(), ": ", s.message()));
  }
  EvictStats& stats = engine_.stats();
  ++stats.ops;
  stats.compute_us += us;
  // Work the op left in flight keeps those inputs' bytes where they are (OpDef::holds_inputs).
  const uint64_t held = op.holds_inputs(), released = op.releases_inputs();
  for (size_t i = 0; i < ins.size(); ++i) {
    if ((held >> i) & 1) ++ins[i]->address_holds;
    if ((released >> i) & 1 && ins[i]->address_holds > 0) --ins[i]->address_holds;
  }
  traced([&](TraceWriter& w) {
    w.op(op, c.inputs, c.outputs, c.output_descs, us, mutated, c.recomputable, last_scratch_);
  });
  if (chrome_ && stats.evict_drop + stats.evict_swap != chrome_evictions_) {
    chrome_evictions_ = stats.evict_drop + stats.evict_swap;
    chrome_->counter("evictions", "drop + swap", static_cast<double>(chrome_evictions_));
  }
  chrome_tensors();
  if (observer_) {
    if (device_.async_kernels()) {
      if (auto it = pending_timers_.find(last_timer_); it != pending_timers_.end()) {
        it->second.out_ids.assign(c.outputs.begin(), c.outputs.end());
      }
    } else {
      absl::InlinedVector<TensorDesc, 4> in_d;
      for (TensorRecord* r : ins) in_d.push_back(r->desc);
      observer_(op, in_d, c.output_descs, c.outputs, us);
    }
  }

  // 5. Record: each output's record and compute path (op, inputs, outputs, time), and its
  //    place in DTE's graph; the inputs are unpinned on the way out.
  // In-place mutation: the mutated inputs move to a new version; the path records the
  // new one (the op's outputs do not depend on the old values; see OpDef::mutates_inputs).
  // A mutated tensor no longer holds what its own compute path made.
  for (size_t i = 0; i < ins.size(); ++i) {
    if ((mutated >> i) & 1) {
      path->input_versions[i] = ++ins[i]->version;
      engine_.cut_producer(*ins[i]);
    }
  }
  path->outputs = c.outputs;
  path->compute_us = device_.async_kernels() ? last_provisional_us_ : us;
  if (opts_.reproducible) {  // the op's FLOPs at 1 GFLOP/s, in microseconds
    absl::InlinedVector<TensorDesc, 4> in_d;
    for (TensorRecord* r : ins) in_d.push_back(r->desc);
    path->compute_us = op.cost(in_d, c.output_descs).flops * 1e-3 + 1.0;
  }
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    TensorRecord& r = engine_.add(c.outputs[i]);
    r.desc = std::move(c.output_descs[i]);
    r.producer = path;
    r.recomputable = c.recomputable;
    r.last_access = engine_.clock();
    engine_.set_resident(r, out_blocks[i]);
  }
  engine_.add_users(ins, c.outputs, c.recomputable);  // Note [Gradients are not recomputed]
  return absl::OkStatus();
}

// ---- a recompute: an op run nested in another ----

// rerun: the engine's recompute of a dropped tensor runs path's op again through steps 2
// to 4, nested in the op that needed it (Engine::recompute installs the outputs).
absl::Status Executor::rerun(const std::shared_ptr<ComputePath>& path, std::span<TensorRecord* const> ins,
                             Pins& pins, evict::Rerun& out) {
  const OpDef& op = *path->op;
  const uint64_t outer_key = op_key_;
  op_key_ = alloc::recompute_key(alloc::program_op_key(reinterpret_cast<uintptr_t>(op.name())));
  absl::Cleanup restore_key = [&] { op_key_ = outer_key; };
  absl::InlinedVector<TensorDesc, 2> out_descs;
  for (uint64_t id : path->outputs) {
    const TensorRecord* o = engine_.find(id);
    if (o != nullptr) out_descs.push_back(o->desc);
  }
  OpFrame frame{ins, &op, out_descs};
  frames_.push_back(&frame);
  absl::Cleanup pop_frame = [&] { frames_.pop_back(); };
  // 2. The inputs, regenerated first if they were evicted themselves.
  MTC_RETURN_IF_ERROR(engine_.make_resident(ins, pins));
  absl::InlinedVector<TensorView, 4> in_views;
  for (TensorRecord* in : ins) in_views.push_back(TensorView{data(*in), &in->desc});
  // 3. Outputs: dropped records get their storage back; the others (resident, swapped, or
  //    gone) are written to temporary blocks that are freed afterwards.
  absl::InlinedVector<TensorView, 2> out_views;
  auto& targets = out.targets;
  auto& blocks = out.blocks;
  targets.assign(path->outputs.size(), nullptr);
  absl::InlinedVector<TensorDesc, 2> temp_descs(path->outputs.size());
  auto free_blocks = [&] {
    for (const alloc::Block& b : blocks) free_compute(b);
    blocks.clear();
  };
  for (size_t i = 0; i < path->outputs.size(); ++i) {
    TensorRecord* o = engine_.find(path->outputs[i]);
    if (o != nullptr && o->state == StorageState::kDropped) targets[i] = o;
    const TensorDesc* d = o != nullptr ? &o->desc : nullptr;
    if (d == nullptr) {
      // A gone output: its shape is not kept; ask the op (inputs are known).
      std::vector<TensorDesc> all;
      absl::InlinedVector<TensorDesc, 4> in_descs;
      for (const TensorView& v : in_views) in_descs.push_back(*v.desc);
      if (absl::Status s = op.infer(in_descs, all); !s.ok()) {
        free_blocks();
        return s;
      }
      temp_descs[i] = all[i];
      d = &temp_descs[i];
    }
    auto b = allocate(d->bytes(), [&] { return absl::StrCat("recomputing op ", op.name()); }, /*lowest=*/false,
                      Request::kOutput);
    if (!b.ok()) {
      free_blocks();
      return b.status();
    }
    blocks.push_back(*b);
    out_views.push_back(TensorView{device_.compute_ptr(*b), d});
  }
  // 4. The kernel, on the inputs where they are now (allocating the outputs and the room
  //    for its scratch may have moved them: Note [Compaction], evict/engine.cc).
  const uint64_t key = run_key(op, in_views, out_views);
  room_for_scratch(op, key);
  for (size_t i = 0; i < ins.size(); ++i) in_views[i].data = data(*ins[i]);
  if (absl::Status s = run(path, in_views, out_views, key, /*recomputing=*/true, &out.us); !s.ok()) {
    free_blocks();
    return s;
  }
  return absl::OkStatus();
}

const char* Executor::op_name(const ComputePath& path) { return path.op->name(); }

// ---- the other commands ----

absl::Status Executor::execute(Put& c) {
  op_key_ = alloc::program_op_key(kPutKey);
  MTC_ASSIGN_OR_RETURN(alloc::Block block, allocate(c.desc.bytes(), [&] {
    return absl::StrCat("put ", c.desc.str(), c.persistent ? " (persistent)" : "");
  }, /*lowest=*/c.persistent));
  if (!simulate_) MTC_RETURN_IF_ERROR(device_.copy_to_device(device_.compute_ptr(block), c.data.data(), c.data.size()));
  TensorRecord& r = engine_.add(c.id);
  r.desc = std::move(c.desc);
  r.persistent = c.persistent;
  r.last_access = engine_.clock();
  engine_.set_resident(r, block);
  traced([&](TraceWriter& w) { w.put(r.id, r.desc, r.persistent); });
  chrome_tensors();
  return absl::OkStatus();
}

absl::Status Executor::execute(Del& c) {
  TensorRecord* r = engine_.find(c.id);
  if (r == nullptr) return absl::OkStatus();  // its op failed: nothing was made
  traced([&](TraceWriter& w) { w.release(c.id); });
  engine_.release(*r);  // erased, or kept as a recompute source (Note [Fake delete])
  chrome_tensors();
  return absl::OkStatus();
}

absl::Status Executor::execute(MakeGradient& c) {
  TensorRecord* r = engine_.find(c.id);
  if (r == nullptr || r->state == StorageState::kMissing) return absl::OkStatus();  // its op failed
  traced([&](TraceWriter& w) { w.gradient(c.id); });
  MTC_RETURN_IF_ERROR(engine_.ensure_resident(*r));
  engine_.remove_candidate(*r);
  r->persistent = true;
  if (!r->in_comm) {
    // To the comm/gradient region when it fits; else it stays, unevictable, in m2.
    if (auto b = device_.comm_region().allocate(r->block.size); b.ok()) {
      if (!simulate_) {
        MTC_RETURN_IF_ERROR(device_.copy_on_device(device_.comm_ptr(*b), device_.compute_ptr(r->block), r->desc.bytes()));
      }
      free_compute(r->block);
      r->block = *b;
      r->in_comm = true;
    }
  }
  engine_.cut_producer(*r);
  chrome_tensors();
  return absl::OkStatus();
}

absl::Status Executor::execute(Mark& c) {
  if (std::string_view(c.label) == "iteration" && ++iteration_marks_ == kScoreTuneIterations + 1 && tune_trace_) {
    tune_score_now();
  }
  traced([&](TraceWriter& w) { w.mark(c.label, c.index); });
  if (chrome_ && std::string_view(c.label) == "iteration") chrome_->instant(absl::StrCat("iteration ", c.index));
  if (tma_) {
    // An iteration boundary: an explicit "iteration" mark, or, for a program that never
    // makes one, the optimizer's "step".
    const std::string_view label = c.label;
    if (label == "iteration") saw_iteration_mark_ = true;
    if (label == "iteration" || (label == "step" && !saw_iteration_mark_)) {
      tma_->boundary(device_.compute_region(), [this] { engine_.pack_low(); });
    }
  }
  return absl::OkStatus();
}

// tune_score_now: the first iterations are done; replay them under each candidate score
// and keep the best (Note [Tuning the score] in src/trace/replay.cc).
void Executor::tune_score_now() {
  std::istringstream in(tune_trace_->take_text());
  tune_trace_.reset();
  const EvictStats& st = engine_.stats();
  if (st.evict_drop + st.evict_swap + st.compactions == 0) return;  // nothing evicted: every score alike
  const auto t0 = Clock::now();
  absl::StatusOr<Trace> trace = parse_trace(in, "the first iterations' record");
  absl::StatusOr<ScoreTuning> t = trace.ok() ? tune_score(*trace, opts_, kScoreTuneIterations) : trace.status();
  if (!t.ok()) {  // the given score stays
    tuning_ = absl::StrCat("not tuned (", t.status().message(), ")");
    return;
  }
  engine_.set_score(t->chosen);
  tuning_ = describe_tuning(*t, us_since(t0) * 1e-6);
}

absl::Status Executor::execute(GetValue& c) {
  TensorRecord* r = engine_.find(c.id);
  if (r == nullptr || r->state == StorageState::kMissing) {
    return absl::FailedPreconditionError("get_value: the tensor was never produced (an earlier op failed)");
  }
  traced([&](TraceWriter& w) { w.read(c.id); });
  MTC_RETURN_IF_ERROR(engine_.ensure_resident(*r));
  MTC_CHECK(c.bytes == r->desc.bytes(), "get_value size mismatch");
  if (simulate_) return absl::OkStatus();
  return device_.copy_to_host(c.dst, data(*r), c.bytes);
}

// ---- memory ----

void Executor::free_compute(alloc::Block b) {
  device_.compute_region().free(b);
  if (tma_) tma_->freed(b);
}

absl::StatusOr<alloc::Block> Executor::allocate(size_t bytes, const std::function<std::string()>& who,
                                                bool lowest, Request request) {
  alloc::Region& region = device_.compute_region();
  const size_t size = alloc::round_up(bytes);
  const size_t m_star = budget();
  // TMA's planned offset for this request, if its plan has one: taken when that range is
  // free (a hit), else best-fit in whatever is free (a miss); see alloc/tma.h.
  const std::optional<size_t> planned = tma_ && !lowest ? tma_->propose(op_key_, size) : std::nullopt;
  std::optional<alloc::Block> got;
  bool compacted = false;
  for (;;) {
    const bool within_budget = region.stats().allocated + size <= m_star;
    if (within_budget) {
      if (planned) {
        if (auto b = region.allocate_at(*planned, size); b.ok()) {
          tma_->placed(op_key_, *b, /*hit=*/true);
          got = *b;
          break;
        }
      }
      auto b = lowest ? region.allocate_lowest(size) : region.allocate(size);
      if (b.ok()) {
        if (tma_) tma_->placed(op_key_, *b, /*hit=*/false);
        got = *b;
        break;
      }
    }
    // Within the budget, the free bytes are there but in pieces: move resident tensors
    // together when the copy costs under a quarter of what evicting would (Note
    // [Compaction], evict/engine.cc). A kernel running now (its scratch) holds its
    // inputs' addresses, so they stay put.
    const std::span<TensorRecord* const> in_use = request == Request::kScratch && !frames_.empty()
                                                      ? frames_.back()->inputs
                                                      : std::span<TensorRecord* const>();
    if (within_budget && !compacted && engine_.compact_if_cheaper(size, in_use)) {
      compacted = true;
      continue;
    }
    if (engine_.evict_one(/*fragmented=*/within_budget)) continue;
    // Nothing more to evict: move them as the last resort.
    if (within_budget && engine_.compact(size, in_use)) {
      compacted = true;
      continue;
    }
    break;
  }
  if (!got) return out_of_memory(size, who, request);
  if (!frames_.empty() && request == Request::kOutput) frames_.back()->outputs_held += size;
  if (!frames_.empty() && request == Request::kScratch) frames_.back()->scratch_held += size;
  return *got;
}

absl::StatusOr<alloc::Block> Executor::move_compute(alloc::Block b, size_t offset) {
  alloc::Region& region = device_.compute_region();
  // The bytes first: if the copy fails, the books still say where they are.
  if (!simulate_) {
    MTC_RETURN_IF_ERROR(device_.copy_on_device(device_.compute_ptr(alloc::Block{offset, b.size}),
                                               device_.compute_ptr(b), b.size));
  }
  const alloc::Block to = region.move(b, offset);
  if (tma_) tma_->moved(b, to);
  return to;
}

// claim: the engine's own blocks (swap-ins, snapshots) go through allocate like any
// request; a swap-in is keyed as one for TMA, whatever op it is made for.
absl::StatusOr<alloc::Block> Executor::claim(size_t bytes, const std::function<std::string()>& who,
                                             evict::Claim why) {
  if (why != evict::Claim::kSwapIn) return allocate(bytes, who);
  const uint64_t outer_key = op_key_;
  op_key_ = alloc::kSwapInKey;
  auto b = allocate(bytes, who);
  op_key_ = outer_key;
  return b;
}

// The message names the limit that bound: the budget m* when the request would take the
// region's allocated bytes past it, else the region itself (full, or without a free block
// large enough). It then says where the held bytes are, what the op being run still needs,
// and which flag to raise, so every tool reports the same advice.
absl::Status Executor::out_of_memory(size_t size, const std::function<std::string()>& who, Request request) const {
  const alloc::Region& region = device_.compute_region();
  const size_t held = region.stats().allocated;
  const size_t m_star = budget();
  const bool over_budget = m_star < region.capacity() && held + size > m_star;
  const OpFrame* frame = frames_.empty() ? nullptr : frames_.back();
  // Where the held bytes are: every resident tensor of the compute region by why it stayed,
  // and the rest (blocks of no tensor) the outputs and scratch of the ops being run.
  const evict::HeldBytes h = engine_.held(frame != nullptr ? frame->inputs : std::span<TensorRecord* const>());
  const size_t own_inputs = h.own_inputs, waiting = h.waiting, persistent = h.persistent, small = h.small,
               kept_by_mode = h.kept_by_mode, evictable = h.evictable;
  const size_t in_tensors = h.total();
  const size_t own_blocks = frame != nullptr ? frame->outputs_held + frame->scratch_held : 0;
  const size_t other_blocks = held - std::min(held, in_tensors + own_blocks);
  auto part = [](size_t bytes, absl::string_view what) {
    return bytes == 0 ? std::string() : absl::StrCat(", ", alloc::format_bytes(bytes), " ", what);
  };
  std::string where = absl::StrCat(
      alloc::format_bytes(held), " held",
      frame != nullptr ? absl::StrCat(", of which ", alloc::format_bytes(own_inputs), " pinned by this op's inputs") : "",
      part(own_blocks, "by its outputs and scratch so far"),
      part(waiting, "pinned by the ops waiting on this one's result"),
      part(other_blocks, "by the outputs and scratch of those ops"),
      part(persistent, "persistent (parameters, optimizer state, gradients)"),
      part(kept_by_mode, "not recomputable, which mode drop cannot evict"),
      part(small, absl::StrCat("in tensors under ", alloc::format_bytes(opts_.min_candidate_bytes),
                               ", which are never evicted")),
      part(evictable, "evictable, which the search did not reach"));
  std::string needs;
  if (frame != nullptr) {
    // The op's whole demand is derived here, on the error path, not on every op run.
    size_t outputs_bytes = 0, scratch_planned = 0;
    for (const TensorDesc& d : frame->outputs) outputs_bytes += alloc::round_up(d.bytes());
    for (size_t b : frame->op->recorded_scratch()) scratch_planned += alloc::round_up(b);
    const size_t outputs = outputs_bytes - std::min(outputs_bytes, frame->outputs_held);
    size_t scratch = scratch_planned - std::min(scratch_planned, frame->scratch_held);
    if (request == Request::kScratch) scratch = std::max(scratch, size);
    needs = absl::StrCat("; the op needs ", request == Request::kOther ? absl::StrCat(alloc::format_bytes(size), " for this, ") : "",
                         alloc::format_bytes(outputs), " more for its outputs and ", alloc::format_bytes(scratch),
                         " more of scratch");
  }
  const bool evicting = opts_.policy != EvictPolicy::kNone;
  std::string limit;
  if (over_budget) {
    limit = absl::StrCat("over the budget m* of ", alloc::format_bytes(m_star), ": ", where, needs,
                         evicting ? "; nothing left to evict: expected a larger --budget"
                                  : "; eviction is off: expected a larger --budget or an eviction policy");
  } else {
    limit = absl::StrCat(held + size > region.capacity() ? "the compute region of " : "no free block in the compute region of ",
                         alloc::format_bytes(region.capacity()), held + size > region.capacity() ? " is full" : " fits it",
                         " (largest free block ", alloc::format_bytes(region.largest_free()), "): ", where, needs,
                         evicting ? "; nothing left to evict: expected a larger --memory"
                                  : "; eviction is off: expected a larger --memory or an eviction policy");
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(who(), ": cannot allocate ", alloc::format_bytes(size), " (", size, " bytes): ", limit));
}

// ---- kernels ----

uint64_t Executor::run_key(const OpDef& op, std::span<const TensorView> ins, std::span<const TensorView> outs) const {
  if (simulate_ || (opts_.policy == EvictPolicy::kNone && !device_.async_kernels())) return 0;
  return op_time_key(op, ins, outs);
}

absl::Status Executor::run(const std::shared_ptr<ComputePath>& path, std::span<const TensorView> ins,
                           std::span<const TensorView> outs, uint64_t key, bool recomputing, double* us) {
  const OpDef& op = *path->op;
  if (simulate_) {  // the recorded time, and the recorded scratch held meanwhile
    *us = std::max(0.0, op.recorded_us());
    ScratchContext ctx(*this, op, recomputing);
    for (size_t bytes : op.recorded_scratch()) MTC_RETURN_IF_ERROR(ctx.scratch(bytes).status());
    return absl::OkStatus();
  }
  KernelFn kernel = op.schema().kernels[static_cast<int>(device_.type())];
  if (kernel == nullptr) {
    return absl::UnimplementedError(absl::StrCat("op ", op.name(), " has no kernel for device ",
                                                 device_type_name(device_.type())));
  }
  ScratchContext ctx(*this, op, recomputing);
  if (device_.async_kernels()) {
    collect_timers(/*wait=*/false);
    const uint64_t timer = device_.start_timer();
    const auto issued = chrome_ ? Clock::now() : Clock::time_point{};
    absl::Status s = kernel(op, KernelArgs{ins, outs, ctx});
    device_.stop_timer(timer);
    // An asynchronous device's span is the host's issue of the op (its device time comes later).
    if (chrome_) chrome_->span(op.name(), recomputing ? "recompute" : "op", issued, us_since(issued));
    // Note [Provisional op times]
    absl::InlinedVector<TensorDesc, 4> in_d, out_d;
    for (const TensorView& v : ins) in_d.push_back(*v.desc);
    for (const TensorView& v : outs) out_d.push_back(*v.desc);
    const OpCost cost = op.cost(in_d, out_d);
    const double work = cost.flops + cost.bytes_read + cost.bytes_written;
    last_provisional_us_ = provisional_us(key, work);
    if (timer != 0) {  // 0: untimed
      PendingTimer& t = pending_timers_[timer];
      t = PendingTimer{};
      t.path = path;
      t.recompute = recomputing;
      t.key = key;
      t.work = work;
      if (observer_ && !recomputing) {
        t.op = path->op;
        t.in = std::move(in_d);  // not read again below
        t.out = std::move(out_d);
        last_timer_ = timer;
      }
    }
    *us = 0;
    last_scratch_.assign(ctx.sizes().begin(), ctx.sizes().end());
    if (opts_.policy != EvictPolicy::kNone) remember_scratch(key);
    return s;
  }
  const auto t0 = Clock::now();
  absl::Status s = kernel(op, KernelArgs{ins, outs, ctx});
  *us = us_since(t0);
  if (chrome_) chrome_->span(op.name(), recomputing ? "recompute" : "op", t0, *us);
  last_scratch_.assign(ctx.sizes().begin(), ctx.sizes().end());
  if (opts_.policy != EvictPolicy::kNone) remember_scratch(key);
  return s;
}

void Executor::remember_scratch(uint64_t key) {
  if (scratch_sizes_.size() >= kMaxOpTimes) scratch_sizes_.clear();  // many shapes: start over
  scratch_sizes_[key].assign(last_scratch_.begin(), last_scratch_.end());
}

// Note [Room for scratch]
// A kernel asks for its scratch while it runs, when its inputs' and outputs' addresses are
// held and nothing of them can move. In a region whose free bytes lie in pieces, its
// request could then find no block even where moving the inputs would have made one: the
// U-Net at 50% of its peak in drop mode, with the region as the limit (a recording of
// 2026-12-01), stopped at a conv2d_backward_input's 32 MiB of scratch with 88.9 MiB of the
// 187.5 MiB region free, the largest block 18.8 MiB, 64 MiB of it held by the op's inputs,
// outputs and earlier scratch. So before the kernel runs, where the largest free block is
// smaller than the largest request the op made last time (or recorded, in a replay), a
// block for each such request is taken, evicting or moving tensors as any request does
// (the inputs may move then: they are pinned, not in use), and given back at once; the
// kernel's requests then find them. Not with TMA, whose plans give each request its place.
void Executor::room_for_scratch(const OpDef& op, uint64_t key) {
  if (tma_ || opts_.policy == EvictPolicy::kNone) return;
  std::span<const size_t> sizes = op.recorded_scratch();
  if (!simulate_) {
    auto it = scratch_sizes_.find(key);
    if (it == scratch_sizes_.end()) return;
    sizes = it->second;
  }
  const alloc::Region& region = device_.compute_region();
  size_t largest = 0;
  for (size_t b : sizes) largest = std::max(largest, alloc::round_up(b));
  if (largest == 0 || region.largest_free() >= largest) return;
  absl::InlinedVector<alloc::Block, 2> taken;
  for (size_t b : sizes) {
    auto got = allocate(b, [&] { return absl::StrCat("op ", op.name(), ": room for its scratch"); });
    if (!got.ok()) break;  // the kernel's own request will say what is wrong
    taken.push_back(*got);
  }
  for (const alloc::Block& b : taken) free_compute(b);
}

// collect_timers: the asynchronous device's finished op timings become their paths'
// compute_us (what DTE's cost reads) and the stats' compute and recompute times.
void Executor::collect_timers(bool wait) {
  if (pending_timers_.empty()) return;
  timers_done_.clear();
  device_.collect_timers(wait, timers_done_);
  for (const auto& [id, us] : timers_done_) {
    auto it = pending_timers_.find(id);
    if (it == pending_timers_.end()) continue;
    if (std::shared_ptr<ComputePath> p = it->second.path.lock(); p && !opts_.reproducible) p->compute_us = us;
    EvictStats& stats = engine_.stats();
    (it->second.recompute ? stats.recompute_us : stats.compute_us) += us;
    if (op_times_.size() >= kMaxOpTimes) op_times_.clear();  // many shapes: start over
    op_times_[it->second.key] = us;
    timed_us_ += us;
    timed_work_ += it->second.work;
    if (observer_ && it->second.op) observer_(*it->second.op, it->second.in, it->second.out, it->second.out_ids, us);
    pending_timers_.erase(it);
  }
}

// Note [Provisional op times]
// On an asynchronous device (CUDA) an op's time arrives from its events some ops later
// (collect_timers), and until then its compute path's time would be 0: DTE's cost would
// see the tensors just made, the ones most likely to be used next, as free to recompute
// and evict them first. So each op run starts with a provisional time, replaced by the
// measured one when it arrives: the last measured time of a run with the same key (the
// op's type and its input and output shapes and dtypes; attributes that change neither,
// such as a scale's factor, share a key), which in a training loop is the previous
// iteration's run of the same op; else, for a key not yet measured (the first
// iteration), the op's work (its cost's flops plus bytes read and written) at the rate of
// every run measured so far; else, before any, at 1 microsecond per 1000 units (1 GFLOP/s,
// the reproducible mode's rate). The table is cleared when it holds kMaxOpTimes keys (a
// model whose shapes never repeat). Host devices time ops with the host clock and never
// use it. The one ratio is deliberately cruder than DTP's fitted Rates (partition/cost.h):
// it serves only until each key's own time arrives, mostly within the first iteration,
// and the executor runs without DTP.
uint64_t Executor::op_time_key(const OpDef& op, std::span<const TensorView> ins, std::span<const TensorView> outs) {
  size_t h = absl::HashOf(reinterpret_cast<uintptr_t>(op.name()), ins.size());
  for (const TensorView& v : ins) h = absl::HashOf(h, v.desc->shape, static_cast<int>(v.desc->dtype));
  for (const TensorView& v : outs) h = absl::HashOf(h, v.desc->shape, static_cast<int>(v.desc->dtype));
  return h;
}

double Executor::provisional_us(uint64_t key, double work) const {
  if (auto it = op_times_.find(key); it != op_times_.end()) return it->second;
  if (timed_work_ > 0) return work * (timed_us_ / timed_work_);
  return work * 1e-3;
}

}  // namespace mtc
