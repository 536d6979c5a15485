// CUDA kernels of matmul, linear and linear's weight gradient through cuBLAS, with the
// semantics of the CPU kernels (src/kernels/cpu/matmul.cc): row-major operands, batch
// dims broadcast, a 2-D b folded into one GEMM over a's batch, linear's bias written into
// y first and the GEMM accumulated onto it (beta = 1), the bias gradient summed in double.
//
// Row-major through a column-major library: a row-major C (m, n) is a column-major C^T,
// so C = op(A) op(B) is issued as C^T = op(B)^T op(A)^T, i.e. cuBLAS gets (b, a) swapped
// with M = n, N = m and the same transpose flags and leading dimensions the CPU passes.
//
// Precision: CUBLAS_DEFAULT_MATH is set before every call (another user of the shared
// handle could have changed it): plain fp32 FMA arithmetic, no TF32 tensor cores (those
// need CUBLAS_TF32_TENSOR_OP_MATH), no BF16x9 emulation (its own math mode). cuBLAS sums
// K in its own order, so results differ from OpenBLAS's by rounding only (tests: rtol 1e-4).
//
// Workspace: a fixed kWorkspaceBytes carved from the compute region (ctx.scratch) is bound
// with cublasSetWorkspace for the op's calls, then the handle is put back on cuBLAS's own
// pool (cublasSetStream does that), so no later call can touch the freed scratch. The size
// never varies, so that cuBLAS picks the same kernel for the same shape every time and a
// DTE recompute reproduces the same bits (cuBLAS is bit-wise reproducible on one GPU model
// for a given configuration).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/nn_blas_launch.h"
#include "mtc/status.h"
#include "ops/matmul.h"

