// CUDA-against-CPU tests of the elementwise, reduction, data-movement, optimizer-step,
// synchronised batch norm and max_grad_mask kernels (src/kernels/cuda/{elementwise,
// reduce,shape_ops,optim,sync_batch_norm}.cc). Each runs the same computation on a CPU
// and a CUDA runtime and compares outputs and, through autograd, input gradients (so the
// backward ops run on CUDA too: relu_grad, swish_grad, gelu_grad, sigmoid_grad, tanh_grad, sum_to / expand,
// slice_backward, the inverse permute and shuffle, split / concat, bn_grad_sums,
// sync_batch_norm_backward, max_grad_mask). Every test skips without a GPU.
//
// Tolerances, |cuda - cpu| <= atol + rtol * |cpu|:
//   data movement (permute, concat, split, slice, channel_shuffle, expand, reshape, copy_,
//   fill, relu, add/sub/mul/scale on equal shapes): exact (0, 0), and i32 data exactly;
//   sums (sum, mean, sum_to in the binary ops' gradients): rtol 1e-6, atol 1e-6 (both
//   devices sum in double, only the order differs);
//   swish, gelu, sigmoid, tanh: rtol 1e-5, atol 1e-6 (CUDA's expf / erff / tanhf vs glibc's, a few ulps);
//   optimizer steps: rtol 1e-6, atol 1e-7 over 4 steps (the kernels repeat the CPU's
//   roundings, so a Release build should agree bit for bit; the slack covers a host
//   compiler that fuses differently);
//   sync batch norm: rtol 1e-4, atol 1e-5 (double sums in another order; invstd and
//   the gradient rows amplify last-bit differences).
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd.h"
#include "comm/communicator.h"
#include "cuda_check.h"
#include "device.h"
#include "dist/collective_ops.h"
#include "dist/sync_batch_norm.h"
#include "gtest/gtest.h"
#include "mtc/distributed.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"
#include "ops/elementwise.h"

namespace mtc {
namespace {

using cuda_check::compare;
using cuda_check::Input;
using cuda_check::random_input;

constexpr double kExact = 0;

std::string str(const Shape& s) { return shape_str(s); }

// ---- helpers for what compare() does not cover: i32 data and in-place results ----

// on_both: f run on a CPU runtime, then on a CUDA runtime (each current while f runs).
template <typename R>
std::pair<R, R> on_both(const std::function<R()>& f) {
  std::pair<R, R> r;
  {
    auto rt = cuda_check::make_runtime("cpu");
    if (rt) {
      r.first = f();
      EXPECT_TRUE(rt->interpreter().sync().ok());
    }
  }
  {
    auto rt = cuda_check::make_runtime("cuda");
    if (rt) {
      r.second = f();
      EXPECT_TRUE(rt->interpreter().sync().ok());
    }
  }
  return r;
}

std::vector<int32_t> i32_of(const Tensor& t) {
  auto v = t.to_vector_i32();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<int32_t>();
}
std::vector<float> f32_of(const Tensor& t) {
  auto v = t.to_vector();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

// expect_close: cuda against cpu, element by element.
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  ASSERT_FALSE(cpu.empty()) << what;
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double d = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    const double tol = atol + rtol * std::fabs(cpu[i]);
    worst = std::max(worst, tol > 0 ? d / tol : d);
    ASSERT_LE(d, tol) << what << " element " << i << ": cuda " << gpu[i] << " cpu " << cpu[i];
  }
  std::printf("  %s: %zu values, worst |cuda - cpu| / tolerance %.3f\n", what.c_str(), cpu.size(), worst);
}

std::vector<int32_t> iota_i32(int64_t n, int32_t start = -1000) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<int32_t>(i * 7919 % 100003);
  return v;
}

// ---- elementwise ----

