// Tests of DTP's cost model (partition/cost.h): the rates and their fit, the collectives'
// alpha-beta model in nccl-tests' size convention and mtc-bench-comm's JSON, each mode's
// time and memory, any op priced by its signature (what --dtp=auto uses), a move, and the
// choice under a budget, all on hand-computed examples.
#include "partition/cost.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace mtc::partition {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Round figures so every expectation below can be computed by hand.
Rates HandRates() { return {1e4 /*FLOP/us*/, 1e3 /*bytes/us*/, 2 /*us per call*/}; }
CollectiveModel HandComm() {
  CollectiveModel m;
  for (auto& l : m.lines) l = {10 /*us*/, 0.001 /*us per bus byte*/};
  return m;
}
CostContext HandContext(int p, double optimizer_states = 2 /*AdamW*/) {
  CostContext c;
  c.parts = p, c.rates = HandRates(), c.comm = HandComm(), c.optimizer_states = optimizer_states;
  return c;
}

// ---- rates ----

TEST(RatesTest, TimeIsFlopsOverRatePlusBytesOverRatePlusOverhead) {
  const Rates r = HandRates();
  // 1e6 FLOP / 1e4 FLOP/us = 100 us; 5e4 bytes / 1e3 bytes/us = 50 us; + 2 us.
  EXPECT_DOUBLE_EQ(r.time_us(1e6, 5e4), 152.0);
  const Rates no_bytes{1e4, kInf, 0};
  EXPECT_DOUBLE_EQ(no_bytes.time_us(1e6, 5e4), 100.0);
  const Rates cpu = Rates::cpu_default();
  EXPECT_DOUBLE_EQ(cpu.flops_per_us, 2e4);  // 20 GFLOP/s
  EXPECT_DOUBLE_EQ(cpu.bytes_per_us, 1e4);  // 10 GB/s
  EXPECT_DOUBLE_EQ(cpu.overhead_us, 5);
}

TEST(RatesTest, FitRecoversKnownRatesWithinOnePercent) {
  const double F = 5e4 /*FLOP/us*/, B = 2e3 /*bytes/us*/, c = 3 /*us*/;
  std::vector<RateSample> samples;
  int i = 0;
  // Compute-bound, memory-bound and tiny ops, with a deterministic +-0.3% error.
  for (double flops : {1e5, 1e6, 1e7, 1e8, 1e9}) {
    for (double bytes : {1e3, 1e4, 1e5, 1e6, 1e7}) {
      const double us = (flops / F + bytes / B + c) * (1 + ((i++ % 3) - 1) * 0.003);
      samples.push_back({flops, bytes, us});
    }
  }
  auto r = fit_rates(samples);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->flops_per_us / F, 1, 0.01);
  EXPECT_NEAR(r->bytes_per_us / B, 1, 0.01);
  EXPECT_NEAR(r->overhead_us / c, 1, 0.01);
}

TEST(RatesTest, FitExactSamplesAndNonNegativeCoefficients) {
  // Exact samples of us = flops/1e4 with no bytes term and no overhead: the bytes rate
  // comes back infinite (its coefficient 0), never negative.
  std::vector<RateSample> samples = {{1e5, 7e3, 10}, {1e6, 2e3, 100}, {3e6, 9e4, 300}, {2e7, 1e2, 2000}};
  auto r = fit_rates(samples);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->flops_per_us, 1e4, 1e4 * 1e-9);
  EXPECT_TRUE(std::isinf(r->bytes_per_us));
  EXPECT_NEAR(r->overhead_us, 0, 1e-9);
  // Samples that a negative overhead would fit best: the fit keeps c >= 0.
  std::vector<RateSample> neg = {{1e6, 0, 90}, {2e6, 0, 190}, {4e6, 0, 390}};
  auto rn = fit_rates(neg);
  ASSERT_TRUE(rn.ok()) << rn.status();
  EXPECT_GE(rn->overhead_us, 0);
  EXPECT_GT(rn->flops_per_us, 0);
}

TEST(RatesTest, CallsOfOneShapeCountAtTheirMeanTime) {
  // Two shapes, each called at two speeds (a core to itself, then shared): 1e6 FLOP in
  // 100 and 300 us, 4e6 FLOP in 400 and 1200 us. The fit predicts each shape's mean,
  // 200 and 800 us (5000 FLOP/us). Weighting the calls one by one would follow the fast
  // ones: 8333 FLOP/us, 120 us for the first shape.
  std::vector<RateSample> samples = {{1e6, 0, 100}, {1e6, 0, 300}, {4e6, 0, 400}, {4e6, 0, 1200}};
  auto r = fit_rates(samples);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->flops_per_us, 5000, 5000 * 1e-9);
  EXPECT_NEAR(r->overhead_us, 0, 1e-9);
  // More calls of one shape do not outweigh the other shape: 3 calls of the first shape
  // at 200 us and 1 of the second at 1600 us (2500 FLOP/us) fit between the two rates,
  // each shape counted once.
  std::vector<RateSample> uneven = {{1e6, 0, 200}, {1e6, 0, 200}, {1e6, 0, 200}, {4e6, 0, 1600}};
  auto ru = fit_rates(uneven);
  ASSERT_TRUE(ru.ok()) << ru.status();
  std::vector<RateSample> once = {{1e6, 0, 200}, {4e6, 0, 1600}};
  auto ro = fit_rates(once);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_DOUBLE_EQ(ru->flops_per_us, ro->flops_per_us);
  EXPECT_DOUBLE_EQ(ru->overhead_us, ro->overhead_us);
}

