// Tests of softmax, log_softmax and cross_entropy: forward against a double reference
// (including logits large enough to overflow a naive exp), backward against finite
// differences, determinism of the parallel paths, and errors (bad dims, bad labels).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc {
namespace {

// ref_softmax: softmax (or log_softmax) of x along dim, in double.
RefTensor ref_softmax(const RefTensor& x, int dim, bool log) {
  const int nd = static_cast<int>(x.shape.size());
  const int d = dim < 0 ? dim + nd : dim;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.shape[i];
  for (int i = d + 1; i < nd; ++i) inner *= x.shape[i];
  const int64_t n = x.shape[d];
  RefTensor y(x.shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + j; };
      double m = x.v[at(0)];
      for (int64_t k = 1; k < n; ++k) m = std::max(m, x.v[at(k)]);
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += std::exp(x.v[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) {
        y.v[at(k)] = log ? x.v[at(k)] - m - std::log(s) : std::exp(x.v[at(k)] - m) / s;
      }
    }
  return y;
}

// ref_cross_entropy: mean over rows of -log_softmax(logits)[label].
RefTensor ref_cross_entropy(const RefTensor& logits, const RefTensor& labels) {
  const RefTensor ls = ref_softmax(logits, 1, true);
  const int64_t n = logits.dim(0);
  RefTensor y;  // shape []
  y.v = {0.0};
  for (int64_t i = 0; i < n; ++i) y.v[0] -= ls.at({i, static_cast<int64_t>(labels.v[i])}) / static_cast<double>(n);
  return y;
}

// fp32 kernels against a double reference: gradients agree to about 1e-7; these bounds
// leave room for rounding only.
constexpr CheckOptions kTight{.grad_atol = 1e-5, .grad_rtol = 1e-4};

TEST(Softmax, AlongEachDim) {
  auto rt = make_test_runtime();
  for (int dim : {-1, 1, 0}) {
    check_op({{2, 4, 3}}, [dim](const TensorList& x) { return softmax(x[0], dim); },
             [dim](const std::vector<RefTensor>& x) { return ref_softmax(x[0], dim, false); }, kTight);
  }
  check_op({{3, 5}}, [](const TensorList& x) { return softmax(x[0], 1); },
           [](const std::vector<RefTensor>& x) { return ref_softmax(x[0], 1, false); },
           {.grad_atol = 1e-5, .grad_rtol = 1e-4, .lo = -4, .hi = 4});
}

TEST(Softmax, LogSoftmaxAlongEachDim) {
  auto rt = make_test_runtime();
  for (int dim : {-1, -2, 0}) {
    check_op({{3, 2, 5}}, [dim](const TensorList& x) { return log_softmax(x[0], dim); },
             [dim](const std::vector<RefTensor>& x) { return ref_softmax(x[0], dim, true); }, kTight);
  }
}

TEST(Softmax, StableForLargeLogits) {
  auto rt = make_test_runtime();
  // exp(500) overflows f32 (and exp(1000) double): only the max-subtracted form is finite.
  Tensor x = from_vector({2, 3}, std::vector<float>{1000.f, 1001.f, 1002.f, -1000.f, 500.f, 0.f});
  auto y = softmax(x, 1).to_vector();
  auto ly = log_softmax(x, 1).to_vector();
  ASSERT_TRUE(y.ok() && ly.ok());
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1 + e1 + e2;
  const double want[] = {e2 / z, e1 / z, 1 / z, 0, 1, 0};
  const double want_log[] = {-2 - std::log(z), -1 - std::log(z), -std::log(z), -1500, 0, -500};
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR((*y)[i], want[i], 1e-6) << i;
    EXPECT_NEAR((*ly)[i], want_log[i], 1e-4 * std::abs(want_log[i]) + 1e-6) << i;
  }
  // Forward on a wide range, against the reference.
  check_op({{4, 9}}, [](const TensorList& x) { return log_softmax(x[0], -1); },
           [](const std::vector<RefTensor>& x) { return ref_softmax(x[0], -1, true); },
           {.lo = -300, .hi = 300, .check_backward = false});
}

