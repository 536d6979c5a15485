// CUDA kernels of max_pool2d, avg_pool2d (count_include_pad), their gradient ops and
// global_avg_pool, on our own kernels (dnn_pool.cu) rather than cuDNN's pooling: the max
// pool's gradient must go to each window's first maximum in row-major order (NaN taking
// over), the element the CPU kernel and PyTorch pick, where cuDNN documents no
// tie-breaking; and gathering the gradients per input element, in the CPU's window
// order, makes them deterministic and bit-identical to the CPU's without atomics.
#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/dnn_pool_launch.h"
#include "mtc/status.h"
#include "ops/pool.h"

namespace mtc::cuda {
namespace {

// geometry: the problem of x (N, C, H, W) pooled to y (N, C, OH, OW) under o. In-plane
// offsets are int32 in the kernels (the argmax buffer holds them), so a plane must have
// fewer than 2^31 values.
absl::StatusOr<PoolGeometry> geometry(const char* op, const Shape& x, const Shape& y,
                                      const Pool2dOptions& o) {
  if (x[2] * x[3] > INT_MAX || y[2] * y[3] > INT_MAX) {
    return absl::UnimplementedError(absl::StrCat(op, " on CUDA: planes of 2^31 or more values (x ",
                                                 shape_str(x), ", y ", shape_str(y), ") are not supported"));
  }
  return PoolGeometry{.planes = x[0] * x[1],
                      .h = x[2],
                      .w = x[3],
                      .oh = y[2],
                      .ow = y[3],
                      .kh = o.kernel_h,
                      .kw = o.kernel_w,
                      .sh = o.stride_h,
                      .sw = o.stride_w,
                      .ph = o.pad_h,
                      .pw = o.pad_w};
}

// The CPU kernels' divisor, rounded the same way.
float avg_inv(const Pool2dOptions& o) { return 1.0f / static_cast<float>(o.kernel_h * o.kernel_w); }

absl::Status max_pool2d(const MaxPool2dOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const PoolGeometry g, geometry("max_pool2d", a.in[0].shape(), a.out[0].shape(), op.o));
  launch_max_pool2d(a.in[0].f32(), a.out[0].f32(), g, stream(a.ctx));
  return last_launch("max_pool2d");
}

// max_pool2d_backward: each window's argmax first (one thread per output, into scratch),
// then each input element sums dy over the windows that picked it.
absl::Status max_pool2d_backward(const MaxPool2dBackwardOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const PoolGeometry g,
                       geometry("max_pool2d_backward", a.in[0].shape(), a.in[1].shape(), op.o));
  cudaStream_t st = stream(a.ctx);
  const int64_t outputs = g.planes * g.oh * g.ow;
  if (outputs == 0) {  // no windows: nothing flows back
    if (a.out[0].bytes() > 0) MTC_CUDA(cudaMemsetAsync(a.out[0].data, 0, a.out[0].bytes(), st));
    return absl::OkStatus();
  }
  MTC_ASSIGN_OR_RETURN(void* p, a.ctx.scratch(static_cast<size_t>(outputs) * sizeof(int32_t)));
  auto* argmax = static_cast<int32_t*>(p);
  launch_max_pool2d_argmax(a.in[0].f32(), argmax, g, st);
  MTC_RETURN_IF_ERROR(last_launch("max_pool2d_argmax"));
  launch_max_pool2d_backward(argmax, a.in[1].f32(), a.out[0].f32(), g, st);
  return last_launch("max_pool2d_backward");
}

absl::Status avg_pool2d(const AvgPool2dOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const PoolGeometry g, geometry("avg_pool2d", a.in[0].shape(), a.out[0].shape(), op.o));
  launch_avg_pool2d(a.in[0].f32(), a.out[0].f32(), g, avg_inv(op.o), stream(a.ctx));
  return last_launch("avg_pool2d");
}

absl::Status avg_pool2d_backward(const AvgPool2dBackwardOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const PoolGeometry g,
                       geometry("avg_pool2d_backward", a.out[0].shape(), a.in[0].shape(), op.o));
  launch_avg_pool2d_backward(a.in[0].f32(), a.out[0].f32(), g, avg_inv(op.o), stream(a.ctx));
  return last_launch("avg_pool2d_backward");
}

absl::Status global_avg_pool(const GlobalAvgPoolOp&, const KernelArgs& a) {
  const Shape& xs = a.in[0].shape();
  const int64_t hw = xs[2] * xs[3];
  const double inv = 1.0 / static_cast<double>(hw > 1 ? hw : 1);
  launch_global_avg_pool(a.in[0].f32(), a.out[0].f32(), xs[0] * xs[1], hw, inv, stream(a.ctx));
  return last_launch("global_avg_pool");
}

}  // namespace

MTC_REGISTER_KERNEL(MaxPool2dOp, DeviceType::kCUDA, max_pool2d);
MTC_REGISTER_KERNEL(MaxPool2dBackwardOp, DeviceType::kCUDA, max_pool2d_backward);
MTC_REGISTER_KERNEL(AvgPool2dOp, DeviceType::kCUDA, avg_pool2d);
MTC_REGISTER_KERNEL(AvgPool2dBackwardOp, DeviceType::kCUDA, avg_pool2d_backward);
MTC_REGISTER_KERNEL(GlobalAvgPoolOp, DeviceType::kCUDA, global_avg_pool);

}  // namespace mtc::cuda