TEST(RatesTest, APreemptedCallIsLeftOutOfItsShapesMean) {
  // Note [Preempted calls]: 20 calls of 1e6 FLOP at 20-39 us and one at 12,000 us (a time
  // slice lost): the shape is priced at the 20 calls' mean, 29.5 us, not at 600 us.
  std::vector<RateSample> samples;
  double sum = 0;
  for (int i = 0; i < 20; ++i) {
    samples.push_back({1e6, 0, 20.0 + i});
    sum += 20.0 + i;
  }
  samples.push_back({1e6, 0, 12000});
  auto r = fit_rates(samples);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(1e6 / r->flops_per_us + r->overhead_us, sum / 20, 1e-6);
  // Calls up to 4 times the median stay (the cores' sharing moves a call 2x): 100, 100,
  // 300 and 400 us average 225 us. So do calls further out by less than a time slice
  // (1 ms): 10, 10, 10 and 900 us average 232.5 us.
  std::vector<RateSample> shared = {{1e6, 0, 100}, {1e6, 0, 100}, {1e6, 0, 300}, {1e6, 0, 400}};
  auto rs = fit_rates(shared);
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_NEAR(1e6 / rs->flops_per_us + rs->overhead_us, 225, 1e-6);
  std::vector<RateSample> small = {{1e6, 0, 10}, {1e6, 0, 10}, {1e6, 0, 10}, {1e6, 0, 900}};
  auto rm = fit_rates(small);
  ASSERT_TRUE(rm.ok()) << rm.status();
  EXPECT_NEAR(1e6 / rm->flops_per_us + rm->overhead_us, 232.5, 1e-6);
  // Of two calls the median is their mean, which neither is 4 times: 10 and 1,000 us
  // price the shape at 505 us.
  std::vector<RateSample> two = {{1e6, 0, 10}, {1e6, 0, 1000}};
  auto rt = fit_rates(two);
  ASSERT_TRUE(rt.ok()) << rt.status();
  EXPECT_NEAR(1e6 / rt->flops_per_us + rt->overhead_us, 505, 1e-6);
}

TEST(RatesTest, FitRejectsBadSamples) {
  EXPECT_FALSE(fit_rates({}).ok());
  std::vector<RateSample> bad = {{1e6, 1e3, 0}};
  auto r = fit_rates(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("us > 0"), std::string::npos) << r.status();
}

TEST(RatesTest, TablePerFamilyWithFallback) {
  RateTable t(HandRates());
  EXPECT_FALSE(t.has("matmul"));
  EXPECT_DOUBLE_EQ(t.get("matmul").flops_per_us, 1e4);
  std::vector<RateSample> s = {{1e6, 0, 10}, {2e6, 0, 20}, {4e6, 0, 40}};  // 1e5 FLOP/us
  ASSERT_TRUE(t.fit("conv2d", s).ok());
  EXPECT_TRUE(t.has("conv2d"));
  EXPECT_NEAR(t.get("conv2d").flops_per_us, 1e5, 1);
  EXPECT_DOUBLE_EQ(t.get("matmul").flops_per_us, 1e4);
  auto bad = t.fit("matmul", {});
  EXPECT_NE(bad.message().find("op family matmul"), std::string::npos) << bad;
}

// ---- collectives ----

TEST(CollectiveTest, BusFactorsAndSizesFollowNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 4), 1.5);  // 2(p-1)/p
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllGather, 4), 0.75);  // (p-1)/p
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllToAll, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 1), 0);
  // S for a 4096-byte tensor on 4 ranks: the whole tensor, except all_to_all's shard.
  EXPECT_DOUBLE_EQ(collective_size_bytes(Collective::kAllReduce, 4096, 4), 4096);
  EXPECT_DOUBLE_EQ(collective_size_bytes(Collective::kAllGather, 4096, 4), 4096);
  EXPECT_DOUBLE_EQ(collective_size_bytes(Collective::kReduceScatter, 4096, 4), 4096);
  EXPECT_DOUBLE_EQ(collective_size_bytes(Collective::kAllToAll, 4096, 4), 1024);
}

TEST(CollectiveTest, TimeIsAlphaPlusBetaTimesBusBytes) {
  const CollectiveModel m = HandComm();
  // all_reduce of 1 MB on 4 ranks: 10 us + 0.001 us/B * 1e6 B * 1.5 = 1510 us.
  EXPECT_DOUBLE_EQ(m.time_us(Collective::kAllReduce, 1e6, 4), 1510);
  // all_gather of 1 MB on 4 ranks: 10 + 0.001 * 1e6 * 0.75 = 760 us.
  EXPECT_DOUBLE_EQ(m.time_us(Collective::kAllGather, 1e6, 4), 760);
  EXPECT_DOUBLE_EQ(m.time_us(Collective::kAllReduce, 1e6, 1), 0);  // one rank: no call
}

TEST(CollectiveTest, SetFitRescalesToOtherWorldSizes) {
  CollectiveModel m;
  // docs/comm.md's sample line, measured at 4 ranks.
  ASSERT_TRUE(m.set_fit(Collective::kAllReduce, 35.1, 0.00237, 4).ok());
  EXPECT_NEAR(m.time_us(Collective::kAllReduce, 1e6, 4), 35.1 + 0.00237 * 1e6, 1e-6);  // as fitted
  // At 2 ranks the bus factor is 1 instead of 1.5: beta becomes 0.00237 / 1.5 us/B.
  EXPECT_NEAR(m.time_us(Collective::kAllReduce, 1e6, 2), 35.1 + 0.00158 * 1e6, 1e-6);
  EXPECT_FALSE(m.set_fit(Collective::kAllGather, 1, 1e-3, 1).ok());
  EXPECT_FALSE(m.set_fit(Collective::kAllGather, -1, 1e-3, 4).ok());
  const CollectiveModel mpi = CollectiveModel::mpi_cpu_default();
  EXPECT_NEAR(mpi.time_us(Collective::kAllReduce, 1e6, 4), 35.1 + 0.00237 * 1e6, 1e-6);
  const CollectiveModel nccl = CollectiveModel::nccl_default();
  // 450 GB/s bus bandwidth: 1 GB all_reduce on 8 GPUs = 10 us + 1e9 * 1.75 / 450e3 us.
  EXPECT_NEAR(nccl.time_us(Collective::kAllReduce, 1e9, 8), 10 + 1e9 * 1.75 / 450e3, 1e-6);
}

