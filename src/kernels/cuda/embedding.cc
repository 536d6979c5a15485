// CUDA kernels of embedding (a row gather) and its gradient (nn_index.cu). The gradient
// adds each table row's dy rows in position order from 0, as the CPU kernel does, so the
// two agree bit for bit; no float atomics, so it is also deterministic.
//
// Indices: the CPU kernels fail with InvalidArgument naming the first index outside
// [0, V). A kernel cannot return a status, so these kernels check the indices on the
// device first and read the answer back, synchronising the compute stream (the only host
// wait in these kernels: once per embedding and per its gradient in an iteration).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/nn_index_launch.h"
#include "mtc/status.h"
#include "ops/embedding.h"

namespace mtc::cuda {
namespace {

// check_indices: the CPU kernel's error for the first index outside [0, vocab).
absl::Status check_indices(KernelContext& ctx, const int32_t* idx, int64_t n, int64_t vocab) {
  MTC_ASSIGN_OR_RETURN(void* slot, ctx.scratch(sizeof(uint64_t)));
  int64_t bad = -1;
  int32_t value = 0;
  MTC_CUDA(find_out_of_range(idx, n, vocab, slot, &bad, &value, stream(ctx)));
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("index ", value, " at position ", bad,
                                                 " is out of range for a table of V = ", vocab, " rows"));
}

absl::Status embedding(const EmbeddingOp& op, const KernelArgs& a) {
  const int64_t vocab = a.in[0].dim(0), d = a.in[0].dim(1);
  const int64_t n = a.in[1].numel();
  MTC_RETURN_IF_ERROR(check_indices(a.ctx, a.in[1].i32(), n, op.masked() ? op.global_vocab : vocab));
  // A vocabulary shard (op.offset): indices of other shards' rows give zero rows.
  launch_gather_rows(a.in[0].f32(), vocab, d, a.in[1].i32(), n, op.offset, a.out[0].f32(), stream(a.ctx));
  return last_launch("embedding");
}

absl::Status embedding_grad(const EmbeddingGradOp& op, const KernelArgs& a) {
  const int32_t* idx = a.in[0].i32();
  const int64_t n = a.in[0].numel();
  const int64_t vocab = op.vocab, d = a.out[0].dim(1);
  MTC_RETURN_IF_ERROR(check_indices(a.ctx, idx, n, op.masked() ? op.global_vocab : vocab));
  if (d == 0 || vocab == 0) return absl::OkStatus();
  if (n >= (int64_t{1} << 32)) {
    // The sort keys hold a position in 32 bits.
    return absl::InvalidArgumentError(
        absl::StrCat("embedding_grad on CUDA takes fewer than 2^32 indices, got ", n));
  }
  MTC_ASSIGN_OR_RETURN(void* scratch, a.ctx.scratch(embedding_grad_scratch_bytes(n, vocab)));
  launch_embedding_grad(idx, n, op.offset, a.in[1].f32(), d, vocab, a.out[0].f32(), scratch, stream(a.ctx));
  return last_launch("embedding_grad");
}

}  // namespace

MTC_REGISTER_KERNEL(EmbeddingOp, DeviceType::kCUDA, embedding);
MTC_REGISTER_KERNEL(EmbeddingGradOp, DeviceType::kCUDA, embedding_grad);

}  // namespace mtc::cuda
