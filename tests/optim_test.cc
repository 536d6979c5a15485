// Tests of src/optim: Sgd and AdamW over several steps against a double-precision
// reference of torch.optim's formulas (tolerance 1e-6 + 1e-5 * |ref|), parameters
// without a gradient left alone, zero_grad, argument checks, and a small descent.
#include "mtc/optim.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "op_check.h"

namespace mtc::optim {
namespace {

constexpr double kAtol = 1e-6, kRtol = 1e-5;

// Fixture values: two parameters, and per step a gradient for each (or none).
struct Problem {
  std::vector<Shape> shapes = {{3, 4}, {5}};
  std::vector<std::vector<float>> init;
  std::vector<std::vector<std::vector<float>>> grads;  // [step][param], empty: no grad
  Problem(int steps, int skip_param, int skip_step) {
    std::mt19937 gen(77);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (const Shape& s : shapes) {
      std::vector<float> v(numel(s));
      for (float& x : v) x = u(gen);
      init.push_back(v);
    }
    grads.resize(steps);
    for (int k = 0; k < steps; ++k) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        std::vector<float> g;
        if (!(static_cast<int>(i) == skip_param && k == skip_step)) {
          g.resize(numel(shapes[i]));
          for (float& x : g) x = u(gen);
        }
        grads[k].push_back(g);
      }
    }
  }
  TensorList make_params() const {
    TensorList ps;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor p = from_vector(shapes[i], init[i], /*persistent=*/true);
      p.set_requires_grad(true);
      ps.push_back(p);
    }
    return ps;
  }
  // run: `steps` rounds of zero_grad, set the gradients, step.
  void run(Optimizer& opt) const {
    for (const auto& step : grads) {
      opt.zero_grad();
      for (size_t i = 0; i < step.size(); ++i) {
        Tensor p = opt.params()[i];  // a handle sharing the parameter's autograd record
        if (!step[i].empty()) p.set_grad(from_vector(shapes[i], step[i]));
      }
      opt.step();
    }
  }
};

void expect_near(const Tensor& t, const std::vector<double>& ref, const char* what) {
  auto v = t.to_vector();
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->size(), ref.size());
  double max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs((*v)[i] - ref[i]);
    max_diff = std::max(max_diff, d);
    EXPECT_LE(d, kAtol + kRtol * std::abs(ref[i]))
        << what << " element " << i << ": mtc " << (*v)[i] << " ref " << ref[i];
  }
  std::printf("  %s: max |mtc - ref| = %.3g (tol %.0e + %.0e*|ref|)\n", what, max_diff, kAtol, kRtol);
}

// sgd_reference: torch.optim.SGD's single-tensor update, in double.
void sgd_reference(const SgdOptions& o, const Problem& pb, std::vector<std::vector<double>>& p,
                   std::vector<std::vector<double>>& buf) {
  p.clear();
  for (const auto& v : pb.init) p.emplace_back(v.begin(), v.end());
  buf.assign(p.size(), {});
  for (const auto& step : pb.grads) {
    for (size_t i = 0; i < p.size(); ++i) {
      if (step[i].empty()) continue;
      std::vector<double> d(step[i].begin(), step[i].end());
      for (size_t j = 0; j < d.size(); ++j) d[j] += o.weight_decay * p[i][j];
      if (o.momentum != 0) {
        if (buf[i].empty()) {
          buf[i] = d;
        } else {
          for (size_t j = 0; j < d.size(); ++j)
            buf[i][j] = o.momentum * buf[i][j] + (1.0 - o.dampening) * d[j];
        }
        for (size_t j = 0; j < d.size(); ++j) d[j] = o.nesterov ? d[j] + o.momentum * buf[i][j] : buf[i][j];
      }
      for (size_t j = 0; j < d.size(); ++j) p[i][j] -= o.lr * d[j];
    }
  }
}