TEST(CollectiveTest, CalibrateAddsTheMedianExcessPerCall) {
  CollectiveModel m = HandComm();
  // Eleven calls of four sizes: 500, 600 or 700 us over the lines' time, and one (the
  // loss's scalar all-reduce, waiting for the slowest rank) 30 ms over: the median of the
  // eleven excesses, 600 us, not their mean.
  const double pred[] = {m.time_us(Collective::kAllReduce, 1e6, 4), m.time_us(Collective::kAllGather, 1e6, 4),
                         m.time_us(Collective::kAllGather, 1e3, 4)};
  std::vector<CollectiveModel::Sample> s;
  for (int i = 0; i < 10; ++i) s.push_back({pred[i % 3], pred[i % 3] + 500 + 100 * (i % 3)});  // 4x 500, 3x 600, 3x 700
  s.push_back({m.time_us(Collective::kAllReduce, 4, 4), m.time_us(Collective::kAllReduce, 4, 4) + 30000});
  ASSERT_TRUE(m.calibrate(s).ok());
  EXPECT_NEAR(m.per_call_us, 600, 1e-6);
  // Every collective priced from then on: all_reduce of 1 MB, 1510 + 600 us.
  EXPECT_NEAR(m.time_us(Collective::kAllReduce, 1e6, 4), 2110, 1e-6);
  EXPECT_DOUBLE_EQ(m.time_us(Collective::kAllReduce, 1e6, 1), 0);  // still no call on one rank
  // An even count takes the mean of the middle two; calls faster than their lines give
  // no negative figure.
  CollectiveModel a = HandComm();
  std::vector<CollectiveModel::Sample> even;
  for (int i = 0; i < 10; ++i) even.push_back({100, i < 5 ? 150.0 : 250.0});
  ASSERT_TRUE(a.calibrate(even).ok());
  EXPECT_NEAR(a.per_call_us, 100, 1e-9);  // (50 + 150) / 2
  CollectiveModel f = HandComm();
  const std::vector<CollectiveModel::Sample> fast(10, {100, 50});
  ASSERT_TRUE(f.calibrate(fast).ok());
  EXPECT_EQ(f.per_call_us, 0);
  // Too few calls, or a bad sample: refused, the model left as it was.
  CollectiveModel c = HandComm();
  const std::vector<CollectiveModel::Sample> few(9, {100, 5000});
  absl::Status st = c.calibrate(few);
  EXPECT_NE(st.message().find("expected at least 10"), std::string::npos) << st;
  std::vector<CollectiveModel::Sample> bad(10, {100, 200});
  bad[3] = {0, 10};
  st = c.calibrate(bad);
  EXPECT_NE(st.message().find("predicted_us > 0"), std::string::npos) << st;
  EXPECT_EQ(c.per_call_us, 0);
}

TEST(CollectiveTest, ConversionTimeIsItsForwardCollective) {
  const CollectiveModel m = HandComm();
  // S(0) -> R of 1 MB on 4 ranks: an all_gather, 760 us; P -> R an all_reduce, 1510 us;
  // R -> S(0) a local slice, 0; S(0) -> S(1) an all_to_all of a rank's 250 kB shard.
  EXPECT_DOUBLE_EQ(conversion_us(plan_conversion(Placement::S(0), Placement::R()), 1e6, 4, m), 760);
  EXPECT_DOUBLE_EQ(conversion_us(plan_conversion(Placement::P(), Placement::R()), 1e6, 4, m), 1510);
  EXPECT_DOUBLE_EQ(conversion_us(plan_conversion(Placement::R(), Placement::S(0)), 1e6, 4, m), 0);
  EXPECT_DOUBLE_EQ(conversion_us(plan_conversion(Placement::S(0), Placement::S(1)), 1e6, 4, m),
                   10 + 0.001 * 2.5e5 * 0.75);
  EXPECT_TRUE(std::isinf(conversion_us(plan_conversion(Placement::R(), Placement::P()), 1e6, 4, m)));
}

// ---- modes ----

// The [64,768] x [768,3072] linear on 4 ranks, f32, AdamW, rates 1e4 FLOP/us, 1e3 B/us,
// 2 us per call; every collective 10 us + 0.001 us per bus byte.
constexpr double kW = 768.0 * 3072 * 4;  // bytes, W global: 9437184
constexpr double kX = 64.0 * 768 * 4;    // bytes, X global: 196608
constexpr double kY = 64.0 * 3072 * 4;   // bytes, Y global: 786432
constexpr double kFlopsPerRank = 2.0 * 64 * 768 * 3072 / 4;  // FLOP, every mode: 75497472

double MatmulUs(double x_bytes, double w_bytes, double y_bytes) {
  return kFlopsPerRank / 1e4 + (x_bytes + w_bytes + y_bytes) / 1e3 + 2;  // us
}

TEST(ModeCostTest, LinearP1AllReducesDw) {
  const WeightOp op = WeightOp::linear(64, 768, 3072);
  EXPECT_DOUBLE_EQ(op.w_bytes(), kW);
  auto b = mode_breakdown(op, Mode::kP1, Placement::S(0), Placement::R(), HandContext(4));
  ASSERT_TRUE(b.ok()) << b.status();
  // Shards X [16,768], W [768,3072] whole, Y [16,3072]; forward, dW and dX.
  EXPECT_DOUBLE_EQ(b->compute_us, 3 * MatmulUs(16.0 * 768 * 4, kW, 16.0 * 3072 * 4));
  // All-reduce of dW: S = 9437184 B, bus bytes 2(p-1)/p * S = 14155776 B.
  EXPECT_DOUBLE_EQ(b->sent_bytes, 2.0 * 3 / 4 * 768 * 3072 * 4);
  EXPECT_DOUBLE_EQ(b->sent_bytes, 14155776);
  EXPECT_DOUBLE_EQ(b->collective_us, 10 + 0.001 * 14155776);  // 14165.776 us
  EXPECT_DOUBLE_EQ(b->conversion_us, 0);                       // X is S(0) already
  // W, dW and AdamW's two moments, whole: 4 * 9437184 = 37748736 B.
  EXPECT_DOUBLE_EQ(b->state_bytes, 37748736);
  EXPECT_DOUBLE_EQ(b->grad_bytes, kW);  // of it, dW (bound for the comm region)
  EXPECT_DOUBLE_EQ(b->activation_bytes, 16.0 * 768 * 4 + 16.0 * 3072 * 4);  // 245760 B
  EXPECT_DOUBLE_EQ(b->buffer_bytes, 0);
  auto c = mode_cost(op, Mode::kP1, Placement::S(0), Placement::R(), HandContext(4));
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->time_us, b->compute_us + b->collective_us);
  EXPECT_DOUBLE_EQ(c->bytes, 37748736 + 245760);
  // SGD without momentum keeps W and dW only: 2 * W.
  auto sgd = mode_breakdown(op, Mode::kP1, Placement::S(0), Placement::R(), HandContext(4, 0));
  EXPECT_DOUBLE_EQ(sgd->state_bytes, 2 * kW);
}

