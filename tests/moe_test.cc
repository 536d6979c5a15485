// Mixture of experts on one rank (src/models/moe.cc): the routing's top-k choice and
// capacity (dropping first choices last, dropless), the load-balancing loss (1 x alpha for
// perfectly balanced routing), MoeMlp against a reference computed token by token, its
// gradients against finite differences, every expert's gradient when some take no
// tokens, and moe_gpt: training lowers the loss, and under DTE at 40% of its peak, alone
// and with TMA, its losses and weights equal the unlimited run's bit for bit.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/evict_options.h"
#include "mtc/interpreter.h"
#include "mtc/models.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"
#include "op_check.h"

namespace mtc {
namespace {

using models::MoeConfig;

// peaked: T x E probabilities, token t's highest at experts[t] (0.7), the rest even.
std::vector<float> peaked(const std::vector<int>& experts, int e) {
  std::vector<float> p(experts.size() * e, 0.3f / static_cast<float>(e - 1));
  for (size_t t = 0; t < experts.size(); ++t) p[t * e + experts[t]] = 0.7f;
  return p;
}

TEST(MoeRoute, TopOneWithACapacityDropsTheOverflowInTokenOrder) {
  // 8 tokens, 4 experts, factor 1.25: C = ceil(1.25 * 8 / 4) = 3. Six want expert 0.
  const std::vector<float> p = peaked({0, 0, 1, 0, 0, 2, 0, 0}, 4);
  const models::MoeAssignment a = models::moe_route(p, 8, MoeConfig{.experts = 4});
  EXPECT_EQ(a.capacity, 3);
  EXPECT_EQ(a.tokens[0], (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(a.tokens[1], (std::vector<int32_t>{2}));
  EXPECT_EQ(a.tokens[2], (std::vector<int32_t>{5}));
  EXPECT_TRUE(a.tokens[3].empty());
  EXPECT_EQ(a.dropped, 3);
  EXPECT_DOUBLE_EQ(a.first_share[0], 6.0 / 8);
  // Dropless: expert 0 takes all six.
  const models::MoeAssignment b = models::moe_route(p, 8, MoeConfig{.experts = 4, .dropless = true});
  EXPECT_EQ(b.capacity, 0);
  EXPECT_EQ(b.dropped, 0);
  EXPECT_EQ(b.tokens[0], (std::vector<int32_t>{0, 1, 3, 4, 6, 7}));
}

TEST(MoeRoute, TopTwoFillsFirstChoicesBeforeSecondOnes) {
  // 4 tokens, 4 experts, top-2, factor 1: C = ceil(1 * 2 * 4 / 4) = 2. Token t's first
  // choice is t % 2, its second 2 + t % 2 (the next highest probability).
  std::vector<float> p(16, 0.05f);
  for (int t = 0; t < 4; ++t) {
    p[t * 4 + t % 2] = 0.6f;
    p[t * 4 + 2 + t % 2] = 0.3f;
  }
  const models::MoeAssignment a = models::moe_route(p, 4, MoeConfig{.experts = 4, .top_k = 2, .capacity_factor = 1});
  EXPECT_EQ(a.capacity, 2);
  EXPECT_EQ(a.tokens[0], (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(a.tokens[1], (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(a.tokens[2], (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(a.tokens[3], (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(a.dropped, 0);
  // Ties go to the lower expert: uniform probabilities send every token to 0 then 1.
  const models::MoeAssignment u = models::moe_route(std::vector<float>(12, 0.25f), 3,
                                                    MoeConfig{.experts = 4, .top_k = 2, .dropless = true});
  EXPECT_EQ(u.tokens[0], (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(u.tokens[1], (std::vector<int32_t>{0, 1, 2}));
}

// Groups: each routes its own tokens with its own capacity, C = ceil(1.25 * 4 / 4) = 2
// here; tokens keep their global indices, group by group.
TEST(MoeRoute, GroupsHaveTheirOwnCapacity) {
  const std::vector<float> p = peaked({0, 0, 0, 1, 0, 0, 2, 0}, 4);
  const models::MoeAssignment a = models::moe_route(p, 8, MoeConfig{.experts = 4, .groups = 2});
  EXPECT_EQ(a.capacity, 2);
  EXPECT_EQ(a.tokens[0], (std::vector<int32_t>{0, 1, 4, 5}));
  EXPECT_EQ(a.tokens[1], (std::vector<int32_t>{3}));
  EXPECT_EQ(a.tokens[2], (std::vector<int32_t>{6}));
  EXPECT_EQ(a.dropped, 2);  // tokens 2 and 7
  ASSERT_EQ(a.first_share.size(), 8u);
  EXPECT_DOUBLE_EQ(a.first_share[0], 3.0 / 4);  // group 0: tokens 0, 1, 2 of 4
  EXPECT_DOUBLE_EQ(a.first_share[4 + 0], 3.0 / 4);
  EXPECT_DOUBLE_EQ(a.first_share[4 + 2], 1.0 / 4);
}

// With groups the load-balancing loss is the mean of each group's.
TEST(MoeAuxLoss, TheMeanOfTheGroups) {
  auto rt = make_test_runtime();
  const std::vector<float> p = peaked({0, 1, 2, 3, 0, 0, 0, 0}, 4);
  const MoeConfig c{.experts = 4, .dropless = true, .groups = 2};
  const models::MoeAssignment a = models::moe_route(p, 8, c);
  const double both = *models::moe_aux_loss(from_vector({8, 4}, p), a.first_share, 1.f).item();
  double want = 0;
  for (int g = 0; g < 2; ++g) {
    const std::vector<float> half(p.begin() + g * 16, p.begin() + (g + 1) * 16);
    const models::MoeAssignment one = models::moe_route(half, 4, MoeConfig{.experts = 4, .dropless = true});
    want += *models::moe_aux_loss(from_vector({4, 4}, half), one.first_share, 1.f).item() / 2;
  }
  EXPECT_NEAR(both, want, 1e-6);
  EXPECT_NEAR(both, (1.0 + 4 * 0.7) / 2, 1e-6);  // balanced, then all to expert 0
}

// alpha * E * sum_i f_i P_i: 1 x alpha when every expert is every token's first choice
// equally often and the mean probabilities are even; E x P_0 when all go to expert 0.
TEST(MoeAuxLoss, OneForPerfectlyBalancedRouting) {
  auto rt = make_test_runtime();
  const std::vector<float> p = peaked({0, 1, 2, 3, 1, 0, 3, 2}, 4);
  const models::MoeAssignment a = models::moe_route(p, 8, MoeConfig{.experts = 4});
  EXPECT_NEAR(*models::moe_aux_loss(from_vector({8, 4}, p), a.first_share, 1.f).item(), 1.0, 1e-6);
  EXPECT_NEAR(*models::moe_aux_loss(from_vector({8, 4}, p), a.first_share, 0.01f).item(), 0.01, 1e-8);
  const std::vector<float> q = peaked(std::vector<int>(8, 0), 4);
  const models::MoeAssignment b = models::moe_route(q, 8, MoeConfig{.experts = 4});
  EXPECT_NEAR(*models::moe_aux_loss(from_vector({8, 4}, q), b.first_share, 1.f).item(), 4 * 0.7, 1e-6);
}

// reference: MoeMlp's output for x (T, D) computed token by token: the sum over the
// experts that took the token of its router probability times the expert's output.
std::vector<float> reference(models::MoeMlp& moe, const Tensor& x) {
  const int64_t t = x.dim(0), d = x.dim(1), e = moe.config.experts;
  const std::vector<float> probs = *softmax(moe.router->forward(x), 1).to_vector();
  const models::MoeAssignment a = models::moe_route(probs, t, moe.config);
  std::vector<float> y(static_cast<size_t>(t * d), 0.f);
  for (int64_t i = 0; i < e; ++i) {
    for (int32_t tok : a.tokens[i]) {
      const std::vector<float> h = *moe.experts[i]->forward(slice(x, 0, tok, tok + 1)).to_vector();
      for (int64_t k = 0; k < d; ++k) y[tok * d + k] += probs[tok * e + i] * h[k];
    }
  }
  return y;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (float& f : v) f = nd(gen);
  return v;
}

TEST(MoeMlp, MatchesATokenByTokenReference) {
  auto rt = make_test_runtime();
  for (MoeConfig c : {MoeConfig{.experts = 4}, MoeConfig{.experts = 4, .top_k = 2},
                      MoeConfig{.experts = 4, .top_k = 2, .capacity_factor = 0.5},
                      MoeConfig{.experts = 3, .dropless = true},
                      MoeConfig{.experts = 4, .top_k = 2, .bucket = 5},
                      MoeConfig{.experts = 3, .dropless = true, .bucket = 4}}) {
    SCOPED_TRACE(c.describe());
    models::MoeMlp moe(8, 16, c, nn::NormalInit{0.3f});
    const Tensor x = from_vector({12, 8}, random_values(96, 3));
    const std::vector<float> got = *moe.forward(reshape(x, {3, 4, 8})).to_vector();
    const std::vector<float> want = reference(moe, x);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::fabs(want[i])) << i;
    int64_t taken = 0;
    for (const auto& tk : moe.routing().tokens) taken += static_cast<int64_t>(tk.size());
    EXPECT_EQ(taken + moe.routing().dropped, 12 * c.top_k);
    if (c.capacity_factor < 1) {
      EXPECT_GT(moe.routing().dropped, 0);
    }
    if (c.bucket > 0) {
      EXPECT_GT(moe.routing().padded, 0);
    }
  }
}

// Bucketing: a count rounds up to a multiple of the bucket, at least one bucket, and with
// a capacity at most C; a bucket as large as C gives every expert C rows.
TEST(MoeConfig, BucketedRows) {
  const MoeConfig c{.experts = 4, .bucket = 8};
  EXPECT_EQ(c.rows(0, 0), 8);
  EXPECT_EQ(c.rows(8, 0), 8);
  EXPECT_EQ(c.rows(9, 0), 16);
  EXPECT_EQ(c.rows(9, 12), 12);
  EXPECT_EQ(MoeConfig{.experts = 4}.rows(9, 12), 9);
  const MoeConfig full{.experts = 4, .bucket = 1 << 20};
  for (int64_t n : {0, 1, 7, 20}) EXPECT_EQ(full.rows(n, 20), 20);
}

// Gradients of loss = sum(y * w) in the input, the router and an expert's first weight,
// against central differences in double of the same forward (the routing does not move
// for steps this small: the test checks it).
TEST(MoeMlp, GradientsMatchFiniteDifferences) {
  auto rt = make_test_runtime();
  models::MoeMlp moe(6, 8, MoeConfig{.experts = 3, .top_k = 2, .capacity_factor = 1}, nn::NormalInit{0.4f});
  std::vector<float> xv = random_values(10 * 6, 5);
  const std::vector<float> wv = random_values(10 * 6, 6);
  auto loss_at = [&](const std::vector<float>& xs) {
    return static_cast<double>(*sum(mul(moe.forward(from_vector({10, 6}, xs)), from_vector({10, 6}, wv))).item());
  };
  Tensor x = from_vector({10, 6}, xv).set_requires_grad(true);
  ASSERT_TRUE(sum(mul(moe.forward(x), from_vector({10, 6}, wv))).backward().ok());
  const std::vector<std::vector<int32_t>> routed = moe.routing().tokens;
  const std::vector<float> gx = *x.grad().to_vector();
  const std::vector<float> gr = *moe.router->weight.grad().to_vector();
  const std::vector<float> g1 = *moe.experts[1]->fc1->weight.grad().to_vector();
  const double h = 1e-2;
  double worst = 0;
  auto check = [&](double analytic, double plus, double minus) {
    const double fd = (plus - minus) / (2 * h);
    const double err = std::fabs(analytic - fd) / (1e-2 + std::fabs(fd));
    worst = std::max(worst, err);
    EXPECT_LT(err, 2e-2) << "analytic " << analytic << " finite difference " << fd;
  };
  for (size_t i : {size_t{0}, size_t{13}, size_t{37}, size_t{59}}) {
    std::vector<float> xp = xv, xm = xv;
    xp[i] += static_cast<float>(h);
    xm[i] -= static_cast<float>(h);
    const double lp = loss_at(xp);
    EXPECT_EQ(moe.routing().tokens, routed) << "the routing moved for input element " << i;
    check(gx[i], lp, loss_at(xm));
  }
  // A parameter's element: perturbed in place through a fresh leaf of new values.
  auto param_fd = [&](Tensor& p, size_t i) {
    const std::vector<float> v = *p.to_vector();
    std::vector<float> vp = v, vm = v;
    vp[i] += static_cast<float>(h);
    vm[i] -= static_cast<float>(h);
    const Shape s = p.shape();
    p = from_vector(s, vp).set_requires_grad(true);
    const double lp = loss_at(xv);
    p = from_vector(s, vm).set_requires_grad(true);
    const double lm = loss_at(xv);
    p = from_vector(s, v).set_requires_grad(true);
    return std::pair<double, double>(lp, lm);
  };
  for (size_t i : {size_t{1}, size_t{8}, size_t{17}}) {
    auto [lp, lm] = param_fd(moe.router->weight, i);
    check(gr[i], lp, lm);
  }
  for (size_t i : {size_t{0}, size_t{20}, size_t{47}}) {
    auto [lp, lm] = param_fd(moe.experts[1]->fc1->weight, i);
    check(g1[i], lp, lm);
  }
  std::printf("  worst relative difference %.2e\n", worst);
}

// A router whose weights are zero gives every token even probabilities: all go to
// expert 0 (ties to the lower), the others take none, and still every expert's
// parameters get a gradient (zero for those that took nothing).
TEST(MoeMlp, ExpertsWithNoTokensRunAndGetZeroGradients) {
  auto rt = make_test_runtime();
  models::MoeMlp moe(4, 8, MoeConfig{.experts = 4, .dropless = true});
  moe.router->weight = zeros({4, 4}).set_requires_grad(true);
  const Tensor x = from_vector({6, 4}, random_values(24, 9));
  ASSERT_TRUE(sum(moe.forward(x)).backward().ok());
  EXPECT_EQ(moe.routing().tokens[0].size(), 6u);
  for (int i = 1; i < 4; ++i) {
    EXPECT_TRUE(moe.routing().tokens[i].empty());
    for (const Tensor& p : moe.experts[i]->parameters()) {
      ASSERT_TRUE(p.grad().defined()) << "expert " << i;
      const std::vector<float> g = *p.grad().to_vector();
      EXPECT_EQ(g, std::vector<float>(g.size(), 0.f)) << "expert " << i;
    }
  }
  for (const Tensor& p : moe.experts[0]->parameters()) ASSERT_TRUE(p.grad().defined());
}

// MoeRun: losses, final weights and figures of `iterations` AdamW steps of the tiny
// moe_gpt (4 experts in block 1 of 2) on a pool of two batches of `batch` sequences.
struct MoeRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  size_t peak = 0;
  EvictStats evict;
  TmaFigures tma;
  std::vector<int64_t> last_tokens;
};
MoeRun train_moe_gpt(const MoeConfig& c, int iterations, int batch, const EvictOptions& ev = {}, bool tma = false) {
  RuntimeOptions o;
  o.memory_bytes = size_t{512} << 20;
  o.num_threads = 2;
  o.seed = 4;
  o.evict = ev;
  o.tma.enabled = tma;
  o.tma.warmup_iterations = 3;
  MoeRun run;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return run;
  models::ModelOptions mo;
  mo.moe = c;
  auto m = models::make_model("moe_gpt", mo);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return run;
  auto opt = optim::AdamW::create(m->net->parameters(), {.lr = 3e-3f});
  EXPECT_TRUE(opt.ok()) << opt.status();
  const data::SyntheticTokens src(16, 128, 2);
  for (int it = 0; it < iterations; ++it) {
    (*rt)->interpreter().mark("iteration", it + 1);
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it % 2, batch)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return run;
    auto v = loss->item();
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return run;
    run.losses.push_back(*v);
  }
  for (const Tensor& p : m->net->parameters()) run.weights.push_back(*p.to_vector());
  auto* gpt = dynamic_cast<models::Gpt*>(m->net.get());
  for (const auto& tk : gpt->moe_blocks().at(0)->routing().tokens) run.last_tokens.push_back(static_cast<int64_t>(tk.size()));
  run.peak = (*rt)->interpreter().memory_stats()->compute.peak_allocated;
  run.evict = *(*rt)->interpreter().evict_stats();
  run.tma = *(*rt)->interpreter().tma_stats();
  return run;
}

// moe_gpt learns: top-1 with a capacity and top-2 dropless, 50 iterations each, the mean
// loss of the last five below 70% of the first (about ln 128 = 4.85 plus the aux term).
TEST(MoeGpt, LossFallsTopOneAndTopTwo) {
  for (MoeConfig c : {MoeConfig{.experts = 4}, MoeConfig{.experts = 4, .top_k = 2, .dropless = true}}) {
    SCOPED_TRACE(c.describe());
    const MoeRun r = train_moe_gpt(c, 50, 8);
    ASSERT_EQ(r.losses.size(), 50u);
    float tail = 0;
    for (int i = 45; i < 50; ++i) tail += r.losses[i] / 5;
    std::printf("  %s: first loss %.4f, mean of the last five %.4f, last tokens per expert %lld %lld %lld %lld\n",
                c.describe().c_str(), r.losses[0], tail, static_cast<long long>(r.last_tokens[0]),
                static_cast<long long>(r.last_tokens[1]), static_cast<long long>(r.last_tokens[2]),
                static_cast<long long>(r.last_tokens[3]));
    EXPECT_NEAR(r.losses[0], std::log(128.f), 0.3f);
    EXPECT_LT(tail, 0.7f * r.losses[0]);
  }
}

// Under DTE at 40% of the unlimited peak, alone and with TMA, moe_gpt trains with the
// unlimited run's losses and final weights, bit for bit (batch 64, where the activations
// outweigh the parameters and AdamW's state). With exact token counts no iteration's
// shapes recur, so TMA plans nothing; with every expert padded to its capacity
// (bucket >= C) they all recur, and TMA places requests at planned offsets.
void budget_and_tma_bit_for_bit(const MoeConfig& c) {
  EvictOptions none;
  none.policy = EvictPolicy::kNone;
  const MoeRun ref = train_moe_gpt(c, 8, 64, none);
  ASSERT_EQ(ref.losses.size(), 8u);
  EvictOptions ev;
  ev.budget_bytes = ref.peak * 4 / 10;
  for (bool tma : {false, true}) {
    SCOPED_TRACE(tma ? "DTE and TMA" : "DTE");
    const MoeRun got = train_moe_gpt(c, 8, 64, ev, tma);
    std::printf("  %s at %.2f of %.2f MiB: peak %.2f MiB, %llu drops, %llu swaps, %llu recomputes, %llu TMA hits\n",
                tma ? "DTE+TMA" : "DTE", ev.budget_bytes / 1048576.0, ref.peak / 1048576.0, got.peak / 1048576.0,
                static_cast<unsigned long long>(got.evict.evict_drop),
                static_cast<unsigned long long>(got.evict.evict_swap),
                static_cast<unsigned long long>(got.evict.recomputes), static_cast<unsigned long long>(got.tma.hits));
    EXPECT_LE(got.peak, ev.budget_bytes);
    EXPECT_GT(got.evict.evict_drop + got.evict.evict_swap, 0u);
    EXPECT_EQ(got.losses, ref.losses);
    EXPECT_EQ(got.weights, ref.weights);
    if (tma) {
      if (c.bucket > 0) {
        EXPECT_GT(got.tma.hits, 0u);
      } else {
        EXPECT_EQ(got.tma.hits, 0u);
      }
    }
  }
}

TEST(MoeGpt, TrainsUnderABudgetAndTmaBitForBit) {
  budget_and_tma_bit_for_bit({.experts = 4, .top_k = 2});
}

TEST(MoeGpt, TrainsUnderABudgetAndTmaBitForBitWithBuckets) {
  budget_and_tma_bit_for_bit({.experts = 4, .top_k = 2, .bucket = 1 << 20});
}

TEST(MoeConfig, CheckNamesTheFieldAndWhatWasExpected) {
  auto message = [](const MoeConfig& c) { return std::string(c.check().message()); };
  EXPECT_NE(message({.experts = 1}).find("experts 1: expected >= 2"), std::string::npos);
  EXPECT_NE(message({.experts = 4, .top_k = 3}).find("top_k 3: expected 1 (Switch) or 2 (GShard)"), std::string::npos);
  EXPECT_NE(message({.experts = 4, .capacity_factor = 0}).find("capacity factor 0"), std::string::npos);
  EXPECT_NE(message({.experts = 4, .aux_alpha = -1}).find("aux alpha -1"), std::string::npos);
  EXPECT_NE(message({.experts = 4, .bucket = -1}).find("bucket -1: expected >= 0"), std::string::npos);
  EXPECT_NE(message({.experts = 4, .groups = 0}).find("groups 0: expected >= 1"), std::string::npos);
  EXPECT_EQ(message({.experts = 2, .top_k = 2}), "");
}

}  // namespace
}  // namespace mtc
