// CUDA kernels of the collective ops (src/dist/collective_ops.h): the op's communicator
// must be NCCL's, which runs on its own stream. Each collective is ordered with the
// compute stream by events, both ways: NCCL's stream first waits for the kernels that
// made the inputs, and the compute stream then waits for the collective before any later
// kernel reads its outputs. Nothing waits on the host. bucket_reduce packs a bucket and
// starts its all-reduce; bucket_wait makes the compute stream wait for it and unpacks
// (scaling the buffer first when the bucket has a scale),
// so the exchange overlaps the kernels issued in between.
#include <cuda_runtime.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "device.h"
#include "dist/collective_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ew_elementwise_launch.h"

namespace mtc::cuda {
namespace {

using dist::CollectiveOp;

absl::Status device_comm(const CollectiveOp& op) {
  if (!op.comm->device_memory()) {
    return absl::FailedPreconditionError(absl::StrCat("the ", comm::backend_name(op.comm->backend()),
                                                      " communicator needs host tensors, these are on a GPU: "
                                                      "expected the nccl backend"));
  }
  return absl::OkStatus();
}

// wait_for: `waiter` waits for the work issued so far on `stream`.
absl::Status wait_for(cudaStream_t waiter, cudaStream_t stream) {
  if (waiter == stream) return absl::OkStatus();
  cudaEvent_t e;
  MTC_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t r = cudaEventRecord(e, stream);
  if (r == cudaSuccess) r = cudaStreamWaitEvent(waiter, e, 0);
  cudaEventDestroy(e);  // released once the wait has passed it
  return status(r, "ordering the compute and NCCL streams");
}

cudaStream_t comm_stream(const CollectiveOp& op) { return static_cast<cudaStream_t>(op.comm->stream()); }

// collective: runs `issue` on NCCL's stream between the two waits.
template <typename F>
absl::Status collective(const CollectiveOp& op, const KernelArgs& a, F issue) {
  MTC_RETURN_IF_ERROR(device_comm(op));
  cudaStream_t compute = stream(a.ctx), nccl = comm_stream(op);
  MTC_RETURN_IF_ERROR(wait_for(nccl, compute));
  std::shared_ptr<comm::Work> w = issue();
  if (w->done()) MTC_RETURN_IF_ERROR(w->wait());  // an argument error fails at once
  return wait_for(compute, nccl);
}

absl::StatusOr<comm::DataType> type_of(const TensorView& v) { return dist::to_comm(v.desc->dtype); }

absl::Status all_reduce(const dist::AllReduceOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  return collective(op, a, [&] {
    return op.comm->all_reduce(a.in[0].data, a.out[0].data, a.in[0].numel(), t, dist::to_comm(op.reduce));
  });
}

absl::Status all_gather(const dist::AllGatherOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  return collective(op, a, [&] { return op.comm->all_gather(a.in[0].data, a.out[0].data, a.in[0].numel(), t); });
}

absl::Status reduce_scatter(const dist::ReduceScatterOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  return collective(op, a, [&] {
    return op.comm->reduce_scatter(a.in[0].data, a.out[0].data, a.out[0].numel(), t, dist::to_comm(op.reduce));
  });
}

absl::Status all_to_all(const dist::AllToAllOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  const int p = op.comm->world_size();
  if (op.send_rows.empty()) {
    return collective(op, a, [&] { return op.comm->all_to_all(a.in[0].data, a.out[0].data, a.in[0].numel() / p, t); });
  }
  std::vector<size_t> send, recv;
  op.element_counts(a.in[0], a.out[0], send, recv);
  return collective(op, a, [&] { return op.comm->all_to_all_v(a.in[0].data, send, a.out[0].data, recv, t); });
}

absl::Status broadcast(const dist::BroadcastOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  if (op.comm->rank() == op.root) {
    MTC_CUDA(cudaMemcpyAsync(a.out[0].data, a.in[0].data, a.in[0].bytes(), cudaMemcpyDeviceToDevice, stream(a.ctx)));
  }
  return collective(op, a, [&] { return op.comm->broadcast(a.out[0].data, a.out[0].numel(), t, op.root); });
}

absl::Status broadcast_in_place(const dist::BroadcastInPlaceOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(comm::DataType t, type_of(a.in[0]));
  return collective(op, a, [&] { return op.comm->broadcast(a.in[0].data, a.in[0].numel(), t, op.root); });
}

absl::Status barrier(const dist::BarrierOp& op, const KernelArgs& a) {
  return collective(op, a, [&] { return op.comm->barrier(); });
}

absl::Status bucket_reduce(const dist::BucketReduceOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(device_comm(op));
  if (op.state->work) {
    return absl::FailedPreconditionError("bucket_reduce: the bucket's previous all-reduce was never waited for");
  }
  cudaStream_t compute = stream(a.ctx), nccl = comm_stream(op);
  float* flat = a.in[0].f32();
  size_t n = 0;  // the gradients one after another from element 0
  for (size_t i = 1; i < a.in.size(); ++i) {
    MTC_CUDA(cudaMemcpyAsync(flat + n, a.in[i].data, a.in[i].bytes(), cudaMemcpyDeviceToDevice, compute));
    n += static_cast<size_t>(a.in[i].numel());
  }
  MTC_RETURN_IF_ERROR(wait_for(nccl, compute));
  op.state->figures->reduced_bytes += n * sizeof(float);
  op.state->work = op.comm->all_reduce(flat, flat, n, comm::DataType::kF32, op.state->reduce);
  return absl::OkStatus();
}

// bucket_wait on a GPU: the compute stream waits for the all-reduce, the host does not.
// The all-reduce's time counts in the figures when it has finished by then; the time
// the compute stream stalls is not measured here (exposed_sec stays 0 on a GPU).
absl::Status bucket_wait(const dist::BucketWaitOp& op, const KernelArgs& a) {
  MTC_RETURN_IF_ERROR(device_comm(op));
  if (!op.state->work) return absl::FailedPreconditionError("bucket_wait: the bucket's all-reduce was never started");
  std::shared_ptr<comm::Work> work = std::move(op.state->work);
  cudaStream_t compute = stream(a.ctx), nccl = comm_stream(op);
  MTC_RETURN_IF_ERROR(wait_for(compute, nccl));
  dist::DataParallelFigures& f = *op.state->figures;
  ++f.reductions;
  if (work->done()) {
    MTC_RETURN_IF_ERROR(work->wait());
    f.comm_sec += work->seconds();
  }
  float* flat = a.in[0].f32();
  int64_t n = 0;
  for (size_t i = 1; i < a.in.size(); ++i) n += a.in[i].numel();
  if (op.state->scale != 1.f) {  // DataParallelOptions::scale, on the reduced elements
    launch_scale(flat, flat, op.state->scale, n, compute);
    MTC_RETURN_IF_ERROR(last_launch("bucket_wait scale"));
  }
  size_t off = 0;
  for (size_t i = 1; i < a.in.size(); ++i) {
    MTC_CUDA(cudaMemcpyAsync(a.in[i].data, flat + off, a.in[i].bytes(), cudaMemcpyDeviceToDevice, compute));
    off += static_cast<size_t>(a.in[i].numel());
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(dist::AllReduceOp, DeviceType::kCUDA, all_reduce);
MTC_REGISTER_KERNEL(dist::AllGatherOp, DeviceType::kCUDA, all_gather);
MTC_REGISTER_KERNEL(dist::ReduceScatterOp, DeviceType::kCUDA, reduce_scatter);
MTC_REGISTER_KERNEL(dist::AllToAllOp, DeviceType::kCUDA, all_to_all);
MTC_REGISTER_KERNEL(dist::BroadcastOp, DeviceType::kCUDA, broadcast);
MTC_REGISTER_KERNEL(dist::BroadcastInPlaceOp, DeviceType::kCUDA, broadcast_in_place);
MTC_REGISTER_KERNEL(dist::BarrierOp, DeviceType::kCUDA, barrier);
MTC_REGISTER_KERNEL(dist::BucketReduceOp, DeviceType::kCUDA, bucket_reduce);
MTC_REGISTER_KERNEL(dist::BucketWaitOp, DeviceType::kCUDA, bucket_wait);

}  // namespace mtc::cuda
