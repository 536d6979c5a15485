// Values for the multi-rank tests (dist_mpitest, dtp_mpitest, dtp_mesh_mpitest,
// dtp_auto_mpitest): a tensor read back (a failure is a test failure), deterministic data
// that every rank draws alike, and an element-wise comparison to 1e-5 relative.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/tensor.h"

namespace mtc::testing_values {

inline std::vector<float> values(const Tensor& t) {
  auto v = t.to_vector();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

// ramp: n small values in a fixed pattern, scaled and shifted, the same on every rank.
inline std::vector<float> ramp(int64_t n, float scale, float shift) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37 + 11) % 23 - 11) + shift;
  return v;
}

// expect_near: a and b element by element within 1e-5 relative (plus 1e-5 absolute).
inline void expect_near(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i]))) << what << " element " << i;
  }
}

}  // namespace mtc::testing_values
