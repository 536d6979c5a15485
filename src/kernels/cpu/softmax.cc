// CPU kernels of softmax, log_softmax, their gradient, and cross_entropy with its
// gradient. Each line along the softmax dim is done by one thread, sums in double, so
// results are bit-identical whatever the thread count. And topk (a partial sort per row).
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_util.h"
#include "mtc/status.h"
#include "ops/shape_ops.h"
#include "ops/softmax.h"

namespace mtc::cpu {
namespace {

// for_each_line: f(first) for every line along the dim that `s` splits around: s.size
// elements starting at offset `first`, s.inner apart. Lines run in parallel.
template <typename F>
void for_each_line(const DimSplit& s, F&& f) {
  const int64_t lines = s.outer * s.inner;
#pragma omp parallel for if (lines * s.size > kParallelGrain)
  for (int64_t l = 0; l < lines; ++l) f(l / s.inner * s.size * s.inner + l % s.inner);
}

float line_max(const float* x, int64_t n, int64_t st) {
  float m = x[0];
  for (int64_t k = 1; k < n; ++k) m = std::max(m, x[k * st]);
  return m;
}

// log_sum_exp: log(sum_k exp(x[k * st])) over n > 0 elements, with the max taken out first.
double log_sum_exp(const float* x, int64_t n, int64_t st) {
  const float m = line_max(x, n, st);
  double acc = 0;
  for (int64_t k = 0; k < n; ++k) acc += std::exp(x[k * st] - m);
  return m + std::log(acc);
}

absl::Status softmax(const SoftmaxOp& op, const KernelArgs& a) {
  const TensorView& xv = a.in[0];
  const DimSplit s = split_at_dim(xv.shape(), *resolve_dim(op.dim, xv.ndim()));
  if (s.size == 0) return absl::OkStatus();
  const float* x = xv.f32();
  float* y = a.out[0].f32();
  const int64_t st = s.inner, n = s.size;
  for_each_line(s, [&](int64_t first) {
    const float* xl = x + first;
    float* yl = y + first;
    if (op.log) {
      const double lse = log_sum_exp(xl, n, st);
      for (int64_t k = 0; k < n; ++k) yl[k * st] = static_cast<float>(xl[k * st] - lse);
      return;
    }
    const float m = line_max(xl, n, st);
    double acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      const float e = std::exp(xl[k * st] - m);
      yl[k * st] = e;
      acc += e;
    }
    const float inv = static_cast<float>(1.0 / acc);
    for (int64_t k = 0; k < n; ++k) yl[k * st] *= inv;
  });
  return absl::OkStatus();
}

absl::Status softmax_grad(const SoftmaxGradOp& op, const KernelArgs& a) {
  const TensorView& yv = a.in[0];
  const DimSplit s = split_at_dim(yv.shape(), *resolve_dim(op.dim, yv.ndim()));
  const float* y = yv.f32();
  const float* dy = a.in[1].f32();
  float* dx = a.out[0].f32();
  const int64_t st = s.inner, n = s.size;
  for_each_line(s, [&](int64_t first) {
    const float* yl = y + first;
    const float* gl = dy + first;
    float* dl = dx + first;
    double acc = 0;
    if (op.log) {
      for (int64_t k = 0; k < n; ++k) acc += gl[k * st];
      for (int64_t k = 0; k < n; ++k) dl[k * st] = static_cast<float>(gl[k * st] - std::exp(yl[k * st]) * acc);
    } else {
      for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(gl[k * st]) * yl[k * st];
      for (int64_t k = 0; k < n; ++k) dl[k * st] = static_cast<float>(yl[k * st] * (gl[k * st] - acc));
    }
  });
  return absl::OkStatus();
}

// ClassRows: the (N, C) logits and N labels of a cross_entropy kernel, labels checked.
struct ClassRows {
  int64_t n, c;
  const float* x;
  const int32_t* labels;
};
absl::StatusOr<ClassRows> class_rows(const KernelArgs& a) {
  ClassRows r{a.in[0].dim(0), a.in[0].dim(1), a.in[0].f32(), a.in[1].i32()};
  const int64_t bad = first_out_of_range(r.labels, r.n, r.c);
  if (bad >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("label ", r.labels[bad], " at position ", bad, " is out of range for C = ", r.c, " classes"));
  }
  return r;
}