TEST(ModeCostTest, LinearP2GathersWAndReduceScattersDw) {
  const WeightOp op = WeightOp::linear(64, 768, 3072);
  auto b = mode_breakdown(op, Mode::kP2, Placement::S(0), Placement::R(), HandContext(4));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->compute_us, 3 * MatmulUs(16.0 * 768 * 4, kW, 16.0 * 3072 * 4));  // W gathered whole
  // all_gather W + reduce_scatter dW: each S = W, bus bytes (p-1)/p * W.
  EXPECT_DOUBLE_EQ(b->sent_bytes, 2 * 0.75 * kW);
  EXPECT_DOUBLE_EQ(b->collective_us, 2 * (10 + 0.001 * 0.75 * kW));
  EXPECT_DOUBLE_EQ(b->state_bytes, 4 * kW / 4);  // W/4, dW/4, two moments of W/4
  EXPECT_DOUBLE_EQ(b->grad_bytes, kW / 4);
  EXPECT_DOUBLE_EQ(b->buffer_bytes, 2 * kW);      // gathered W and the whole dW
}

TEST(ModeCostTest, LinearP3ConvertsXAndY) {
  const WeightOp op = WeightOp::linear(64, 768, 3072);
  // X held S(0) must become S(1): all_to_all, S = X/4 = 49152 B, bus bytes 0.75 * S,
  // and its inverse in the backward. Y Partial -> R: all_reduce forward and backward.
  auto b = mode_breakdown(op, Mode::kP3, Placement::S(0), Placement::R(), HandContext(4));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->compute_us, 3 * MatmulUs(64.0 * 192 * 4, 192.0 * 3072 * 4, kY));
  EXPECT_DOUBLE_EQ(b->conversion_us, 2 * (10 + 0.001 * 0.75 * kX / 4));
  EXPECT_DOUBLE_EQ(b->collective_us, 2 * (10 + 0.001 * 1.5 * kY));
  EXPECT_DOUBLE_EQ(b->sent_bytes, 2 * 0.75 * kX / 4 + 2 * 1.5 * kY);
  EXPECT_DOUBLE_EQ(b->state_bytes, 4 * kW / 4);
  EXPECT_DOUBLE_EQ(b->activation_bytes, 64.0 * 192 * 4 + kY);  // X [64,192], Y [64,3072] Partial
  EXPECT_DOUBLE_EQ(b->buffer_bytes, kY);                        // the all-reduced Y
  // The next op takes Y S(1): reduce_scatter forward, all_gather backward, buffer Y/4.
  auto rs = mode_breakdown(op, Mode::kP3, Placement::S(1), Placement::S(1), HandContext(4));
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_DOUBLE_EQ(rs->conversion_us, 0);
  EXPECT_DOUBLE_EQ(rs->collective_us, 2 * (10 + 0.001 * 0.75 * kY));
  EXPECT_DOUBLE_EQ(rs->buffer_bytes, kY / 4);
  // The next op takes it Partial: no collective.
  auto pp = mode_breakdown(op, Mode::kP3, Placement::S(1), Placement::P(), HandContext(4));
  EXPECT_DOUBLE_EQ(pp->collective_us, 0);
}

TEST(ModeCostTest, LinearP4AllReducesDx) {
  const WeightOp op = WeightOp::linear(64, 768, 3072);
  auto b = mode_breakdown(op, Mode::kP4, Placement::R(), Placement::R(), HandContext(4));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->compute_us, 3 * MatmulUs(kX, 768.0 * 768 * 4, 64.0 * 768 * 4));
  EXPECT_DOUBLE_EQ(b->collective_us, 10 + 0.001 * 1.5 * kX);  // all_reduce of dX
  EXPECT_DOUBLE_EQ(b->conversion_us, 0);
  EXPECT_DOUBLE_EQ(b->state_bytes, 4 * kW / 4);
  EXPECT_DOUBLE_EQ(b->activation_bytes, kX + 64.0 * 768 * 4);  // X whole, Y [64,768]
  // X held S(0): all_gather forward, reduce_scatter backward, which also sums dX.
  auto g = mode_breakdown(op, Mode::kP4, Placement::S(0), Placement::R(), HandContext(4));
  ASSERT_TRUE(g.ok());
  EXPECT_DOUBLE_EQ(g->collective_us, 0);
  EXPECT_DOUBLE_EQ(g->conversion_us, 2 * (10 + 0.001 * 0.75 * kX));
  // A first layer (no dX): no all_reduce.
  CostContext ctx = HandContext(4);
  ctx.x_needs_grad = false;
  auto f = mode_breakdown(op, Mode::kP4, Placement::R(), Placement::R(), ctx);
  EXPECT_DOUBLE_EQ(f->collective_us, 0);
  EXPECT_DOUBLE_EQ(f->compute_us, 2 * MatmulUs(kX, 768.0 * 768 * 4, 64.0 * 768 * 4));
}

TEST(ModeCostTest, Conv2dUsesSpatialWork) {
  // x (8, 64, 32, 32), w (128, 64, 3, 3), y (8, 128, 32, 32) on 2 ranks; FLOPs only.
  const WeightOp op = WeightOp::conv2d(8, 64, 32, 32, 128, 3, 3, 32, 32);
  EXPECT_DOUBLE_EQ(op.flops(), 2.0 * 8 * 64 * 128 * 9 * 1024);
  EXPECT_DOUBLE_EQ(op.w_bytes(), 128.0 * 64 * 9 * 4);
  EXPECT_DOUBLE_EQ(op.x_bytes(), 8.0 * 64 * 1024 * 4);
  EXPECT_DOUBLE_EQ(op.y_bytes(), 8.0 * 128 * 1024 * 4);
  CostContext ctx = HandContext(2);
  ctx.rates = {1e4, kInf, 0};
  for (Mode m : {Mode::kP1, Mode::kP2, Mode::kP3, Mode::kP4}) {
    auto b = mode_breakdown(op, m, x_placement_for(op, m), Placement::R(), ctx);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_DOUBLE_EQ(b->compute_us, 3 * op.flops() / 2 / 1e4) << mode_name(m);  // flops / p
  }
  auto p1 = mode_breakdown(op, Mode::kP1, Placement::S(0), Placement::R(), ctx);
  EXPECT_DOUBLE_EQ(p1->collective_us, 10 + 0.001 * 1.0 * op.w_bytes());  // all_reduce dW, factor 1 at p=2
}

