// CPU kernels of the elementwise ops: fill, add/sub/mul with broadcasting, scale,
// relu/swish/gelu/sigmoid/tanh and their gradients, expand, reshape (a copy) and copy_.
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "ops/elementwise.h"
#include "ops/reshape.h"

namespace mtc::cpu {
namespace {

absl::Status fill(const FillOp& op, const KernelArgs& a) {
  const TensorView& y = a.out[0];
  const int64_t n = y.numel();
  if (op.dtype == DType::kI32) {
    int32_t* p = y.i32();
    const int32_t v = static_cast<int32_t>(op.value);
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  } else {
    float* p = y.f32();
#pragma omp parallel for simd if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] = op.value;
  }
  return absl::OkStatus();
}

template <typename F>
void binary_loop(const TensorView& a, const TensorView& b, const TensorView& y, F f) {
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* py = y.f32();
  const int64_t n = y.numel();
  if (a.shape() == y.shape() && b.shape() == y.shape()) {
#pragma omp parallel for simd if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) py[i] = f(pa[i], pb[i]);
  } else if (a.shape() == y.shape() && b.numel() == 1) {
    const float s = pb[0];
#pragma omp parallel for simd if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) py[i] = f(pa[i], s);
  } else {
    for_each_strided(y.shape(), broadcast_strides(a.shape(), y.shape()),
                     broadcast_strides(b.shape(), y.shape()),
                     [&](int64_t i, int64_t ia, int64_t ib) { py[i] = f(pa[ia], pb[ib]); });
  }
}

absl::Status binary(const BinaryOp& op, const KernelArgs& a) {
  switch (op.kind) {
    case BinaryKind::kAdd: binary_loop(a.in[0], a.in[1], a.out[0], [](float x, float y) { return x + y; }); break;
    case BinaryKind::kSub: binary_loop(a.in[0], a.in[1], a.out[0], [](float x, float y) { return x - y; }); break;
    case BinaryKind::kMul: binary_loop(a.in[0], a.in[1], a.out[0], [](float x, float y) { return x * y; }); break;
  }
  return absl::OkStatus();
}

absl::Status scale(const ScaleOp& op, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  float* y = a.out[0].f32();
  const int64_t n = a.out[0].numel();
  const float s = op.s;
#pragma omp parallel for simd if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
  return absl::OkStatus();
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

absl::Status act(const ActOp& op, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  float* y = a.out[0].f32();
  const int64_t n = a.out[0].numel();
  switch (op.kind) {
    case ActKind::kRelu:
#pragma omp parallel for simd if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
      break;
    case ActKind::kSwish:
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.f + std::exp(-x[i]));
      break;
    case ActKind::kGelu:
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * kInvSqrt2));
      break;
    case ActKind::kSigmoid:
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + std::exp(-x[i]));
      break;
    case ActKind::kTanh:
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      break;
  }
  return absl::OkStatus();
}

absl::Status act_grad(const ActGradOp& op, const KernelArgs& a) {
  const float* s = a.in[0].f32();  // relu, sigmoid, tanh: y; swish, gelu: x
  const float* dy = a.in[1].f32();
  float* dx = a.out[0].f32();
  const int64_t n = a.out[0].numel();
  switch (op.kind) {
    case ActKind::kRelu:
#pragma omp parallel for simd if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) dx[i] = s[i] > 0.f ? dy[i] : 0.f;
      break;
    case ActKind::kSwish:
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const float sg = 1.f / (1.f + std::exp(-s[i]));
        dx[i] = dy[i] * (sg + s[i] * sg * (1.f - sg));
      }
      break;
    case ActKind::kGelu:
#pragma omp parallel for if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const float cdf = 0.5f * (1.f + std::erf(s[i] * kInvSqrt2));
        dx[i] = dy[i] * (cdf + s[i] * kInvSqrt2Pi * std::exp(-0.5f * s[i] * s[i]));
      }
      break;
    case ActKind::kSigmoid:
#pragma omp parallel for simd if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * s[i] * (1.f - s[i]);
      break;
    case ActKind::kTanh:
#pragma omp parallel for simd if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.f - s[i] * s[i]);
      break;
  }
  return absl::OkStatus();
}

absl::Status expand(const ExpandOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const TensorView& y = a.out[0];
  const Shape sx = broadcast_strides(x.shape(), y.shape());
  const Shape zero(y.shape().size(), 0);
  const int32_t* px = static_cast<const int32_t*>(x.data);  // 4-byte elements either way
  int32_t* py = static_cast<int32_t*>(y.data);
  for_each_strided(y.shape(), sx, zero, [&](int64_t i, int64_t ix, int64_t) { py[i] = px[ix]; });
  return absl::OkStatus();
}

absl::Status reshape(const ReshapeOp&, const KernelArgs& a) {
  std::memcpy(a.out[0].data, a.in[0].data, a.in[0].bytes());
  return absl::OkStatus();
}

absl::Status copy_in_place(const CopyInPlaceOp&, const KernelArgs& a) {
  std::memcpy(a.in[0].data, a.in[1].data, a.in[1].bytes());
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(FillOp, DeviceType::kCPU, fill);
MTC_REGISTER_KERNEL(CopyInPlaceOp, DeviceType::kCPU, copy_in_place);
MTC_REGISTER_KERNEL(ScaleOp, DeviceType::kCPU, scale);
MTC_REGISTER_KERNEL(ExpandOp, DeviceType::kCPU, expand);
MTC_REGISTER_KERNEL(ReshapeOp, DeviceType::kCPU, reshape);

static const bool registered_families = [] {
  constexpr int cpu = static_cast<int>(DeviceType::kCPU);
  auto bin = [](const OpDef& op, const KernelArgs& a) { return binary(static_cast<const BinaryOp&>(op), a); };
  auto un = [](const OpDef& op, const KernelArgs& a) { return act(static_cast<const ActOp&>(op), a); };
  auto gr = [](const OpDef& op, const KernelArgs& a) { return act_grad(static_cast<const ActGradOp&>(op), a); };
  BinaryOp::add_schema().kernels[cpu] = bin;
  BinaryOp::sub_schema().kernels[cpu] = bin;
  BinaryOp::mul_schema().kernels[cpu] = bin;
  ActOp::relu_schema().kernels[cpu] = un;
  ActOp::swish_schema().kernels[cpu] = un;
  ActOp::gelu_schema().kernels[cpu] = un;
  ActOp::sigmoid_schema().kernels[cpu] = un;
  ActOp::tanh_schema().kernels[cpu] = un;
  ActGradOp::relu_grad_schema().kernels[cpu] = gr;
  ActGradOp::swish_grad_schema().kernels[cpu] = gr;
  ActGradOp::gelu_grad_schema().kernels[cpu] = gr;
  ActGradOp::sigmoid_grad_schema().kernels[cpu] = gr;
  ActGradOp::tanh_grad_schema().kernels[cpu] = gr;
  return true;
}();

}  // namespace mtc::cpu
