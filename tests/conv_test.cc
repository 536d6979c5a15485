// Tests of conv2d: forward against a double-precision direct convolution, gradients of x,
// w and bias against central finite differences of it, over stride, padding, dilation,
// groups (incl. depthwise) and bias; determinism; and the shape errors a user can make.
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc {
namespace {

// conv_ref: x (N, C, H, W), w (OC, C/g, KH, KW), optional bias (OC), in double.
RefTensor conv_ref(const std::vector<RefTensor>& in, const Conv2dOptions& o) {
  const RefTensor& x = in[0];
  const RefTensor& w = in[1];
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  const int64_t oc = w.dim(0), cg = w.dim(1), kh = w.dim(2), kw = w.dim(3);
  const int64_t g = o.groups, ocg = oc / g;
  const int64_t oh = (h + 2 * o.pad_h - o.dilation_h * (kh - 1) - 1) / o.stride_h + 1;
  const int64_t ow = (wd + 2 * o.pad_w - o.dilation_w * (kw - 1) - 1) / o.stride_w + 1;
  EXPECT_EQ(c, cg * g);
  RefTensor y({n, oc, oh, ow});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t f = 0; f < oc; ++f)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = in.size() > 2 ? in[2].at({f}) : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t hi = i * o.stride_h - o.pad_h + p * o.dilation_h;
                const int64_t wi = j * o.stride_w - o.pad_w + q * o.dilation_w;
                if (hi < 0 || hi >= h || wi < 0 || wi >= wd) continue;
                acc += x.at({b, (f / ocg) * cg + ci, hi, wi}) * w.at({f, ci, p, q});
              }
          y.at({b, f, i, j}) = acc;
        }
  return y;
}

void check_conv(Shape x, Shape w, bool bias, Conv2dOptions o) {
  std::vector<InputSpec> specs{InputSpec(x), InputSpec(w)};
  if (bias) specs.emplace_back(Shape{w[0]});
  check_op(
      specs,
      [&](const TensorList& t) { return conv2d(t[0], t[1], bias ? t[2] : Tensor(), o); },
      [&](const std::vector<RefTensor>& r) { return conv_ref(r, o); },
      {.fwd_atol = 1e-5, .fwd_rtol = 1e-5, .grad_atol = 1e-4, .grad_rtol = 1e-4});
}

TEST(Conv2d, Plain3x3Pad1WithBias) {
  auto rt = make_test_runtime();
  check_conv({2, 4, 7, 7}, {6, 4, 3, 3}, true, Conv2dOptions::make(1, 1));
}

TEST(Conv2d, Stride2NoPadNoBias) {
  auto rt = make_test_runtime();
  check_conv({2, 3, 9, 8}, {5, 3, 3, 3}, false, Conv2dOptions::make(2, 0));
}

TEST(Conv2d, OneByOneStride2) {
  auto rt = make_test_runtime();
  check_conv({2, 8, 8, 8}, {16, 8, 1, 1}, false, Conv2dOptions::make(2, 0));
}

TEST(Conv2d, Dilation2Pad2) {
  auto rt = make_test_runtime();
  check_conv({2, 3, 9, 9}, {4, 3, 3, 3}, true, Conv2dOptions::make(1, 2, 2));
}

TEST(Conv2d, Groups2) {
  auto rt = make_test_runtime();
  check_conv({2, 4, 6, 6}, {6, 2, 3, 3}, true, Conv2dOptions::make(1, 1, 1, 2));
}

TEST(Conv2d, DepthwiseStride2) {
  auto rt = make_test_runtime();
  check_conv({2, 8, 7, 7}, {8, 1, 3, 3}, true, Conv2dOptions::make(2, 1, 1, 8));
}

TEST(Conv2d, DepthwiseMultiplier2) {
  auto rt = make_test_runtime();
  check_conv({1, 4, 6, 6}, {8, 1, 3, 3}, false, Conv2dOptions::make(1, 1, 1, 4));
}

TEST(Conv2d, AsymmetricOptionsAndKernel) {
  auto rt = make_test_runtime();
  Conv2dOptions o{.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 2, .dilation_h = 1, .dilation_w = 2, .groups = 1};
  check_conv({2, 3, 8, 7}, {4, 3, 3, 2}, true, o);
}

// ResNet's channel counts make oneDNN pick its blocked (16-channel) kernels and reorders.
TEST(Conv2d, BlockedKernelShapes) {
  auto rt = make_test_runtime();
  check_conv({2, 16, 5, 5}, {16, 16, 3, 3}, false, Conv2dOptions::make(2, 1));
}