void check_sgd(const SgdOptions& o, const char* label) {
  std::printf("%s\n", label);
  auto rt = make_test_runtime();
  Problem pb(/*steps=*/5, /*skip_param=*/1, /*skip_step=*/2);
  auto opt = Sgd::create(pb.make_params(), o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  pb.run(**opt);
  std::vector<std::vector<double>> p, buf;
  sgd_reference(o, pb, p, buf);
  for (size_t i = 0; i < p.size(); ++i) {
    expect_near((*opt)->params()[i], p[i], "param");
    if (o.momentum != 0) expect_near((*opt)->momentum_buffer(i), buf[i], "momentum buffer");
  }
}

TEST(Sgd, PlainMatchesReference) { check_sgd({.lr = 0.1f}, "sgd lr 0.1"); }
TEST(Sgd, MomentumDampeningWeightDecayMatchReference) {
  check_sgd({.lr = 0.05f, .momentum = 0.9f, .dampening = 0.3f, .weight_decay = 5e-4f},
            "sgd momentum dampening wd");
}
TEST(Sgd, NesterovMatchesReference) {
  check_sgd({.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-2f, .nesterov = true}, "sgd nesterov");
}

TEST(Sgd, RejectsBadOptions) {
  auto rt = make_test_runtime();
  EXPECT_FALSE(Sgd::create({}, {.lr = -1.f}).ok());
  EXPECT_FALSE(Sgd::create({}, {.lr = 0.1f, .momentum = -0.5f}).ok());
  EXPECT_FALSE(Sgd::create({}, {.lr = 0.1f, .nesterov = true}).ok());
  auto s = Sgd::create({}, {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .nesterov = true});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("Nesterov"), std::string::npos) << s.status();
}

TEST(AdamW, MatchesReferenceAndSkipsParamsWithoutGrad) {
  auto rt = make_test_runtime();
  const AdamWOptions o{.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};
  Problem pb(/*steps=*/6, /*skip_param=*/1, /*skip_step=*/1);
  auto opt = AdamW::create(pb.make_params(), o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  pb.run(**opt);
  // torch.optim.AdamW (single tensor, amsgrad off), per parameter with its own step count.
  for (size_t i = 0; i < pb.shapes.size(); ++i) {
    std::vector<double> p(pb.init[i].begin(), pb.init[i].end()), m(p.size(), 0.0), v(p.size(), 0.0);
    int t = 0;
    for (const auto& step : pb.grads) {
      if (step[i].empty()) continue;
      ++t;
      const double bc1 = 1 - std::pow(double{o.beta1}, t), bc2 = 1 - std::pow(double{o.beta2}, t);
      for (size_t j = 0; j < p.size(); ++j) {
        const double g = step[i][j];
        p[j] *= 1 - double{o.lr} * o.weight_decay;
        m[j] = o.beta1 * m[j] + (1 - o.beta1) * g;
        v[j] = o.beta2 * v[j] + (1 - o.beta2) * g * g;
        p[j] -= o.lr / bc1 * m[j] / (std::sqrt(v[j]) / std::sqrt(bc2) + o.eps);
      }
    }
    expect_near((*opt)->params()[i], p, "adamw param");
    expect_near((*opt)->exp_avg(i), m, "adamw exp_avg");
    expect_near((*opt)->exp_avg_sq(i), v, "adamw exp_avg_sq");
  }
  EXPECT_FALSE(AdamW::create({}, {.beta1 = 1.f}).ok());
  EXPECT_FALSE(AdamW::create({}, {.eps = -1.f}).ok());
}

TEST(Optimizer, ZeroGradClearsAndStepWithoutGradsChangesNothing) {
  auto rt = make_test_runtime();
  Problem pb(1, -1, -1);
  TensorList ps = pb.make_params();
  auto opt = Sgd::create(ps, {.lr = 0.1f, .momentum = 0.9f});
  ASSERT_TRUE(opt.ok());
  ps[0].set_grad(ones(ps[0].shape()));
  (*opt)->zero_grad();
  EXPECT_FALSE(ps[0].grad().defined());
  (*opt)->step();
  EXPECT_FALSE((*opt)->momentum_buffer(0).defined());
  auto v = ps[0].to_vector();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, pb.init[0]);
}

