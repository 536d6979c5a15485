// CUDA against CPU for the cuDNN-family ops: conv2d (cuDNN) with its gradient ops
// conv2d_backward_input and conv2d_backward_weight (with the bias gradient); batch_norm
// and batch_norm_backward (training with and without running statistics, eval); and
// max_pool2d, avg_pool2d with their gradient ops, and global_avg_pool. Forward outputs
// and every input's gradient (through autograd, so the backward ops run on CUDA too) are
// compared over odd shapes and several attribute values; running statistics are compared
// after the in-place update. The CUDA kernels are also checked to be deterministic (two
// runs give the same bits), which DTE's recomputation relies on. Skipped without a GPU.
//
// Tolerances, |cuda - cpu| <= atol + rtol * |cpu|:
//  - conv: rtol 1e-4, atol 1e-4 (1e-3 for the 32x32 problem, whose weight gradient sums
//    8192 products): cuDNN and oneDNN both sum in fp32 in different orders. TF32 (10-bit
//    mantissas) would miss this by an order of magnitude, so the test also shows that fp32
//    stays fp32.
//  - batch_norm: rtol 1e-4, atol 1e-5 forward, 1e-4 / 1e-4 for gradients: the CUDA sums run
//    in double, the CPU's in float lanes flushed to double.
//  - pooling: rtol 1e-6, atol 1e-6, where the kernels are in fact bit-identical to the
//    CPU's (same windows, tie-breaking and summation order); a gradient routed to the
//    wrong maximum of a tie would be off by a whole value.
#include <cmath>
#include <memory>
#include <vector>

#include "autograd.h"
#include "cuda_check.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "ops/batch_norm.h"

namespace mtc {
namespace {

using cuda_check::compare;
using cuda_check::Input;
using cuda_check::random_input;

// ---- conv2d ----

struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dOptions o;
  bool bias;
  double atol = 1e-4;
};

void check_conv(const ConvCase& k, uint64_t seed) {
  std::vector<Input> in{random_input(k.x, seed), random_input(k.w, seed + 1)};
  if (k.bias) in.push_back(random_input({k.w[0]}, seed + 2));
  const Conv2dOptions o = k.o;
  const bool bias = k.bias;
  compare(
      k.name,
      [o, bias](const TensorList& t) { return TensorList{conv2d(t[0], t[1], bias ? t[2] : Tensor(), o)}; },
      in, /*rtol=*/1e-4, k.atol);
}

TEST(CudaDnn, Conv2d) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<ConvCase> cases{
      {"3x3 pad 1 bias", {2, 3, 7, 9}, {4, 3, 3, 3}, Conv2dOptions::make(1, 1), true},
      {"3x3 stride 2 pad 1 groups 2", {3, 4, 11, 10}, {6, 2, 3, 3}, Conv2dOptions::make(2, 1, 1, 2), false},
      {"depthwise 3x3 dilation 2 pad 2 bias",
       {2, 4, 9, 9},
       {4, 1, 3, 3},
       Conv2dOptions::make(1, 2, 2, 4),
       true},
      {"1x1 stride 2 bias", {1, 5, 8, 7}, {3, 5, 1, 1}, Conv2dOptions::make(2, 0), true},
      {"asymmetric stride, pad, dilation, kernel",
       {2, 3, 10, 9},
       {5, 3, 3, 2},
       Conv2dOptions{1, 2, 0, 1, 2, 1, 1},
       true},
      {"5x5 stride 3 groups 3 no pad", {2, 6, 13, 12}, {9, 2, 5, 5}, Conv2dOptions::make(3, 0, 1, 3), false},
      {"ResNet block 16->16 @32x32", {8, 16, 32, 32}, {16, 16, 3, 3}, Conv2dOptions::make(1, 1), true, 1e-3},
  };
  uint64_t seed = 100;
  for (const ConvCase& k : cases) check_conv(k, seed += 10);
}