TEST(Conv2d, OnlyBiasNeedsGrad) {
  auto rt = make_test_runtime();
  const Conv2dOptions o = Conv2dOptions::make(1, 1);
  check_op({InputSpec::no_grad({2, 3, 5, 5}), InputSpec::no_grad({4, 3, 3, 3}), {4}},
           [&](const TensorList& t) { return conv2d(t[0], t[1], t[2], o); },
           [&](const std::vector<RefTensor>& r) { return conv_ref(r, o); },
           {.fwd_atol = 1e-5, .fwd_rtol = 1e-5, .grad_atol = 1e-4, .grad_rtol = 1e-4});
}

TEST(Conv2d, BitIdenticalRunToRun) {
  auto rt = make_test_runtime();
  std::vector<float> xv(4 * 16 * 12 * 12), wv(32 * 16 * 3 * 3);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.11f * i);
  auto run = [&] {
    Tensor x = from_vector({4, 16, 12, 12}, xv).set_requires_grad(true);
    Tensor w = from_vector({32, 16, 3, 3}, wv).set_requires_grad(true);
    Tensor y = conv2d(x, w, Tensor(), Conv2dOptions::make(1, 1));
    EXPECT_TRUE(sum(mul(y, y)).backward().ok());
    return std::vector<std::vector<float>>{*y.to_vector(), *x.grad().to_vector(), *w.grad().to_vector()};
  };
  auto first = run();
  for (int rep = 0; rep < 3; ++rep) {
    auto again = run();
    for (size_t k = 0; k < first.size(); ++k) {
      ASSERT_EQ(first[k].size(), again[k].size());
      EXPECT_EQ(0, std::memcmp(first[k].data(), again[k].data(), first[k].size() * sizeof(float))) << "output " << k;
    }
  }
}

// oneDNN rejects empty problems; the kernels answer them directly.
TEST(Conv2d, EmptyBatchAndEmptyChannels) {
  auto rt = make_test_runtime();
  Tensor w = ones({4, 3, 3, 3}).set_requires_grad(true), b = full({4}, 2.f).set_requires_grad(true);
  Tensor y = conv2d(zeros({0, 3, 5, 5}), w, b, Conv2dOptions::make(1, 1));
  EXPECT_EQ(shape_str(y.shape()), "[0,4,5,5]");
  ASSERT_TRUE(sum(y).backward().ok());
  EXPECT_EQ(*w.grad().to_vector(), std::vector<float>(4 * 27, 0.f));
  EXPECT_EQ(*b.grad().to_vector(), std::vector<float>(4, 0.f));
  // No input channels: every output is the bias, and db counts every output position.
  Tensor w0 = zeros({4, 0, 3, 3}).set_requires_grad(true), b0 = full({4}, 2.f).set_requires_grad(true);
  Tensor y0 = conv2d(zeros({2, 0, 5, 5}), w0, b0, Conv2dOptions::make(1, 1));
  EXPECT_EQ(*y0.to_vector(), std::vector<float>(2 * 4 * 25, 2.f));
  ASSERT_TRUE(sum(y0).backward().ok());
  EXPECT_EQ(*b0.grad().to_vector(), std::vector<float>(4, 50.f));
}

TEST(Conv2d, ChannelMismatchIsAClearError) {
  auto rt = make_test_runtime();
  Tensor y = conv2d(zeros({2, 3, 8, 8}), zeros({16, 4, 3, 3}), Tensor(), Conv2dOptions::make(1, 1));
  auto v = y.to_vector();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m(v.status().message());
  EXPECT_NE(m.find("conv2d("), std::string::npos) << m;
  EXPECT_NE(m.find("f32[2,3,8,8], f32[16,4,3,3]"), std::string::npos) << m;
  EXPECT_NE(m.find("x has 3 channels"), std::string::npos) << m;
  std::printf("  error: %s\n", m.c_str());
}

TEST(Conv2d, OtherShapeErrors) {
  auto rt = make_test_runtime();
  auto message = [](const Tensor& t) {
    auto v = t.to_vector();
    EXPECT_FALSE(v.ok());
    return std::string(v.status().message());
  };
  EXPECT_NE(message(conv2d(zeros({3, 8, 8}), zeros({4, 3, 3, 3}))).find("expected 4-D"), std::string::npos);
  EXPECT_NE(message(conv2d(zeros({1, 6, 8, 8}), zeros({4, 2, 3, 3}), Tensor(), Conv2dOptions::make(1, 1, 1, 4)))
                .find("groups=4 must divide"),
            std::string::npos);
  EXPECT_NE(message(conv2d(zeros({1, 3, 2, 2}), zeros({4, 3, 3, 3}))).find("does not fit"), std::string::npos);
  EXPECT_NE(message(conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}), zeros({5}))).find("expected [4] (OC)"),
            std::string::npos);
}

}  // namespace
}  // namespace mtc
