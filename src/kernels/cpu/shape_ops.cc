// CPU kernels of the data-movement ops: permute/transpose (a strided gather), concat,
// split, slice and slice_backward (block copies along one dim), channel_shuffle. They
// move 4-byte elements without looking at them, so f32 and i32 share every kernel.
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "ops/shape_ops.h"

namespace mtc::cpu {
namespace {

static_assert(sizeof(float) == sizeof(int32_t), "the kernels move 4-byte elements");
using Elem = int32_t;  // a 4-byte element of either dtype

const Elem* elems(const TensorView& v) { return static_cast<const Elem*>(v.data); }
Elem* mutable_elems(const TensorView& v) { return static_cast<Elem*>(v.data); }

// copy_along_dim: src and dst are (outer, src_dim, inner) and (outer, dst_dim, inner);
// copies slabs [src_off, src_off + len) of src into [dst_off, dst_off + len) of dst.
void copy_along_dim(const Elem* src, int64_t src_dim, int64_t src_off, Elem* dst, int64_t dst_dim,
                    int64_t dst_off, int64_t outer, int64_t len, int64_t inner) {
  const int64_t run = len * inner;  // contiguous elements per outer index
  if (run == 0) return;
#pragma omp parallel for if (outer * run > kParallelGrain)
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + (o * dst_dim + dst_off) * inner, src + (o * src_dim + src_off) * inner,
                static_cast<size_t>(run) * sizeof(Elem));
  }
}

absl::Status permute(const PermuteOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const TensorView& y = a.out[0];
  if (y.numel() == 0) return absl::OkStatus();
  const std::vector<int> p = *op.perm(x.ndim());
  // Input strides (elements) of x, read in the order of y's dims.
  Shape xstride(x.ndim(), 1), st(y.ndim(), 0);
  for (int i = x.ndim() - 2; i >= 0; --i) xstride[i] = xstride[i + 1] * x.shape()[i + 1];
  for (int i = 0; i < y.ndim(); ++i) st[i] = xstride[p[i]];
  const Elem* px = elems(x);
  Elem* py = mutable_elems(y);
  for_each_strided(y.shape(), st, Shape(y.ndim(), 0), [&](int64_t i, int64_t ix, int64_t) { py[i] = px[ix]; });
  return absl::OkStatus();
}

// move_pieces: the pieces lie one after another along dim d of `whole`; concat gathers
// them into it (into_whole), split cuts them out of it.
void move_pieces(const TensorView& whole, std::span<const TensorView> pieces, int d, bool into_whole) {
  const DimSplit ws = split_at_dim(whole.shape(), d);
  int64_t off = 0;
  for (const TensorView& p : pieces) {
    const int64_t len = p.shape()[d];
    if (into_whole) {
      copy_along_dim(elems(p), len, 0, mutable_elems(whole), ws.size, off, ws.outer, len, ws.inner);
    } else {
      copy_along_dim(elems(whole), ws.size, off, mutable_elems(p), len, 0, ws.outer, len, ws.inner);
    }
    off += len;
  }
}

absl::Status concat(const ConcatOp& op, const KernelArgs& a) {
  move_pieces(a.out[0], a.in, *resolve_dim(op.dim, a.out[0].ndim()), true);
  return absl::OkStatus();
}

absl::Status split(const SplitOp& op, const KernelArgs& a) {
  move_pieces(a.in[0], a.out, *resolve_dim(op.dim, a.in[0].ndim()), false);
  return absl::OkStatus();
}

absl::Status slice(const SliceOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const int d = *resolve_dim(op.dim, x.ndim());
  const DimSplit xs = split_at_dim(x.shape(), d);
  const auto [first, len] = resolve_slice(xs.size, op.start, op.end);
  copy_along_dim(elems(x), xs.size, first, mutable_elems(a.out[0]), len, 0, xs.outer, len, xs.inner);
  return absl::OkStatus();
}

absl::Status slice_backward(const SliceBackwardOp& op, const KernelArgs& a) {
  const TensorView& dy = a.in[0];
  const TensorView& dx = a.out[0];
  if (dx.numel() == 0) return absl::OkStatus();
  const int d = *resolve_dim(op.dim, dx.ndim());
  const DimSplit xs = split_at_dim(dx.shape(), d);
  std::memset(dx.data, 0, dx.bytes());
  const int64_t len = dy.shape()[d];
  copy_along_dim(elems(dy), len, 0, mutable_elems(dx), xs.size, op.start, xs.outer, len, xs.inner);
  return absl::OkStatus();
}

absl::Status channel_shuffle(const ChannelShuffleOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const DimSplit s = split_at_dim(x.shape(), 1);  // (N, C, spatial)
  const int64_t g = op.groups, k = s.size / g;
  const Elem* px = elems(x);
  Elem* py = mutable_elems(a.out[0]);
  if (s.inner == 0) return absl::OkStatus();
  const int64_t planes = s.outer * s.size;
#pragma omp parallel for if (planes * s.inner > kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t n = p / s.size, c = p % s.size;  // c = i * k + j
    const int64_t to = (c % k) * g + c / k;         // j * g + i
    std::memcpy(py + (n * s.size + to) * s.inner, px + p * s.inner, static_cast<size_t>(s.inner) * sizeof(Elem));
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(ConcatOp, DeviceType::kCPU, concat);
MTC_REGISTER_KERNEL(SplitOp, DeviceType::kCPU, split);
MTC_REGISTER_KERNEL(SliceOp, DeviceType::kCPU, slice);
MTC_REGISTER_KERNEL(SliceBackwardOp, DeviceType::kCPU, slice_backward);
MTC_REGISTER_KERNEL(ChannelShuffleOp, DeviceType::kCPU, channel_shuffle);

static const bool registered_permute = [] {
  constexpr int cpu = static_cast<int>(DeviceType::kCPU);
  auto fn = [](const OpDef& op, const KernelArgs& a) { return permute(static_cast<const PermuteOp&>(op), a); };
  PermuteOp::permute_schema().kernels[cpu] = fn;
  PermuteOp::transpose_schema().kernels[cpu] = fn;
  return true;
}();

}  // namespace mtc::cpu