TEST(CudaElementwise, BinaryOpsBroadcast) {
  MTC_SKIP_WITHOUT_GPU();
  struct Case {
    Shape a, b;
    double rtol, atol;  // exact on equal shapes; the gradients of broadcast inputs are sums
  };
  const std::vector<Case> cases = {
      {{3, 5, 7}, {3, 5, 7}, kExact, kExact},
      {{1001}, {1001}, kExact, kExact},
      {{4, 6}, {1}, 1e-6, 1e-6},                                // scalar operand
      {{4, 6}, {}, 1e-6, 1e-6},                                 // rank-0 operand
      {{2, 3, 4, 5}, {3, 1, 5}, 1e-6, 1e-6},                    // right-aligned, inner broadcast
      {{7, 1}, {1, 9}, 1e-6, 1e-6},                             // both broadcast
      {{5}, {3, 4, 5}, 1e-6, 1e-6},                             // a broadcast
      {{2, 1, 3, 1, 5, 1}, {4, 1, 6}, 1e-6, 1e-6},              // rank 6, alternating
      {{2, 3, 2, 3, 2, 3, 2}, {3, 1, 3, 1, 3, 2}, 1e-6, 1e-6},  // rank 7
      {{64, 129}, {129}, 1e-6, 1e-6},                           // bias-like
  };
  for (const Case& c : cases) {
    for (const char* kind : {"add", "sub", "mul"}) {
      const std::string k = kind;
      compare(
          k + " " + str(c.a) + " " + str(c.b),
          [k](const TensorList& in) {
            return TensorList{k == "add"   ? add(in[0], in[1])
                              : k == "sub" ? sub(in[0], in[1])
                                           : mul(in[0], in[1])};
          },
          {random_input(c.a, 1), random_input(c.b, 2)}, c.rtol, c.atol);
    }
  }
}

TEST(CudaElementwise, ScaleFillExpandReshape) {
  MTC_SKIP_WITHOUT_GPU();
  for (const Shape& s : {Shape{17}, Shape{3, 5, 7}, Shape{2, 1, 9, 11}}) {
    compare(
        "scale " + str(s), [](const TensorList& in) { return TensorList{scale(in[0], -0.37f)}; },
        {random_input(s, 3)}, kExact, kExact);
    compare(
        "reshape " + str(s), [](const TensorList& in) { return TensorList{reshape(in[0], {-1})}; },
        {random_input(s, 4)}, kExact, kExact);
    compare(
        "fill " + str(s),
        [s](const TensorList& in) {
          return TensorList{full(s, 2.5f), add(in[0], zeros(s)), ones(s)};
        },
        {random_input(s, 5)}, kExact, kExact);
  }
  struct Case {
    Shape from, to;
  };
  for (const Case& c : {Case{{3, 1, 5}, {2, 3, 4, 5}}, Case{{1}, {7, 3}}, Case{{4, 1}, {4, 33}},
                        Case{{1, 6, 1}, {5, 6, 7}}, Case{{2, 3}, {2, 3}}}) {
    // The gradient is sum_to (a reduction): sums in double on both devices.
    compare(
        "expand " + str(c.from) + " -> " + str(c.to),
        [c](const TensorList& in) { return TensorList{expand(in[0], c.to)}; }, {random_input(c.from, 6)},
        1e-6, 1e-6);
  }
}

TEST(CudaElementwise, Activations) {
  MTC_SKIP_WITHOUT_GPU();
  for (const Shape& s : {Shape{1}, Shape{1000}, Shape{3, 17, 19}}) {
    // relu and relu_grad only compare and select: exact.
    compare(
        "relu " + str(s), [](const TensorList& in) { return TensorList{relu(in[0])}; }, {random_input(s, 7)},
        kExact, kExact);
    compare(
        "swish " + str(s), [](const TensorList& in) { return TensorList{swish(in[0])}; },
        {random_input(s, 8)}, 1e-5, 1e-6);
    compare(
        "gelu " + str(s), [](const TensorList& in) { return TensorList{gelu(in[0])}; }, {random_input(s, 9)},
        1e-5, 1e-6);
    compare(
        "sigmoid " + str(s), [](const TensorList& in) { return TensorList{sigmoid(in[0])}; },
        {random_input(s, 11)}, 1e-5, 1e-6);
    compare(
        "tanh " + str(s), [](const TensorList& in) { return TensorList{tanh(in[0])}; }, {random_input(s, 12)},
        1e-5, 1e-6);
  }
  // Large magnitudes: exp overflow and erf saturation behave alike.
  Input wide = random_input({257}, 10);
  for (float& v : wide.f32) v *= 30.f;
  compare(
      "swish wide", [](const TensorList& in) { return TensorList{swish(in[0])}; }, {wide}, 1e-5, 1e-6);
  compare(
      "gelu wide", [](const TensorList& in) { return TensorList{gelu(in[0])}; }, {wide}, 1e-5, 1e-6);
  compare(
      "sigmoid wide", [](const TensorList& in) { return TensorList{sigmoid(in[0])}; }, {wide}, 1e-5, 1e-6);
  compare(
      "tanh wide", [](const TensorList& in) { return TensorList{tanh(in[0])}; }, {wide}, 1e-5, 1e-6);
}

