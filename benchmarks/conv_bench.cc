// Times the conv2d and batch_norm shapes of CIFAR ResNet-56 (batch 64) through the mtc
// interpreter, per op (forward, backward-data, backward-weights), and one whole training
// iteration of ResNet-56. Prints the same table as benchmarks/conv_torch.py, so the two
// can be compared line by line. Usage: conv_bench [threads=2] [reps=10]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "autograd.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"
#include "ops/batch_norm.h"
#include "ops/conv.h"

namespace mtc {
namespace {

constexpr int64_t kBatch = 64;

struct ConvShape {
  const char* name;
  int64_t c, oc, h, k;
  int stride, pad;
  int count;  // how many ResNet-56 has
};
const ConvShape kConvs[] = {
    {"first 3->16 @32", 3, 16, 32, 3, 1, 1, 1},      {"3x3 16->16 @32", 16, 16, 32, 3, 1, 1, 18},
    {"3x3 s2 16->32 @32", 16, 32, 32, 3, 2, 1, 1},   {"1x1 s2 16->32 @32", 16, 32, 32, 1, 2, 0, 1},
    {"3x3 32->32 @16", 32, 32, 16, 3, 1, 1, 17},     {"3x3 s2 32->64 @16", 32, 64, 16, 3, 2, 1, 1},
    {"1x1 s2 32->64 @16", 32, 64, 16, 1, 2, 0, 1},   {"3x3 64->64 @8", 64, 64, 8, 3, 1, 1, 17},
};
struct BnShape {
  const char* name;
  int64_t c, h;
  int count;
};
const BnShape kBns[] = {{"bn 16 @32", 16, 32, 19}, {"bn 32 @16", 32, 16, 19}, {"bn 64 @8", 64, 8, 19}};

Tensor random_tensor(const Shape& s, std::mt19937& gen, float scale = 1.f, bool grad = false) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (float& x : v) x = nd(gen);
  Tensor t = from_vector(s, v, /*persistent=*/true);
  if (grad) t.set_requires_grad(true);
  return t;
}

// best_ms: the fastest of `reps` runs of f (after two warm-ups), each ending in a sync.
double best_ms(int reps, const std::function<void()>& f) {
  Interpreter& in = Runtime::current().interpreter();
  double best = 1e30;
  for (int i = 0; i < reps + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    absl::Status s = in.sync();
    MTC_CHECK(s.ok(), s.ToString());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) best = std::min(best, ms);
  }
  return best;
}

// ResNet56: CIFAR ResNet-56 with 1x1 stride-2 shortcut convs, as benchmarks/conv_torch.py.
struct ResNet56 {
  struct Bn {
    Tensor gamma, beta, mean, var;
  };
  std::vector<Tensor> convs;  // in order of use
  std::vector<Bn> bns;
  Tensor fc_w, fc_b;
  std::mt19937 gen{0};

  Tensor conv_w(int64_t oc, int64_t c, int64_t k) {
    convs.push_back(random_tensor({oc, c, k, k}, gen, std::sqrt(2.f / static_cast<float>(c * k * k)), true));
    return convs.back();
  }
  Bn& bn(int64_t c) {
    bns.push_back({full({c}, 1.f).set_requires_grad(true), zeros({c}).set_requires_grad(true), zeros({c}), ones({c})});
    return bns.back();
  }
  ResNet56() {
    conv_w(16, 3, 3);
    bn(16);
    int64_t cin = 16;
    for (int64_t cout : {16, 32, 64}) {
      for (int i = 0; i < 9; ++i) {
        conv_w(cout, cin, 3);
        bn(cout);
        conv_w(cout, cout, 3);
        bn(cout);
        if (cin != cout) {
          conv_w(cout, cin, 1);
          bn(cout);
        }
        cin = cout;
      }
    }
    fc_w = random_tensor({10, 64}, gen, 0.1f, true);
    fc_b = zeros({10}).set_requires_grad(true);
  }
  Tensor forward(const Tensor& x) {
    size_t ci = 0, bi = 0;
    auto conv_bn = [&](const Tensor& in, int stride, int pad) {
      const Tensor& w = convs[ci++];
      Bn& b = bns[bi++];
      return batch_norm(conv2d(in, w, Tensor(), Conv2dOptions::make(stride, pad)), b.gamma, b.beta, b.mean, b.var, true);
    };
    Tensor h = relu(conv_bn(x, 1, 1));
    int64_t cin = 16;
    for (int64_t cout : {16, 32, 64}) {
      for (int i = 0; i < 9; ++i) {
        const int stride = cin != cout ? 2 : 1;
        Tensor y = relu(conv_bn(h, stride, 1));
        y = conv_bn(y, 1, 1);
        Tensor sc = cin != cout ? conv_bn(h, 2, 0) : h;
        h = relu(add(y, sc));
        cin = cout;
      }
    }
    return linear(global_avg_pool(h), fc_w, fc_b);
  }
  // sgd: p <- p - lr * grad, as fresh leaves.
  void sgd(float lr) {
    auto step = [lr](Tensor& p) {
      Tensor g = p.grad();
      if (!g.defined()) return;
      p = sub(p.detach(), scale(g, lr)).set_requires_grad(true);
    };
    for (Tensor& w : convs) step(w);
    for (Bn& b : bns) {
      step(b.gamma);
      step(b.beta);
    }
    step(fc_w);
    step(fc_b);
  }
};