TEST(ModeCostTest, OneRankHasNoCollectivesAndErrors) {
  const WeightOp op = WeightOp::linear(64, 768, 3072);
  auto b = mode_breakdown(op, Mode::kP3, Placement::R(), Placement::R(), HandContext(1));
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(b->collective_us + b->conversion_us + b->sent_bytes, 0);
  EXPECT_FALSE(mode_breakdown(op, Mode::kNone, Placement::R(), Placement::R(), HandContext(4)).ok());
  EXPECT_FALSE(mode_breakdown(WeightOp::linear(0, 768, 3072), Mode::kP1, Placement::R(), Placement::R(),
                              HandContext(4))
                   .ok());
  // A Partial X for P1: reduce_scatter to S(0) forward, all_gather backward.
  auto px = mode_breakdown(op, Mode::kP1, Placement::P(), Placement::R(), HandContext(4));
  ASSERT_TRUE(px.ok());
  EXPECT_DOUBLE_EQ(px->conversion_us, 2 * (10 + 0.001 * 0.75 * kX));
}

// ---- choice ----

std::vector<ModeOption> Options() {
  return {{Mode::kP1, {100, 1000}}, {Mode::kP2, {150, 400}}, {Mode::kP3, {120, 500}}, {Mode::kP4, {90, 700}}};
}

TEST(ChooseModeTest, LambdaExtremes) {
  const auto o = Options();
  EXPECT_EQ(*choose_mode(o, 1e9, 0), Mode::kP4);  // fastest
  EXPECT_EQ(*choose_mode(o, 1e9, 1), Mode::kP2);  // smallest
  // 0.5 against P1's figures (1000 B, 100 us): P1 1, P2 0.95, P3 0.85, P4 0.8.
  EXPECT_EQ(*choose_mode(o, 1e9, 0.5), Mode::kP4);
}

TEST(ChooseModeTest, BudgetFilters) {
  const auto o = Options();
  EXPECT_EQ(*choose_mode(o, 450, 0), Mode::kP2);  // only P2 fits
  EXPECT_EQ(*choose_mode(o, 600, 0), Mode::kP3);  // P2, P3 fit; P3 is faster
  EXPECT_EQ(*choose_mode(o, 700, 0), Mode::kP4);  // the budget is inclusive
  // P1 does not fit: refs are the smallest figures, 400 B and 120 us: P2 0.5 + 0.625 =
  // 1.125, P3 0.625 + 0.5 = 1.125; the tie goes to the smaller bytes.
  EXPECT_EQ(*choose_mode(o, 600, 0.5), Mode::kP2);
}

TEST(ChooseModeTest, NoFitNamesTheSmallestRequirement) {
  auto r = choose_mode(Options(), 100, 0.5, "linear fc1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "op linear fc1: no mode fits the budget of 100 bytes (0.0 MiB) per rank; the smallest, p2, needs 400 "
            "bytes (0.0 MiB)");
  EXPECT_FALSE(choose_mode(Options(), 1e9, 1.5).ok());
  EXPECT_FALSE(choose_mode({}, 1e9, 0.5).ok());
}

TEST(ChooseModeTest, FromTheModelUnderABudget) {
  // The linear above under AdamW on 4 ranks: P1 keeps 4 W = 36 MiB; a 20 MB budget leaves
  // the sharded modes, and lambda 1 takes the one holding least.
  const WeightOp op = WeightOp::linear(64, 768, 3072);
  std::vector<ModeOption> o;
  for (Mode m : {Mode::kP1, Mode::kP2, Mode::kP3, Mode::kP4}) {
    auto c = mode_cost(op, m, Placement::S(0), Placement::R(), HandContext(4));
    ASSERT_TRUE(c.ok()) << c.status();
    o.push_back({m, *c});
  }
  auto all = choose_mode(o, 1e12, 0);
  auto small = choose_mode(o, 20e6, 1);
  ASSERT_TRUE(all.ok() && small.ok());
  EXPECT_NE(*small, Mode::kP1);
  double least = kInf;
  Mode least_mode = Mode::kNone;
  for (const auto& x : o)
    if (x.cost.bytes < least) least = x.cost.bytes, least_mode = x.mode;
  EXPECT_EQ(*small, least_mode);
}


// ---- any op by its signatures (what --dtp=auto prices) ----

OpContext HandOpContext(int p) {
  OpContext c;
  c.parts = p, c.rates = HandRates(), c.step_rates = HandRates(), c.comm = HandComm();
  c.optimizer_states = 2;  // AdamW
  return c;
}

InputTerm Activation(Placement have, Placement want, double global, double local) {
  InputTerm t;
  t.have = have, t.want = want, t.global_bytes = global, t.local_bytes = local, t.needs_grad = true;
  return t;
}

InputTerm Parameter(Placement have, Placement want, double global, double local, bool gather = false) {
  InputTerm t = Activation(have, want, global, local);
  t.holding = Holding::kParameter, t.gather = gather;
  return t;
}

TEST(SignatureTest, AReplicatedGradientSharesItsBucketsCall) {
  // W's gradient all-reduce, data parallel's, in a bucket 4x W's size: the per-byte time
  // whole and a quarter of the call's fixed 10 us; per_call_us (the measured wait) is
  // shared alike. A bucket smaller than W: a call of its own.
  const std::vector<InputTerm> in{Activation(Placement::S(0), Placement::S(0), kX, kX / 4),
                                  Parameter(Placement::R(), Placement::R(), kW, kW)};
  const std::vector<OutputTerm> out{{Placement::S(0), kY, kY / 4}};
  const SignatureTerms s{in, out, kFlopsPerRank, kX / 4 + kW + kY / 4, /*weighted=*/true};
  OpContext ctx = HandOpContext(4);
  ctx.grad_bucket_bytes = 4 * kW;
  auto b = signature_breakdown(s, ctx);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->collective_us, 0.001 * kW * 1.5 + 10.0 / 4);
  EXPECT_DOUBLE_EQ(b->sent_bytes, kW * 1.5);
  ctx.comm.per_call_us = 2000;
  b = signature_breakdown(s, ctx);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->collective_us, 0.001 * kW * 1.5 + 2010.0 / 4);
  ctx.grad_bucket_bytes = kW / 2;
  b = signature_breakdown(s, ctx);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->collective_us, 0.001 * kW * 1.5 + 2010.0);
}