// i32 tensors through the 4-byte data-movement kernels (and fill, expand, reshape, and
// copy_ over a tensor of zeros, in place).
TEST(CudaElementwise, I32DataMovement) {
  MTC_SKIP_WITHOUT_GPU();
  const Shape s{2, 6, 5, 3};
  const std::vector<int32_t> v = iota_i32(numel(s));
  const std::vector<int32_t> w = iota_i32(2 * 4 * 5 * 3, 77);
  auto r = on_both<std::vector<std::vector<int32_t>>>([&] {
    Tensor x = from_vector_i32(s, v);
    Tensor z = from_vector_i32({2, 4, 5, 3}, w);
    std::vector<std::vector<int32_t>> out;
    Interpreter& interp = Runtime::current().interpreter();
    out.push_back(i32_of(interp.apply(std::make_shared<FillOp>(Shape{5, 7}, -3.f, DType::kI32), {})[0]));
    out.push_back(
        i32_of(expand(from_vector_i32({6, 1, 3}, std::vector<int32_t>(v.begin(), v.begin() + 18)), s)));
    out.push_back(i32_of(reshape(x, {6, -1})));
    out.push_back(i32_of(permute(x, {3, 1, 0, 2})));
    out.push_back(i32_of(transpose(x, 0, 2)));
    const Tensor parts[] = {x, z, x};
    out.push_back(i32_of(concat(parts, 1)));
    for (const Tensor& p : split(x, {1, 3, 2}, 1)) out.push_back(i32_of(p));
    out.push_back(i32_of(slice(x, 2, 1, -1)));
    out.push_back(i32_of(channel_shuffle(x, 3)));
    Tensor dst = from_vector_i32(s, std::vector<int32_t>(v.size(), 0));
    copy_(dst, x);
    out.push_back(i32_of(dst));
    return out;
  });
  ASSERT_EQ(r.first.size(), r.second.size());
  for (size_t k = 0; k < r.first.size(); ++k) {
    ASSERT_FALSE(r.first[k].empty()) << "result " << k;
    EXPECT_EQ(r.second[k], r.first[k]) << "result " << k;
  }
}

