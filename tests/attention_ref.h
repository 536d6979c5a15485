// ref_attention_heads: multi-head attention in double, written out loop by loop, for the
// tests of nn::multi_head_self_attention (vit_test) and nn::scaled_dot_product_attention
// (gpt_test). q, k, v (N, T, D); head h is columns [h*d, (h+1)*d), d = D / heads; per head
// softmax(q k^T / sqrt(d) + mask) v, where the mask adds `masked` above the diagonal
// when causal. -> (N, T, D).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "op_check.h"

namespace mtc {

inline RefTensor ref_attention_heads(const RefTensor& q, const RefTensor& k, const RefTensor& v, int heads,
                                     bool causal = false, double masked = 0) {
  const int64_t n = q.dim(0), t = q.dim(1), dm = q.dim(2), d = dm / heads;
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  RefTensor o({n, t, dm});
  for (int64_t b = 0; b < n; ++b)
    for (int h = 0; h < heads; ++h)
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> p(t);
        double mx = -1e300;
        for (int64_t u = 0; u < t; ++u) {
          double acc = 0;
          for (int64_t c = 0; c < d; ++c) acc += q.at({b, i, h * d + c}) * k.at({b, u, h * d + c});
          p[u] = acc * s + (causal && u > i ? masked : 0.0);
          mx = std::max(mx, p[u]);
        }
        double z = 0;
        for (double& e : p) z += (e = std::exp(e - mx));
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t u = 0; u < t; ++u) acc += p[u] / z * v.at({b, u, h * d + c});
          o.at({b, i, h * d + c}) = acc;
        }
      }
  return o;
}

}  // namespace mtc
