// Tests of batch_norm: training (batch statistics) and eval (running statistics) forward
// against a double reference, gradients of x, gamma and beta against finite differences,
// the in-place running-statistics update against PyTorch's rule, precision with a large
// mean, determinism across thread counts (synchronised batch norm's kernels too), and
// shape errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "autograd.h"
#include "dist/sync_batch_norm.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc {
namespace {

constexpr double kEps = 1e-5;

// BatchStats: per-channel mean and biased variance of x (N, C, ...).
struct BatchStats {
  std::vector<double> mean, var;
  int64_t count = 0;
};
BatchStats batch_stats(const RefTensor& x) {
  const int64_t n = x.dim(0), c = x.dim(1), s = static_cast<int64_t>(x.v.size()) / (n * c);
  BatchStats st{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0), n * s};
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) st.mean[ch] += x.v[(i * c + ch) * s + j];
    st.mean[ch] /= static_cast<double>(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const double d = x.v[(i * c + ch) * s + j] - st.mean[ch];
        st.var[ch] += d * d;
      }
    st.var[ch] /= static_cast<double>(n * s);
  }
  return st;
}

// bn_ref: y = (x - mean) / sqrt(var + eps) * gamma + beta per channel.
RefTensor bn_ref(const RefTensor& x, const RefTensor& gamma, const RefTensor& beta, const std::vector<double>& mean,
                 const std::vector<double>& var) {
  const int64_t n = x.dim(0), c = x.dim(1), s = static_cast<int64_t>(x.v.size()) / (n * c);
  RefTensor y(x.shape);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < s; ++j) {
        const int64_t k = (i * c + ch) * s + j;
        y.v[k] = (x.v[k] - mean[ch]) / std::sqrt(var[ch] + kEps) * gamma.v[ch] + beta.v[ch];
      }
  return y;
}