TEST(SignatureTest, P1LinearComputesThriceStepsAndAllReducesDw) {
  // x f32[64,768] S(0), W [768,3072] R -> y S(0) on 4 ranks, training, AdamW.
  const std::vector<InputTerm> in{Activation(Placement::S(0), Placement::S(0), kX, kX / 4),
                                  Parameter(Placement::R(), Placement::R(), kW, kW)};
  const std::vector<OutputTerm> out{{Placement::S(0), kY, kY / 4}};
  const double bytes = kX / 4 + kW + kY / 4;
  const SignatureTerms s{in, out, kFlopsPerRank, bytes, /*weighted=*/true};
  auto b = signature_breakdown(s, HandOpContext(4));
  ASSERT_TRUE(b.ok()) << b.status();
  const double op_us = kFlopsPerRank / 1e4 + bytes / 1e3 + 2;  // the forward, us
  const double step_us = kW * (2 + 2 * 2) / 1e3 + 2;           // AdamW reads/writes 6 W, us
  EXPECT_DOUBLE_EQ(b->compute_us, 3 * op_us + step_us);        // forward, dX, dW, the step
  EXPECT_DOUBLE_EQ(b->collective_us, 10 + 0.001 * kW * 1.5);   // data parallel's all_reduce of dW
  EXPECT_DOUBLE_EQ(b->conversion_us, 0);                       // x is held S(0) already
  EXPECT_DOUBLE_EQ(b->sent_bytes, kW * 1.5);
  EXPECT_DOUBLE_EQ(b->state_bytes, 4 * kW);                    // W, dW, two moments
  EXPECT_DOUBLE_EQ(b->grad_bytes, kW);                         // dW
  EXPECT_DOUBLE_EQ(b->activation_bytes, kX / 4 + kY / 4);
  EXPECT_DOUBLE_EQ(b->buffer_bytes, 0);
  auto f = forward_us(s, HandOpContext(4));
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ(*f, op_us);
  OpContext eval = HandOpContext(4);
  eval.training = false;  // no backward, no step, no gradient all_reduce
  auto e = signature_breakdown(s, eval);
  ASSERT_TRUE(e.ok());
  EXPECT_DOUBLE_EQ(e->total().time_us, op_us);
}

TEST(SignatureTest, ConversionForwardAndBackwardAndAPartialOutput) {
  // x held S(0), the signature wants S(1) (an all_to_all forward and back); W S(1) stored
  // there; y Partial (all_reduced forward and backward).
  const std::vector<InputTerm> in{Activation(Placement::S(0), Placement::S(1), kX, kX / 4),
                                  Parameter(Placement::S(1), Placement::S(1), kW, kW / 4)};
  const std::vector<OutputTerm> out{{Placement::P(), kY, kY}};
  const SignatureTerms s{in, out, kFlopsPerRank, 0, true};
  auto b = signature_breakdown(s, HandOpContext(4));
  ASSERT_TRUE(b.ok()) << b.status();
  const double a2a = 10 + 0.001 * (kX / 4) * 0.75;  // all_to_all: S is a rank's shard, us
  const double ar = 10 + 0.001 * kY * 1.5;          // all_reduce of Y, us
  EXPECT_DOUBLE_EQ(b->conversion_us, 2 * a2a);
  EXPECT_DOUBLE_EQ(b->collective_us, 2 * ar);       // no dW all_reduce: W is split
  EXPECT_DOUBLE_EQ(b->state_bytes, 4 * kW / 4);
  EXPECT_DOUBLE_EQ(b->compute_us, 3 * (kFlopsPerRank / 1e4 + 2) + (kW / 4 * 6 / 1e3 + 2));
  auto f = forward_us(s, HandOpContext(4));
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ(*f, kFlopsPerRank / 1e4 + 2 + a2a);  // the op and the forward all_to_all
}

TEST(SignatureTest, GatheredParameterAndBuffer) {
  // W stored S(0) and gathered for the op (P2); a buffer of 400 bytes held whole.
  std::vector<InputTerm> in{Activation(Placement::S(0), Placement::S(0), kX, kX / 4),
                            Parameter(Placement::S(0), Placement::R(), kW, kW / 4, /*gather=*/true)};
  InputTerm buffer = Activation(Placement::R(), Placement::R(), 400, 400);
  buffer.holding = Holding::kBuffer, buffer.needs_grad = false;
  in.push_back(buffer);
  const std::vector<OutputTerm> out{{Placement::S(0), kY, kY / 4}};
  const SignatureTerms s{in, out, kFlopsPerRank, 0, true};
  auto b = signature_breakdown(s, HandOpContext(4));
  ASSERT_TRUE(b.ok()) << b.status();
  const double ag = 10 + 0.001 * kW * 0.75;  // all_gather of W = reduce_scatter of dW, us
  EXPECT_DOUBLE_EQ(b->collective_us, 2 * ag);
  EXPECT_DOUBLE_EQ(b->buffer_bytes, 2 * kW);  // the gathered W and the whole dW
  EXPECT_DOUBLE_EQ(b->state_bytes, 4 * kW / 4 + 400);
  EXPECT_DOUBLE_EQ(b->grad_bytes, kW / 4);  // the buffer has no gradient
  auto f = forward_us(s, HandOpContext(4));
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ(*f, kFlopsPerRank / 1e4 + 2 + ag);  // the op and the gather
}

TEST(SignatureTest, UnsupportedConversionAndBadContextAreErrors) {
  const std::vector<InputTerm> in{Activation(Placement::R(), Placement::P(), kX, kX)};
  const SignatureTerms s{in, {}, 0, 0, false};
  auto b = signature_breakdown(s, HandOpContext(4));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), "cost: an input held as R cannot be converted to P");
  EXPECT_FALSE(forward_us(s, HandOpContext(4)).ok());
  const SignatureTerms none{{}, {}, 0, 0, false};
  EXPECT_FALSE(signature_breakdown(none, HandOpContext(0)).ok());
}

