// Tests of matmul (2-D, batched, broadcast, 2-D b over a batch, and the transpose flags its
// gradients use) and linear (bias, 3-D and 1-D input): forward against a double
// reference, gradients against finite differences, and shape errors.
#include <cmath>

#include "gtest/gtest.h"
#include "autograd.h"
#include "mtc/ops.h"
#include "op_check.h"
#include "ops/matmul.h"

namespace mtc {
namespace {

// matmul_ref: op(a) op(b) with NumPy batch broadcasting; op transposes the last two dims.
RefTensor matmul_ref(const RefTensor& a, const RefTensor& b, bool ta = false, bool tb = false) {
  const size_t na = a.shape.size(), nb = b.shape.size();
  const int64_t m = ta ? a.shape[na - 1] : a.shape[na - 2], k = ta ? a.shape[na - 2] : a.shape[na - 1];
  const int64_t n = tb ? b.shape[nb - 2] : b.shape[nb - 1];
  const size_t nbatch = std::max(na, nb) - 2;
  Shape ys(nbatch);
  for (size_t i = 0; i < nbatch; ++i) {
    const int64_t da = i + na - 2 >= nbatch ? a.shape[i + na - 2 - nbatch] : 1;
    const int64_t db = i + nb - 2 >= nbatch ? b.shape[i + nb - 2 - nbatch] : 1;
    ys[i] = std::max(da, db);
  }
  Shape yshape = ys;
  yshape.push_back(m);
  yshape.push_back(n);
  RefTensor y(yshape);
  const int64_t batches = numel(ys);
  for (int64_t bi = 0; bi < batches; ++bi) {
    // Batch offsets (in matrices) of a and b for output batch bi.
    int64_t rem = bi, ao = 0, bo = 0, sa = 1, sb = 1;
    for (int d = static_cast<int>(nbatch) - 1; d >= 0; --d) {
      const int64_t idx = rem % ys[d];
      rem /= ys[d];
      const int da = d - static_cast<int>(nbatch) + static_cast<int>(na) - 2;
      const int db = d - static_cast<int>(nbatch) + static_cast<int>(nb) - 2;
      if (da >= 0) {
        ao += (a.shape[da] == 1 ? 0 : idx) * sa;
        sa *= a.shape[da];
      }
      if (db >= 0) {
        bo += (b.shape[db] == 1 ? 0 : idx) * sb;
        sb *= b.shape[db];
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = a.v[ao * m * k + (ta ? p * m + i : i * k + p)];
          const double bv = b.v[bo * k * n + (tb ? j * k + p : p * n + j)];
          acc += av * bv;
        }
        y.v[(bi * m + i) * n + j] = acc;
      }
  }
  return y;
}

constexpr CheckOptions kTol{.fwd_atol = 1e-5, .fwd_rtol = 1e-5, .grad_atol = 1e-4, .grad_rtol = 1e-4};

void check_matmul(Shape a, Shape b) {
  check_op({a, b}, [](const TensorList& t) { return matmul(t[0], t[1]); },
           [](const std::vector<RefTensor>& r) { return matmul_ref(r[0], r[1]); }, kTol);
}

TEST(Matmul, TwoD) {
  auto rt = make_test_runtime();
  check_matmul({3, 4}, {4, 5});
}

TEST(Matmul, Batched) {
  auto rt = make_test_runtime();
  check_matmul({2, 3, 4}, {2, 4, 5});
}

TEST(Matmul, BroadcastBatchDims) {
  auto rt = make_test_runtime();
  check_matmul({2, 1, 3, 4}, {3, 4, 2});
}

TEST(Matmul, TwoDRightOperandAppliesToEveryBatch) {
  auto rt = make_test_runtime();
  check_matmul({2, 3, 4, 5}, {5, 6});
}

TEST(Matmul, TwoDLeftOperandWithBatchedRight) {
  auto rt = make_test_runtime();
  check_matmul({3, 4}, {2, 4, 5});
}

TEST(Matmul, TransposeFlags) {
  auto rt = make_test_runtime();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{2, 4, 3} : Shape{2, 3, 4};
      const Shape b = tb ? Shape{5, 4} : Shape{4, 5};
      check_op({a, b},
               [=](const TensorList& t) { return call1(std::make_shared<MatmulOp>(ta, tb), {t[0], t[1]}); },
               [=](const std::vector<RefTensor>& r) { return matmul_ref(r[0], r[1], ta, tb); }, kTol);
    }
}

// linear_ref: x (..., IN) w^T + bias.
RefTensor linear_ref(const std::vector<RefTensor>& r) {
  const RefTensor& x = r[0];
  const RefTensor& w = r[1];
  const int64_t in = w.dim(1), out = w.dim(0), rows = static_cast<int64_t>(x.v.size()) / in;
  Shape ys = x.shape;
  ys.back() = out;
  RefTensor y(ys);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double acc = r.size() > 2 ? r[2].v[o] : 0.0;
      for (int64_t p = 0; p < in; ++p) acc += x.v[i * in + p] * w.v[o * in + p];
      y.v[i * out + o] = acc;
    }
  return y;
}