// Empty problems, which cuDNN cannot run: an empty batch (y empty, dw = 0, db = 0) and no
// input channels (y = the bias broadcast, db = the sum of dy).
TEST(CudaDnn, Conv2dEmptyProblems) {
  MTC_SKIP_WITHOUT_GPU();
  auto f = [](const TensorList& t) {
    return TensorList{conv2d(t[0], t[1], t[2], Conv2dOptions::make(1, 1))};
  };
  compare("N = 0", f, {random_input({0, 3, 5, 5}, 1), random_input({4, 3, 3, 3}, 2), random_input({4}, 3)},
          1e-6, 1e-6);
  compare("C = 0", f, {random_input({2, 0, 5, 5}, 4), random_input({4, 0, 3, 3}, 5), random_input({4}, 6)},
          1e-6, 1e-5);
}

// ---- batch_norm ----

// bn_inputs: x, gamma, beta and, when tracked, running_mean and running_var (positive).
std::vector<Input> bn_inputs(const Shape& x, bool tracked, uint64_t seed, float x_offset = 0.f) {
  const Shape c{x[1]};
  std::vector<Input> in{random_input(x, seed), random_input(c, seed + 1), random_input(c, seed + 2)};
  for (float& v : in[0].f32) v += x_offset;
  if (tracked) {
    in.push_back(random_input(c, seed + 3, false));
    in.push_back(random_input(c, seed + 4, false));
    for (float& v : in[4].f32) v = v * v + 0.5f;
  }
  return in;
}

// check_bn: forward with all three outputs and the running statistics after the update;
// then the gradients of x, gamma and beta through y.
void check_bn(const std::string& name, const Shape& x, bool training, bool tracked, uint64_t seed,
              float x_offset = 0.f) {
  const std::vector<Input> in = bn_inputs(x, training ? tracked : true, seed, x_offset);
  const float momentum = 0.1f, eps = 1e-5f;
  compare(
      name + " forward",
      [=](const TensorList& t) {
        const bool has_running = t.size() == 5;
        TensorList ins{t[0], t[1], t[2]};
        if (has_running) ins.insert(ins.end(), {t[3], t[4]});
        TensorList out = call(std::make_shared<BatchNormOp>(training, momentum, eps, has_running), ins);
        if (has_running) out.insert(out.end(), {t[3], t[4]});  // read after the in-place update
        return out;
      },
      in, 1e-4, 1e-5, /*backward=*/false);
  compare(
      name + " backward",
      [=](const TensorList& t) {
        const bool has_running = t.size() == 5;
        return TensorList{batch_norm(t[0], t[1], t[2], has_running ? t[3] : Tensor(),
                                     has_running ? t[4] : Tensor(), training, momentum, eps)};
      },
      in, 1e-4, 1e-4);
}

TEST(CudaDnn, BatchNormTrain) {
  MTC_SKIP_WITHOUT_GPU();
  check_bn("4-D", {4, 3, 5, 5}, true, true, 10);
  check_bn("2-D", {7, 5}, true, true, 20);
  check_bn("5-D", {3, 4, 2, 3, 5}, true, true, 30);
  check_bn("two values per channel", {2, 3, 1, 1}, true, true, 40);
  check_bn("untracked", {4, 6, 7, 3}, true, false, 50);
  check_bn("large mean", {5, 3, 9, 11}, true, true, 60, 50.f);
  // 64 * 1024 values per channel: many partial sums per channel.
  check_bn("ResNet-sized 64x16x32x32", {64, 16, 32, 32}, true, true, 70);
  // Many channels with few values each: one partial per channel.
  check_bn("many channels", {3, 700, 2, 3}, true, true, 80);
}

TEST(CudaDnn, BatchNormEval) {
  MTC_SKIP_WITHOUT_GPU();
  check_bn("eval 4-D", {4, 3, 5, 5}, false, true, 110);
  check_bn("eval 2-D", {1, 9}, false, true, 120);
  check_bn("eval odd", {3, 5, 7, 11}, false, true, 130);
}

// ---- pooling ----