// topk on both devices: the same indices, ties and NaN included, for row lengths below
// and above a block and k from 1 to C.
TEST(CudaElementwise, TopkIndices) {
  MTC_SKIP_WITHOUT_GPU();
  for (const Shape& s : {Shape{7, 10}, Shape{3, 1001}, Shape{2, 4, 33}, Shape{1, 1}}) {
    std::vector<float> v(static_cast<size_t>(numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = i % 13 == 5 ? std::nanf("") : static_cast<float>((i * 37) % 17);
    for (int k : {1, 5, static_cast<int>(s.back())}) {
      if (k > s.back()) continue;
      auto r = on_both<std::vector<int32_t>>([&] { return i32_of(topk(from_vector(s, v), k)); });
      ASSERT_FALSE(r.first.empty());
      EXPECT_EQ(r.second, r.first) << "topk " << str(s) << " k " << k;
    }
  }
}

// ---- reductions ----

TEST(CudaReduce, SumAndMeanOverDims) {
  MTC_SKIP_WITHOUT_GPU();
  struct Case {
    Shape shape;
    std::vector<int> dims;  // empty: all
    bool keepdim, mean;
  };
  const std::vector<Case> cases = {
      {{37}, {}, false, false},
      {{1 << 20}, {}, false, false},               // one output, many chunks (two passes)
      {{3, 100003}, {1}, false, false},            // rows, several chunks each
      {{3, 100003}, {}, false, true},              // mean of everything
      {{4099, 37}, {0}, false, false},             // columns
      {{200003, 3}, {0}, true, false},             // few columns, many chunks (two passes)
      {{37, 5001}, {1}, true, true},               // mean over rows, keepdim
      {{2, 3, 4, 5, 6}, {0, 2, 4}, false, false},  // reduced innermost, alternating
      {{2, 3, 4, 5, 6}, {1, 3}, true, false},      // kept innermost, alternating
      {{2, 3, 4, 5, 6}, {0, 2, 3}, true, true},
      {{1, 5, 1, 7}, {0, 2}, false, false},  // only size-1 dims reduced
      {{6, 1, 9}, {1}, true, false},
      {{9, 1, 1}, {0, 1, 2}, false, false},
      {{33, 65, 17}, {-1}, false, false},
      {{33, 65, 17}, {0}, false, true},
  };
  for (const Case& c : cases) {
    std::string name = std::string(c.mean ? "mean " : "sum ") + str(c.shape) + " dims [";
    for (int d : c.dims) name += std::to_string(d) + ",";
    name += c.keepdim ? "] keepdim" : "]";
    compare(
        name,
        [c](const TensorList& in) {
          if (c.dims.empty()) return TensorList{c.mean ? mean(in[0]) : sum(in[0])};
          return TensorList{c.mean ? mean(in[0], c.dims, c.keepdim) : sum(in[0], c.dims, c.keepdim)};
        },
        {random_input(c.shape, 11)}, 1e-6, 1e-6);
  }
  // sum_to, as broadcasting's gradient uses it.
  compare(
      "sum_to [5,4,3] -> [4,1]",
      [](const TensorList& in) {
        return TensorList{sum_to(in[0], {4, 1})};
      },
      {random_input({5, 4, 3}, 12)}, 1e-6, 1e-6);
}

// ---- data movement ----

TEST(CudaShapeOps, PermuteAndTranspose) {
  MTC_SKIP_WITHOUT_GPU();
  struct Case {
    Shape shape;
    std::vector<int> perm;
  };
  for (const Case& c :
       {Case{{3, 5}, {1, 0}}, Case{{2, 3, 4, 5}, {0, 2, 3, 1}}, Case{{2, 3, 4, 5}, {3, 2, 1, 0}},
        Case{{7, 1, 9, 2, 3}, {4, 0, 3, 1, 2}}, Case{{4, 5, 6}, {0, 1, 2}}}) {
    std::string name = "permute " + str(c.shape) + " [";
    for (int p : c.perm) name += std::to_string(p) + ",";
    compare(
        name + "]", [c](const TensorList& in) { return TensorList{permute(in[0], c.perm)}; },
        {random_input(c.shape, 13)}, kExact, kExact);
  }
  compare(
      "transpose [2,3,4,5] 1,3", [](const TensorList& in) { return TensorList{transpose(in[0], 1, 3)}; },
      {random_input({2, 3, 4, 5}, 14)}, kExact, kExact);
  compare(
      "transpose [33,65] -1,0", [](const TensorList& in) { return TensorList{transpose(in[0], -1, 0)}; },
      {random_input({33, 65}, 15)}, kExact, kExact);
}

TEST(CudaShapeOps, ConcatAndSplit) {
  MTC_SKIP_WITHOUT_GPU();
  for (int dim : {0, 1, 2, -1}) {
    Shape a{3, 4, 5}, b{3, 4, 5}, c{3, 4, 5};
    const int d = dim < 0 ? dim + 3 : dim;
    b[d] = 2;
    c[d] = 7;
    compare(
        "concat dim " + std::to_string(dim),
        [dim](const TensorList& in) { return TensorList{concat(in, dim)}; },
        {random_input(a, 16), random_input(b, 17), random_input(c, 18)}, kExact, kExact);
    compare(
        "split dim " + std::to_string(dim),
        [dim, d](const TensorList& in) {
          const int64_t n = in[0].shape()[d];
          return split(in[0], {1, n - 3, 2}, dim);
        },
        {random_input({5, 6, 7}, 19)}, kExact, kExact);
  }
}

TEST(CudaShapeOps, SliceAndItsBackward) {
  MTC_SKIP_WITHOUT_GPU();
  struct Case {
    Shape shape;
    int dim;
    int64_t start, end;
  };
  for (const Case& c : {Case{{10}, 0, 2, 7}, Case{{4, 9, 5}, 1, -4, -1}, Case{{4, 9, 5}, 2, 0, 100},
                        Case{{4, 9, 5}, 0, 3, 4}, Case{{4, 9, 5}, -1, 1, 2}, Case{{6, 7}, 1, 5, 2}}) {
    // The backward runs slice_backward (a zero-padded copy).
    compare(
        "slice " + str(c.shape) + " dim " + std::to_string(c.dim) + " [" + std::to_string(c.start) + ", " +
            std::to_string(c.end) + ")",
        [c](const TensorList& in) { return TensorList{slice(in[0], c.dim, c.start, c.end)}; },
        {random_input(c.shape, 20)}, kExact, kExact);
  }
}

TEST(CudaShapeOps, ChannelShuffle) {
  MTC_SKIP_WITHOUT_GPU();
  struct Case {
    Shape shape;
    int groups;
  };
  for (const Case& c : {Case{{2, 6, 5, 3}, 2}, Case{{2, 6, 5, 3}, 3}, Case{{3, 12, 7}, 4}, Case{{1, 8}, 8},
                        Case{{4, 9, 1, 1}, 1}}) {
    compare(
        "channel_shuffle " + str(c.shape) + " groups " + std::to_string(c.groups),
        [c](const TensorList& in) { return TensorList{channel_shuffle(in[0], c.groups)}; },
        {random_input(c.shape, 21)}, kExact, kExact);
  }
}

// ---- optimizer steps (in place) ----

constexpr double kOptRtol = 1e-6, kOptAtol = 1e-7;

// OptRun: two parameters with odd sizes, 4 steps with fresh gradients; returns the
// parameters and the optimizer state after them.
using StateList = std::vector<std::vector<float>>;

StateList run_steps(const std::function<std::unique_ptr<optim::Optimizer>(TensorList)>& make,
                    const std::function<void(const optim::Optimizer&, StateList&)>& state) {
  const std::vector<Shape> shapes = {{37, 29}, {1001}};
  TensorList params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = from_vector(shapes[i], random_input(shapes[i], 30 + i).f32, /*persistent=*/true);
    p.set_requires_grad(true);
    params.push_back(p);
  }
  auto opt = make(params);
  if (!opt) return {};
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor p = opt->params()[i];
      p.set_grad(from_vector(shapes[i], random_input(shapes[i], 100 + 10 * step + i).f32));
    }
    opt->step();
  }
  StateList out;
  for (const Tensor& p : opt->params()) out.push_back(f32_of(p));
  state(*opt, out);
  return out;
}

