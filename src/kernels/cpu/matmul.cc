// CPU kernels of matmul, linear and linear's weight gradient, through OpenBLAS's
// cblas_sgemm (its threads split M and N, never K, so results are deterministic for a
// fixed thread count). Bias sums run in double in a fixed order.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "ops/matmul.h"

namespace mtc::cpu {
namespace {

// gemm: c (m, n) = op(a) op(b) + beta * c, row-major, a and b packed as their shapes say.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum; BLAS may leave c untouched
    if (beta == 0.f) std::memset(c, 0, sizeof(float) * m * n);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(ta ? m : k), b,
              static_cast<int>(tb ? k : n), beta, c, static_cast<int>(n));
}

absl::Status matmul(const MatmulOp& op, const KernelArgs& args) {
  const auto [m, n, k, batches, ab, bb, yb, fold] =
      op.plan(args.in[0].shape(), args.in[1].shape(), args.out[0].shape());
  const float* a = args.in[0].f32();
  const float* b = args.in[1].f32();
  float* y = args.out[0].f32();
  if (fold) {
    // One b for all: the batch folds into a's rows, a single GEMM.
    gemm(false, op.trans_b, batches * m, n, k, a, b, 0.f, y);
    return absl::OkStatus();
  }
  // One GEMM per output batch, a and b read through broadcast strides (in matrices).
  const Shape sa = broadcast_strides(ab, yb), sb = broadcast_strides(bb, yb);
  const int64_t a_mat = m * k, b_mat = k * n;
  for (int64_t i = 0; i < batches; ++i) {
    int64_t rem = i, ao = 0, bo = 0;
    for (int d = static_cast<int>(yb.size()) - 1; d >= 0; --d) {
      const int64_t idx = rem % yb[d];
      rem /= yb[d];
      ao += idx * sa[d];
      bo += idx * sb[d];
    }
    gemm(op.trans_a, op.trans_b, m, n, k, a + ao * a_mat, b + bo * b_mat, 0.f, y + i * m * n);
  }
  return absl::OkStatus();
}

absl::Status linear(const LinearOp& op, const KernelArgs& args) {
  const int64_t in = args.in[0].shape().back(), out = args.in[1].dim(0);
  const int64_t rows = args.out[0].numel() / std::max<int64_t>(out, 1);
  float* y = args.out[0].f32();
  float beta = 0.f;
  if (op.has_bias && !op.bias_ignored) {
    const float* bias = args.in[2].f32();
    for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * out, bias, sizeof(float) * out);
    beta = 1.f;
  }
  gemm(false, true, rows, out, in, args.in[0].f32(), args.in[1].f32(), beta, y);
  return absl::OkStatus();
}

absl::Status linear_backward_weight(const LinearBackwardWeightOp& op, const KernelArgs& args) {
  const float* x = args.in[0].f32();
  const float* dy = args.in[1].f32();
  const int64_t in = args.in[0].shape().back(), out = args.in[1].shape().back();
  const int64_t rows = args.in[1].numel() / std::max<int64_t>(out, 1);
  gemm(true, false, out, in, rows, dy, x, 0.f, args.out[0].f32());  // dw = dy^T x
  if (!op.with_bias) return absl::OkStatus();
  float* db = args.out[1].f32();
  constexpr int64_t kBlock = 64;  // columns per task; each column's sum runs over rows in order
#pragma omp parallel for schedule(static) if (rows * out > kParallelGrain)
  for (int64_t c0 = 0; c0 < out; c0 += kBlock) {
    const int64_t c1 = std::min(out, c0 + kBlock);
    double acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += dy[r * out + c];
    for (int64_t c = c0; c < c1; ++c) db[c] = static_cast<float>(acc[c - c0]);
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(MatmulOp, DeviceType::kCPU, matmul);
MTC_REGISTER_KERNEL(LinearOp, DeviceType::kCPU, linear);
MTC_REGISTER_KERNEL(LinearBackwardWeightOp, DeviceType::kCPU, linear_backward_weight);

}  // namespace mtc::cpu
