// Tests of DTE (evict/ and the executor's evictions): the cost's choices against
// hand-worked cases, the evicted-tensor classes, and training under a budget, which must
// give bit-identical losses and final weights to the unlimited run (the reference) with
// drop only, swap only and both, for CIFAR ResNet-56 and for a network with dropout, and
// a Tree-LSTM in drop mode, trained by planned regeneration where the recursion storms.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "device.h"
#include "evict/cost.h"
#include "evict/evicted_classes.h"
#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/nn.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"
#include "trace/replay.h"
#include "train_check.h"

namespace mtc {
namespace {

evict::CandidateStats stats(size_t bytes, double compute_us, double swap_us, double staleness) {
  evict::CandidateStats c;
  c.bytes = bytes;
  c.compute_us = compute_us;
  c.swap_us = swap_us;
  c.staleness = staleness;
  c.can_drop = c.can_swap = true;
  return c;
}

TEST(EvictionCost, MtcTakesTheCheaperActionAndCountsFreeNeighbours) {
  EvictOptions o;
  evict::EvictionCost mtc(o);
  // Swapping 1 MiB at 10 GB/s (~105 us) beats recomputing an op of 500 us.
  evict::Score s = mtc.score(stats(1 << 20, 500, 105, 4));
  EXPECT_TRUE(s.eligible);
  EXPECT_EQ(s.action, evict::Action::kSwap);
  EXPECT_DOUBLE_EQ(s.h, 105.0 / ((1 << 20) * 4.0));
  // A cheap op is dropped instead.
  s = mtc.score(stats(1 << 20, 20, 105, 4));
  EXPECT_EQ(s.action, evict::Action::kDrop);
  // Free neighbours enlarge the denominator: the same tensor next to 3 MiB of free space
  // scores a quarter, so it goes first.
  evict::CandidateStats c = stats(1 << 20, 20, 105, 4);
  c.free_left = 1 << 20;
  c.free_right = 2 << 20;
  EXPECT_DOUBLE_EQ(mtc.score(c).h, s.h / 4);
  // Each recompute multiplies by beta (1.25), up to beta_max_power (4) of them.
  c.recompute_count = 3;
  EXPECT_DOUBLE_EQ(mtc.score(c).h, s.h / 4 * std::pow(1.25, 3));
  c.recompute_count = 4;
  EXPECT_DOUBLE_EQ(mtc.score(c).h, s.h / 4 * std::pow(1.25, 4));
  c.recompute_count = 5;
  EXPECT_DOUBLE_EQ(mtc.score(c).h, s.h / 4 * std::pow(1.25, 4)) << "a fifth recompute counts no more";
  // Bounded and finite however often a tensor was recomputed (2^1024 was infinite, and
  // every candidate recomputed that often tied).
  c.recompute_count = 5000;
  EXPECT_TRUE(std::isfinite(mtc.score(c).h));
  EvictOptions unbounded;
  unbounded.beta = 2;
  unbounded.beta_max_power = UINT32_MAX;
  EXPECT_FALSE(std::isfinite(evict::EvictionCost(unbounded).score(c).h)) << "what the bound prevents";
  // The evicted neighbourhood adds to the recompute cost.
  evict::CandidateStats n = stats(1 << 20, 20, 1000, 4);
  n.neighbourhood_us = 30;
  EXPECT_DOUBLE_EQ(mtc.score(n).h, 50.0 / ((1 << 20) * 4.0));
}

TEST(EvictionCost, ModesAndBaselines) {
  EvictOptions o;
  o.mode = EvictMode::kDrop;
  evict::CandidateStats c = stats(4096, 500, 1, 2);
  EXPECT_EQ(evict::EvictionCost(o).score(c).action, evict::Action::kDrop);
  c.can_drop = false;  // a Put tensor: drop-only mode cannot evict it
  EXPECT_FALSE(evict::EvictionCost(o).score(c).eligible);
  o.mode = EvictMode::kSwap;
  EXPECT_EQ(evict::EvictionCost(o).score(stats(4096, 1, 500, 2)).action, evict::Action::kSwap);
  o.mode = EvictMode::kBoth;
  o.policy = EvictPolicy::kNone;
  EXPECT_FALSE(evict::EvictionCost(o).score(stats(4096, 1, 1, 2)).eligible);
  o.policy = EvictPolicy::kDtr;
  evict::Score d = evict::EvictionCost(o).score(stats(4096, 100, 1, 2));
  EXPECT_EQ(d.action, evict::Action::kDrop);  // dtr recomputes even when a swap is cheaper
  EXPECT_DOUBLE_EQ(d.h, 100.0 / (4096 * 2));
  o.policy = EvictPolicy::kCapuchin;
  EXPECT_EQ(evict::EvictionCost(o).score(stats(4096, 1, 100, 2)).action, evict::Action::kSwap);
  o.policy = EvictPolicy::kLargest;
  EXPECT_LT(evict::EvictionCost(o).score(stats(8192, 1, 1, 1)).h, evict::EvictionCost(o).score(stats(4096, 1, 1, 1)).h);
  EXPECT_FALSE(parse_evict_policy("fifo").ok());
  EXPECT_EQ(*parse_evict_policy("capuchin"), EvictPolicy::kCapuchin);
  EXPECT_FALSE(parse_evict_mode("all").ok());
}

TEST(EvictedClasses, UnionsSumCostsAndRestoresSubtract) {
  evict::EvictedClasses k;
  k.add(1, 10);
  k.add(2, 20);
  k.add(3, 5);
  EXPECT_DOUBLE_EQ(k.class_cost(1), 10);
  k.unite(1, 2);
  EXPECT_EQ(k.root(1), k.root(2));
  EXPECT_DOUBLE_EQ(k.class_cost(2), 30);
  k.unite(2, 3);
  EXPECT_DOUBLE_EQ(k.class_cost(1), 35);
  k.restore(2);  // back in memory: its cost leaves the class, the class stays whole
  EXPECT_FALSE(k.contains(2));
  EXPECT_DOUBLE_EQ(k.class_cost(3), 15);
  k.add(2, 7);  // dropped again
  EXPECT_DOUBLE_EQ(k.class_cost(1), 22);
}

// ---- training under a budget ----

// DropoutNet: twelve conv3x3 layers (3->16, then 16->16), each followed by relu and
// dropout(0.3), then global-avg-pool and linear(16->10). Activations dominate its memory
// and no single op needs much of it, as in the models DTE is for.
class DropoutNet final : public nn::Module {
 public:
  DropoutNet() {
    for (int i = 0; i < 12; ++i) {
      convs_.push_back(register_module(
          absl::StrCat("c", i),
          std::make_shared<nn::Conv2d>(nn::Conv2dConfig{.in_channels = i == 0 ? 3 : 16, .out_channels = 16, .kernel = 3, .padding = 1})));
    }
    fc_ = register_module("fc", std::make_shared<nn::Linear>(16, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& c : convs_) h = dropout(relu((*c)(h)), 0.3f, is_training());
    return (*fc_)(global_avg_pool(h));
  }
  std::string type_name() const override { return "DropoutNet"; }

 private:
  std::vector<std::shared_ptr<nn::Conv2d>> convs_;
  std::shared_ptr<nn::Linear> fc_;
};

struct Run : train_check::Trained {
  size_t peak = 0;
  EvictStats evict;
};

// runtime: a runtime of `memory` bytes on two threads, seed 7, with DTE's options `ev`.
auto runtime(size_t memory, const EvictOptions& ev) {
  RuntimeOptions o;
  o.memory_bytes = memory;
  o.num_threads = 2;
  o.seed = 7;
  o.evict = ev;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  return rt;
}

Run train(const std::string& model, int iterations, int batch, const EvictOptions& ev) {
  Run run;
  auto rt = runtime(size_t{1} << 30, ev);
  if (!rt.ok()) return run;
  Shape sample;
  std::shared_ptr<nn::Module> net =
      train_check::net_or_model(model == "dropout" ? std::make_shared<DropoutNet>() : nullptr, model, &sample);
  if (net == nullptr) return run;
  auto opt = optim::Sgd::create(net->parameters(), {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f});
  EXPECT_TRUE(opt.ok()) << opt.status();
  data::SyntheticData src(sample, 10, 7);
  for (int it = 0; it < iterations; ++it) {
    if (!train_check::step(*net, **opt, src, it, batch, run.losses)) return run;
  }
  for (const Tensor& p : net->parameters()) run.weights.push_back(*p.to_vector());
  auto ms = (*rt)->interpreter().memory_stats();
  run.peak = ms->compute.peak_allocated;
  run.evict = *(*rt)->interpreter().evict_stats();
  return run;
}

void check_budgeted_runs(const std::string& model, int iterations, int batch) {
  EvictOptions unlimited;
  unlimited.policy = EvictPolicy::kNone;
  const Run ref = train(model, iterations, batch, unlimited);
  ASSERT_EQ(static_cast<int>(ref.losses.size()), iterations);
  std::printf("  %s, batch %d: unlimited peak %.1f MiB, losses %.6f .. %.6f\n", model.c_str(), batch,
              ref.peak / 1048576.0, ref.losses.front(), ref.losses.back());
  // Budget: 30% of the unlimited peak, in each mode.
  for (EvictMode mode : {EvictMode::kDrop, EvictMode::kSwap, EvictMode::kBoth}) {
    EvictOptions ev;
    ev.mode = mode;
    ev.reproducible = true;  // the same evictions on every run and machine
    ev.budget_bytes = ref.peak * 3 / 10;
    const Run got = train(model, iterations, batch, ev);
    std::printf("  budget %d%% (%.1f MiB), mode %s: peak %.1f MiB, %llu drops, %llu swaps, %llu recomputes\n",
                30, ev.budget_bytes / 1048576.0, evict_mode_name(mode), got.peak / 1048576.0,
                static_cast<unsigned long long>(got.evict.evict_drop),
                static_cast<unsigned long long>(got.evict.evict_swap),
                static_cast<unsigned long long>(got.evict.recomputes));
    EXPECT_LE(got.peak, ev.budget_bytes) << "the budget was exceeded";
    if (mode == EvictMode::kDrop) {
      EXPECT_GT(got.evict.recomputes, 0u);
    }
    if (mode == EvictMode::kSwap) {
      EXPECT_GT(got.evict.evict_swap, 0u);
    }
    EXPECT_GT(got.evict.evict_drop + got.evict.evict_swap, 0u);  // both: the policy picks
    train_check::expect_bit_identical(ref, got, std::string("mode ") + evict_mode_name(mode));
  }
}

TEST(DteTraining, ResNet56UnderABudgetIsBitIdentical) { check_budgeted_runs("resnet56", 20, 16); }
TEST(DteTraining, DropoutNetUnderABudgetIsBitIdentical) { check_budgeted_runs("dropout", 20, 32); }

// Note [Planned regeneration] in evict/engine.cc: a Tree-LSTM (hidden 64, 32 tokens, batch
// 64: 16 KiB node states) in drop mode at 40% of its unlimited peak. Regenerating each
// input down its own chain recomputes the children's states again for every level of the
// tree and stops as a recompute storm; recomputing the dropped tensors in the order they
// were made trains, with the losses and weights of the unlimited run.
Run train_tree_lstm(int iterations, const EvictOptions& ev, std::string* error) {
  Run run;
  auto rt = runtime(size_t{256} << 20, ev);
  if (!rt.ok()) return run;
  models::GptConfig c;
  c.layers = 1;
  c.hidden = 64;
  c.heads = 1;
  c.seq = 32;
  c.vocab = 128;
  auto m = models::make_model("treelstm", {.gpt = c});
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return run;
  auto opt = optim::Sgd::create(m->net->parameters(), {.lr = 0.05f, .momentum = 0.9f});
  EXPECT_TRUE(opt.ok()) << opt.status();
  data::SyntheticTokens src(c.seq, c.vocab, 7);
  for (int it = 0; it < iterations; ++it) {
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it, 64)));
    absl::StatusOr<float> value = loss.ok() ? loss->item() : absl::StatusOr<float>(loss.status());
    if (!value.ok()) {  // an op's error surfaces where its result is read
      *error = std::string(value.status().message());
      return run;
    }
    run.losses.push_back(*value);
  }
  for (const Tensor& p : m->net->parameters()) run.weights.push_back(*p.to_vector());
  run.peak = (*rt)->interpreter().memory_stats()->compute.peak_allocated;
  run.evict = *(*rt)->interpreter().evict_stats();
  return run;
}

