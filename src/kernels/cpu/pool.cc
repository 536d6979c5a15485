// CPU kernels of the pooling ops. Threads split the (n, c) planes; within a plane the
// windows run in order, so scatters in the backward ops are deterministic.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu_util.h"
#include "ops/pool.h"

namespace mtc::cpu {
namespace {

// PlaneGeometry: one (n, c) plane of x (H, W) and of y (OH, OW), and the window of an
// output element clipped to the input.
struct PlaneGeometry {
  int64_t planes, h, w, oh, ow;
  Pool2dOptions o;
  PlaneGeometry(const Shape& x, const Shape& y, const Pool2dOptions& o)
      : planes(x[0] * x[1]), h(x[2]), w(x[3]), oh(y[2]), ow(y[3]), o(o) {}
  struct Window {
    int64_t h0, h1, w0, w1;  // [h0, h1) x [w0, w1), inside the input
  };
  Window window(int64_t i, int64_t j) const {
    const int64_t hs = i * o.stride_h - o.pad_h, ws = j * o.stride_w - o.pad_w;
    return {std::max<int64_t>(hs, 0), std::min<int64_t>(hs + o.kernel_h, h), std::max<int64_t>(ws, 0),
            std::min<int64_t>(ws + o.kernel_w, w)};
  }
  bool parallel() const { return planes * h * w > kParallelGrain; }
};

// argmax: offset in the plane of the window's first maximum (NaN wins, as in PyTorch).
inline int64_t argmax(const float* plane, const PlaneGeometry& g, const PlaneGeometry::Window& win) {
  int64_t best = win.h0 * g.w + win.w0;
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t r = win.h0; r < win.h1; ++r)
    for (int64_t c = win.w0; c < win.w1; ++c) {
      const float v = plane[r * g.w + c];
      if (v > m || std::isnan(v)) {
        m = v;
        best = r * g.w + c;
      }
    }
  return best;
}

absl::Status max_pool2d(const MaxPool2dOp& op, const KernelArgs& a) {
  const PlaneGeometry g(a.in[0].shape(), a.out[0].shape(), op.o);
  const float* x = a.in[0].f32();
  float* y = a.out[0].f32();
#pragma omp parallel for schedule(static) if (g.parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* xp = x + p * g.h * g.w;
    float* yp = y + p * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) yp[i * g.ow + j] = xp[argmax(xp, g, g.window(i, j))];
  }
  return absl::OkStatus();
}

absl::Status max_pool2d_backward(const MaxPool2dBackwardOp& op, const KernelArgs& a) {
  const PlaneGeometry g(a.in[0].shape(), a.in[1].shape(), op.o);
  const float* x = a.in[0].f32();
  const float* dy = a.in[1].f32();
  float* dx = a.out[0].f32();
#pragma omp parallel for schedule(static) if (g.parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* xp = x + p * g.h * g.w;
    const float* dyp = dy + p * g.oh * g.ow;
    float* dxp = dx + p * g.h * g.w;
    std::memset(dxp, 0, sizeof(float) * g.h * g.w);
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) dxp[argmax(xp, g, g.window(i, j))] += dyp[i * g.ow + j];
  }
  return absl::OkStatus();
}

absl::Status avg_pool2d(const AvgPool2dOp& op, const KernelArgs& a) {
  const PlaneGeometry g(a.in[0].shape(), a.out[0].shape(), op.o);
  const float* x = a.in[0].f32();
  float* y = a.out[0].f32();
  const float inv = 1.0f / static_cast<float>(op.o.kernel_h * op.o.kernel_w);
#pragma omp parallel for schedule(static) if (g.parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* xp = x + p * g.h * g.w;
    float* yp = y + p * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) {
        const PlaneGeometry::Window win = g.window(i, j);
        float acc = 0.f;
        for (int64_t r = win.h0; r < win.h1; ++r)
          for (int64_t c = win.w0; c < win.w1; ++c) acc += xp[r * g.w + c];
        yp[i * g.ow + j] = acc * inv;
      }
  }
  return absl::OkStatus();
}

absl::Status avg_pool2d_backward(const AvgPool2dBackwardOp& op, const KernelArgs& a) {
  const PlaneGeometry g(a.out[0].shape(), a.in[0].shape(), op.o);
  const float* dy = a.in[0].f32();
  float* dx = a.out[0].f32();
  const float inv = 1.0f / static_cast<float>(op.o.kernel_h * op.o.kernel_w);
#pragma omp parallel for schedule(static) if (g.parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* dyp = dy + p * g.oh * g.ow;
    float* dxp = dx + p * g.h * g.w;
    std::memset(dxp, 0, sizeof(float) * g.h * g.w);
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) {
        const PlaneGeometry::Window win = g.window(i, j);
        const float d = dyp[i * g.ow + j] * inv;
        for (int64_t r = win.h0; r < win.h1; ++r)
          for (int64_t c = win.w0; c < win.w1; ++c) dxp[r * g.w + c] += d;
      }
  }
  return absl::OkStatus();
}

absl::Status global_avg_pool(const GlobalAvgPoolOp&, const KernelArgs& a) {
  const Shape& xs = a.in[0].shape();
  const int64_t planes = xs[0] * xs[1], hw = xs[2] * xs[3];
  const float* x = a.in[0].f32();
  float* y = a.out[0].f32();
  const double inv = 1.0 / static_cast<double>(std::max<int64_t>(hw, 1));
#pragma omp parallel for schedule(static) if (planes * hw > kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    double acc = 0;
    for (int64_t i = 0; i < hw; ++i) acc += x[p * hw + i];
    y[p] = static_cast<float>(acc * inv);
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(MaxPool2dOp, DeviceType::kCPU, max_pool2d);
MTC_REGISTER_KERNEL(MaxPool2dBackwardOp, DeviceType::kCPU, max_pool2d_backward);
MTC_REGISTER_KERNEL(AvgPool2dOp, DeviceType::kCPU, avg_pool2d);
MTC_REGISTER_KERNEL(AvgPool2dBackwardOp, DeviceType::kCPU, avg_pool2d_backward);
MTC_REGISTER_KERNEL(GlobalAvgPoolOp, DeviceType::kCPU, global_avg_pool);

}  // namespace mtc::cpu
