// CPU kernels of layer_norm and its gradient. x is (rows, D) row-major; statistics are
// computed per row in double (two passes). dgamma and dbeta sum fixed chunks of rows,
// combined in chunk order, so the results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "ops/layer_norm.h"

namespace mtc::cpu {
namespace {

constexpr int64_t kRowChunks = 32;  // partial sums of dgamma/dbeta, combined in order

struct RowStats {
  double mean, rstd;  // rstd = 1 / sqrt(biased variance + eps)
};

RowStats row_stats(const float* x, int64_t d, float eps) {
  double sum = 0;
  for (int64_t k = 0; k < d; ++k) sum += x[k];
  const double mean = sum / static_cast<double>(d);
  double sq = 0;
  for (int64_t k = 0; k < d; ++k) sq += (x[k] - mean) * (x[k] - mean);
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(d) + eps)};
}

// NormRows: x as (rows, d) and the optional gamma, from the inputs of layer_norm or
// layer_norm_grad (x first, then gamma when there is one).
struct NormRows {
  int64_t rows, d;
  const float* x;
  const float* gamma;  // null without gamma
};
NormRows norm_rows(const KernelArgs& a, bool has_gamma) {
  const int64_t d = a.in[0].dim(-1);
  return {d == 0 ? 0 : a.in[0].numel() / d, d, a.in[0].f32(), has_gamma ? a.in[1].f32() : nullptr};
}

absl::Status layer_norm(const LayerNormOp& op, const KernelArgs& a) {
  const auto [rows, d, x, gamma] = norm_rows(a, op.has_gamma);
  const float* beta = op.has_beta ? a.in[1 + op.has_gamma].f32() : nullptr;
  float* y = a.out[0].f32();
#pragma omp parallel for if (rows * d > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    const RowStats s = row_stats(xr, d, op.eps);
    for (int64_t k = 0; k < d; ++k) {
      float v = static_cast<float>((xr[k] - s.mean) * s.rstd);
      if (gamma) v *= gamma[k];
      if (beta) v += beta[k];
      yr[k] = v;
    }
  }
  return absl::OkStatus();
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma, per row.
absl::Status layer_norm_grad(const LayerNormGradOp& op, const KernelArgs& a) {
  const auto [rows, d, x, gamma] = norm_rows(a, op.has_gamma);
  const float* dy = a.in[1 + op.has_gamma].f32();
  float* dx = a.out[0].f32();
  std::vector<RowStats> stats(rows);
#pragma omp parallel for if (rows * d > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* gr = dy + r * d;
    const RowStats s = stats[r] = row_stats(xr, d, op.eps);
    double mg = 0, mgx = 0;
    for (int64_t k = 0; k < d; ++k) {
      const double g = gamma ? static_cast<double>(gr[k]) * gamma[k] : gr[k];
      mg += g;
      mgx += g * (xr[k] - s.mean) * s.rstd;
    }
    mg /= static_cast<double>(d);
    mgx /= static_cast<double>(d);
    for (int64_t k = 0; k < d; ++k) {
      const double g = gamma ? static_cast<double>(gr[k]) * gamma[k] : gr[k];
      const double xhat = (xr[k] - s.mean) * s.rstd;
      dx[r * d + k] = static_cast<float>(s.rstd * (g - mg - xhat * mgx));
    }
  }
  if (!op.has_gamma && !op.has_beta) return absl::OkStatus();
  float* dgamma = op.has_gamma ? a.out[1].f32() : nullptr;
  float* dbeta = op.has_beta ? a.out[1 + op.has_gamma].f32() : nullptr;
  // Fixed row chunks (their number depends on rows only) summed in parallel, then
  // combined in chunk order.
  const int64_t chunks = std::min<int64_t>(kRowChunks, rows);
  const int64_t per = chunks == 0 ? 0 : (rows + chunks - 1) / chunks;
  std::vector<double> part(static_cast<size_t>(chunks * 2 * d), 0.0);  // [chunk][gamma|beta][d]
#pragma omp parallel for if (rows * d > kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    double* sg = part.data() + c * 2 * d;
    double* sb = sg + d;
    for (int64_t r = c * per; r < std::min(rows, (c + 1) * per); ++r) {
      const float* xr = x + r * d;
      const float* gr = dy + r * d;
      const RowStats s = stats[r];
      for (int64_t k = 0; k < d; ++k) {
        sg[k] += gr[k] * ((xr[k] - s.mean) * s.rstd);
        sb[k] += gr[k];
      }
    }
  }
  for (int64_t k = 0; k < d; ++k) {
    double g = 0, b = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      g += part[c * 2 * d + k];
      b += part[c * 2 * d + d + k];
    }
    if (dgamma) dgamma[k] = static_cast<float>(g);
    if (dbeta) dbeta[k] = static_cast<float>(b);
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(LayerNormOp, DeviceType::kCPU, layer_norm);
MTC_REGISTER_KERNEL(LayerNormGradOp, DeviceType::kCPU, layer_norm_grad);

}  // namespace mtc::cpu