int run(int threads, int reps) {
  RuntimeOptions o;
  o.memory_bytes = size_t{3} << 30;
  o.num_threads = threads;
  auto rt = Runtime::create(o);
  MTC_CHECK(rt.ok(), rt.status().ToString());
  std::mt19937 gen(0);
  std::printf("mtc, %d threads, batch %ld; best of %d runs, ms (conv: oneDNN blocked kernels + reorders)\n", threads,
              kBatch, reps);
  std::printf("%-24s %8s %9s %8s %8s %8s\n", "shape", "fwd", "bwd_data", "bwd_wt", "sum", "x count");
  double total = 0;
  for (const ConvShape& s : kConvs) {
    const Conv2dOptions co = Conv2dOptions::make(s.stride, s.pad);
    const Shape xs{kBatch, s.c, s.h, s.h}, ws{s.oc, s.c, s.k, s.k};
    Tensor x = random_tensor(xs, gen), w = random_tensor(ws, gen);
    Tensor y = conv2d(x, w, Tensor(), co);
    Tensor dy = random_tensor(y.shape(), gen);
    const double fwd = best_ms(reps, [&] { conv2d(x, w, Tensor(), co); });
    const double bd = best_ms(reps, [&] { call1(std::make_shared<Conv2dBackwardInputOp>(co, xs), {dy, w}); });
    const double bw = best_ms(reps, [&] { call(std::make_shared<Conv2dBackwardWeightOp>(co, ws, false), {x, dy}); });
    const double sum = fwd + bd + bw;
    total += sum * s.count;
    std::printf("%-24s %8.3f %9.3f %8.3f %8.3f %8.2f\n", s.name, fwd, bd, bw, sum, sum * s.count);
  }
  for (const BnShape& s : kBns) {
    const Shape xs{kBatch, s.c, s.h, s.h};
    Tensor x = random_tensor(xs, gen), dy = random_tensor(xs, gen);
    Tensor gamma = ones({s.c}), beta = zeros({s.c}), rm = zeros({s.c}), rv = ones({s.c});
    auto bn_op = std::make_shared<BatchNormOp>(true, 0.1f, 1e-5f, true);
    TensorList outs = call(bn_op, {x, gamma, beta, rm, rv});
    const double fwd = best_ms(reps, [&] { call(bn_op, {x, gamma, beta, rm, rv}); });
    const double bwd = best_ms(reps, [&] {
      call(std::make_shared<BatchNormBackwardOp>(true), {x, gamma, outs[1], outs[2], dy});
    });
    total += (fwd + bwd) * s.count;
    std::printf("%-24s %8.3f %9.3f %8s %8.3f %8.2f\n", s.name, fwd, bwd, "", fwd + bwd, (fwd + bwd) * s.count);
  }
  std::printf("conv+bn total over ResNet-56: %.1f ms\n", total);

  ResNet56 net;
  Tensor x = random_tensor({kBatch, 3, 32, 32}, gen);
  Tensor loss_w = random_tensor({kBatch, 10}, gen);
  const double iter = best_ms(std::max(reps / 2, 3), [&] {
    Tensor loss = sum(mul(net.forward(x), loss_w));
    absl::Status s = loss.backward();
    MTC_CHECK(s.ok(), s.ToString());
    net.sgd(0.01f);
  });
  std::printf("ResNet-56 training iteration (fwd+bwd+SGD; loss = sum(logits * w)): %.1f ms\n", iter);
  return 0;
}

}  // namespace
}  // namespace mtc

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  return mtc::run(threads, reps);
}