TEST(DteTraining, PlannedRegenerationTrainsATreeLstmWhereTheRecursionStorms) {
  EvictOptions unlimited;
  unlimited.policy = EvictPolicy::kNone;
  std::string error;
  const mtc::Run ref = train_tree_lstm(3, unlimited, &error);
  ASSERT_EQ(ref.losses.size(), 3u) << error;
  EvictOptions ev;
  ev.mode = EvictMode::kDrop;
  ev.reproducible = true;
  ev.budget_bytes = ref.peak * 4 / 10;
  const mtc::Run planned = train_tree_lstm(3, ev, &error);
  ASSERT_TRUE(error.empty()) << error;
  std::printf("  unlimited peak %.2f MiB; at %.2f MiB, drop mode: peak %.2f MiB, %llu recomputes\n",
              ref.peak / 1048576.0, ev.budget_bytes / 1048576.0, planned.peak / 1048576.0,
              static_cast<unsigned long long>(planned.evict.recomputes));
  EXPECT_LE(planned.peak, ev.budget_bytes);
  EXPECT_GT(planned.evict.recomputes, 0u);
  train_check::expect_bit_identical(ref, planned, "planned regeneration");
  ev.plan_regeneration = false;
  const mtc::Run recursion = train_tree_lstm(3, ev, &error);
  EXPECT_LT(recursion.losses.size(), 3u);
  EXPECT_NE(error.find("a recompute storm"), std::string::npos) << error;
}

