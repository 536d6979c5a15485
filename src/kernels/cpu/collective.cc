// CPU kernels of the collective ops (src/dist/collective_ops.h). Each hands the tensors'
// host memory to the op's communicator (MPI, or local for one rank) and waits for the
// result, except bucket_reduce, which starts its all-reduce and returns: bucket_wait
// waits for it later, so the reduction overlaps the ops issued in between.
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "device.h"
#include "dist/collective_ops.h"
#include "kernels/cpu/cpu_util.h"

namespace mtc::cpu {
namespace {

using dist::CollectiveOp;
using dist::to_comm;

// host_comm: the op's communicator, which must work on host memory.
absl::Status host_comm(const CollectiveOp& op) {
  if (op.comm->device_memory()) {
    return absl::FailedPreconditionError(absl::StrCat("the ", comm::backend_name(op.comm->backend()),
                                                      " communicator needs tensors on a GPU, these are on the CPU"));
  }
  return absl::OkStatus();
}

absl::StatusOr<comm::DataType> type_of(const TensorView& v) { return dist::to_comm(v.desc->dtype); }

absl::Status all_reduce(const dist::AllReduceOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(host_comm(op));
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  return dist::issue_and_wait(
      [&] { return op.comm->all_reduce(a.in[0].data, a.out[0].data, a.in[0].numel(), t, to_comm(op.reduce)); },
      "all_reduce", a.in[0].bytes(), a.ctx);
}

absl::Status all_gather(const dist::AllGatherOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(host_comm(op));
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  return dist::issue_and_wait([&] { return op.comm->all_gather(a.in[0].data, a.out[0].data, a.in[0].numel(), t); },
                              "all_gather", a.in[0].bytes(), a.ctx);
}

absl::Status reduce_scatter(const dist::ReduceScatterOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(host_comm(op));
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  return dist::issue_and_wait(
      [&] { return op.comm->reduce_scatter(a.in[0].data, a.out[0].data, a.out[0].numel(), t, to_comm(op.reduce)); },
      "reduce_scatter", a.in[0].bytes(), a.ctx);
}

absl::Status all_to_all(const dist::AllToAllOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(host_comm(op));
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  const int p = op.comm->world_size();
  if (op.send_rows.empty()) {
    return dist::issue_and_wait(
        [&] { return op.comm->all_to_all(a.in[0].data, a.out[0].data, a.in[0].numel() / p, t); }, "all_to_all",
        a.in[0].bytes(), a.ctx);
  }
  std::vector<size_t> send, recv;
  op.element_counts(a.in[0], a.out[0], send, recv);
  return dist::issue_and_wait([&] { return op.comm->all_to_all_v(a.in[0].data, send, a.out[0].data, recv, t); },
                              "all_to_all_v", a.in[0].bytes(), a.ctx);
}

absl::Status broadcast(const dist::BroadcastOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(host_comm(op));
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  if (op.comm->rank() == op.root) std::memcpy(a.out[0].data, a.in[0].data, a.in[0].bytes());
  return dist::issue_and_wait([&] { return op.comm->broadcast(a.out[0].data, a.out[0].numel(), t, op.root); },
                              "broadcast", a.out[0].bytes(), a.ctx);
}

absl::Status broadcast_in_place(const dist::BroadcastInPlaceOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(host_comm(op));
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  return dist::issue_and_wait([&] { return op.comm->broadcast(a.in[0].data, a.in[0].numel(), t, op.root); },
                              "broadcast", a.in[0].bytes(), a.ctx);
}

absl::Status barrier(const dist::BarrierOp& op, const KernelArgs& a) {
  return dist::issue_and_wait([&] { return op.comm->barrier(); }, "barrier", 0, a.ctx);
}

absl::Status max_grad_mask(const dist::MaxGradMaskOp&, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  const float* y = a.in[1].f32();
  const float* g = a.in[2].f32();
  float* out = a.out[0].f32();
  const int64_t n = a.out[0].numel();
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] == y[i] ? g[i] : 0.f;
  return absl::OkStatus();
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::Status bucket_reduce(const dist::BucketReduceOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(host_comm(op));
  if (op.state->work) {
    return absl::FailedPreconditionError("bucket_reduce: the bucket's previous all-reduce was never waited for");
  }
  const auto t0 = std::chrono::steady_clock::now();
  float* flat = a.in[0].f32();
  size_t n = 0;  // the gradients one after another from element 0
  for (size_t i = 1; i < a.in.size(); ++i) {
    std::memcpy(flat + n, a.in[i].data, a.in[i].bytes());
    n += static_cast<size_t>(a.in[i].numel());
  }
  op.state->figures->bucket_copy_sec += since(t0);
  op.state->figures->reduced_bytes += n * sizeof(float);
  op.state->work = op.comm->all_reduce(flat, flat, n, comm::DataType::kF32, op.state->reduce);
  return absl::OkStatus();
}

absl::Status bucket_wait(const dist::BucketWaitOp& op, const KernelArgs& a) {
  if (!op.state->work) return absl::FailedPreconditionError("bucket_wait: the bucket's all-reduce was never started");
  std::shared_ptr<comm::Work> work = std::move(op.state->work);
  dist::DataParallelFigures& f = *op.state->figures;
  auto t0 = std::chrono::steady_clock::now();
  absl::Status s = dist::wait(*work, "all_reduce (bucket)", a.in[0].bytes(), a.ctx);
  f.exposed_sec += since(t0);
  MTC_RETURN_IF_ERROR(s);
  f.comm_sec += work->seconds();
  ++f.reductions;
  t0 = std::chrono::steady_clock::now();
  const float* flat = a.in[0].f32();
  const float scale = op.state->scale;
  size_t off = 0;
  for (size_t i = 1; i < a.in.size(); ++i) {
    const int64_t n = a.in[i].numel();
    if (scale == 1.f) {
      std::memcpy(a.in[i].data, flat + off, a.in[i].bytes());
    } else {
      const float* from = flat + off;
      float* to = a.in[i].f32();
      for (int64_t j = 0; j < n; ++j) to[j] = from[j] * scale;
    }
    off += static_cast<size_t>(n);
  }
  f.bucket_copy_sec += since(t0);
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(dist::AllReduceOp, DeviceType::kCPU, all_reduce);
MTC_REGISTER_KERNEL(dist::AllGatherOp, DeviceType::kCPU, all_gather);
MTC_REGISTER_KERNEL(dist::ReduceScatterOp, DeviceType::kCPU, reduce_scatter);
MTC_REGISTER_KERNEL(dist::AllToAllOp, DeviceType::kCPU, all_to_all);
MTC_REGISTER_KERNEL(dist::BroadcastOp, DeviceType::kCPU, broadcast);
MTC_REGISTER_KERNEL(dist::BroadcastInPlaceOp, DeviceType::kCPU, broadcast_in_place);
MTC_REGISTER_KERNEL(dist::BarrierOp, DeviceType::kCPU, barrier);
MTC_REGISTER_KERNEL(dist::MaxGradMaskOp, DeviceType::kCPU, max_grad_mask);
MTC_REGISTER_KERNEL(dist::BucketReduceOp, DeviceType::kCPU, bucket_reduce);
MTC_REGISTER_KERNEL(dist::BucketWaitOp, DeviceType::kCPU, bucket_wait);

}  // namespace mtc::cpu