// In eval the running variance must be positive: tests pass rv * rv + 0.5.
Tensor positive(const Tensor& rv) { return add(mul(rv, rv), full(rv.shape(), 0.5f)); }
std::vector<double> positive(const RefTensor& rv) {
  std::vector<double> v(rv.v.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = rv.v[i] * rv.v[i] + 0.5;
  return v;
}

// check_train: training mode, with running statistics (not differentiated) or without.
void check_train(Shape x, bool tracked = true) {
  const Shape c{x[1]};
  std::vector<InputSpec> specs{InputSpec(x), InputSpec(c), InputSpec(c)};
  if (tracked) specs.insert(specs.end(), {InputSpec::no_grad(c), InputSpec::no_grad(c)});
  check_op(specs,
           [tracked](const TensorList& t) {
             return batch_norm(t[0], t[1], t[2], tracked ? t[3] : Tensor(), tracked ? t[4] : Tensor(), true);
           },
           [](const std::vector<RefTensor>& r) {
             BatchStats st = batch_stats(r[0]);
             return bn_ref(r[0], r[1], r[2], st.mean, st.var);
           },
           {.fwd_atol = 1e-5, .fwd_rtol = 1e-5, .grad_atol = 1e-4, .grad_rtol = 1e-4});
}

TEST(BatchNorm, Train4D) {
  auto rt = make_test_runtime();
  check_train({4, 3, 5, 5});
}

TEST(BatchNorm, Train2DAnd3D) {
  auto rt = make_test_runtime();
  check_train({6, 5});
  check_train({3, 4, 7});
}

TEST(BatchNorm, TrainWithoutRunningStats) {
  auto rt = make_test_runtime();
  check_train({4, 3, 3, 3}, false);
}

TEST(BatchNorm, Eval) {
  auto rt = make_test_runtime();
  const Shape c{3};
  check_op({{4, 3, 5, 5}, c, c, InputSpec::no_grad(c), InputSpec::no_grad(c)},
           [](const TensorList& t) { return batch_norm(t[0], t[1], t[2], t[3], positive(t[4]), false); },
           [](const std::vector<RefTensor>& r) { return bn_ref(r[0], r[1], r[2], r[3].v, positive(r[4])); },
           {.fwd_atol = 1e-5, .fwd_rtol = 1e-5, .grad_atol = 1e-4, .grad_rtol = 1e-4});
}

TEST(BatchNorm, RunningStatsUpdatedInPlaceAsPyTorch) {
  auto rt = make_test_runtime();
  const int n = 4, c = 3, hw = 6;
  std::vector<float> rm0{0.5f, -1.f, 2.f}, rv0{1.f, 0.25f, 3.f};
  Tensor rm = from_vector({c}, rm0), rv = from_vector({c}, rv0);
  Tensor gamma = ones({c}), beta = zeros({c});
  std::vector<double> ref_m(rm0.begin(), rm0.end()), ref_v(rv0.begin(), rv0.end());
  const float momentum = 0.1f;
  double max_err = 0;
  for (int step = 0; step < 3; ++step) {
    RefTensor xr({n, c, hw});
    std::vector<float> xv(xr.v.size());
    for (size_t i = 0; i < xv.size(); ++i) xr.v[i] = xv[i] = static_cast<float>(std::sin(1.3 * i + step) * (1 + step));
    Tensor y = batch_norm(from_vector({n, c, hw}, xv), gamma, beta, rm, rv, true, momentum);
    ASSERT_TRUE(y.to_vector().ok());
    BatchStats st = batch_stats(xr);
    for (int ch = 0; ch < c; ++ch) {
      ref_m[ch] = (1 - momentum) * ref_m[ch] + momentum * st.mean[ch];
      ref_v[ch] = (1 - momentum) * ref_v[ch] + momentum * st.var[ch] * st.count / (st.count - 1);  // unbiased
    }
    std::vector<float> gm = *rm.to_vector(), gv = *rv.to_vector();
    for (int ch = 0; ch < c; ++ch) {
      EXPECT_NEAR(gm[ch], ref_m[ch], 1e-6) << "running_mean, step " << step << " channel " << ch;
      EXPECT_NEAR(gv[ch], ref_v[ch], 1e-6 * (1 + ref_v[ch])) << "running_var, step " << step << " channel " << ch;
      max_err = std::max({max_err, std::abs(gm[ch] - ref_m[ch]), std::abs(gv[ch] - ref_v[ch])});
    }
  }
  // Eval leaves them alone.
  Tensor y = batch_norm(ones({2, c, 2}), gamma, beta, rm, rv, false);
  ASSERT_TRUE(y.to_vector().ok());
  std::vector<float> gm = *rm.to_vector();
  for (int ch = 0; ch < c; ++ch) EXPECT_NEAR(gm[ch], ref_m[ch], 1e-6);
  std::printf("  running stats after 3 steps: max |mtc - ref| = %.3g (tol 1e-6)\n", max_err);
}

TEST(BatchNorm, LargeMeanKeepsPrecision) {
  auto rt = make_test_runtime();
  // x = 1000 + small noise: a naive one-pass float variance would lose it entirely.
  RefTensor xr({8, 2, 16});
  std::vector<float> xv(xr.v.size());
  for (size_t i = 0; i < xv.size(); ++i) xr.v[i] = xv[i] = 1000.f + 0.01f * static_cast<float>(std::sin(0.7 * i));
  RefTensor g({2}), b({2});
  g.v = {1, 1};
  BatchStats st = batch_stats(xr);
  RefTensor ref = bn_ref(xr, g, b, st.mean, st.var);
  std::vector<float> y = *batch_norm(from_vector({8, 2, 16}, xv), ones({2}), zeros({2}), Tensor(), Tensor(), true).to_vector();
  double max_err = 0;
  for (size_t i = 0; i < y.size(); ++i) max_err = std::max(max_err, std::abs(y[i] - ref.v[i]));
  // The reference sees the same float inputs; what is left is the rounding of the mean.
  EXPECT_LT(max_err, 1e-2);
  std::printf("  mean 1000, std 0.007: max |mtc - ref| = %.3g (tol 1e-2)\n", max_err);
}

// x of 51,200 values, above the kernels' grain (kParallelGrain, 32,768), so two threads
// split the channels.
constexpr int64_t kThreadN = 8, kThreadC = 16, kThreadHw = 20;

// threaded_runtime: a runtime of 256 MiB whose kernels run on `threads` threads.
absl::StatusOr<std::unique_ptr<Runtime>> threaded_runtime(int threads) {
  RuntimeOptions o;
  o.memory_bytes = size_t{256} << 20;
  o.num_threads = threads;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok());
  return rt;
}

TEST(BatchNorm, BitIdenticalAcrossThreadCounts) {
  const Shape shape{kThreadN, kThreadC, kThreadHw, kThreadHw};
  std::vector<float> xv(numel(shape)), dyv(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    xv[i] = std::sin(0.37f * i) + 0.5f;
    dyv[i] = std::cos(0.19f * i);
  }
  auto run = [&](int threads) {
    auto rt = threaded_runtime(threads);
    Tensor x = from_vector(shape, xv).set_requires_grad(true);
    Tensor gamma = full({kThreadC}, 1.5f).set_requires_grad(true), beta = zeros({kThreadC}).set_requires_grad(true);
    Tensor rm = zeros({kThreadC}), rv = ones({kThreadC});
    Tensor y = batch_norm(x, gamma, beta, rm, rv, true);
    EXPECT_TRUE(sum(mul(y, from_vector(shape, dyv))).backward().ok());
    return std::vector<std::vector<float>>{*y.to_vector(), *x.grad().to_vector(), *gamma.grad().to_vector(),
                                           *beta.grad().to_vector(), *rv.to_vector()};
  };
  auto one = run(1), two = run(2), two_again = run(2);
  for (size_t k = 0; k < one.size(); ++k) {
    EXPECT_EQ(0, std::memcmp(one[k].data(), two[k].data(), one[k].size() * sizeof(float))) << "output " << k;
    EXPECT_EQ(0, std::memcmp(two[k].data(), two_again[k].data(), two[k].size() * sizeof(float))) << "output " << k;
  }
}

