// Tests of src/nn: Module plumbing (names, recursion, buffers, train/eval, zero_grad),
// PyTorch's default initialisation (bounds and moments of the drawn values, constants),
// reproducibility from the runtime seed, and the layers' output shapes and values.
#include "mtc/nn.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc::nn {
namespace {

// Scale2: y = relu(x * w + b) with w, b of shape [2] and a counter buffer; made of ops
// that exist in the core, to test the plumbing on its own.
class Scale2 final : public Module {
 public:
  Scale2() {
    w = register_parameter("w", parameter({2}, std::vector<float>{2.f, -1.f}));
    b = register_parameter("b", constant_parameter({2}, 0.5f));
    count = register_buffer("count", constant_buffer({1}, 0.f));
  }
  Tensor forward(const Tensor& x) override { return relu(add(mul(x, w), b)); }
  std::string type_name() const override { return "Scale2"; }
  Tensor w, b, count;
};

class Pair final : public Module {
 public:
  Pair() {
    first = register_module("first", std::make_shared<Scale2>());
    rest = register_module("rest", std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
                                       std::make_shared<Scale2>(), std::make_shared<ReLU>()}));
  }
  Tensor forward(const Tensor& x) override { return rest->forward(first->forward(x)); }
  std::string type_name() const override { return "Pair"; }
  std::shared_ptr<Scale2> first;
  std::shared_ptr<Sequential> rest;
};

std::vector<std::string> names(const NamedTensors& nt) {
  std::vector<std::string> out;
  for (const auto& [n, t] : nt) out.push_back(n);
  return out;
}

TEST(Module, NamesRecursionBuffersAndModes) {
  auto rt = make_test_runtime();
  Pair m;
  EXPECT_EQ(names(m.named_parameters()),
            (std::vector<std::string>{"first.w", "first.b", "rest.0.w", "rest.0.b"}));
  EXPECT_EQ(names(m.named_buffers()), (std::vector<std::string>{"first.count", "rest.0.count"}));
  EXPECT_EQ(m.parameters().size(), 4u);
  EXPECT_EQ(m.num_parameters(), 8);
  for (const Tensor& p : m.parameters()) EXPECT_TRUE(p.requires_grad());
  for (const Tensor& b : m.buffers()) EXPECT_FALSE(b.requires_grad());
  EXPECT_TRUE(m.is_training());
  m.eval();
  EXPECT_FALSE(m.first->is_training());
  EXPECT_FALSE(m.rest->operator[](1).is_training());
  m.train();
  EXPECT_TRUE(m.rest->operator[](0).is_training());
}