namespace mtc::cuda {
namespace {

// 4 MiB: cuBLAS's recommended workspace before Hopper (it recommends 32 MiB on Hopper,
// mostly for tensor-core kernels, which fp32 in this math mode does not use). A doubt to
// revisit with a profile on the H200.
constexpr size_t kWorkspaceBytes = size_t{4} << 20;

// with_blas: runs body(handle) with the math mode and a scratch workspace bound, and
// unbinds the workspace afterwards whatever body returned.
template <typename F>
absl::Status with_blas(KernelContext& ctx, F&& body) {
  cublasHandle_t h = cublas(ctx);
  MTC_ASSIGN_OR_RETURN(void* ws, ctx.scratch(kWorkspaceBytes));
  MTC_CUDA(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MTC_CUDA(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  absl::Status s = status(cublasSetWorkspace(h, ws, kWorkspaceBytes), "cublasSetWorkspace");
  if (s.ok()) s = body(h);
  // cublasSetStream resets the workspace to the handle's default pool (cuBLAS docs).
  const absl::Status r = status(cublasSetStream(h, stream(ctx)), "cublasSetStream");
  return s.ok() ? r : s;
}

// Gemm: `batch` products c_i (m, n) = op(a_i) op(b_i) + beta * c_i, row-major, a_i at
// a + i * stride_a (floats; 0 repeats one matrix), likewise b_i and c_i.
struct Gemm {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t stride_a = 0;
  const float* b = nullptr;
  int64_t stride_b = 0;
  float* c = nullptr;
  int64_t stride_c = 0;
  int64_t batch = 1;
  float beta = 0.f;
};

absl::Status run_gemm(cublasHandle_t h, KernelContext& ctx, const Gemm& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return absl::OkStatus();
  if (g.k == 0) {  // an empty sum: c = beta * c; BLAS may leave c untouched
    if (g.beta == 0.f) {
      for (int64_t i = 0; i < g.batch; ++i) {
        MTC_CUDA(cudaMemsetAsync(g.c + i * g.stride_c, 0, sizeof(float) * g.m * g.n, stream(ctx)));
      }
    }
    return absl::OkStatus();
  }
  const float one = 1.f;
  const int64_t lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
  // Column-major view: C^T (n, m) = op(B)^T (n, k) op(A)^T (k, m).
  MTC_CUDA(cublasSgemmStridedBatched_64(h, g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, g.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        g.n, g.m, g.k, &one, g.b, ldb, g.stride_b, g.a, lda, g.stride_a,
                                        &g.beta, g.c, g.n, g.stride_c, g.batch));
  return absl::OkStatus();
}

// InnerBatch: output batch dims [split, nd) form one strided batch of `count` products in
// which a's matrix advances by `a_full` ? 1 : 0 matrices per product (likewise b); the
// dims before `split` are looped over.
struct InnerBatch {
  size_t split;
  int64_t count;
  bool a_full, b_full;
};

// inner_batch: the longest run of trailing batch dims over which each operand is either
// fully present (its strides those of a packed tensor of the output's batch shape) or
// fully broadcast (stride 0): there one strided-batched call covers every product.
InnerBatch inner_batch(const Shape& yb, const Shape& sa, const Shape& sb) {
  enum Mode { kUnset, kZero, kFull };
  Mode ma = kUnset, mb = kUnset;
  auto fits = [](Mode& mode, int64_t stride, int64_t count) {
    const Mode want = stride == 0 ? kZero : stride == count ? kFull : kUnset;
    if (want == kUnset || (mode != kUnset && mode != want)) return false;
    mode = want;
    return true;
  };
  size_t split = yb.size();
  int64_t count = 1;
  for (size_t d = yb.size(); d-- > 0;) {
    if (yb[d] != 1) {
      Mode ta = ma, tb = mb;
      if (!fits(ta, sa[d], count) || !fits(tb, sb[d], count)) break;
      ma = ta;
      mb = tb;
      count *= yb[d];
    }
    split = d;
  }
  return {split, count, ma == kFull, mb == kFull};
}

absl::Status matmul(const MatmulOp& op, const KernelArgs& args) {
  const auto [m, n, k, batches, ab, bb, yb, fold] =
      op.plan(args.in[0].shape(), args.in[1].shape(), args.out[0].shape());
  const float* a = args.in[0].f32();
  const float* b = args.in[1].f32();
  float* y = args.out[0].f32();
  if (batches == 0 || m == 0 || n == 0) return absl::OkStatus();
  return with_blas(args.ctx, [&](cublasHandle_t h) -> absl::Status {
    if (fold) {
      // One b for all: the batch folds into a's rows, a single GEMM (as on the CPU).
      return run_gemm(h, args.ctx,
                      Gemm{.ta = false, .tb = op.trans_b, .m = batches * m, .n = n, .k = k, .a = a, .b = b,
                           .c = y});
    }
    // Strides in matrices, as the CPU kernel reads the batch dims.
    const Shape sa = broadcast_strides(ab, yb), sb = broadcast_strides(bb, yb);
    const InnerBatch ib = inner_batch(yb, sa, sb);
    const int64_t a_mat = m * k, b_mat = k * n, y_mat = m * n;
    const Shape outer(yb.begin(), yb.begin() + static_cast<std::ptrdiff_t>(ib.split));
    const int64_t outers = numel(outer);
    // The rest broadcast in ways one stride cannot say: one strided batch per outer index.
    for (int64_t o = 0; o < outers; ++o) {
      int64_t rem = o, ao = 0, bo = 0;
      for (int d = static_cast<int>(ib.split) - 1; d >= 0; --d) {
        const int64_t idx = rem % yb[d];
        rem /= yb[d];
        ao += idx * sa[d];
        bo += idx * sb[d];
      }
      MTC_RETURN_IF_ERROR(run_gemm(h, args.ctx,
                                   Gemm{.ta = op.trans_a, .tb = op.trans_b, .m = m, .n = n, .k = k,
                                        .a = a + ao * a_mat, .stride_a = ib.a_full ? a_mat : 0,
                                        .b = b + bo * b_mat, .stride_b = ib.b_full ? b_mat : 0,
                                        .c = y + o * ib.count * y_mat, .stride_c = y_mat,
                                        .batch = ib.count}));
    }
    return absl::OkStatus();
  });
}

absl::Status linear(const LinearOp& op, const KernelArgs& args) {
  const int64_t in = args.in[0].shape().back(), out = args.in[1].dim(0);
  const int64_t rows = args.out[0].numel() / std::max<int64_t>(out, 1);
  float* y = args.out[0].f32();
  if (rows == 0 || out == 0) return absl::OkStatus();
  float beta = 0.f;
  if (op.has_bias && !op.bias_ignored) {
    launch_fill_rows(args.in[2].f32(), y, rows, out, stream(args.ctx));
    MTC_RETURN_IF_ERROR(last_launch("fill_rows"));
    beta = 1.f;
  }
  return with_blas(args.ctx, [&](cublasHandle_t h) {
    return run_gemm(h, args.ctx,
                    Gemm{.ta = false, .tb = true, .m = rows, .n = out, .k = in, .a = args.in[0].f32(),
                         .b = args.in[1].f32(), .c = y, .beta = beta});
  });
}

absl::Status linear_backward_weight(const LinearBackwardWeightOp& op, const KernelArgs& args) {
  const float* x = args.in[0].f32();
  const float* dy = args.in[1].f32();
  const int64_t in = args.in[0].shape().back(), out = args.in[1].shape().back();
  const int64_t rows = args.in[1].numel() / std::max<int64_t>(out, 1);
  MTC_RETURN_IF_ERROR(with_blas(args.ctx, [&](cublasHandle_t h) {  // dw = dy^T x
    return run_gemm(h, args.ctx,
                    Gemm{.ta = true, .tb = false, .m = out, .n = in, .k = rows, .a = dy, .b = x,
                         .c = args.out[0].f32()});
  }));
  if (!op.with_bias || out == 0) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(void* part, args.ctx.scratch(column_sum_scratch_bytes(rows, out)));
  launch_column_sum(dy, rows, out, args.out[1].f32(), part, stream(args.ctx));
  return last_launch("column_sum");
}

}  // namespace

MTC_REGISTER_KERNEL(MatmulOp, DeviceType::kCUDA, matmul);
MTC_REGISTER_KERNEL(LinearOp, DeviceType::kCUDA, linear);
MTC_REGISTER_KERNEL(LinearBackwardWeightOp, DeviceType::kCUDA, linear_backward_weight);

}  // namespace mtc::cuda