void compare_steps(const std::string& what, const std::function<StateList()>& f) {
  SCOPED_TRACE(what);
  auto r = on_both<StateList>(f);
  ASSERT_EQ(r.first.size(), r.second.size());
  for (size_t k = 0; k < r.first.size(); ++k) {
    expect_close(r.second[k], r.first[k], kOptRtol, kOptAtol, what + " tensor " + std::to_string(k));
  }
}

TEST(CudaOptim, SgdStep) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<std::string, optim::SgdOptions>> configs = {
      {"plain", {.lr = 0.1f}},
      {"weight decay", {.lr = 0.05f, .weight_decay = 1e-2f}},
      {"momentum", {.lr = 0.1f, .momentum = 0.9f}},
      {"momentum dampening decay",
       {.lr = 0.03f, .momentum = 0.8f, .dampening = 0.25f, .weight_decay = 5e-4f}},
      {"nesterov", {.lr = 0.07f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true}},
  };
  for (const auto& [name, o] : configs) {
    compare_steps("sgd " + name, [o] {
      return run_steps(
          [o](TensorList ps) -> std::unique_ptr<optim::Optimizer> {
            auto s = optim::Sgd::create(std::move(ps), o);
            EXPECT_TRUE(s.ok()) << s.status();
            return s.ok() ? std::move(s).value() : nullptr;
          },
          [o](const optim::Optimizer& opt, StateList& out) {
            if (o.momentum == 0.f) return;
            const auto& sgd = static_cast<const optim::Sgd&>(opt);
            for (size_t i = 0; i < opt.params().size(); ++i) out.push_back(f32_of(sgd.momentum_buffer(i)));
          });
    });
  }
}

TEST(CudaOptim, AdamWStep) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<std::string, optim::AdamWOptions>> configs = {
      {"defaults", {}},
      {"large lr, no decay", {.lr = 0.1f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.f}},
  };
  for (const auto& [name, o] : configs) {
    compare_steps("adamw " + name, [o] {
      return run_steps(
          [o](TensorList ps) -> std::unique_ptr<optim::Optimizer> {
            auto s = optim::AdamW::create(std::move(ps), o);
            EXPECT_TRUE(s.ok()) << s.status();
            return s.ok() ? std::move(s).value() : nullptr;
          },
          [](const optim::Optimizer& opt, StateList& out) {
            const auto& adam = static_cast<const optim::AdamW&>(opt);
            for (size_t i = 0; i < opt.params().size(); ++i) {
              out.push_back(f32_of(adam.exp_avg(i)));
              out.push_back(f32_of(adam.exp_avg_sq(i)));
            }
          });
    });
  }
}

// ---- synchronised batch norm ----

constexpr double kBnRtol = 1e-4, kBnAtol = 1e-5;

