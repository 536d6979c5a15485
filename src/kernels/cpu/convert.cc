// CPU kernel of the placement conversions (src/dist/convert_ops.h): runs the op's
// ConvertKernel on host memory: packs the shards into scratch with memcpy, runs the
// communicator's collective (MPI, or local for one rank), waits, and unpacks.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dist/collective_ops.h"
#include "dist/convert_ops.h"
#include "kernels/cpu/cpu_util.h"

namespace mtc::cpu {
namespace {

using Buffer = dist::ConvertKernel::Buffer;

// copy2d: `rows` rows of `width` bytes from src (row pitch spitch) to dst (pitch dpitch).
void copy2d(char* dst, size_t dpitch, const char* src, size_t spitch, size_t width, int64_t rows) {
  if (dpitch == width && spitch == width) {
    std::memcpy(dst, src, width * rows);
    return;
  }
#pragma omp parallel for if (static_cast<int64_t>(width) * rows > kParallelGrain * 4)
  for (int64_t i = 0; i < rows; ++i) std::memcpy(dst + i * dpitch, src + i * spitch, width);
}

absl::Status convert(const dist::ConvertOp& op, const KernelArgs& a) {
  comm::Communicator& c = *op.comm;
  if (c.device_memory()) {
    return absl::FailedPreconditionError(absl::StrCat("the ", comm::backend_name(c.backend()),
                                                      " communicator needs tensors on a GPU, these are on the CPU"));
  }
  MTC_ASSIGN_OR_RETURN(const dist::ConvertKernel k, dist::prepare_kernel(op, a));
  const size_t es = k.element_bytes;
  auto run = [&](const dist::ConvertKernel::Copy& cp) {
    if (cp.width == 0 || cp.rows == 0) return;  // an empty shard (its tensor may have no memory)
    copy2d(k.at(cp.dst, cp.dst_at), cp.dst_pitch * es, k.at(cp.src, cp.src_at), cp.src_pitch * es, cp.width * es,
           cp.rows);
  };
  for (const auto& cp : k.pack) run(cp);
  for (const auto& z : k.zero) std::memset(k.at(Buffer::kScratch, z.at), 0, z.count * es);
  size_t sent = k.count;
  for (size_t n : k.send_counts) sent += n;
  MTC_RETURN_IF_ERROR(dist::issue_and_wait([&] { return k.issue(c); }, "convert", sent * es, a.ctx));
  for (const auto& cp : k.unpack) run(cp);
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(dist::ConvertOp, DeviceType::kCPU, convert);

}  // namespace mtc::cpu
