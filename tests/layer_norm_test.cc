// Tests of layer_norm: forward against a double reference, backward (x, gamma, beta)
// against finite differences with and without the affine parameters, the parallel
// paths' determinism, and shape errors.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc {
namespace {

constexpr double kEps = 1e-5;

// ref_layer_norm: x (..., D); gamma and beta (D) or null.
RefTensor ref_layer_norm(const RefTensor& x, const RefTensor* gamma, const RefTensor* beta) {
  const int64_t d = x.shape.back(), rows = numel(x.shape) / d;
  RefTensor y(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.v.data() + r * d;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < d; ++k) mean += xr[k] / static_cast<double>(d);
    for (int64_t k = 0; k < d; ++k) var += (xr[k] - mean) * (xr[k] - mean) / static_cast<double>(d);
    for (int64_t k = 0; k < d; ++k) {
      double v = (xr[k] - mean) / std::sqrt(var + kEps);
      if (gamma) v *= gamma->v[k];
      if (beta) v += beta->v[k];
      y.v[r * d + k] = v;
    }
  }
  return y;
}

// fp32 kernels against a double reference: gradients agree to about 1e-6.
constexpr CheckOptions kTight{.grad_atol = 2e-5, .grad_rtol = 2e-4};

TEST(LayerNorm, WithGammaAndBeta) {
  auto rt = make_test_runtime();
  check_op({{3, 4, 8}, {8}, {8}}, [](const TensorList& x) { return layer_norm(x[0], x[1], x[2]); },
           [](const std::vector<RefTensor>& x) { return ref_layer_norm(x[0], &x[1], &x[2]); }, kTight);
}

TEST(LayerNorm, WithoutAffineOrWithOneOfThem) {
  auto rt = make_test_runtime();
  check_op({{5, 6}}, [](const TensorList& x) { return layer_norm(x[0], Tensor(), Tensor()); },
           [](const std::vector<RefTensor>& x) { return ref_layer_norm(x[0], nullptr, nullptr); }, kTight);
  check_op({{2, 3, 7}, {7}}, [](const TensorList& x) { return layer_norm(x[0], x[1], Tensor()); },
           [](const std::vector<RefTensor>& x) { return ref_layer_norm(x[0], &x[1], nullptr); }, kTight);
  check_op({{4, 5}, {5}}, [](const TensorList& x) { return layer_norm(x[0], Tensor(), x[1]); },
           [](const std::vector<RefTensor>& x) { return ref_layer_norm(x[0], nullptr, &x[1]); }, kTight);
}

TEST(LayerNorm, LargeTakesParallelPathsAndIsDeterministic) {
  auto rt = make_test_runtime();
  // 300 x 128 elements: above the parallel grain. x's gradient is not finite-differenced
  // here (too many elements); gamma's and beta's, summed over 300 rows, are.
  check_op({InputSpec::no_grad({300, 128}), {128}, {128}},
           [](const TensorList& x) { return layer_norm(x[0], x[1], x[2]); },
           [](const std::vector<RefTensor>& x) { return ref_layer_norm(x[0], &x[1], &x[2]); },
           {.grad_atol = 1e-4, .grad_rtol = 1e-4});
  std::vector<float> v(300 * 128), w(v.size()), g(128);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::sin(0.37f * static_cast<float>(i));
    w[i] = std::cos(0.11f * static_cast<float>(i));
  }
  for (size_t i = 0; i < g.size(); ++i) g[i] = 1.f + 0.01f * static_cast<float>(i);
  auto grads = [&] {
    Tensor x = from_vector({300, 128}, v).set_requires_grad(true);
    Tensor gamma = from_vector({128}, g).set_requires_grad(true);
    Tensor beta = zeros({128}).set_requires_grad(true);
    EXPECT_TRUE(sum(mul(layer_norm(x, gamma, beta), from_vector({300, 128}, w))).backward().ok());
    return std::vector<std::vector<float>>{*x.grad().to_vector(), *gamma.grad().to_vector(), *beta.grad().to_vector()};
  };
  const auto a = grads(), b = grads();
  for (size_t t = 0; t < a.size(); ++t) {
    ASSERT_EQ(a[t].size(), b[t].size());
    for (size_t i = 0; i < a[t].size(); ++i) ASSERT_EQ(a[t][i], b[t][i]) << "gradient " << t << " element " << i;
  }
}

TEST(LayerNorm, ShapeErrorsNameWhatWasWrong) {
  auto rt = make_test_runtime();
  Tensor x = zeros({2, 3});
  expect_op_error(layer_norm(x, zeros({2}), Tensor()), {"gamma is f32[2], expected (D) = [3]"});
  expect_op_error(layer_norm(x, Tensor(), zeros({3, 1})), {"beta is f32[3,1], expected (D) = [3]"});
  expect_op_error(layer_norm(zeros({}), Tensor(), Tensor()), {"x is 0-d"});
  expect_op_error(layer_norm(from_vector_i32({3}, std::vector<int32_t>{1, 2, 3}), Tensor(), Tensor()), {"x is i32[3]"});
  expect_op_error(layer_norm(x, Tensor(), Tensor(), -1.f), {"eps=-1"});
}

}  // namespace
}  // namespace mtc
