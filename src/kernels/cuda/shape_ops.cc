// CUDA kernels of the data-movement ops: permute/transpose (a strided gather), concat,
// split, slice and slice_backward (slab copies along one dim), channel_shuffle. They move
// 4-byte elements without looking at them, so f32 and i32 share every kernel, as on the
// CPU (src/kernels/cpu/shape_ops.cc). One launch per piece for concat and split.
#include "ops/shape_ops.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ew_elementwise_launch.h"
#include "kernels/cuda/ew_shape_launch.h"

namespace mtc::cuda {
namespace {

static_assert(sizeof(float) == sizeof(int32_t), "the kernels move 4-byte elements");

absl::Status permute(const PermuteOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const TensorView& y = a.out[0];
  const int64_t n = y.numel();
  if (n == 0) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(const std::vector<int> p, op.perm(x.ndim()));
  // Input strides (elements) of x, read in the order of y's dims.
  Shape xstride(x.ndim(), 1), st(y.ndim(), 0);
  for (int i = x.ndim() - 2; i >= 0; --i) xstride[i] = xstride[i + 1] * x.shape()[i + 1];
  for (int i = 0; i < y.ndim(); ++i) st[i] = xstride[p[i]];
  Strided s;
  if (!make_strided(y.ndim(), y.shape().data(), st.data(), nullptr, &s)) {
    return absl::UnimplementedError(absl::StrCat(op.name(), ": ", shape_str(y.shape()), " keeps more than ",
                                                 kMaxStridedDims,
                                                 " dims after merging (the CUDA kernel's limit)"));
  }
  launch_gather32(x.data, y.data, n, s, stream(a.ctx));
  return last_launch(op.name());
}

// move_pieces: the pieces lie one after another along dim d of `whole`; concat gathers
// them into it (into_whole), split cuts them out of it.
void move_pieces(const TensorView& whole, std::span<const TensorView> pieces, int d, bool into_whole,
                 cudaStream_t s) {
  const DimSplit ws = split_at_dim(whole.shape(), d);
  int64_t off = 0;
  for (const TensorView& p : pieces) {
    const int64_t len = p.shape()[d];
    if (into_whole) {
      launch_copy_along_dim32(p.data, len, 0, whole.data, ws.size, off, ws.outer, len, ws.inner, s);
    } else {
      launch_copy_along_dim32(whole.data, ws.size, off, p.data, len, 0, ws.outer, len, ws.inner, s);
    }
    off += len;
  }
}

absl::Status concat(const ConcatOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const int d, resolve_dim(op.dim, a.out[0].ndim()));
  move_pieces(a.out[0], a.in, d, true, stream(a.ctx));
  return last_launch("concat");
}

absl::Status split(const SplitOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const int d, resolve_dim(op.dim, a.in[0].ndim()));
  move_pieces(a.in[0], a.out, d, false, stream(a.ctx));
  return last_launch("split");
}

absl::Status slice(const SliceOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  MTC_ASSIGN_OR_RETURN(const int d, resolve_dim(op.dim, x.ndim()));
  const DimSplit xs = split_at_dim(x.shape(), d);
  const auto [first, len] = resolve_slice(xs.size, op.start, op.end);
  launch_copy_along_dim32(x.data, xs.size, first, a.out[0].data, len, 0, xs.outer, len, xs.inner,
                          stream(a.ctx));
  return last_launch("slice");
}

absl::Status slice_backward(const SliceBackwardOp& op, const KernelArgs& a) {
  const TensorView& dy = a.in[0];
  const TensorView& dx = a.out[0];
  if (dx.numel() == 0) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(const int d, resolve_dim(op.dim, dx.ndim()));
  const DimSplit xs = split_at_dim(dx.shape(), d);
  launch_pad_along_dim32(dy.data, dy.shape()[d], dx.data, xs.size, op.start, xs.outer, xs.inner,
                         stream(a.ctx));
  return last_launch("slice_backward");
}

absl::Status channel_shuffle(const ChannelShuffleOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const DimSplit s = split_at_dim(x.shape(), 1);  // (N, C, spatial)
  launch_channel_shuffle32(x.data, a.out[0].data, s.outer, s.size, s.inner, op.groups, stream(a.ctx));
  return last_launch("channel_shuffle");
}

}  // namespace

MTC_REGISTER_KERNEL(ConcatOp, DeviceType::kCUDA, concat);
MTC_REGISTER_KERNEL(SplitOp, DeviceType::kCUDA, split);
MTC_REGISTER_KERNEL(SliceOp, DeviceType::kCUDA, slice);
MTC_REGISTER_KERNEL(SliceBackwardOp, DeviceType::kCUDA, slice_backward);
MTC_REGISTER_KERNEL(ChannelShuffleOp, DeviceType::kCUDA, channel_shuffle);

static const bool registered_permute = [] {
  constexpr int gpu = static_cast<int>(DeviceType::kCUDA);
  auto fn = [](const OpDef& op, const KernelArgs& a) {
    return permute(static_cast<const PermuteOp&>(op), a);
  };
  PermuteOp::permute_schema().kernels[gpu] = fn;
  PermuteOp::transpose_schema().kernels[gpu] = fn;
  return true;
}();

}  // namespace mtc::cuda