TEST(SignatureTest, MoveConvertsTheTensorAndItsOptimizerStates) {
  // A settled W [768,3072] moved S(0) -> S(1): an all_to_all of the parameter and of its
  // two AdamW moments (gradients are cleared between iterations).
  InputTerm w = Parameter(Placement::S(0), Placement::S(1), kW, kW / 4);
  EXPECT_DOUBLE_EQ(move_us(w, HandOpContext(4)), 3 * (10 + 0.001 * (kW / 4) * 0.75));
  w.have = Placement::R(), w.want = Placement::S(0);  // a local slice: no collective
  EXPECT_DOUBLE_EQ(move_us(w, HandOpContext(4)), 0);
  InputTerm buf = Activation(Placement::S(0), Placement::R(), 4096, 4096);
  buf.holding = Holding::kBuffer;  // one tensor, all_gathered
  EXPECT_DOUBLE_EQ(move_us(buf, HandOpContext(4)), 10 + 0.001 * 4096 * 0.75);
  w.have = Placement::R(), w.want = Placement::P();  // cannot be reached
  EXPECT_EQ(move_us(w, HandOpContext(4)), kInf);
}

TEST(ChooseIndexTest, ReferenceBudgetAndLambda) {
  // Option 0 is the P1 reference: 100 us, 100 bytes; 1 is smaller and slower; 2 faster
  // and larger.
  const std::vector<ModeCost> c{{100, 100}, {150, 25}, {90, 400}};
  const std::vector<std::string> names{"p1", "p3", "p4"};
  // lambda 0.1: scores 1.0, 0.1*0.25 + 0.9*1.5 = 1.375, 0.1*4 + 0.9*0.9 = 1.21.
  auto r = choose_index(c, names, 1e9, 0.1, "op", 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);
  // lambda 0.5: 1.0, 0.875, 2.45.
  r = choose_index(c, names, 1e9, 0.5, "op", 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  r = choose_index(c, names, 1e9, 0, "op", 0);  // the fastest
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2u);
  r = choose_index(c, names, 200, 0, "op", 0);  // 2 does not fit: the fastest of the rest
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);
  r = choose_index(c, names, 50, 0, "op", 0);  // only 1 fits; the reference does not
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  r = choose_index(c, names, 10, 0.1, "linear on x", 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "op linear on x: no mode fits the budget of 10 bytes (0.0 MiB) per rank; the smallest, p3, needs 25 "
            "bytes (0.0 MiB)");
  EXPECT_FALSE(choose_index(c, names, 1e9, -0.1, "op", 0).ok());
  EXPECT_FALSE(choose_index({}, {}, 1e9, 0.1, "op", -1).ok());
}

TEST(CollectiveTest, FromBenchJsonReadsEveryLineAndKeepsTheBase) {
  const std::string json = R"({"backend": "mpi", "world_size": 4, "collectives": {
    "all_reduce": {"alpha_us":100,"beta_us_per_byte":0.003,"busbw_factor":1.5,"points":[[8,100]]},
    "broadcast": {"alpha_us":1,"beta_us_per_byte":1,"busbw_factor":1.0}}})";
  const CollectiveModel base = HandComm();
  auto m = CollectiveModel::from_bench_json(json, base);
  ASSERT_TRUE(m.ok()) << m.status();
  // all_reduce has one point, 100 us at 8 B: past it the line's 0.003 us/B (at 4 ranks)
  // carries on from it. At 2 ranks the bus factor 1 instead of 1.5 reads 1 MB as 1/1.5 MB
  // at 4 ranks.
  EXPECT_NEAR(m->time_us(Collective::kAllReduce, 1e6, 4), 100 + 0.003 * (1e6 - 8), 1e-9);
  EXPECT_NEAR(m->time_us(Collective::kAllReduce, 1e6, 2), 100 + 0.003 * (1e6 / 1.5 - 8), 1e-9);
  // Without points the line alone: 100 us + 0.003 us/B x 1 MB; 0.002 us per byte at 2 ranks.
  auto line = CollectiveModel::from_bench_json(
      R"({"world_size": 4, "collectives": {"all_reduce": {"alpha_us":100,"beta_us_per_byte":0.003}}})", base);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_NEAR(line->time_us(Collective::kAllReduce, 1e6, 4), 3100, 1e-9);
  EXPECT_NEAR(line->time_us(Collective::kAllReduce, 1e6, 2), 2100, 1e-9);
  // all_gather is not in the file: the base's line.
  EXPECT_DOUBLE_EQ(m->time_us(Collective::kAllGather, 1e6, 4), base.time_us(Collective::kAllGather, 1e6, 4));
  auto no_ws = CollectiveModel::from_bench_json(R"({"collectives": {}})", base);
  ASSERT_FALSE(no_ws.ok());
  EXPECT_EQ(no_ws.status().message(), "mtc-bench-comm JSON: expected \"world_size\": N with N >= 2");
  EXPECT_FALSE(CollectiveModel::from_bench_json(R"({"world_size": 1, "all_reduce": {}})", base).ok());
  auto none = CollectiveModel::from_bench_json(R"({"world_size": 4, "collectives": {}})", base);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(),
            "mtc-bench-comm JSON: no collective found; expected all_reduce, all_gather, reduce_scatter or all_to_all");
  auto half = CollectiveModel::from_bench_json(R"({"world_size": 4, "all_gather": {"alpha_us": 3}})", base);
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().message(),
            "mtc-bench-comm JSON: all_gather: expected alpha_us and beta_us_per_byte numbers");
}

