// Training under TMA: CIFAR ResNet-56 must give bit-identical losses and final weights to
// the run without TMA, with at least 99% of the requests after the warm-up at their planned
// offsets and the compute region's high-water mark within 2% of its peak live bytes; a
// network whose branch is drawn at random each iteration must train bit-identically too,
// with its plan-cache hit rate printed; and TMA under a DTE budget must stay bit-identical
// and within the budget.
#include <cstring>
#include <memory>
#include <random>

#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/nn.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"
#include "train_check.h"

namespace mtc {
namespace {

// BranchNet: a stem conv, then one of three branches drawn at random each iteration (as a
// supernet samples a path), then pooling and a linear head. The branches differ in their
// ops and tensor sizes, so each gives the iteration a different signature.
class BranchNet final : public nn::Module {
 public:
  explicit BranchNet(uint64_t seed) : rng_(seed) {
    stem_ = register_module("stem", std::make_shared<nn::Conv2d>(nn::Conv2dConfig{.in_channels = 3, .out_channels = 16, .kernel = 3, .padding = 1}));
    a_ = register_module("a", std::make_shared<nn::Conv2d>(nn::Conv2dConfig{.in_channels = 16, .out_channels = 16, .kernel = 3, .padding = 1}));
    b1_ = register_module("b1", std::make_shared<nn::Conv2d>(nn::Conv2dConfig{.in_channels = 16, .out_channels = 32, .kernel = 1}));
    b2_ = register_module("b2", std::make_shared<nn::Conv2d>(nn::Conv2dConfig{.in_channels = 32, .out_channels = 16, .kernel = 3, .padding = 1}));
    c_ = register_module("c", std::make_shared<nn::Conv2d>(nn::Conv2dConfig{.in_channels = 16, .out_channels = 16, .kernel = 5, .padding = 2}));
    fc_ = register_module("fc", std::make_shared<nn::Linear>(16, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*stem_)(x));
    switch (rng_() % 3) {
      case 0: h = relu((*a_)(h)); break;
      case 1: h = relu((*b2_)(relu((*b1_)(h)))); break;
      default: h = relu((*c_)(h)); break;
    }
    return (*fc_)(global_avg_pool(h));
  }
  std::string type_name() const override { return "BranchNet"; }

