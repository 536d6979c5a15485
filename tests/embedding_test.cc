// Tests of embedding: forward against a gather reference, the weight gradient (a
// scatter-add over repeated indices) against finite differences and a double reference,
// its determinism, and errors (bad shapes, indices out of range at execution); and of
// scatter_add_rows (that scatter-add as an op of its own, with its gather gradient).
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc {
namespace {

// ref_embedding: weight (V, D), indices (...) -> (..., D).
RefTensor ref_embedding(const RefTensor& w, const RefTensor& idx) {
  const int64_t d = w.dim(1);
  Shape s = idx.shape;
  s.push_back(d);
  RefTensor y(s);
  for (size_t i = 0; i < idx.v.size(); ++i)
    for (int64_t k = 0; k < d; ++k) y.v[i * d + k] = w.v[static_cast<int64_t>(idx.v[i]) * d + k];
  return y;
}

TEST(Embedding, ForwardAndScatterAddBackward) {
  auto rt = make_test_runtime();
  // 12 indices into 7 rows: rows repeat, so the backward must add.
  const CheckOptions exact{.fwd_atol = 0, .fwd_rtol = 0, .grad_atol = 1e-6, .grad_rtol = 1e-6};
  check_op({{7, 5}, InputSpec::ints({3, 4}, 7)},
           [](const TensorList& x) { return embedding(x[0], x[1]); },
           [](const std::vector<RefTensor>& x) { return ref_embedding(x[0], x[1]); }, exact);
  check_op({{4, 3}, InputSpec::ints({6}, 4)},
           [](const TensorList& x) { return embedding(x[0], x[1]); },
           [](const std::vector<RefTensor>& x) { return ref_embedding(x[0], x[1]); }, exact);
}

// ref_scatter_add_rows: src (n, D), indices (n) -> (rows, D).
RefTensor ref_scatter_add_rows(const RefTensor& src, const RefTensor& idx, int64_t rows) {
  const int64_t d = src.dim(1);
  RefTensor y(Shape{rows, d});
  for (size_t i = 0; i < idx.v.size(); ++i)
    for (int64_t k = 0; k < d; ++k) y.v[static_cast<int64_t>(idx.v[i]) * d + k] += src.v[i * d + k];
  return y;
}

// scatter_add_rows: repeated indices add, untouched rows are zero, and its gradient in
// src gathers (finite differences); no rows at all gives zeros.
TEST(ScatterAddRows, ForwardAndGatherBackward) {
  auto rt = make_test_runtime();
  check_op({{9, 4}, InputSpec::ints({9}, 6)},
           [](const TensorList& x) { return scatter_add_rows(x[0], x[1], 6); },
           [](const std::vector<RefTensor>& x) { return ref_scatter_add_rows(x[0], x[1], 6); },
           {.fwd_atol = 1e-6, .fwd_rtol = 1e-6});
  Tensor src = from_vector({0, 3}, std::vector<float>{}).set_requires_grad(true);
  Tensor y = scatter_add_rows(src, from_vector_i32({0}, std::vector<int32_t>{}), 2);
  EXPECT_EQ(*y.to_vector(), std::vector<float>(6, 0.f));
  ASSERT_TRUE(sum(mul(y, from_vector({2, 3}, std::vector<float>(6, 1.f)))).backward().ok());
  ASSERT_TRUE(src.grad().defined());
  EXPECT_EQ(src.grad().numel(), 0);
}

TEST(Embedding, LargeGradientIsDeterministicAndMatchesReference) {
  auto rt = make_test_runtime();
  // 4000 lookups into 50 rows of 64 (80 hits a row): above the parallel grain.
  const int64_t v = 50, d = 64, n = 4000;
  std::vector<int32_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>((i * 7919) % v);
  std::vector<float> w(v * d), dy(n * d);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i % 97);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::sin(0.3f * static_cast<float>(i));
  auto grad = [&] {
    Tensor weight = from_vector({v, d}, w).set_requires_grad(true);
    Tensor y = embedding(weight, from_vector_i32({n}, idx));
    EXPECT_TRUE(sum(mul(y, from_vector({n, d}, dy))).backward().ok());
    return *weight.grad().to_vector();
  };
  const std::vector<float> g1 = grad(), g2 = grad();
  std::vector<double> want(v * d, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < d; ++k) want[idx[i] * d + k] += dy[i * d + k];
  double max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(g1[i], g2[i]) << "run-to-run difference at " << i;
    max_err = std::max(max_err, std::abs(g1[i] - want[i]));
  }
  std::printf("  dweight: max |mtc - double reference| = %.3g (tol 1e-4)\n", max_err);
  EXPECT_LE(max_err, 1e-4);
}

TEST(Embedding, IndexOutOfRangeFailsAtExecution) {
  auto rt = make_test_runtime();
  Tensor w = zeros({7, 3});
  for (int32_t bad : {7, -1, 100}) {
    Tensor y = embedding(w, from_vector_i32({2, 2}, std::vector<int32_t>{0, 6, 2, bad}));
    EXPECT_FALSE(y.poisoned());  // shapes are fine: the kernel finds it
    expect_op_error(y, {"embedding on f32[7,3], i32[2,2]", absl::StrCat("index ", bad, " at position 3").c_str(),
                        "V = 7"});
  }
  EXPECT_TRUE(embedding(w, from_vector_i32({1}, std::vector<int32_t>{6})).to_vector().ok());
}

TEST(Embedding, ShapeErrorsNameWhatWasWrong) {
  auto rt = make_test_runtime();
  Tensor idx = from_vector_i32({2}, std::vector<int32_t>{0, 1});
  expect_op_error(embedding(zeros({7}), idx), {"weight is f32[7], expected (V, D)"});
  expect_op_error(embedding(zeros({7, 3}), zeros({2})), {"indices is f32[2], expected i32"});
}

}  // namespace
}  // namespace mtc