TEST(CollectiveTest, MeasuredPointsPriceTheCallsTheLineMisses) {
  // mtc-bench-comm's reduce_scatter on 4 MPI ranks sharing 2 cores (rounded): the line,
  // fitted on the relative error, says 40 us + 0.00034 us/B, 2.9 ms at 8 MiB and 46 ms at
  // 128 MiB, where the calls took 8.6 ms and 1.36 s. The 8-byte point (138 us) is above
  // the 32-byte one: noise, lowered to 42 us.
  const std::string json = R"({"world_size": 4, "collectives": {"reduce_scatter": {
    "alpha_us":40,"beta_us_per_byte":0.00034,"busbw_factor":0.75,
    "points":[[8,138],[32,42],[2097152,610],[8388608,8648],[134217728,1364627]]}}})";
  const CollectiveModel base = HandComm();
  auto m = CollectiveModel::from_bench_json(json, base);
  ASSERT_TRUE(m.ok()) << m.status();
  const Collective rs = Collective::kReduceScatter;
  EXPECT_NEAR(m->time_us(rs, 8, 4), 42, 1e-9);   // lowered to the 32-byte point
  EXPECT_NEAR(m->time_us(rs, 1, 4), 42, 1e-9);   // below the smallest: its time
  EXPECT_NEAR(m->time_us(rs, 8388608, 4), 8648, 1e-9);
  // Between two points, on the line through them: 4 MiB is a third of the way from 2 to
  // 8 MiB; the GPT's logits (103 MB) lie between 8 and 128 MiB.
  EXPECT_NEAR(m->time_us(rs, 4194304, 4), 610 + (8648 - 610) / 3.0, 1e-9);
  const double slope = (1364627.0 - 8648) / (134217728.0 - 8388608);
  EXPECT_NEAR(m->time_us(rs, 103e6, 4), 8648 + slope * (103e6 - 8388608), 1e-6);
  EXPECT_GT(m->time_us(rs, 103e6, 4), 20 * (40 + 0.00034 * 103e6));  // the line: 35 ms
  // Past the largest point, along the last segment.
  EXPECT_NEAR(m->time_us(rs, 2 * 134217728.0, 4), 1364627 + slope * 134217728.0, 1e-6);
  // At 2 ranks (bus factor 1/2 instead of 3/4) 6 MiB moves the bus bytes of 4 MiB at 4.
  EXPECT_NEAR(m->time_us(rs, 6291456, 2), m->time_us(rs, 4194304, 4), 1e-9);
  EXPECT_EQ(m->time_us(rs, 6291456, 1), 0);
  // A bucket's share: the bytes' time (beyond the smallest point's 42 us) and its share of
  // the call's fixed time, the smallest point's, with the measured wait.
  CollectiveModel w = *m;
  w.per_call_us = 1000;
  EXPECT_NEAR(w.shared_call_us(rs, 4194304, 4, 0.25), (610 + (8648 - 610) / 3.0 - 42) + 0.25 * (42 + 1000), 1e-9);
  EXPECT_NEAR(w.time_us(rs, 4194304, 4), m->time_us(rs, 4194304, 4) + 1000, 1e-9);
  // The other collectives keep the base's lines.
  EXPECT_DOUBLE_EQ(m->time_us(Collective::kAllGather, 1e6, 4), base.time_us(Collective::kAllGather, 1e6, 4));
  // A later file without points returns reduce_scatter to its line.
  auto again = CollectiveModel::from_bench_json(
      R"({"world_size": 4, "reduce_scatter": {"alpha_us":40,"beta_us_per_byte":0.00034}})", *m);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NEAR(again->time_us(rs, 8388608, 4), 40 + 0.00034 * 8388608, 1e-6);
}

TEST(CollectiveTest, BadPointsAreRefusedAndLeaveTheModelAsItWas) {
  CollectiveModel m = HandComm();
  const Collective ar = Collective::kAllReduce;
  const double before = m.time_us(ar, 1e6, 4);
  using P = std::vector<std::pair<double, double>>;
  absl::Status s = m.set_points(ar, P{{8, 10}, {8, 20}}, 4);
  EXPECT_EQ(s.message(), "collective model: all_reduce points need increasing sizes; point 1 has 8 bytes after 8");
  s = m.set_points(ar, P{{8, 10}, {64, 0}}, 4);
  EXPECT_EQ(s.message(), "collective model: all_reduce point 1 needs bytes > 0 and us > 0, both finite; got [64, 0]");
  EXPECT_EQ(m.set_points(ar, P{}, 4).message(), "collective model: all_reduce: no points");
  EXPECT_EQ(m.set_points(ar, P{{8, 10}}, 1).message(),
            "collective model: all_reduce points measured at world_size 1; needs >= 2");
  EXPECT_EQ(m.time_us(ar, 1e6, 4), before);
  const CollectiveModel base = HandComm();
  auto r = CollectiveModel::from_bench_json(
      R"({"world_size": 4, "all_reduce": {"alpha_us":1,"beta_us_per_byte":1,"points":[[8,10],[4]]}})", base);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "mtc-bench-comm JSON: all_reduce: expected \"points\": [[bytes, us], ...]");
  r = CollectiveModel::from_bench_json(
      R"({"world_size": 4, "all_reduce": {"alpha_us":1,"beta_us_per_byte":1,"points":[[64,10],[8,20]]}})", base);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "mtc-bench-comm JSON: collective model: all_reduce points need increasing sizes; point 1 has 8 bytes "
            "after 64");
  // all_gather's line lacks beta: it is not taken from reduce_scatter's after it.
  r = CollectiveModel::from_bench_json(
      R"({"world_size": 4, "all_gather": {"alpha_us":1}, "reduce_scatter": {"alpha_us":1,"beta_us_per_byte":1}})",
      base);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "mtc-bench-comm JSON: all_gather: expected alpha_us and beta_us_per_byte numbers");
}

TEST(RatesTest, FitFromOneOrTwoSamplesOfOneShapeIsExact) {
  // An op that runs once per iteration (the loss) has two samples of one shape in the
  // warm-up: the fit prices that shape as measured.
  const std::vector<RateSample> one{{6.4e6 /*FLOP*/, 2.6e7 /*bytes*/, 26700 /*us*/}};
  auto r = fit_rates(one);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->time_us(6.4e6, 2.6e7), 26700, 1e-6);
  const std::vector<RateSample> two{{6.4e6, 2.6e7, 26000}, {6.4e6, 2.6e7, 27400}};
  r = fit_rates(two);
  ASSERT_TRUE(r.ok());
  // Calls of one shape are averaged before the fit: the mean, 26700 us.
  EXPECT_NEAR(r->time_us(6.4e6, 2.6e7), (26000 + 27400) / 2.0, 1e-6);
}

}  // namespace
}  // namespace mtc::partition
