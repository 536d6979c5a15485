// The interpreter's user-facing side: handle creation, shape inference on the caller's
// thread, the MPSC command queue, synchronising calls and error surfacing.
#include "mtc/interpreter.h"

#include <cstdlib>
#include <cstring>
#include <future>
#include <string>

#include "autograd.h"
#include "commands.h"
#include "device.h"
#include "dist/dtp.h"
#include "executor.h"
#include "mtc/status.h"
#include "trace/replay.h"

namespace mtc {

TensorRef::~TensorRef() {
  if (id != 0 && interp && !dist) interp->del(id);
}

std::shared_ptr<Interpreter> Interpreter::create(std::shared_ptr<Device> device,
                                                 InterpreterOptions opts) {
  return std::shared_ptr<Interpreter>(new Interpreter(std::move(device), opts));
}

Interpreter::Interpreter(std::shared_ptr<Device> device, InterpreterOptions opts)
    : tracing_(opts.trace != nullptr),
      marks_(opts.trace != nullptr || opts.tma.enabled || opts.chrome != nullptr || tunes_score(opts.evict)),
      device_(std::move(device)),
      executor_(std::make_unique<Executor>(*device_, ExecutorOptions{.evict = opts.evict, .trace = opts.trace,
                                                                     .tma = opts.tma, .chrome = opts.chrome})),
      queue_(new std::deque<Command>()) {
  const char* env = std::getenv("MTC_INTERP_SYNC");
  synchronous_ = opts.synchronous || (env != nullptr && std::strcmp(env, "0") != 0 && *env != '\0');
  if (synchronous_) {
    device_->on_worker_start();
  } else {
    worker_ = std::thread([this] { worker_loop(); });
  }
}

Interpreter::~Interpreter() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    worker_.join();
  }
  executor_.reset();
  delete queue_;
}

namespace {
// run_command: executes one command on the worker, routing errors to `record`.
template <typename Record, typename Take>
void run_command(Executor& ex, Command& c, Record&& record, Take&& take_error) {
  std::visit(
      [&](auto& cmd) {
        using T = std::decay_t<decltype(cmd)>;
        if constexpr (std::is_same_v<T, Sync>) {
          cmd.done->set_value(take_error());
        } else if constexpr (std::is_same_v<T, Inspect>) {
          cmd.fn(ex);
          cmd.done->set_value(take_error());
        } else if constexpr (std::is_same_v<T, GetValue>) {
          absl::Status err = take_error();
          cmd.done->set_value(err.ok() ? ex.execute(cmd) : err);
        } else {
          absl::Status s = ex.execute(cmd);
          if (!s.ok()) record(std::move(s));
        }
      },
      c.v);
}
}  // namespace

absl::Status Interpreter::set_op_observer(OpObserver f) {
  absl::Status s = sync();
  executor_->set_observer(std::move(f));  // the worker is idle after sync()
  return s;
}

void Interpreter::record_error(absl::Status s) {
  std::lock_guard<std::mutex> l(error_mu_);
  if (first_error_.ok()) first_error_ = std::move(s);
}

void Interpreter::enqueue(Command&& c) {
  auto record = [this](absl::Status s) { record_error(std::move(s)); };
  auto take = [this] {
    std::lock_guard<std::mutex> l(error_mu_);
    return std::exchange(first_error_, absl::OkStatus());
  };
  if (synchronous_) {
    std::lock_guard<std::mutex> l(sync_mu_);
    run_command(*executor_, c, record, take);
    executed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_->push_back(std::move(c));
    wake = worker_waiting_;
  }
  if (wake) cv_.notify_one();
}

void Interpreter::worker_loop() {
  device_->on_worker_start();
  auto record = [this](absl::Status s) { record_error(std::move(s)); };
  auto take = [this] {
    std::lock_guard<std::mutex> l(error_mu_);
    return std::exchange(first_error_, absl::OkStatus());
  };
  std::deque<Command> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      worker_waiting_ = true;
      cv_.wait(l, [this] { return stop_ || !queue_->empty(); });
      worker_waiting_ = false;
      if (queue_->empty()) return;  // stop_ and drained
      batch.swap(*queue_);
    }
    for (Command& c : batch) {
      run_command(*executor_, c, record, take);
      executed_.fetch_add(1, std::memory_order_relaxed);
    }
    batch.clear();
  }
}

Tensor Interpreter::make_handle(TensorDesc d) {
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  return Tensor(std::make_shared<TensorRef>(id, std::move(d), shared_from_this()));
}

TensorList Interpreter::poisoned(std::span<const TensorDesc> descs) {
  TensorList out;
  for (const TensorDesc& d : descs) out.emplace_back(std::make_shared<TensorRef>(0, d, shared_from_this()));
  return out;
}

Tensor Interpreter::put(const TensorDesc& desc, const void* data, bool persistent) {
  Tensor t = make_handle(desc);
  Put p{t.id(), desc, std::vector<std::byte>(desc.bytes()), persistent};
  if (desc.bytes() > 0) std::memcpy(p.data.data(), data, desc.bytes());
  enqueue(Command{std::move(p)});
  return t;
}

