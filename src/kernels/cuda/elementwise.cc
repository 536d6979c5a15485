// CUDA kernels of the elementwise ops: fill, add/sub/mul with NumPy broadcasting, scale,
// relu/swish/gelu/sigmoid/tanh and their gradients, expand, reshape and copy_ (device-to-device copies), and
// max_grad_mask (the all_reduce(max) backward's mask). The host side here reads shapes
// and attributes and calls the launchers of ew_elementwise.cu; broadcasting's strides are
// computed here and passed to the kernel in a small struct by value.
#include "ops/elementwise.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "dist/collective_ops.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ew_elementwise_launch.h"
#include "ops/reshape.h"

namespace mtc::cuda {
namespace {

absl::Status too_many_dims(const char* op, const Shape& out) {
  return absl::UnimplementedError(absl::StrCat(op, ": output ", shape_str(out), " keeps more than ",
                                               kMaxStridedDims,
                                               " dims after merging (the CUDA kernel's limit)"));
}

absl::Status fill(const FillOp& op, const KernelArgs& a) {
  const TensorView& y = a.out[0];
  uint32_t bits;
  if (op.dtype == DType::kI32) {
    const int32_t v = static_cast<int32_t>(op.value);
    std::memcpy(&bits, &v, sizeof(bits));
  } else {
    std::memcpy(&bits, &op.value, sizeof(bits));
  }
  launch_fill32(y.data, bits, y.numel(), stream(a.ctx));
  return last_launch("fill");
}

EwBinary ew_kind(BinaryKind k) {
  switch (k) {
    case BinaryKind::kAdd: return EwBinary::kAdd;
    case BinaryKind::kSub: return EwBinary::kSub;
    case BinaryKind::kMul: return EwBinary::kMul;
  }
  return EwBinary::kAdd;
}

absl::Status binary(const BinaryOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const TensorView& w = a.in[1];
  const TensorView& y = a.out[0];
  const int64_t n = y.numel();
  if (n == 0) return absl::OkStatus();
  const EwBinary k = ew_kind(op.kind);
  cudaStream_t s = stream(a.ctx);
  if (x.shape() == y.shape() && w.shape() == y.shape()) {
    launch_binary_same(k, x.f32(), w.f32(), y.f32(), n, s);
  } else if (x.shape() == y.shape() && w.numel() == 1) {
    launch_binary_scalar_b(k, x.f32(), w.f32(), y.f32(), n, s);
  } else {
    const Shape sa = broadcast_strides(x.shape(), y.shape());
    const Shape sb = broadcast_strides(w.shape(), y.shape());
    Strided st;
    if (!make_strided(y.ndim(), y.shape().data(), sa.data(), sb.data(), &st))
      return too_many_dims(op.name(), y.shape());
    launch_binary_strided(k, x.f32(), w.f32(), y.f32(), n, st, s);
  }
  return last_launch(op.name());
}

absl::Status scale(const ScaleOp& op, const KernelArgs& a) {
  launch_scale(a.in[0].f32(), a.out[0].f32(), op.s, a.out[0].numel(), stream(a.ctx));
  return last_launch("scale");
}

EwAct ew_act(ActKind k) {
  switch (k) {
    case ActKind::kRelu: return EwAct::kRelu;
    case ActKind::kSwish: return EwAct::kSwish;
    case ActKind::kGelu: return EwAct::kGelu;
    case ActKind::kSigmoid: return EwAct::kSigmoid;
    case ActKind::kTanh: return EwAct::kTanh;
  }
  return EwAct::kRelu;
}

absl::Status act(const ActOp& op, const KernelArgs& a) {
  launch_act(ew_act(op.kind), a.in[0].f32(), a.out[0].f32(), a.out[0].numel(), stream(a.ctx));
  return last_launch(op.name());
}

absl::Status act_grad(const ActGradOp& op, const KernelArgs& a) {
  launch_act_grad(ew_act(op.kind), a.in[0].f32(), a.in[1].f32(), a.out[0].f32(), a.out[0].numel(),
                  stream(a.ctx));
  return last_launch(op.name());
}

// expand: a gather of 4-byte elements (f32 or i32) through broadcast strides.
absl::Status expand(const ExpandOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const TensorView& y = a.out[0];
  const int64_t n = y.numel();
  if (n == 0) return absl::OkStatus();
  const Shape sx = broadcast_strides(x.shape(), y.shape());
  Strided st;
  if (!make_strided(y.ndim(), y.shape().data(), sx.data(), nullptr, &st))
    return too_many_dims("expand", y.shape());
  launch_gather32(x.data, y.data, n, st, stream(a.ctx));
  return last_launch("expand");
}

absl::Status reshape(const ReshapeOp&, const KernelArgs& a) {
  const size_t bytes = a.in[0].bytes();
  if (bytes == 0) return absl::OkStatus();
  MTC_CUDA(cudaMemcpyAsync(a.out[0].data, a.in[0].data, bytes, cudaMemcpyDeviceToDevice, stream(a.ctx)));
  return absl::OkStatus();
}

absl::Status copy_in_place(const CopyInPlaceOp&, const KernelArgs& a) {
  const size_t bytes = a.in[1].bytes();
  if (bytes == 0) return absl::OkStatus();
  MTC_CUDA(cudaMemcpyAsync(a.in[0].data, a.in[1].data, bytes, cudaMemcpyDeviceToDevice, stream(a.ctx)));
  return absl::OkStatus();
}

absl::Status max_grad_mask(const dist::MaxGradMaskOp&, const KernelArgs& a) {
  launch_max_grad_mask(a.in[0].f32(), a.in[1].f32(), a.in[2].f32(), a.out[0].f32(), a.out[0].numel(),
                       stream(a.ctx));
  return last_launch("max_grad_mask");
}

}  // namespace

MTC_REGISTER_KERNEL(FillOp, DeviceType::kCUDA, fill);
MTC_REGISTER_KERNEL(ScaleOp, DeviceType::kCUDA, scale);
MTC_REGISTER_KERNEL(ExpandOp, DeviceType::kCUDA, expand);
MTC_REGISTER_KERNEL(ReshapeOp, DeviceType::kCUDA, reshape);
MTC_REGISTER_KERNEL(CopyInPlaceOp, DeviceType::kCUDA, copy_in_place);
MTC_REGISTER_KERNEL(dist::MaxGradMaskOp, DeviceType::kCUDA, max_grad_mask);

static const bool registered_families = [] {
  constexpr int gpu = static_cast<int>(DeviceType::kCUDA);
  auto bin = [](const OpDef& op, const KernelArgs& a) { return binary(static_cast<const BinaryOp&>(op), a); };
  auto un = [](const OpDef& op, const KernelArgs& a) { return act(static_cast<const ActOp&>(op), a); };
  auto gr = [](const OpDef& op, const KernelArgs& a) {
    return act_grad(static_cast<const ActGradOp&>(op), a);
  };
  BinaryOp::add_schema().kernels[gpu] = bin;
  BinaryOp::sub_schema().kernels[gpu] = bin;
  BinaryOp::mul_schema().kernels[gpu] = bin;
  ActOp::relu_schema().kernels[gpu] = un;
  ActOp::swish_schema().kernels[gpu] = un;
  ActOp::gelu_schema().kernels[gpu] = un;
  ActOp::sigmoid_schema().kernels[gpu] = un;
  ActOp::tanh_schema().kernels[gpu] = un;
  ActGradOp::relu_grad_schema().kernels[gpu] = gr;
  ActGradOp::swish_grad_schema().kernels[gpu] = gr;
  ActGradOp::gelu_grad_schema().kernels[gpu] = gr;
  ActGradOp::sigmoid_grad_schema().kernels[gpu] = gr;
  ActGradOp::tanh_grad_schema().kernels[gpu] = gr;
  return true;
}();

}  // namespace mtc::cuda