// A descent through autograd: minimise sum((p - target)^2) with momentum SGD; each step
// issues one op per parameter and the worker runs them in order with the backward ops.
TEST(Optimizer, SgdDescendsAQuadraticThroughAutograd) {
  auto rt = make_test_runtime();
  Tensor p = from_vector({4}, std::vector<float>{1, -2, 3, 0.5f}, true);
  p.set_requires_grad(true);
  Tensor target = from_vector({4}, std::vector<float>{0.5f, 0.5f, -1, 2});
  auto opt = Sgd::create({p}, {.lr = 0.1f, .momentum = 0.5f});
  ASSERT_TRUE(opt.ok());
  float first = 0, last = 0;
  for (int it = 0; it < 60; ++it) {
    (*opt)->zero_grad();
    Tensor d = sub(p, target);
    Tensor loss = sum(mul(d, d));
    ASSERT_TRUE(loss.backward().ok());
    (*opt)->step();
    auto l = loss.item();
    ASSERT_TRUE(l.ok()) << l.status();
    if (it == 0) first = *l;
    last = *l;
  }
  std::printf("  quadratic loss %.4f -> %.6f\n", first, last);
  EXPECT_LT(last, 1e-6f * first);
}

// LrSchedule against PyTorch's schedulers stepped once per iteration, values worked by
// hand: LinearLR(start_factor=1/4, total_iters=3) for the warm-up, then StepLR(step_size
// 3, gamma 0.5) or CosineAnnealingLR(T_max 4, eta_min 0.01) from the base 0.2.
TEST(LrSchedule, WarmupStepAndCosineAsPyTorch) {
  LrSchedule s{.kind = LrSchedule::Kind::kStep, .base = 0.2f, .warmup = 4, .step_size = 3, .gamma = 0.5f};
  ASSERT_TRUE(s.check().ok());
  const float step[] = {0.05f, 0.1f, 0.15f, 0.2f, 0.2f, 0.2f, 0.2f, 0.1f, 0.1f, 0.1f, 0.05f};
  for (int t = 1; t <= 11; ++t) EXPECT_FLOAT_EQ(s.at(t), step[t - 1]) << "step, iteration " << t;
  LrSchedule c{.kind = LrSchedule::Kind::kCosine, .base = 0.2f, .warmup = 0, .min = 0.01f, .total = 4};
  ASSERT_TRUE(c.check().ok());
  // min + (base - min) * (1 + cos(pi * s / 4)) / 2 for s = 0..3
  const double want[] = {0.2, 0.01 + 0.19 * (1 + std::sqrt(0.5)) / 2, 0.105, 0.01 + 0.19 * (1 - std::sqrt(0.5)) / 2};
  for (int t = 1; t <= 4; ++t) EXPECT_NEAR(c.at(t), want[t - 1], 1e-7) << "cosine, iteration " << t;
  EXPECT_EQ(LrSchedule{.base = 0.3f}.at(17), 0.3f);
  EXPECT_EQ(c.describe(), "cosine from 0.2 to 0.01 over 4 iterations");
  EXPECT_EQ(s.describe(), "0.2, times 0.5 every 3 iterations after 4 of linear warm-up");
}

TEST(LrSchedule, SchedulesThatCannotRunAreNamed) {
  auto expect_bad = [](const LrSchedule& s, const std::string& want) {
    absl::Status st = s.check();
    EXPECT_FALSE(st.ok()) << want;
    EXPECT_NE(st.message().find(want), std::string::npos) << st;
  };
  expect_bad({.kind = LrSchedule::Kind::kStep, .base = 0.1f}, "step schedule every 0 iterations");
  expect_bad({.kind = LrSchedule::Kind::kStep, .base = 0.1f, .step_size = 2, .gamma = 1.5f}, "factor 1.5");
  expect_bad({.kind = LrSchedule::Kind::kCosine, .base = 0.1f, .warmup = 5, .total = 5},
             "cosine schedule over 5 iterations with 5 of warm-up");
  expect_bad({.kind = LrSchedule::Kind::kCosine, .base = 0.1f, .min = 0.2f, .total = 5}, "end rate 0.2");
  expect_bad({.base = -1.f}, "learning rate -1");
  EXPECT_FALSE(parse_schedule_kind("linear").ok());
  EXPECT_EQ(*parse_schedule_kind("cosine"), LrSchedule::Kind::kCosine);
}

}  // namespace
}  // namespace mtc::optim