// communicator: a world of one for the current runtime: local on the CPU (host buffers),
// NCCL on a GPU (the CUDA collective kernels need device buffers).
dist::CommPtr communicator() {
  const bool gpu = Runtime::current().device().type() == DeviceType::kCUDA;
  auto c = comm::create({.backend = gpu ? comm::Backend::kNccl : comm::Backend::kLocal});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

const std::vector<Shape>& bn_shapes() {
  static const std::vector<Shape> s = {{4, 3, 5, 7}, {8, 6}, {3, 4, 9, 11}, {2, 5, 33}};
  return s;
}

// The four ops issued directly (no collective in between): bn_stats, then
// sync_batch_norm on those stats (no communicator); the backward runs bn_grad_sums and
// sync_batch_norm_backward.
TEST(CudaSyncBatchNorm, OpsForwardAndBackward) {
  MTC_SKIP_WITHOUT_GPU();
  for (const Shape& s : bn_shapes()) {
    const Shape c{s[1]};
    Input gamma = random_input(c, 41), beta = random_input(c, 42);
    for (float& g : gamma.f32) g = 1.f + 0.3f * g;
    compare(
        "sync_batch_norm ops " + str(s),
        [](const TensorList& in) {
          Tensor st = call1(std::make_shared<dist::BnStatsOp>(), {in[0]});
          TensorList y = call(std::make_shared<dist::SyncBatchNormOp>(0.1f, 1e-5f, false),
                              std::vector<Tensor>{in[0], in[1], in[2], st});
          return TensorList{y[0], y[1], y[2], st};
        },
        {random_input(s, 40), gamma, beta}, kBnRtol, kBnAtol);
  }
}

// Through dist::sync_batch_norm (bn_stats, all_reduce over a world of one, sync_batch_norm).
TEST(CudaSyncBatchNorm, ThroughCommunicator) {
  MTC_SKIP_WITHOUT_GPU();
  for (const Shape& s : bn_shapes()) {
    const Shape c{s[1]};
    compare(
        "dist::sync_batch_norm " + str(s),
        [](const TensorList& in) {
          return TensorList{
              dist::sync_batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), 0.1f, 1e-5f, communicator())};
        },
        {random_input(s, 43), random_input(c, 44), random_input(c, 45)}, kBnRtol, kBnAtol);
  }
}

// Running statistics updated in place (read back after the op), then left alone by an
// op that does not track them.
TEST(CudaSyncBatchNorm, RunningStatistics) {
  MTC_SKIP_WITHOUT_GPU();
  for (const Shape& s : bn_shapes()) {
    const Shape c{s[1]};
    Input rm = random_input(c, 46, false), rv = random_input(c, 47, false);
    for (float& v : rv.f32) v = 1.f + std::fabs(v);
    compare(
        "sync_batch_norm running stats " + str(s),
        [](const TensorList& in) {
          Tensor st = call1(std::make_shared<dist::BnStatsOp>(), {in[0]});
          TensorList y = call(std::make_shared<dist::SyncBatchNormOp>(0.25f, 1e-3f, true),
                              std::vector<Tensor>{in[0], in[1], in[2], st, in[3], in[4]});
          return TensorList{y[0], in[3], in[4]};
        },
        {random_input(s, 48), random_input(c, 49), random_input(c, 50), rm, rv}, kBnRtol, kBnAtol);
  }
}

// ---- max_grad_mask ----

TEST(CudaCollective, MaxGradMask) {
  MTC_SKIP_WITHOUT_GPU();
  for (const Shape& s : {Shape{1}, Shape{1000}, Shape{7, 13, 3}}) {
    Input x = random_input(s, 51, false), y = random_input(s, 52, false), g = random_input(s, 53, false);
    for (size_t i = 0; i < y.f32.size(); i += 2) y.f32[i] = x.f32[i];  // every other element ties
    compare(
        "max_grad_mask " + str(s),
        [](const TensorList& in) {
          return TensorList{call1(std::make_shared<dist::MaxGradMaskOp>(), {in[0], in[1], in[2]})};
        },
        {x, y, g}, kExact, kExact, /*backward=*/false);
  }
  // As all_reduce(max)'s backward runs it (a world of one: every element is the maximum).
  compare(
      "all_reduce max backward",
      [](const TensorList& in) {
        return TensorList{dist::all_reduce(in[0], dist::Reduce::kMax, communicator())};
      },
      {random_input({5, 9}, 54)}, kExact, kExact);
}

}  // namespace
}  // namespace mtc
