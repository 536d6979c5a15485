// CPU kernel of ReduceSumOp. Dims are first collapsed into alternating kept / reduced
// runs; the common shapes (all, [K,R], [R,K], [K,R,K]) get a direct loop, anything else
// a general strided walk. Sums accumulate in double, in a fixed order (deterministic
// whatever the thread count).
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "ops/reduce.h"

namespace mtc::cpu {
namespace {

absl::Status reduce_sum(const ReduceSumOp& op, const KernelArgs& a) {
  const float* x = a.in[0].f32();
  float* y = a.out[0].f32();
  const Shape& xs = a.in[0].shape();
  auto [sizes, red] = op.runs(xs);
  const int64_t n_out = a.out[0].numel();
  if (a.in[0].numel() == 0) {
    for (int64_t i = 0; i < n_out; ++i) y[i] = 0.f;
    return absl::OkStatus();
  }
  // Pad to the [K, R, K] form where it fits.
  int64_t outer = 1, r = 1, inner = 1;
  bool direct = true;
  if (sizes.empty()) {
  } else if (sizes.size() == 1) {
    (red[0] ? r : outer) = sizes[0];
  } else if (sizes.size() == 2) {
    if (red[0]) { r = sizes[0]; inner = sizes[1]; } else { outer = sizes[0]; r = sizes[1]; }
  } else if (sizes.size() == 3 && !red[0]) {
    outer = sizes[0]; r = sizes[1]; inner = sizes[2];
  } else {
    direct = false;
  }
  const double s = op.scale;
  if (direct) {
    if (inner == 1 && outer == 1) {
      // One output: fixed chunks summed in parallel, combined in order.
      constexpr int64_t kChunks = 64;
      double part[kChunks] = {};
      const int64_t step = (r + kChunks - 1) / kChunks;
#pragma omp parallel for if (r > kParallelGrain)
      for (int64_t c = 0; c < kChunks; ++c) {
        double acc = 0;
        for (int64_t i = c * step; i < std::min(r, (c + 1) * step); ++i) acc += x[i];
        part[c] = acc;
      }
      double acc = 0;
      for (double p : part) acc += p;
      y[0] = static_cast<float>(acc * s);
    } else if (inner == 1) {
#pragma omp parallel for if (outer * r > kParallelGrain)
      for (int64_t o = 0; o < outer; ++o) {
        double acc = 0;
        for (int64_t i = 0; i < r; ++i) acc += x[o * r + i];
        y[o] = static_cast<float>(acc * s);
      }
    } else {
#pragma omp parallel for if (outer * r * inner > kParallelGrain)
      for (int64_t o = 0; o < outer; ++o) {
        std::vector<double> acc(inner, 0.0);
        for (int64_t i = 0; i < r; ++i) {
          const float* row = x + (o * r + i) * inner;
          for (int64_t j = 0; j < inner; ++j) acc[j] += row[j];
        }
        for (int64_t j = 0; j < inner; ++j) y[o * inner + j] = static_cast<float>(acc[j] * s);
      }
    }
    return absl::OkStatus();
  }
  // General: walk x, accumulating into out through strides that skip reduced dims.
  Shape cs(sizes.begin(), sizes.end()), ostride(sizes.size(), 0);
  int64_t st = 1;
  for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
    if (!red[i]) {
      ostride[i] = st;
      st *= sizes[i];
    }
  }
  std::vector<double> acc(n_out, 0.0);
  const int nd = static_cast<int>(cs.size());
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  const int64_t total = a.in[0].numel();
  for (int64_t i = 0; i < total; ++i) {
    acc[off] += x[i];
    for (int d = nd - 1; d >= 0; --d) {
      off += ostride[d];
      if (++idx[d] < cs[d]) break;
      off -= ostride[d] * cs[d];
      idx[d] = 0;
    }
  }
  for (int64_t i = 0; i < n_out; ++i) y[i] = static_cast<float>(acc[i] * s);
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(ReduceSumOp, DeviceType::kCPU, reduce_sum);

}  // namespace mtc::cpu