TEST(Softmax, LargeIsDeterministicAndMatchesReference) {
  auto rt = make_test_runtime();
  // 64 x 40 x 16 elements: above the parallel grain, and dim 1 is strided.
  check_op({{64, 40, 16}}, [](const TensorList& x) { return softmax(x[0], 1); },
           [](const std::vector<RefTensor>& x) { return ref_softmax(x[0], 1, false); }, {.check_backward = false});
  std::vector<float> v(64 * 40 * 16), w(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::sin(0.37f * static_cast<float>(i));
    w[i] = std::cos(0.11f * static_cast<float>(i));
  }
  auto grad = [&](bool log) {
    Tensor x = from_vector({64, 40, 16}, v).set_requires_grad(true);
    Tensor y = log ? log_softmax(x, 1) : softmax(x, 1);
    EXPECT_TRUE(sum(mul(y, from_vector({64, 40, 16}, w))).backward().ok());
    return *x.grad().to_vector();
  };
  for (bool log : {false, true}) {
    const std::vector<float> g1 = grad(log), g2 = grad(log);
    ASSERT_EQ(g1.size(), v.size());
    for (size_t i = 0; i < g1.size(); ++i) ASSERT_EQ(g1[i], g2[i]) << "run-to-run difference at " << i;
  }
}

TEST(CrossEntropy, ForwardAndBackward) {
  auto rt = make_test_runtime();
  check_op({{6, 5}, InputSpec::ints({6}, 5)},
           [](const TensorList& x) { return cross_entropy(x[0], x[1]); },
           [](const std::vector<RefTensor>& x) { return ref_cross_entropy(x[0], x[1]); }, kTight);
  check_op({{3, 7}, InputSpec::ints({3}, 7)},
           [](const TensorList& x) { return cross_entropy(x[0], x[1]); },
           [](const std::vector<RefTensor>& x) { return ref_cross_entropy(x[0], x[1]); },
           {.grad_atol = 1e-5, .grad_rtol = 1e-4, .lo = -8, .hi = 8, .seed = 7});
  // Large logits and enough rows for the parallel path.
  check_op({{400, 100}, InputSpec::ints({400}, 100)},
           [](const TensorList& x) { return cross_entropy(x[0], x[1]); },
           [](const std::vector<RefTensor>& x) { return ref_cross_entropy(x[0], x[1]); },
           {.fwd_rtol = 1e-5, .lo = -200, .hi = 200, .check_backward = false});
}

TEST(CrossEntropy, GradientIsSoftmaxMinusOneHotOverN) {
  auto rt = make_test_runtime();
  const std::vector<float> v = {0.5f, -1.f, 2.f, 0.f, 0.f, 0.f};
  Tensor x = from_vector({2, 3}, v).set_requires_grad(true);
  Tensor labels = from_vector_i32({2}, std::vector<int32_t>{2, 0});
  Tensor loss = scale(cross_entropy(x, labels), 3.f);  // upstream gradient 3
  ASSERT_TRUE(loss.backward().ok());
  auto g = x.grad().to_vector();
  ASSERT_TRUE(g.ok()) << g.status();
  RefTensor rx({2, 3});
  rx.v.assign(v.begin(), v.end());
  const RefTensor p = ref_softmax(rx, 1, false);
  const int label[] = {2, 0};
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c) {
      const double want = 3.0 * (p.at({i, c}) - (c == label[i] ? 1 : 0)) / 2;
      EXPECT_NEAR((*g)[i * 3 + c], want, 1e-6) << i << "," << c;
    }
}

