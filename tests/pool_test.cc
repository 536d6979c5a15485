// Tests of max_pool2d, avg_pool2d (count_include_pad) and global_avg_pool: forward against
// a double reference, gradients against finite differences, the first-maximum tie rule,
// and shape errors.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc {
namespace {

// pool_ref: max or average (divisor KH*KW, padding counted) pooling of x (N, C, H, W).
RefTensor pool_ref(const RefTensor& x, const Pool2dOptions& o, bool is_max) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = (h + 2 * o.pad_h - o.kernel_h) / o.stride_h + 1;
  const int64_t ow = (w + 2 * o.pad_w - o.kernel_w) / o.stride_w + 1;
  RefTensor y({n, c, oh, ow});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t p = 0; p < o.kernel_h; ++p)
            for (int64_t q = 0; q < o.kernel_w; ++q) {
              const int64_t r = i * o.stride_h - o.pad_h + p, s = j * o.stride_w - o.pad_w + q;
              if (r < 0 || r >= h || s < 0 || s >= w) continue;
              acc = is_max ? std::max(acc, x.at({b, ch, r, s})) : acc + x.at({b, ch, r, s});
            }
          y.at({b, ch, i, j}) = is_max ? acc : acc / static_cast<double>(o.kernel_h * o.kernel_w);
        }
  return y;
}

void check_pool(Shape x, Pool2dOptions o, bool is_max) {
  check_op({x},
           [&](const TensorList& t) { return is_max ? max_pool2d(t[0], o) : avg_pool2d(t[0], o); },
           [&](const std::vector<RefTensor>& r) { return pool_ref(r[0], o, is_max); },
           {.fwd_atol = 1e-6, .fwd_rtol = 1e-6, .grad_atol = 1e-5, .grad_rtol = 1e-5});
}

TEST(MaxPool2d, Kernel2Stride2) {
  auto rt = make_test_runtime();
  check_pool({2, 3, 6, 6}, Pool2dOptions::make(2, 2), true);
}

TEST(MaxPool2d, Kernel3Stride2Pad1) {
  auto rt = make_test_runtime();
  check_pool({2, 2, 7, 8}, Pool2dOptions::make(3, 2, 1), true);
}

TEST(MaxPool2d, TiesGoToTheFirstMaximum) {
  auto rt = make_test_runtime();
  // Overlapping 3x3 windows (stride 1, padding 1) over a constant 4x4 plane: every window's
  // gradient goes to its first element in row-major order.
  Tensor x = ones({1, 1, 4, 4}).set_requires_grad(true);
  Tensor y = max_pool2d(x, Pool2dOptions::make(3, 1, 1));
  ASSERT_TRUE(sum(y).backward().ok());
  std::vector<float> g = *x.grad().to_vector();
  std::vector<float> want(16, 0.f);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) want[std::max(i - 1, 0) * 4 + std::max(j - 1, 0)] += 1.f;
  EXPECT_EQ(g, want);
}

TEST(AvgPool2d, Kernel2Stride2) {
  auto rt = make_test_runtime();
  check_pool({2, 3, 6, 7}, Pool2dOptions::make(2, 2), false);
}

TEST(AvgPool2d, Kernel3Stride2Pad1CountsPadding) {
  auto rt = make_test_runtime();
  check_pool({2, 2, 7, 7}, Pool2dOptions::make(3, 2, 1), false);
  // A corner window over ones holds 4 real values of 9: 4/9, as PyTorch's default.
  EXPECT_NEAR((*avg_pool2d(ones({1, 1, 4, 4}), Pool2dOptions::make(3, 2, 1)).to_vector())[0], 4.0 / 9.0, 1e-7);
}

TEST(GlobalAvgPool, ForwardAndBackward) {
  auto rt = make_test_runtime();
  check_op({{2, 3, 4, 5}}, [](const TensorList& t) { return global_avg_pool(t[0]); },
           [](const std::vector<RefTensor>& r) {
             RefTensor y({2, 3});
             for (int b = 0; b < 2; ++b)
               for (int c = 0; c < 3; ++c)
                 for (int i = 0; i < 4; ++i)
                   for (int j = 0; j < 5; ++j) y.at({b, c}) += r[0].at({b, c, i, j}) / 20.0;
             return y;
           },
           {.fwd_atol = 1e-6, .fwd_rtol = 1e-6, .grad_atol = 1e-5, .grad_rtol = 1e-5});
}

TEST(Pool, ShapeErrors) {
  auto rt = make_test_runtime();
  auto message = [](const Tensor& t) {
    auto v = t.to_vector();
    EXPECT_FALSE(v.ok());
    return std::string(v.status().message());
  };
  std::string m = message(max_pool2d(zeros({3, 8, 8}), Pool2dOptions::make(2, 2)));
  EXPECT_NE(m.find("expected f32 (N, C, H, W)"), std::string::npos) << m;
  m = message(avg_pool2d(zeros({1, 1, 8, 8}), Pool2dOptions::make(2, 2, 2)));
  EXPECT_NE(m.find("at most half the kernel"), std::string::npos) << m;
  m = message(max_pool2d(zeros({1, 1, 2, 2}), Pool2dOptions::make(3, 1)));
  EXPECT_NE(m.find("does not fit"), std::string::npos) << m;
  std::printf("  error: %s\n", m.c_str());
  m = message(global_avg_pool(zeros({4, 8})));
  EXPECT_NE(m.find("expected f32 (N, C, H, W)"), std::string::npos) << m;
}

}  // namespace
}  // namespace mtc
