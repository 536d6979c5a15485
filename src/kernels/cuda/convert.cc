// CUDA kernel of the placement conversions (src/dist/convert_ops.h): runs the op's
// ConvertKernel (the same copies and padded collectives as the CPU kernel) on the GPU.
// The communicator must be NCCL's: the shards are packed on the compute stream (each a
// strided 2-D block: cudaMemcpy2DAsync; padding: cudaMemsetAsync), NCCL's
// stream waits for the packing, runs the collective, the compute stream waits for it
// (events both ways, as in src/kernels/cuda/collective.cc) and unpacks. Nothing waits on
// the host; the scratch is stream-ordered on the compute stream, which passes the
// collective's end before any later kernel can reuse it.
#include <cuda_runtime.h>

#include <climits>

#include "absl/strings/str_cat.h"
#include "dist/convert_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ew_shape_launch.h"

namespace mtc::cuda {
namespace {

using Buffer = dist::ConvertKernel::Buffer;

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

// collective: runs `issue` on NCCL's stream after the compute stream's work so far; the
// compute stream then waits for it.
template <typename F>
absl::Status collective(const dist::ConvertOp& op, cudaStream_t compute, F issue) {
  cudaStream_t nccl = static_cast<cudaStream_t>(op.comm->stream());
  MTC_RETURN_IF_ERROR(wait_for(nccl, compute));
  std::shared_ptr<comm::Work> w = issue();
  if (w->done()) MTC_RETURN_IF_ERROR(w->wait());  // an argument error fails at once
  return wait_for(compute, nccl);
}

// copy2d: `rows` rows of `width` bytes from src (row pitch spitch) to dst (pitch dpitch),
// on `s`. Pitches above cudaMemcpy2D's limit (2^31 bytes) go through the copy kernel of
// the shape ops (4-byte elements: f32 and i32 alike).
absl::Status copy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, int64_t rows,
                    cudaStream_t s) {
  if (rows == 1 || (dpitch == width && spitch == width)) {
    MTC_CUDA(cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDeviceToDevice, s));
    return absl::OkStatus();
  }
  if (dpitch <= INT_MAX && spitch <= INT_MAX) {
    MTC_CUDA(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, s));
    return absl::OkStatus();
  }
  launch_copy_along_dim32(src, static_cast<int64_t>(spitch / 4), 0, dst, static_cast<int64_t>(dpitch / 4), 0, rows,
                          static_cast<int64_t>(width / 4), 1, s);
  return last_launch("copy_along_dim32");
}

absl::Status convert(const dist::ConvertOp& op, const KernelArgs& a) {
  comm::Communicator& c = *op.comm;
  if (!c.device_memory()) {
    return absl::FailedPreconditionError(absl::StrCat("the ", comm::backend_name(c.backend()),
                                                      " communicator needs host tensors, these are on a GPU: "
                                                      "expected the nccl backend"));
  }
  MTC_ASSIGN_OR_RETURN(const dist::ConvertKernel k, dist::prepare_kernel(op, a));
  const size_t es = k.element_bytes;
  cudaStream_t cs = stream(a.ctx);
  auto run = [&](const dist::ConvertKernel::Copy& cp) {
    if (cp.width == 0 || cp.rows == 0) return absl::OkStatus();  // an empty shard
    return copy2d(k.at(cp.dst, cp.dst_at), cp.dst_pitch * es, k.at(cp.src, cp.src_at), cp.src_pitch * es,
                  cp.width * es, cp.rows, cs);
  };
  for (const auto& cp : k.pack) MTC_RETURN_IF_ERROR(run(cp));
  for (const auto& z : k.zero) MTC_CUDA(cudaMemsetAsync(k.at(Buffer::kScratch, z.at), 0, z.count * es, cs));
  MTC_RETURN_IF_ERROR(collective(op, cs, [&] { return k.issue(c); }));
  for (const auto& cp : k.unpack) MTC_RETURN_IF_ERROR(run(cp));
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(dist::ConvertOp, DeviceType::kCUDA, convert);

}  // namespace mtc::cuda