TEST(CrossEntropy, BadLabelFailsAtExecution) {
  auto rt = make_test_runtime();
  Tensor logits = zeros({4, 5});
  for (int32_t bad : {7, -1, 5}) {
    Tensor labels = from_vector_i32({4}, std::vector<int32_t>{0, 1, bad, 4});
    Tensor loss = cross_entropy(logits, labels);
    EXPECT_FALSE(loss.poisoned());  // shapes are fine: the error comes from the kernel
    auto v = loss.item();
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
    const std::string msg(v.status().message());
    EXPECT_NE(msg.find("cross_entropy on f32[4,5], i32[4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(absl::StrCat("label ", bad, " at position 2")), std::string::npos) << msg;
    EXPECT_NE(msg.find("C = 5"), std::string::npos) << msg;
  }
  EXPECT_NEAR(*cross_entropy(logits, from_vector_i32({4}, std::vector<int32_t>{0, 1, 2, 4})).item(), std::log(5.0), 1e-6);
}

TEST(Softmax, ShapeErrorsNameWhatWasWrong) {
  auto rt = make_test_runtime();
  expect_op_error(softmax(zeros({2, 3}), 2), {"softmax(dim=2) on f32[2,3]: dim 2 is out of range for 2 dims"});
  expect_op_error(log_softmax(zeros({2, 3}), -3), {"dim -3 is out of range"});
  expect_op_error(softmax(from_vector_i32({2}, std::vector<int32_t>{1, 2}), 0), {"input is i32[2], expected f32"});
  Tensor labels = from_vector_i32({3}, std::vector<int32_t>{0, 1, 2});
  expect_op_error(cross_entropy(zeros({2, 3}), labels), {"labels are i32[3], expected (N) = [2]"});
  expect_op_error(cross_entropy(zeros({2, 3, 1}), labels), {"expected (N, C)"});
  expect_op_error(cross_entropy(zeros({3, 3}), zeros({3})), {"labels is f32[3], expected i32"});
}

// topk: each row's largest values' indices, largest first; equal values by index; NaN
// below every number; over the last dim of any rank; k from 1 to C; a bad k is named.
TEST(Topk, OrderTiesNanAndShapes) {
  auto rt = make_test_runtime();
  const float nan = std::nanf("");
  const std::vector<float> v = {0.5f, 2.f, -1.f, 2.f, nan, 7.f,  //
                                nan,  nan, 3.f,  3.f, 3.f, -9.f};
  Tensor x = from_vector({2, 6}, v);
  EXPECT_EQ(*topk(x, 1).to_vector_i32(), (std::vector<int32_t>{5, 2}));
  EXPECT_EQ(*topk(x, 3).to_vector_i32(), (std::vector<int32_t>{5, 1, 3, 2, 3, 4}));
  EXPECT_EQ(*topk(x, 6).to_vector_i32(), (std::vector<int32_t>{5, 1, 3, 0, 2, 4, 2, 3, 4, 5, 0, 1}));
  Tensor x3 = from_vector({2, 1, 6}, v);
  Tensor t3 = topk(x3, 2);
  EXPECT_EQ(shape_str(t3.shape()), "[2,1,2]");
  EXPECT_EQ(*t3.to_vector_i32(), (std::vector<int32_t>{5, 1, 2, 3}));
  // Against a sort of each row, for random rows.
  std::vector<float> r(40 * 33);
  for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>((i * 7919) % 101) - 50.f;
  const std::vector<int32_t> got = *topk(from_vector({40, 33}, r), 5).to_vector_i32();
  for (int row = 0; row < 40; ++row) {
    std::vector<int32_t> idx(33);
    for (int i = 0; i < 33; ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return r[row * 33 + a] > r[row * 33 + b]; });
    EXPECT_EQ(std::vector<int32_t>(got.begin() + row * 5, got.begin() + row * 5 + 5),
              std::vector<int32_t>(idx.begin(), idx.begin() + 5))
        << "row " << row;
  }
  expect_op_error(topk(x, 7), {"topk: k 7 of f32[2,6]"});
  expect_op_error(topk(x, 0), {"topk: k 0"});
}

}  // namespace
}  // namespace mtc
