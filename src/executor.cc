// Executes interpreter commands against a device. See executor.h.
#include "executor.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "mtc/status.h"

namespace mtc {
namespace {

// ScratchContext: kernel scratch carved from the compute region, freed after the kernel.
class ScratchContext final : public KernelContext {
 public:
  ScratchContext(Device& d, const OpDef& op) : device_(d), op_(op) {}
  ~ScratchContext() override {
    for (const alloc::Block& b : blocks_) device_.compute_region().free(b);
  }
  absl::StatusOr<void*> scratch(size_t bytes) override {
    auto b = device_.compute_region().allocate(bytes);
    if (!b.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("op ", op_.name(), ": scratch space: ", b.status().message()));
    }
    blocks_.push_back(*b);
    return static_cast<void*>(device_.compute_ptr(*b));
  }
  Device& device() override { return device_; }

 private:
  Device& device_;
  const OpDef& op_;
  absl::InlinedVector<alloc::Block, 2> blocks_;
};

}  // namespace

Executor::~Executor() {
  for (auto& [id, r] : records_) release_storage(r).IgnoreError();
}

absl::Status Executor::release_storage(TensorRecord& r) {
  if (r.state == StorageState::kResident) {
    device_.compute_region().free(r.block);
    r.state = StorageState::kMissing;
  }
  return absl::OkStatus();
}

absl::Status Executor::execute(Put& c) {
  auto block = device_.compute_region().allocate(c.desc.bytes());
  if (!block.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "put ", c.desc.str(), c.persistent ? " (persistent)" : "", ": ", block.status().message()));
  }
  MTC_RETURN_IF_ERROR(device_.copy_to_device(device_.compute_ptr(*block), c.data.data(), c.data.size()));
  TensorRecord& r = records_[c.id];
  r.id = c.id;
  r.desc = std::move(c.desc);
  r.state = StorageState::kResident;
  r.block = *block;
  r.persistent = c.persistent;
  r.last_access = op_clock_;
  return absl::OkStatus();
}

absl::Status Executor::execute(ApplyOp& c) {
  const OpDef& op = *c.op;
  ++op_clock_;
  absl::InlinedVector<TensorRecord*, 4> ins;
  absl::InlinedVector<TensorView, 4> in_views;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    auto it = records_.find(c.inputs[i]);
    if (it == records_.end() || it->second.state != StorageState::kResident) {
      return absl::FailedPreconditionError(absl::StrCat(
          "op ", op.name(), ": input ", i, " was never produced (an earlier op failed)"));
    }
    TensorRecord& r = it->second;
    r.last_access = op_clock_;
    ins.push_back(&r);
    in_views.push_back(TensorView{device_.compute_ptr(r.block), &r.desc});
  }
  auto context = [&] {
    absl::InlinedVector<TensorDesc, 4> d;
    for (auto* r : ins) d.push_back(r->desc);
    return op_context(op, d);
  };

  KernelFn kernel = op.schema().kernels[static_cast<int>(device_.type())];
  if (kernel == nullptr) {
    return absl::UnimplementedError(absl::StrCat("op ", op.name(), " has no kernel for device ",
                                                 device_type_name(device_.type())));
  }

  absl::InlinedVector<alloc::Block, 2> out_blocks;
  absl::InlinedVector<TensorView, 2> out_views;
  auto free_outputs = [&] {
    for (const alloc::Block& b : out_blocks) device_.compute_region().free(b);
  };
  for (size_t i = 0; i < c.output_descs.size(); ++i) {
    auto b = device_.compute_region().allocate(c.output_descs[i].bytes());
    if (!b.ok()) {
      free_outputs();
      return absl::ResourceExhaustedError(absl::StrCat(context(), ": output ", i, " ",
                                                       c.output_descs[i].str(), ": ",
                                                       b.status().message()));
    }
    out_blocks.push_back(*b);
    out_views.push_back(TensorView{device_.compute_ptr(*b), &c.output_descs[i]});
  }

  absl::Status s;
  double us;
  {
    ScratchContext ctx(device_, op);
    const auto t0 = std::chrono::steady_clock::now();
    s = kernel(op, KernelArgs{in_views, out_views, ctx});
    us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  if (!s.ok()) {
    free_outputs();
    return absl::Status(s.code(), absl::StrCat(context(), ": ", s.message()));
  }

  auto path = std::make_shared<ComputePath>();
  path->op = c.op;
  path->inputs = c.inputs;
  path->outputs = c.outputs;
  path->compute_us = us;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    TensorRecord& r = records_[c.outputs[i]];
    r.id = c.outputs[i];
    r.desc = std::move(c.output_descs[i]);
    r.state = StorageState::kResident;
    r.block = out_blocks[i];
    r.producer = path;
    r.last_access = op_clock_;
  }
  for (TensorRecord* r : ins) r->users.insert(r->users.end(), c.outputs.begin(), c.outputs.end());
  return absl::OkStatus();
}

absl::Status Executor::execute(Del& c) {
  auto it = records_.find(c.id);
  if (it == records_.end()) return absl::OkStatus();  // its op failed: nothing was made
  TensorRecord& r = it->second;
  r.handle_alive = false;
  MTC_RETURN_IF_ERROR(release_storage(r));
  if (r.producer) {  // it no longer uses its inputs
    for (uint64_t in : r.producer->inputs) {
      auto src = records_.find(in);
      if (src == records_.end()) continue;
      auto& u = src->second.users;
      if (auto pos = std::find(u.begin(), u.end(), c.id); pos != u.end()) {
        *pos = u.back();
        u.pop_back();
      }
    }
  }
  records_.erase(it);
  return absl::OkStatus();
}

absl::Status Executor::execute(GetValue& c) {
  auto it = records_.find(c.id);
  if (it == records_.end() || it->second.state != StorageState::kResident) {
    return absl::FailedPreconditionError("get_value: the tensor was never produced (an earlier op failed)");
  }
  const TensorRecord& r = it->second;
  MTC_CHECK(c.bytes == r.desc.bytes(), "get_value size mismatch");
  return device_.copy_to_host(c.dst, device_.compute_ptr(r.block), c.bytes);
}

}  // namespace mtc