TEST(Module, GradientsReachParametersAndZeroGradClears) {
  auto rt = make_test_runtime();
  Pair m;
  Tensor x = from_vector({3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(sum(m(x)).backward().ok());
  // first: y1 = relu(x * [2, -1] + 0.5); column 1 is negative, so only column 0 passes.
  // rest: y = relu(y1 * [2, -1] + 0.5) -> column 0 again. d/dw_first[0] = sum(x[:,0] * 2).
  auto gw = m.first->w.grad().to_vector();
  ASSERT_TRUE(gw.ok()) << gw.status();
  EXPECT_FLOAT_EQ((*gw)[0], 2.f * (1 + 3 + 5));
  EXPECT_FLOAT_EQ((*gw)[1], 0.f);
  // Handles share the autograd record: the copy in parameters() sees the same grad.
  EXPECT_TRUE(m.parameters()[0].grad().defined());
  m.zero_grad();
  for (const Tensor& p : m.parameters()) EXPECT_FALSE(p.grad().defined());
}

// moments: mean and variance of a tensor's values, with the largest |value|.
struct Moments {
  double mean = 0, var = 0, max_abs = 0;
};
Moments moments(const Tensor& t) {
  auto v = t.to_vector();
  EXPECT_TRUE(v.ok()) << v.status();
  Moments m;
  for (float x : *v) {
    m.mean += x;
    m.max_abs = std::max(m.max_abs, static_cast<double>(std::abs(x)));
  }
  m.mean /= v->size();
  for (float x : *v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= v->size();
  return m;
}

// U(-b, b) has mean 0 and variance b^2 / 3; with n draws the mean's standard error is
// b / sqrt(3n). The checks allow 5 standard errors, and 5% on the variance.
void expect_uniform(const Tensor& t, double bound, const char* what) {
  const Moments m = moments(t);
  const double n = static_cast<double>(t.numel());
  std::printf("  %s: n %.0f bound %.5f max|x| %.5f mean %.2e var %.3e (expected %.3e)\n", what, n, bound,
              m.max_abs, m.mean, m.var, bound * bound / 3);
  EXPECT_LE(m.max_abs, bound) << what;
  EXPECT_GE(m.max_abs, 0.98 * bound) << what << " does not fill its range";
  EXPECT_NEAR(m.mean, 0.0, 5 * bound / std::sqrt(3 * n)) << what;
  EXPECT_NEAR(m.var, bound * bound / 3, 0.05 * bound * bound / 3) << what;
}

TEST(Init, LinearAndConvFollowPyTorchDefaults) {
  auto rt = make_test_runtime();
  Linear fc(400, 300);
  EXPECT_EQ(fc.weight.desc().str(), "f32[300,400]");
  EXPECT_EQ(fc.bias.desc().str(), "f32[300]");
  expect_uniform(fc.weight, 1 / std::sqrt(400.0), "Linear(400,300).weight");
  EXPECT_LE(moments(fc.bias).max_abs, 1 / std::sqrt(400.0));

  Conv2d conv({.in_channels = 32, .out_channels = 64, .kernel = 3, .padding = 1});
  EXPECT_EQ(conv.weight.desc().str(), "f32[64,32,3,3]");
  expect_uniform(conv.weight, 1 / std::sqrt(32.0 * 9), "Conv2d(32,64,3).weight");
  EXPECT_LE(moments(conv.bias).max_abs, 1 / std::sqrt(32.0 * 9));

  Conv2d grouped({.in_channels = 32, .out_channels = 64, .kernel = 3, .groups = 4, .bias = false});
  EXPECT_EQ(grouped.weight.desc().str(), "f32[64,8,3,3]");
  EXPECT_FALSE(grouped.bias.defined());
  EXPECT_EQ(grouped.parameters().size(), 1u);
  expect_uniform(grouped.weight, 1 / std::sqrt(8.0 * 9), "grouped Conv2d weight (fan_in 72)");
}

TEST(Init, NormalisationConstants) {
  auto rt = make_test_runtime();
  BatchNorm2d bn(6);
  EXPECT_EQ(names(bn.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(names(bn.named_buffers()), (std::vector<std::string>{"running_mean", "running_var"}));
  EXPECT_EQ(*bn.weight.to_vector(), std::vector<float>(6, 1.f));
  EXPECT_EQ(*bn.bias.to_vector(), std::vector<float>(6, 0.f));
  EXPECT_EQ(*bn.running_mean.to_vector(), std::vector<float>(6, 0.f));
  EXPECT_EQ(*bn.running_var.to_vector(), std::vector<float>(6, 1.f));
  LayerNorm ln(5);
  EXPECT_EQ(*ln.weight.to_vector(), std::vector<float>(5, 1.f));
  EXPECT_EQ(*ln.bias.to_vector(), std::vector<float>(5, 0.f));
}

TEST(Init, ReproducibleFromTheRuntimeSeed) {
  auto values = [](uint64_t seed) {
    RuntimeOptions o;
    o.memory_bytes = size_t{64} << 20;
    o.num_threads = 1;
    o.seed = seed;
    auto rt = Runtime::create(o);
    EXPECT_TRUE(rt.ok());
    Linear a(10, 10), b(10, 10);
    std::vector<float> v = *a.weight.to_vector(), w = *b.weight.to_vector();
    EXPECT_NE(v, w) << "two layers drew the same values";
    v.insert(v.end(), w.begin(), w.end());
    return v;
  };
  EXPECT_EQ(values(3), values(3));
  EXPECT_NE(values(3), values(4));
}

// ---- layers on the ops of the other branches ----

TEST(Layers, LinearMatchesReference) {
  auto rt = make_test_runtime();
  Linear fc(3, 2);
  std::vector<float> xv{1, 2, 3, -1, 0.5f, 2};
  Tensor y = fc(from_vector({2, 3}, xv));
  auto w = *fc.weight.to_vector(), b = *fc.bias.to_vector();
  auto yv = y.to_vector();
  ASSERT_TRUE(yv.ok()) << yv.status();
  ASSERT_EQ(y.desc().str(), "f32[2,2]");
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 2; ++o) {
      double ref = b[o];
      for (int i = 0; i < 3; ++i) ref += double{xv[n * 3 + i]} * w[o * 3 + i];
      EXPECT_NEAR((*yv)[n * 2 + o], ref, 1e-5);
    }
}

TEST(Layers, ConvBatchNormPoolShapesAndRunningStats) {
  auto rt = make_test_runtime();
  Sequential net({std::make_shared<Conv2d>(Conv2dConfig{
                      .in_channels = 3, .out_channels = 8, .kernel = 3, .stride = 2, .padding = 1}),
                  std::make_shared<BatchNorm2d>(8), std::make_shared<ReLU>(),
                  std::make_shared<MaxPool2d>(2, 2), std::make_shared<GlobalAvgPool>(),
                  std::make_shared<Linear>(8, 4)});
  EXPECT_EQ(names(net.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias"}));
  data::SyntheticData src({3, 16, 16}, 4, 1);
  Tensor x = data::to_device(src.next(4)).images;
  Tensor y = net(x);
  EXPECT_EQ(y.desc().str(), "f32[4,4]");
  ASSERT_TRUE(sum(y).backward().ok());
  for (const auto& [name, p] : net.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  // Training updated the running statistics in place; eval leaves them alone.
  auto& bn = static_cast<BatchNorm2d&>(net[1]);
  std::vector<float> rm = *bn.running_mean.to_vector();
  EXPECT_NE(rm, std::vector<float>(8, 0.f));
  net.eval();
  Tensor y_eval = net(x);
  ASSERT_TRUE(y_eval.to_vector().ok());
  EXPECT_EQ(*bn.running_mean.to_vector(), rm);
}

TEST(Layers, LayerNormNormalisesTheLastDim) {
  auto rt = make_test_runtime();
  LayerNorm ln(4);
  Tensor y = ln(from_vector({2, 4}, std::vector<float>{1, 2, 3, 4, -2, 0, 2, 8}));
  auto v = y.to_vector();
  ASSERT_TRUE(v.ok()) << v.status();
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 4; ++i) mean += (*v)[r * 4 + i] / 4.0;
    for (int i = 0; i < 4; ++i) var += ((*v)[r * 4 + i] - mean) * ((*v)[r * 4 + i] - mean) / 4.0;
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var, 1.0, 1e-3);
  }
}

}  // namespace
}  // namespace mtc::nn
