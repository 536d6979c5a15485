// Tests of the elementwise ops, reductions and reshape: forward against a double
// reference, backward against central finite differences of that reference.
#include <cmath>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc {
namespace {

TEST(Elementwise, AddBroadcastForwardAndBackward) {
  auto rt = make_test_runtime();
  check_op({{2, 3, 4}, {3, 1}},
           [](const TensorList& x) { return add(x[0], x[1]); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y({2, 3, 4});
             for (int i = 0; i < 2; ++i)
               for (int j = 0; j < 3; ++j)
                 for (int k = 0; k < 4; ++k) y.at({i, j, k}) = x[0].at({i, j, k}) + x[1].at({j, 0});
             return y;
           });
}

TEST(Elementwise, SubAndMulBroadcast) {
  auto rt = make_test_runtime();
  check_op({{4, 5}, {5}},
           [](const TensorList& x) { return sub(x[0], x[1]); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y({4, 5});
             for (int i = 0; i < 4; ++i)
               for (int j = 0; j < 5; ++j) y.at({i, j}) = x[0].at({i, j}) - x[1].at({j});
             return y;
           });
  check_op({{4, 1, 3}, {1, 5, 3}},
           [](const TensorList& x) { return mul(x[0], x[1]); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y({4, 5, 3});
             for (int i = 0; i < 4; ++i)
               for (int j = 0; j < 5; ++j)
                 for (int k = 0; k < 3; ++k) y.at({i, j, k}) = x[0].at({i, 0, k}) * x[1].at({0, j, k});
             return y;
           });
}

TEST(Elementwise, ScaleReluSwishGelu) {
  auto rt = make_test_runtime();
  auto unary = [](auto f) {
    return [f](const std::vector<RefTensor>& x) {
      RefTensor y(x[0].shape);
      for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = f(x[0].v[i]);
      return y;
    };
  };
  check_op({{3, 7}}, [](const TensorList& x) { return scale(x[0], -2.5f); }, unary([](double v) { return -2.5 * v; }));
  // relu's kink: keep inputs away from 0 so finite differences are valid.
  check_op({{3, 7}}, [](const TensorList& x) { return relu(x[0]); }, unary([](double v) { return v > 0 ? v : 0; }),
           {.avoid_zero = 0.05});
  check_op({{3, 7}}, [](const TensorList& x) { return swish(x[0]); }, unary([](double v) { return v / (1 + std::exp(-v)); }));
  check_op({{3, 7}}, [](const TensorList& x) { return gelu(x[0]); },
           unary([](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }));
  check_op({{3, 7}}, [](const TensorList& x) { return sigmoid(x[0]); }, unary([](double v) { return 1 / (1 + std::exp(-v)); }));
  check_op({{3, 7}}, [](const TensorList& x) { return tanh(x[0]); }, unary([](double v) { return std::tanh(v); }));
}

TEST(Reduce, SumMeanAndSumTo) {
  auto rt = make_test_runtime();
  check_op({{2, 3, 4}}, [](const TensorList& x) { return sum(x[0]); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y(Shape{});
             for (double v : x[0].v) y.v[0] += v;
             return y;
           });
  check_op({{2, 3, 4}}, [](const TensorList& x) { return mean(x[0], {1}, true); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y({2, 1, 4});
             for (int i = 0; i < 2; ++i)
               for (int k = 0; k < 4; ++k) {
                 for (int j = 0; j < 3; ++j) y.at({i, 0, k}) += x[0].at({i, j, k}) / 3.0;
               }
             return y;
           });
  // [R, K, R] takes the general path.
  check_op({{2, 3, 4}}, [](const TensorList& x) { return sum(x[0], {0, 2}); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y({3});
             for (int i = 0; i < 2; ++i)
               for (int j = 0; j < 3; ++j)
                 for (int k = 0; k < 4; ++k) y.at({j}) += x[0].at({i, j, k});
             return y;
           });
  check_op({{5, 2, 3}}, [](const TensorList& x) { return sum_to(x[0], {2, 1}); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y({2, 1});
             for (int i = 0; i < 5; ++i)
               for (int j = 0; j < 2; ++j)
                 for (int k = 0; k < 3; ++k) y.at({j, 0}) += x[0].at({i, j, k});
             return y;
           });
}

TEST(Reshape, ReshapeAndFlatten) {
  auto rt = make_test_runtime();
  check_op({{2, 3, 4}}, [](const TensorList& x) { return reshape(x[0], {4, -1}); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y = x[0];
             y.shape = {4, 6};
             return y;
           });
  check_op({{2, 3, 4}}, [](const TensorList& x) { return flatten(x[0]); },
           [](const std::vector<RefTensor>& x) {
             RefTensor y = x[0];
             y.shape = {2, 12};
             return y;
           });
}

TEST(Elementwise, ShapeErrorSurfacesAtSync) {
  auto rt = make_test_runtime();
  Tensor a = zeros({2, 3}), b = zeros({4});
  Tensor c = add(a, b);
  EXPECT_TRUE(c.poisoned());
  Tensor d = relu(c);  // a poisoned input poisons quietly
  absl::StatusOr<std::vector<float>> v = d.to_vector();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("add on f32[2,3], f32[4]"), std::string::npos) << v.status();
  EXPECT_NE(v.status().message().find("do not broadcast"), std::string::npos) << v.status();
  // The error was reported once; the runtime goes on working.
  EXPECT_TRUE(rt->interpreter().sync().ok());
  EXPECT_EQ(*sum(ones({3, 3})).item(), 9.0f);
}

}  // namespace
}  // namespace mtc