 private:
  std::mt19937_64 rng_;
  std::shared_ptr<nn::Conv2d> stem_, a_, b1_, b2_, c_;
  std::shared_ptr<nn::Linear> fc_;
};

struct TrainRun : train_check::Trained {
  size_t peak = 0, high_water = 0;  // over the iterations after the warm-up
  TmaFigures tma;
  EvictStats evict;
};

TrainRun train(const std::string& model, int iterations, int batch, bool tma, size_t budget = 0) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 30;
  o.num_threads = 2;
  o.seed = 7;
  o.tma.enabled = tma;
  o.tma.warmup_iterations = 5;
  o.evict.budget_bytes = budget;
  o.evict.reproducible = true;
  TrainRun run;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return run;
  Shape sample;
  std::shared_ptr<nn::Module> net =
      train_check::net_or_model(model == "branch" ? std::make_shared<BranchNet>(11) : nullptr, model, &sample);
  if (net == nullptr) return run;
  auto opt = optim::Sgd::create(net->parameters(), {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f});
  EXPECT_TRUE(opt.ok()) << opt.status();
  data::SyntheticData src(sample, 10, 7);
  Interpreter& interp = (*rt)->interpreter();
  for (int it = 1; it <= iterations; ++it) {
    interp.mark("iteration", it);
    if (!train_check::step(*net, **opt, src, it, batch, run.losses)) return run;
    if (it == 6) {
      EXPECT_TRUE(interp.reset_peak().ok());  // the plan applies from iteration 6
    }
  }
  interp.mark("iteration", iterations + 1);  // ends the last iteration for TMA's figures
  for (const Tensor& p : net->parameters()) run.weights.push_back(*p.to_vector());
  auto ms = interp.memory_stats();
  run.peak = ms->compute.peak_allocated;
  run.high_water = ms->compute.high_water;
  run.tma = *interp.tma_stats();
  run.evict = *interp.evict_stats();
  return run;
}

double hit_rate(const TmaFigures& t) {
  return t.hits + t.misses == 0 ? 0.0 : static_cast<double>(t.hits) / static_cast<double>(t.hits + t.misses);
}

TEST(TmaTraining, ResNet56IsBitIdenticalWithPlannedOffsets) {
  const TrainRun ref = train("resnet56", 10, 16, false);
  const TrainRun got = train("resnet56", 10, 16, true);
  std::printf("  resnet56 batch 16: %llu hits, %llu misses (%.2f%%), plan peak %.2f MiB against lower bound "
              "%.2f MiB, planned in %.3f s; high water %.2f MiB against peak live %.2f MiB (%.4fx); "
              "without TMA: high water %.2f MiB (%.4fx)\n",
              static_cast<unsigned long long>(got.tma.hits), static_cast<unsigned long long>(got.tma.misses),
              100 * hit_rate(got.tma), got.tma.last_plan_peak / 1048576.0,
              got.tma.last_plan_lower_bound / 1048576.0, got.tma.plan_sec, got.high_water / 1048576.0,
              got.peak / 1048576.0, static_cast<double>(got.high_water) / got.peak, ref.high_water / 1048576.0,
              static_cast<double>(ref.high_water) / ref.peak);
  train_check::expect_bit_identical(ref, got, "with TMA");
  EXPECT_EQ(got.tma.plans, 1u);
  EXPECT_GE(hit_rate(got.tma), 0.99);
  EXPECT_LE(static_cast<double>(got.high_water), 1.02 * static_cast<double>(got.peak));
}

TEST(TmaTraining, RandomBranchNetTrainsBitIdenticallyFromThePlanCache) {
  const TrainRun ref = train("branch", 40, 8, false);
  const TrainRun got = train("branch", 40, 8, true);
  std::printf("  branch net: %llu plans, plan cache %llu of %llu iterations (%.1f%%), %llu hits, %llu misses "
              "(%.1f%%)\n",
              static_cast<unsigned long long>(got.tma.plans), static_cast<unsigned long long>(got.tma.cache_hits),
              static_cast<unsigned long long>(got.tma.cache_lookups),
              100.0 * got.tma.cache_hits / std::max<uint64_t>(1, got.tma.cache_lookups),
              static_cast<unsigned long long>(got.tma.hits), static_cast<unsigned long long>(got.tma.misses),
              100 * hit_rate(got.tma));
  train_check::expect_bit_identical(ref, got, "with TMA");
  EXPECT_EQ(got.tma.plans, 3u) << "one plan per branch";
  EXPECT_GT(got.tma.cache_hits, got.tma.cache_lookups / 2);
  EXPECT_GT(hit_rate(got.tma), 0.5);
}

TEST(TmaTraining, WithADteBudgetStaysBitIdenticalAndWithinTheBudget) {
  const TrainRun ref = train("resnet20", 10, 16, false);
  const size_t budget = ref.peak * 4 / 10;
  const TrainRun dte = train("resnet20", 10, 16, false, budget);
  const TrainRun both = train("resnet20", 10, 16, true, budget);
  std::printf("  resnet20 batch 16 at 40%%: DTE alone %llu evictions; with TMA %llu evictions, %llu hits, "
              "%llu misses, %llu plans not applied\n",
              static_cast<unsigned long long>(dte.evict.evict_drop + dte.evict.evict_swap),
              static_cast<unsigned long long>(both.evict.evict_drop + both.evict.evict_swap),
              static_cast<unsigned long long>(both.tma.hits), static_cast<unsigned long long>(both.tma.misses),
              static_cast<unsigned long long>(both.tma.plan_failures));
  train_check::expect_bit_identical(ref, both, "with TMA and a budget");
  EXPECT_LE(both.peak, budget);
  EXPECT_GT(both.tma.hits, 0u);
}

}  // namespace
}  // namespace mtc