TensorList Interpreter::apply(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs) {
  absl::InlinedVector<TensorDesc, 4> in_descs;
  bool any_poisoned = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      record_error(absl::InvalidArgumentError(
          absl::StrCat("op ", op->name(), ": input ", i, " is an undefined tensor")));
      return poisoned(std::vector<TensorDesc>(op->num_outputs()));
    }
    MTC_CHECK(inputs[i].interpreter() == this, "op ", op->name(), ": input ", i,
              " belongs to another interpreter");
    any_poisoned |= inputs[i].poisoned();
    // A global handle (DTP) reaches the interpreter as this rank's shard.
    in_descs.push_back(inputs[i].global() ? dtp::local(inputs[i]).desc() : inputs[i].desc());
  }
  std::vector<TensorDesc> out_descs;
  if (any_poisoned) return poisoned(std::vector<TensorDesc>(op->num_outputs()));
  if (absl::Status s = op->infer(in_descs, out_descs); !s.ok()) {
    record_error(absl::Status(s.code(), absl::StrCat(op_context(*op, in_descs), ": ", s.message())));
    return poisoned(std::vector<TensorDesc>(op->num_outputs()));
  }
  ApplyOp cmd;
  TensorList outs;
  outs.reserve(out_descs.size());
  for (const Tensor& t : inputs) cmd.inputs.push_back(t.id());
  for (TensorDesc& d : out_descs) {
    outs.push_back(make_handle(d));
    cmd.outputs.push_back(outs.back().id());
    cmd.output_descs.push_back(std::move(d));
  }
  cmd.op = std::move(op);
  cmd.recomputable = !in_backward() && cmd.op->recomputable();
  enqueue(Command{std::move(cmd)});
  return outs;
}

void Interpreter::del(uint64_t id) { enqueue(Command{Del{id}}); }

void Interpreter::make_gradient(const Tensor& t) {
  if (t.defined() && !t.poisoned()) enqueue(Command{MakeGradient{t.id()}});
}

void Interpreter::mark(const char* label, int64_t index) {
  if (marks_) enqueue(Command{Mark{label, index}});
}

absl::Status Interpreter::close_trace() {
  absl::Status result;
  std::promise<absl::Status> done;
  auto f = done.get_future();
  enqueue(Command{Inspect{[&result](Executor& ex) { result = ex.close_trace(); }, &done}});
  MTC_RETURN_IF_ERROR(f.get());
  return result;
}

absl::Status Interpreter::get_value(const Tensor& t, void* dst, size_t bytes) {
  if (bytes != t.desc().bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("get_value: tensor ", t.desc().str(), " holds ",
                                                   t.desc().bytes(), " bytes, buffer has ", bytes));
  }
  if (t.poisoned()) {
    absl::Status s = sync();
    return s.ok() ? absl::FailedPreconditionError("get_value: the tensor's op failed") : s;
  }
  std::promise<absl::Status> done;
  auto f = done.get_future();
  enqueue(Command{GetValue{t.id(), dst, bytes, &done}});
  return f.get();
}

absl::Status Interpreter::sync() {
  std::promise<absl::Status> done;
  auto f = done.get_future();
  enqueue(Command{Sync{&done}});
  return f.get();
}

static RegionFigures figures(const alloc::Region& r) {
  alloc::RegionStats s = r.stats();
  return RegionFigures{s.capacity, s.allocated, s.peak_allocated, s.high_water, s.largest_free,
                       s.fragmentation()};
}

absl::StatusOr<MemoryStats> Interpreter::memory_stats() {
  MemoryStats m;
  std::promise<absl::Status> done;
  auto f = done.get_future();
  enqueue(Command{Inspect{[&m](Executor& ex) {
                            m.compute = figures(ex.device().compute_region());
                            m.comm = figures(ex.device().comm_region());
                          },
                          &done}});
  MTC_RETURN_IF_ERROR(f.get());
  return m;
}

absl::StatusOr<EvictStats> Interpreter::evict_stats() {
  EvictStats st;
  std::promise<absl::Status> done;
  auto f = done.get_future();
  enqueue(Command{Inspect{[&st](Executor& ex) { st = ex.evict_stats(); }, &done}});
  MTC_RETURN_IF_ERROR(f.get());
  return st;
}

absl::StatusOr<std::string> Interpreter::dte_tuning() {
  std::string line;
  std::promise<absl::Status> done;
  auto f = done.get_future();
  enqueue(Command{Inspect{[&line](Executor& ex) { line = ex.score_tuning(); }, &done}});
  MTC_RETURN_IF_ERROR(f.get());
  return line;
}

absl::StatusOr<TmaFigures> Interpreter::tma_stats() {
  TmaFigures t;
  std::promise<absl::Status> done;
  auto f = done.get_future();
  enqueue(Command{Inspect{[&t](Executor& ex) {
                            const alloc::TmaStats s = ex.tma_stats();
                            t = TmaFigures{s.iterations, s.planned_iterations, s.hits, s.misses,
                                           s.plans, s.plan_failures, s.cache_hits, s.cache_lookups,
                                           s.plan_sec, s.max_plan_sec, s.last_plan_peak, s.last_plan_lower_bound,
                                           s.plans_evicted, s.plans_cached, s.cache_bytes};
                          },
                          &done}});
  MTC_RETURN_IF_ERROR(f.get());
  return t;
}

absl::Status Interpreter::reset_peak() {
  std::promise<absl::Status> done;
  auto f = done.get_future();
  enqueue(Command{Inspect{[](Executor& ex) {
                            ex.device().compute_region().reset_peak();
                            ex.device().comm_region().reset_peak();
                          },
                          &done}});
  return f.get();
}

}  // namespace mtc
