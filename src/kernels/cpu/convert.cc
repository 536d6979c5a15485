// CPU kernel of the placement conversions (src/dist/convert_ops.h): packs the shards
// into scratch, runs the communicator's collective on host memory (MPI, or local for one
// rank), waits, and unpacks. A shard r of dimension d, the tensor viewed as (outer, n,
// inner), is `outer` rows of len_r * inner elements at column off_r * inner, pitch
// n * inner: each pack or unpack is one strided 2-D copy.
//
// Uneven shards: all_gather and reduce_scatter pad every rank's block to the largest
// shard, B = outer * ceil(n / p) * inner elements, and run the native collectives with
// count B; block r holds shard r packed (outer, len_r, inner) in its first
// outer * len_r * inner elements and zeros after. all_to_all sends exact blocks with
// all_to_all_v.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "dist/convert_ops.h"
#include "kernels/cpu/cpu_util.h"

namespace mtc::cpu {
namespace {

using partition::Range;
using partition::Step;
using partition::shard_range;

// copy2d: `rows` rows of `width` bytes from src (row pitch spitch) to dst (pitch dpitch).
void copy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, int64_t rows) {
  if (width == 0 || rows == 0) return;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (dpitch == width && spitch == width) {
    std::memcpy(d, s, width * rows);
    return;
  }
#pragma omp parallel for if (static_cast<int64_t>(width) * rows > kParallelGrain * 4)
  for (int64_t i = 0; i < rows; ++i) std::memcpy(d + i * dpitch, s + i * spitch, width);
}

// scratch: `bytes` of scratch, null for none.
absl::StatusOr<char*> scratch(KernelContext& ctx, size_t bytes) {
  if (bytes == 0) return nullptr;
  MTC_ASSIGN_OR_RETURN(void* p, ctx.scratch(bytes));
  return static_cast<char*>(p);
}

absl::Status convert(const dist::ConvertOp& op, const KernelArgs& a) {
  comm::Communicator& c = *op.comm;
  if (c.device_memory()) {
    return absl::FailedPreconditionError(absl::StrCat("the ", comm::backend_name(c.backend()),
                                                      " communicator needs tensors on a GPU, these are on the CPU"));
  }
  MTC_ASSIGN_OR_RETURN(const comm::DataType t, dist::to_comm(op.global.dtype));
  const size_t es = dtype_size(op.global.dtype);
  const int p = c.world_size();
  const char* x = static_cast<const char*>(a.in[0].data);
  char* y = static_cast<char*>(a.out[0].data);

  switch (op.step.step) {
    case Step::kAllReduce:
      return c.all_reduce(x, y, a.in[0].numel(), t, comm::ReduceOp::kSum)->wait();

    case Step::kAllGather: {  // x (outer, len_me, inner) -> y (outer, n, inner)
      const dist::ConvertLayout l = dist::layout_along(op.global.shape, op.from.dim);
      const int64_t most = shard_range(l.n, p, 0).size;
      const size_t block = static_cast<size_t>(l.outer * most * l.inner);  // elements
      if (l.outer == 1 && l.n % p == 0) return c.all_gather(x, y, block, t)->wait();  // y is the blocks
      const size_t mine = static_cast<size_t>(a.in[0].numel());
      MTC_ASSIGN_OR_RETURN(char* buf, scratch(a.ctx, (p + 1) * block * es));
      const char* send = x;
      if (mine != block) {  // pad this rank's shard to the block size
        char* padded = buf + p * block * es;
        if (mine > 0) std::memcpy(padded, x, mine * es);
        std::memset(padded + mine * es, 0, (block - mine) * es);
        send = padded;
      }
      MTC_RETURN_IF_ERROR(c.all_gather(send, buf, block, t)->wait());
      for (int r = 0; r < p; ++r) {
        const Range s = shard_range(l.n, p, r);
        copy2d(y + s.offset * l.inner * es, l.n * l.inner * es, buf + r * block * es, s.size * l.inner * es,
               s.size * l.inner * es, l.outer);
      }
      return absl::OkStatus();
    }

    case Step::kReduceScatter: {  // x (outer, n, inner) -> y (outer, len_me, inner)
      const dist::ConvertLayout l = dist::layout_along(op.global.shape, op.to.dim);
      const int64_t most = shard_range(l.n, p, 0).size;
      const size_t block = static_cast<size_t>(l.outer * most * l.inner);
      if (l.outer == 1 && l.n % p == 0) return c.reduce_scatter(x, y, block, t, comm::ReduceOp::kSum)->wait();
      const size_t mine = static_cast<size_t>(a.out[0].numel());
      MTC_ASSIGN_OR_RETURN(char* buf, scratch(a.ctx, (p + 1) * block * es));
      for (int r = 0; r < p; ++r) {
        const Range s = shard_range(l.n, p, r);
        char* b = buf + r * block * es;
        const size_t len = static_cast<size_t>(l.outer * s.size * l.inner);
        copy2d(b, s.size * l.inner * es, x + s.offset * l.inner * es, l.n * l.inner * es, s.size * l.inner * es,
               l.outer);
        if (block > len) std::memset(b + len * es, 0, (block - len) * es);
      }
      char* recv = mine == block ? y : buf + p * block * es;
      MTC_RETURN_IF_ERROR(c.reduce_scatter(buf, recv, block, t, comm::ReduceOp::kSum)->wait());
      if (recv != y && mine > 0) std::memcpy(y, recv, mine * es);
      return absl::OkStatus();
    }

    case Step::kAllToAll: {  // x: dim d cut, d' whole -> y: d whole, d' cut
      const int d = op.from.dim, dn = op.to.dim;
      const dist::ConvertLayout lx = dist::layout_along(a.in[0].shape(), dn);   // d' of x is whole
      const dist::ConvertLayout ly = dist::layout_along(a.out[0].shape(), d);   // d of y is whole
      std::vector<size_t> send(p), recv(p);
      for (int q = 0; q < p; ++q) {
        send[q] = static_cast<size_t>(lx.outer * shard_range(lx.n, p, q).size * lx.inner);
        recv[q] = static_cast<size_t>(ly.outer * shard_range(ly.n, p, q).size * ly.inner);
      }
      size_t total_send = 0, total_recv = 0;
      for (int q = 0; q < p; ++q) total_send += send[q], total_recv += recv[q];
      MTC_ASSIGN_OR_RETURN(char* buf, scratch(a.ctx, (total_send + total_recv) * es));
      char* sbuf = buf;
      char* rbuf = buf + total_send * es;
      size_t at = 0;
      for (int q = 0; q < p; ++q) {  // block q: x's shard q of d'
        const Range s = shard_range(lx.n, p, q);
        copy2d(sbuf + at * es, s.size * lx.inner * es, x + s.offset * lx.inner * es, lx.n * lx.inner * es,
               s.size * lx.inner * es, lx.outer);
        at += send[q];
      }
      MTC_RETURN_IF_ERROR(c.all_to_all_v(sbuf, send, rbuf, recv, t)->wait());
      at = 0;
      for (int q = 0; q < p; ++q) {  // from rank q: its shard q of d, this rank's shard of d'
        const Range s = shard_range(ly.n, p, q);
        copy2d(y + s.offset * ly.inner * es, ly.n * ly.inner * es, rbuf + at * es, s.size * ly.inner * es,
               s.size * ly.inner * es, ly.outer);
        at += recv[q];
      }
      return absl::OkStatus();
    }

    default:
      return absl::InvalidArgumentError(
          absl::StrCat("convert: no kernel for step ", partition::step_name(op.step.step)));
  }
}

}  // namespace

MTC_REGISTER_KERNEL(dist::ConvertOp, DeviceType::kCPU, convert);

}  // namespace mtc::cpu