struct PoolCase {
  const char* name;
  Shape x;
  Pool2dOptions o;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases{
      {"2x2 stride 2", {2, 3, 8, 8}, Pool2dOptions::make(2, 2)},
      {"2x2 stride 2 odd", {2, 3, 7, 9}, Pool2dOptions::make(2, 2)},
      {"3x3 stride 2 pad 1", {2, 4, 11, 10}, Pool2dOptions::make(3, 2, 1)},
      {"3x3 stride 1 pad 1", {1, 2, 9, 7}, Pool2dOptions::make(3, 1, 1)},
      {"asymmetric 3x2 stride 2,1 pad 1,0", {2, 2, 9, 8}, Pool2dOptions{3, 2, 2, 1, 1, 0}},
      {"5x5 stride 3 pad 2", {3, 2, 13, 14}, Pool2dOptions::make(5, 3, 2)},
      {"ResNet stem 3x3 stride 2 pad 1", {8, 16, 56, 56}, Pool2dOptions::make(3, 2, 1)},
  };
  return cases;
}

TEST(CudaDnn, MaxPool2d) {
  MTC_SKIP_WITHOUT_GPU();
  uint64_t seed = 200;
  for (const PoolCase& k : pool_cases()) {
    const Pool2dOptions o = k.o;
    compare(
        k.name, [o](const TensorList& t) { return TensorList{max_pool2d(t[0], o)}; },
        {random_input(k.x, seed += 10)}, 1e-6, 1e-6);
  }
}

// Ties: values on a coarse grid, so windows hold equal maxima; the gradient must go to
// the first one (row-major) as on the CPU.
TEST(CudaDnn, MaxPool2dTies) {
  MTC_SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  for (const PoolCase& k : pool_cases()) {
    Input in = random_input(k.x, seed += 10);
    for (float& v : in.f32) v = std::round(v);  // mostly -1, 0, 1
    const Pool2dOptions o = k.o;
    compare(
        std::string("ties ") + k.name, [o](const TensorList& t) { return TensorList{max_pool2d(t[0], o)}; },
        {in}, 1e-6, 1e-6);
  }
}

TEST(CudaDnn, AvgPool2d) {
  MTC_SKIP_WITHOUT_GPU();
  uint64_t seed = 400;
  for (const PoolCase& k : pool_cases()) {
    const Pool2dOptions o = k.o;
    compare(
        k.name, [o](const TensorList& t) { return TensorList{avg_pool2d(t[0], o)}; },
        {random_input(k.x, seed += 10)}, 1e-6, 1e-6);
  }
}

TEST(CudaDnn, GlobalAvgPool) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes{
      {2, 3, 7, 9}, {4, 5, 1, 1}, {2, 2, 33, 31}, {1, 2, 224, 224}, {64, 64, 8, 8}};
  uint64_t seed = 500;
  for (const Shape& s : shapes) {
    compare(
        "global_avg_pool " + shape_str(s),
        [](const TensorList& t) { return TensorList{global_avg_pool(t[0])}; }, {random_input(s, seed += 10)},
        1e-6, 1e-6);
  }
}

// ---- determinism ----

// Two CUDA runs of conv (forward and both gradients), batch_norm (training) and max pool
// backward over the same inputs give the same bits.
TEST(CudaDnn, Deterministic) {
  MTC_SKIP_WITHOUT_GPU();
  std::vector<Input> in{random_input({8, 16, 20, 20}, 900), random_input({16, 16, 3, 3}, 901),
                        random_input({16}, 902), random_input({16}, 903), random_input({16}, 904)};
  auto f = [](const TensorList& t) {
    Tensor y = conv2d(t[0], t[1], t[2], Conv2dOptions::make(1, 1));
    y = batch_norm(y, t[3], t[4], Tensor(), Tensor(), true);
    return TensorList{max_pool2d(y, Pool2dOptions::make(3, 2, 1))};
  };
  const cuda_check::Result a = cuda_check::run_on("cuda", f, in, true);
  const cuda_check::Result b = cuda_check::run_on("cuda", f, in, true);
  ASSERT_EQ(a.outputs.size(), 1u);
  EXPECT_EQ(a.outputs, b.outputs);
  ASSERT_EQ(a.grads.size(), in.size());
  for (size_t k = 0; k < a.grads.size(); ++k) {
    EXPECT_FALSE(a.grads[k].empty()) << "input " << k;
    EXPECT_EQ(a.grads[k], b.grads[k]) << "input " << k;
  }
}

}  // namespace
}  // namespace mtc