TEST(DteTraining, BudgetTooSmallForOneOpNamesTheOpAndBytes) {
  RuntimeOptions o;
  o.memory_bytes = size_t{256} << 20;
  o.num_threads = 1;
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok());
  Tensor a = full({512, 512}, 1.f);  // 1 MiB each
  Tensor b = full({512, 512}, 2.f);
  ASSERT_TRUE((*rt)->interpreter().sync().ok());
  // A second runtime whose budget holds the two inputs but not the output.
  o.evict.budget_bytes = (size_t{2} << 20) + 4096;
  auto small = Runtime::create(o);
  ASSERT_TRUE(small.ok());
  Tensor x = full({512, 512}, 1.f), y = full({512, 512}, 2.f);
  Tensor z = add(x, y);
  absl::Status s = (*small)->interpreter().sync();
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("add on f32[512,512], f32[512,512]: output 0 f32[512,512]"), std::string::npos) << s;
  EXPECT_NE(s.message().find("cannot allocate 1.0 MiB (1048576 bytes): over the budget m* of 2.0 MiB: 2.0 MiB held, "
                             "of which 2.0 MiB pinned by this op's inputs; the op needs 1.0 MiB more for its outputs "
                             "and 0 B more of scratch; nothing left to evict: expected a larger --budget"),
            std::string::npos)
      << s;
  // Nothing is corrupted: the inputs are intact and the runtime goes on.
  EXPECT_EQ(*sum(x).item(), 512.f * 512.f);
  // The worker owns the region: let it finish (the temporary's Del) before reading it here.
  ASSERT_TRUE((*small)->interpreter().sync().ok());
  (*small)->device().compute_region().check_invariants();
}