// Synchronised batch norm's four CPU kernels (bn_stats, sync_batch_norm and, backward,
// bn_grad_sums and sync_batch_norm_backward) issued without a communicator, as on one
// rank: bit for bit the same at 1 and 2 threads, and batch_norm's figures within float
// rounding (their sums run in another order).
TEST(SyncBatchNormOps, BitIdenticalAcrossThreadCountsAndNearBatchNorm) {
  const Shape shape{kThreadN, kThreadC, kThreadHw, kThreadHw};
  std::vector<float> xv(numel(shape)), dyv(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    xv[i] = 0.8f * std::sin(0.37f * i) + 0.01f * static_cast<float>(i % 97);
    dyv[i] = std::cos(0.19f * i);
  }
  auto run = [&](int threads, bool sync) {
    auto rt = threaded_runtime(threads);
    Tensor x = from_vector(shape, xv).set_requires_grad(true);
    std::vector<float> gv(kThreadC);
    for (int64_t c = 0; c < kThreadC; ++c) gv[c] = 0.5f + 0.1f * static_cast<float>(c);
    Tensor gamma = from_vector({kThreadC}, gv).set_requires_grad(true);
    Tensor beta = full({kThreadC}, 0.25f).set_requires_grad(true);
    Tensor rm = zeros({kThreadC}), rv = ones({kThreadC});
    Tensor y;
    if (sync) {
      Tensor st = call1(std::make_shared<dist::BnStatsOp>(), {x});
      y = call(std::make_shared<dist::SyncBatchNormOp>(0.1f, 1e-5f, true), std::vector<Tensor>{x, gamma, beta, st, rm, rv})[0];
    } else {
      y = batch_norm(x, gamma, beta, rm, rv, true);
    }
    EXPECT_TRUE(sum(mul(y, from_vector(shape, dyv))).backward().ok());
    return std::vector<std::vector<float>>{*y.to_vector(),            *x.grad().to_vector(), *gamma.grad().to_vector(),
                                           *beta.grad().to_vector(), *rm.to_vector(),       *rv.to_vector()};
  };
  const char* names[] = {"y", "dx", "dgamma", "dbeta", "running_mean", "running_var"};
  auto one = run(1, true), two = run(2, true), plain = run(1, false);
  double worst = 0;
  for (size_t k = 0; k < one.size(); ++k) {
    EXPECT_EQ(0, std::memcmp(one[k].data(), two[k].data(), one[k].size() * sizeof(float))) << names[k];
    for (size_t i = 0; i < one[k].size(); ++i) {
      const double err = std::fabs(one[k][i] - plain[k][i]) / (1 + std::fabs(plain[k][i]));
      worst = std::max(worst, err);
      ASSERT_LT(err, 1e-4) << names[k] << " element " << i << ": " << one[k][i] << " against " << plain[k][i];
    }
  }
  std::printf("  sync ops against batch_norm: largest relative difference %.3g (tol 1e-4)\n", worst);
}

TEST(BatchNorm, ShapeErrors) {
  auto rt = make_test_runtime();
  auto message = [](const Tensor& t) {
    auto v = t.to_vector();
    EXPECT_FALSE(v.ok());
    return std::string(v.status().message());
  };
  std::string m = message(batch_norm(zeros({2, 3, 4, 4}), ones({4}), zeros({3}), zeros({3}), ones({3}), true));
  EXPECT_NE(m.find("gamma is f32[4], expected f32[3]"), std::string::npos) << m;
  std::printf("  error: %s\n", m.c_str());
  m = message(batch_norm(zeros({2, 3}), ones({3}), zeros({3}), Tensor(), Tensor(), false));
  EXPECT_NE(m.find("eval mode"), std::string::npos) << m;
  m = message(batch_norm(zeros({1, 3, 1, 1}), ones({3}), zeros({3}), zeros({3}), ones({3}), true));
  EXPECT_NE(m.find("more than 1 value per channel"), std::string::npos) << m;
}

}  // namespace
}  // namespace mtc
