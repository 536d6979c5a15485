// Tests of dropout: the mask's statistics and scale, the kernel against the counter-based
// generator (forward and finite-difference backward), the same bits for the same seed
// (the same op run again, or a runtime with the same seed), different masks for different
// seeds, the backward's reuse of the forward's mask, identity in eval, and bad p.
#include <cmath>
#include <memory>

#include "autograd.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"
#include "ops/dropout.h"

namespace mtc {
namespace {

std::vector<float> ramp(size_t n) {  // nonzero values, so a zero output means dropped
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.5f + static_cast<float>(i % 13);
  return v;
}

TEST(Dropout, MaskStatisticsAndScale) {
  auto rt = make_test_runtime();
  const int64_t n = 400 * 500;  // above the parallel grain
  Tensor x = ones({400, 500});
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    auto y = dropout(x, p).to_vector();
    ASSERT_TRUE(y.ok()) << y.status();
    const float kept_value = 1.f / (1.f - p);
    int64_t dropped = 0;
    double total = 0;
    for (float v : *y) {
      if (v == 0.f) {
        ++dropped;
      } else {
        ASSERT_EQ(v, kept_value);
      }
      total += v;
    }
    // The dropped count is Binomial(n, p): allow 5 standard deviations.
    const double frac = static_cast<double>(dropped) / static_cast<double>(n);
    const double sigma = std::sqrt(p * (1 - p) / static_cast<double>(n));
    std::printf("  p=%.1f: dropped %.4f of %lld (5 sigma = %.4f), mean %.4f\n", p, frac, static_cast<long long>(n),
                5 * sigma, total / static_cast<double>(n));
    EXPECT_NEAR(frac, p, 5 * sigma);
    EXPECT_NEAR(total / static_cast<double>(n), 1.0, 5 * sigma / (1 - p));  // E[y] = x
  }
}

TEST(Dropout, KernelMatchesGeneratorForwardAndBackward) {
  auto rt = make_test_runtime();
  const float p = 0.4f;
  const uint64_t seed = 0x1234abcdULL;
  auto ref = [&](const std::vector<RefTensor>& x) {
    RefTensor y(x[0].shape);
    const double s = 1.0 / (1.0 - static_cast<double>(p));
    for (size_t i = 0; i < y.v.size(); ++i) {
      y.v[i] = dropout_draw(seed, i) >= dropout_threshold(p) ? x[0].v[i] * s : 0.0;
    }
    return y;
  };
  auto fn = [&](const TensorList& x) { return call1(std::make_shared<DropoutOp>(p, seed), {x[0]}); };
  check_op({{6, 7}}, fn, ref, {.grad_atol = 1e-6, .grad_rtol = 1e-6});
  // Above the parallel grain: every thread draws the same bits as the reference.
  check_op({{300, 200}}, fn, ref, {.check_backward = false});
}

TEST(Dropout, SameSeedSameBitsDifferentSeedsDifferentMasks) {
  const std::vector<float> v = ramp(50000);
  auto run = [&](uint64_t runtime_seed) {
    RuntimeOptions o;
    o.memory_bytes = size_t{64} << 20;
    o.seed = runtime_seed;
    auto rt = Runtime::create(o);
    EXPECT_TRUE(rt.ok());
    Tensor x = from_vector({50000}, v);
    // The same op object run twice: what a recompute after eviction does.
    auto op = std::make_shared<DropoutOp>(0.5f, (*rt)->next_seed());
    std::vector<float> a = *call1(op, {x}).to_vector(), b = *call1(op, {x}).to_vector();
    EXPECT_EQ(a, b) << "the same op gave different bits";
    std::vector<float> c = *dropout(x, 0.5f).to_vector(), d = *dropout(x, 0.5f).to_vector();
    return std::vector<std::vector<float>>{a, c, d};
  };
  const auto r1 = run(7), r2 = run(7), r3 = run(8);
  EXPECT_EQ(r1, r2) << "the same runtime seed gave different masks";
  auto differing = [](const std::vector<float>& a, const std::vector<float>& b) {
    int64_t k = 0;
    for (size_t i = 0; i < a.size(); ++i) k += (a[i] == 0.f) != (b[i] == 0.f);
    return k;
  };
  // Independent masks at p = 0.5 differ in about half the positions.
  EXPECT_GT(differing(r1[1], r1[2]), 20000) << "two dropout calls drew the same mask";
  EXPECT_GT(differing(r1[0], r1[1]), 20000);
  EXPECT_GT(differing(r1[1], r3[1]), 20000) << "different runtime seeds drew the same mask";
}

TEST(Dropout, BackwardReusesTheForwardMask) {
  auto rt = make_test_runtime();
  const int64_t n = 40000;
  const float p = 0.25f;
  Tensor x = from_vector({n}, ramp(n)).set_requires_grad(true);
  std::vector<float> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = std::cos(0.1f * static_cast<float>(i));
  Tensor y = dropout(x, p);
  ASSERT_TRUE(sum(mul(y, from_vector({n}, w))).backward().ok());
  auto yv = y.to_vector();
  auto g = x.grad().to_vector();
  ASSERT_TRUE(yv.ok() && g.ok());
  const float s = 1.f / (1.f - p);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ((*g)[i], (*yv)[i] == 0.f ? 0.f : w[i] * s) << "element " << i;
  }
}

TEST(Dropout, IdentityInEvalOrWithZeroP) {
  auto rt = make_test_runtime();
  Tensor x = from_vector({3, 4}, ramp(12));
  const Tensor eval = dropout(x, 0.5f, false), p0 = dropout(x, 0.f);
  EXPECT_EQ(eval.id(), x.id());  // no op issued
  EXPECT_EQ(p0.id(), x.id());
  EXPECT_EQ(*eval.to_vector(), ramp(12));
}

TEST(Dropout, POutsideZeroOneIsAnError) {
  auto rt = make_test_runtime();
  Tensor x = ones({4});
  expect_op_error(dropout(x, 1.f), {"dropout(p=1", "p=1 is outside [0, 1)"});
  expect_op_error(dropout(x, -0.1f), {"p=-0.1 is outside [0, 1)"});
  expect_op_error(dropout(x, std::nanf(""), false), {"is outside [0, 1)"});
  expect_op_error(dropout(x, 1.5f, false), {"p=1.5 is outside [0, 1)"});
  expect_op_error(dropout(from_vector_i32({2}, std::vector<int32_t>{1, 2}), 0.5f), {"input is i32[2], expected f32"});
}

}  // namespace
}  // namespace mtc