absl::Status cross_entropy(const CrossEntropyOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const ClassRows r, class_rows(a));
  std::vector<double> loss(r.n);  // per row, then summed in order
#pragma omp parallel for if (r.n * r.c > kParallelGrain)
  for (int64_t i = 0; i < r.n; ++i) loss[i] = log_sum_exp(r.x + i * r.c, r.c, 1) - r.x[i * r.c + r.labels[i]];
  double acc = 0;
  for (double l : loss) acc += l;
  a.out[0].f32()[0] = static_cast<float>(acc / cross_entropy_divisor(op.divisor, r.n));
  return absl::OkStatus();
}

absl::Status cross_entropy_grad(const CrossEntropyGradOp& op, const KernelArgs& a) {
  MTC_ASSIGN_OR_RETURN(const ClassRows r, class_rows(a));
  const double g = static_cast<double>(a.in[2].f32()[0]) / cross_entropy_divisor(op.divisor, r.n);
  float* dx = a.out[0].f32();
#pragma omp parallel for if (r.n * r.c > kParallelGrain)
  for (int64_t i = 0; i < r.n; ++i) {
    const float* xr = r.x + i * r.c;
    const double lse = log_sum_exp(xr, r.c, 1);
    for (int64_t k = 0; k < r.c; ++k) {
      const double p = std::exp(xr[k] - lse) - (k == r.labels[i] ? 1.0 : 0.0);
      dx[i * r.c + k] = static_cast<float>(p * g);
    }
  }
  return absl::OkStatus();
}

// topk: per row, the indices ordered by value (largest first, NaN last), then by index;
// the first k of that order, by a partial sort of the row's indices.
absl::Status topk(const TopkOp& op, const KernelArgs& a) {
  const int64_t c = a.in[0].shape().back(), rows = c > 0 ? a.in[0].numel() / c : 0;
  const float* x = a.in[0].f32();
  int32_t* y = a.out[0].i32();
#pragma omp parallel if (rows * c > kParallelGrain)
  {
    std::vector<int32_t> idx(static_cast<size_t>(c));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * c;
      for (int64_t i = 0; i < c; ++i) idx[i] = static_cast<int32_t>(i);
      std::partial_sort(idx.begin(), idx.begin() + op.k, idx.end(), [xr](int32_t i, int32_t j) {
        const float u = xr[i], v = xr[j];
        if (std::isnan(u) || std::isnan(v)) return std::isnan(u) != std::isnan(v) ? !std::isnan(u) : i < j;
        return u != v ? u > v : i < j;
      });
      std::copy(idx.begin(), idx.begin() + op.k, y + r * op.k);
    }
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(TopkOp, DeviceType::kCPU, topk);
MTC_REGISTER_KERNEL(CrossEntropyOp, DeviceType::kCPU, cross_entropy);
MTC_REGISTER_KERNEL(CrossEntropyGradOp, DeviceType::kCPU, cross_entropy_grad);

static const bool registered_softmax = [] {
  constexpr int cpu = static_cast<int>(DeviceType::kCPU);
  auto fwd = [](const OpDef& op, const KernelArgs& a) { return softmax(static_cast<const SoftmaxOp&>(op), a); };
  auto bwd = [](const OpDef& op, const KernelArgs& a) { return softmax_grad(static_cast<const SoftmaxGradOp&>(op), a); };
  SoftmaxOp::softmax_schema().kernels[cpu] = fwd;
  SoftmaxOp::log_softmax_schema().kernels[cpu] = fwd;
  SoftmaxGradOp::softmax_grad_schema().kernels[cpu] = bwd;
  SoftmaxGradOp::log_softmax_grad_schema().kernels[cpu] = bwd;
  return true;
}();

}  // namespace mtc::cpu