TEST(Linear, ThreeDInputWithBias) {
  auto rt = make_test_runtime();
  check_op({{2, 3, 5}, {4, 5}, {4}}, [](const TensorList& t) { return linear(t[0], t[1], t[2]); }, linear_ref, kTol);
}

TEST(Linear, TwoDWithoutBiasAndOneD) {
  auto rt = make_test_runtime();
  check_op({{6, 5}, {3, 5}}, [](const TensorList& t) { return linear(t[0], t[1]); }, linear_ref, kTol);
  check_op({{5}, {3, 5}, {3}}, [](const TensorList& t) { return linear(t[0], t[1], t[2]); }, linear_ref, kTol);
}

TEST(Linear, OnlyBiasNeedsGrad) {
  auto rt = make_test_runtime();
  check_op({InputSpec::no_grad({4, 5}), InputSpec::no_grad({3, 5}), {3}},
           [](const TensorList& t) { return linear(t[0], t[1], t[2]); }, linear_ref, kTol);
}

TEST(MatmulLinear, BitIdenticalRunToRun) {
  auto rt = make_test_runtime();
  std::vector<float> xv(8 * 64 * 96), wv(80 * 96);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.11f * i);
  auto run = [&] {
    Tensor x = from_vector({8, 64, 96}, xv).set_requires_grad(true);
    Tensor w = from_vector({80, 96}, wv).set_requires_grad(true);
    Tensor b = zeros({80}).set_requires_grad(true);
    Tensor y = matmul(linear(x, w, b), w);
    EXPECT_TRUE(sum(mul(y, y)).backward().ok());
    return std::vector<std::vector<float>>{*y.to_vector(), *x.grad().to_vector(), *w.grad().to_vector(),
                                           *b.grad().to_vector()};
  };
  auto first = run();
  for (int rep = 0; rep < 2; ++rep) EXPECT_EQ(first, run());
}

TEST(MatmulLinear, ShapeErrors) {
  auto rt = make_test_runtime();
  auto message = [](const Tensor& t) {
    auto v = t.to_vector();
    EXPECT_FALSE(v.ok());
    return std::string(v.status().message());
  };
  std::string m = message(matmul(zeros({2, 3, 4}), zeros({5, 6})));
  EXPECT_NE(m.find("has K = 4 but b [5,6] has K = 5"), std::string::npos) << m;
  std::printf("  error: %s\n", m.c_str());
  m = message(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})));
  EXPECT_NE(m.find("do not broadcast"), std::string::npos) << m;
  m = message(linear(zeros({2, 7}), zeros({3, 5})));
  EXPECT_NE(m.find("x has 7 features"), std::string::npos) << m;
  m = message(linear(zeros({2, 5}), zeros({3, 5}), zeros({4})));
  EXPECT_NE(m.find("expected [3] (OUT)"), std::string::npos) << m;
}

}  // namespace
}  // namespace mtc