// ---- out-of-memory messages ----

// oom_of: the error of training DropoutNet at batch 8 for two iterations under `o`.
absl::Status oom_of(RuntimeOptions o) {
  o.num_threads = 1;
  o.evict.reproducible = true;
  auto rt = Runtime::create(o);
  if (!rt.ok()) return rt.status();
  auto net = std::make_shared<DropoutNet>();
  auto opt = optim::Sgd::create(net->parameters(), {.lr = 0.05f});
  if (!opt.ok()) return opt.status();
  data::SyntheticData src({3, 32, 32}, 10, 7);
  for (int it = 0; it < 2; ++it) {
    auto loss = models::train_step(*net, **opt, data::to_device(src.batch_at(it, 8)));
    if (!loss.ok()) return loss.status();
    if (absl::Status s = loss->item().status(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool has(const absl::Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// A budget far below what one layer needs: the message names the budget and its size,
// accounts the op's pinned inputs, and advises a larger --budget, not --memory (the region
// is 64 MiB, nearly all free).
TEST(DteOutOfMemory, TooSmallBudgetNamesTheBudget) {
  RuntimeOptions o;
  o.memory_bytes = size_t{68} << 20;
  o.comm_bytes = size_t{4} << 20;
  o.evict.budget_bytes = size_t{1} << 20;
  const absl::Status s = oom_of(o);
  std::printf("  %s\n", std::string(s.message()).c_str());
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(has(s, "over the budget m* of 1.0 MiB: ")) << s;
  EXPECT_TRUE(has(s, "pinned by this op's inputs")) << s;
  EXPECT_TRUE(has(s, "more for its outputs and ")) << s;
  EXPECT_TRUE(has(s, "nothing left to evict: expected a larger --budget")) << s;
  EXPECT_FALSE(has(s, "--memory")) << s;
}

// A compute region of 1 MiB and no budget: the region is the limit, named with its size,
// and the advice is a larger --memory.
TEST(DteOutOfMemory, TooSmallRegionNamesTheRegion) {
  RuntimeOptions o;
  o.memory_bytes = (size_t{1} << 20) + (size_t{64} << 10);
  o.comm_bytes = size_t{64} << 10;
  const absl::Status s = oom_of(o);
  std::printf("  %s\n", std::string(s.message()).c_str());
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(has(s, "compute region of 1.0 MiB")) << s;
  EXPECT_TRUE(has(s, "pinned by this op's inputs")) << s;
  EXPECT_TRUE(has(s, "nothing left to evict: expected a larger --memory")) << s;
  EXPECT_FALSE(has(s, "budget")) << s;
  // Without eviction the advice says so.
  o.evict.policy = EvictPolicy::kNone;
  const absl::Status off = oom_of(o);
  EXPECT_TRUE(has(off, "eviction is off: expected a larger --memory")) << off;
}

// The accounting counts the op's own outputs and scratch, with exact figures: a replayed
// op with 1 MiB inputs (2), a 1 MiB output and 512 KiB of scratch. Under a budget of
// 3.5 MiB - 4 KiB its output fits and its scratch does not; in a region of that size
// with no budget, the region is the limit.
TEST(DteOutOfMemory, CountsTheOpsOutputsAndScratch) {
  const std::string path = ::testing::TempDir() + "oom_scratch.jsonl";
  auto write = [&](size_t compute_bytes) {
    std::ofstream f(path);
    f << R"({"mtc_trace":1,"device":"cpu","compute_bytes":)" << compute_bytes
      << R"(,"comm_bytes":0,"budget_bytes":0,"bytes_per_us":1000})" "\n"
      << R"({"e":"put","id":1,"shape":[262144],"dtype":"f32"})" "\n"
      << R"({"e":"put","id":2,"shape":[262144],"dtype":"f32"})" "\n"
      << R"({"e":"op","op":"mix","in":[1,2],"out":[3],"shapes":[[262144]],"dtypes":["f32"],"us":10,"scratch":[524288]})" "\n";
  };
  const size_t limit = (size_t{7} << 19) - 4096;
  write(size_t{64} << 20);
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EvictOptions ev;
  ev.budget_bytes = limit;
  auto r = replay(*trace, ev, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->error,
            "mix on f32[262144], f32[262144]: op mix: scratch space: cannot allocate 512.0 KiB (524288 bytes): "
            "over the budget m* of 3.5 MiB: "
            "3.0 MiB held, of which 2.0 MiB pinned by this op's inputs, 1.0 MiB by its outputs and scratch so far; "
            "the op needs 0 B more for its outputs and 512.0 KiB more of scratch; nothing left to evict: "
            "expected a larger --budget");
  write(limit);
  trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  r = replay(*trace, EvictOptions{}, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->error,
            "mix on f32[262144], f32[262144]: op mix: scratch space: cannot allocate 512.0 KiB (524288 bytes): "
            "the compute region of 3.5 MiB is full "
            "(largest free block 508.0 KiB): 3.0 MiB held, of which 2.0 MiB pinned by this op's inputs, 1.0 MiB by "
            "its outputs and scratch so far; the op needs 0 B more for its outputs and 512.0 KiB more of scratch; "
            "nothing left to evict: expected a larger --memory");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace mtc
