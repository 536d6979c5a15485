// CPU kernels of embedding (a row gather) and its gradient. The gradient sorts index
// positions by row with a stable counting sort, then each thread owns whole rows of
// dweight and adds their dy rows in position order: no atomics, a fixed order.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_util.h"
#include "ops/embedding.h"

namespace mtc::cpu {
namespace {

// check_indices: InvalidArgument naming the first index outside [0, vocab).
absl::Status check_indices(const int32_t* idx, int64_t n, int64_t vocab) {
  const int64_t bad = first_out_of_range(idx, n, vocab);
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("index ", idx[bad], " at position ", bad, " is out of range for a table of V = ", vocab, " rows"));
}

absl::Status embedding(const EmbeddingOp& op, const KernelArgs& a) {
  const int64_t vocab = a.in[0].dim(0), d = a.in[0].dim(1);
  const float* w = a.in[0].f32();
  const int32_t* idx = a.in[1].i32();
  const int64_t n = a.in[1].numel();
  MTC_RETURN_IF_ERROR(check_indices(idx, n, op.masked() ? op.global_vocab : vocab));
  if (d == 0) return absl::OkStatus();
  float* y = a.out[0].f32();
  if (op.masked()) {
    // A vocabulary shard: rows [offset, offset + vocab) are here, the others read as zeros.
#pragma omp parallel for if (n * d > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = idx[i] - op.offset;
      if (r >= 0 && r < vocab) {
        std::memcpy(y + i * d, w + r * d, static_cast<size_t>(d) * sizeof(float));
      } else {
        std::memset(y + i * d, 0, static_cast<size_t>(d) * sizeof(float));
      }
    }
    return absl::OkStatus();
  }
#pragma omp parallel for if (n * d > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) std::memcpy(y + i * d, w + idx[i] * d, static_cast<size_t>(d) * sizeof(float));
  return absl::OkStatus();
}

absl::Status embedding_grad(const EmbeddingGradOp& op, const KernelArgs& a) {
  const int32_t* idx = a.in[0].i32();
  const int64_t n = a.in[0].numel();
  const float* dy = a.in[1].f32();
  const int64_t vocab = op.vocab, d = a.out[0].dim(1);
  MTC_RETURN_IF_ERROR(check_indices(idx, n, op.masked() ? op.global_vocab : vocab));
  if (d == 0) return absl::OkStatus();
  // row(i): the row of dweight position i adds to, or -1 (another shard's row).
  auto row = [&](int64_t i) -> int64_t {
    const int64_t r = idx[i] - op.offset;
    return r >= 0 && r < vocab ? r : -1;
  };
  // start[v] .. start[v + 1]: the positions holding row v, in increasing order.
  std::vector<int64_t> start(vocab + 1, 0), pos(n);
  for (int64_t i = 0; i < n; ++i) {
    if (const int64_t r = row(i); r >= 0) ++start[r + 1];
  }
  for (int64_t v = 0; v < vocab; ++v) start[v + 1] += start[v];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    if (const int64_t r = row(i); r >= 0) pos[fill[r]++] = i;
  }
  float* dw = a.out[0].f32();
#pragma omp parallel for schedule(dynamic, 16) if (vocab * d + n * d > kParallelGrain)
  for (int64_t v = 0; v < vocab; ++v) {
    float* row = dw + v * d;
    for (int64_t k = 0; k < d; ++k) row[k] = 0.f;
    for (int64_t p = start[v]; p < start[v + 1]; ++p) {
      const float* g = dy + pos[p] * d;
      for (int64_t k = 0; k < d; ++k) row[k] += g[k];
    }
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(EmbeddingOp, DeviceType::kCPU, embedding);
MTC_REGISTER_KERNEL(EmbeddingGradOp, DeviceType::kCPU, embedding_grad);

}  // namespace mtc::cpu
