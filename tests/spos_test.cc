// The SPOS supernet (src/models/spos.cc): its parameters and FLOPs against the official
// supernet rebuilt in PyTorch, paths checked and parsed, one path's training equal to the
// stand-alone subnet's, units off every drawn path untouched (values and optimizer state),
// training under a DTE budget and TMA bit for bit, and the sampler's FLOPs range.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/runtime.h"
#include "op_check.h"

namespace mtc {
namespace {

using models::kSposBlocks;

// The official supernet (megvii-model/SinglePathOneShot, Supernet), rebuilt in PyTorch
// with BatchNorm2d(affine=False) throughout: 7,374,416 parameters in 335 tensors with 10
// classes, 8,388,176 with 1000. Its FLOPs (multiply-adds of the convolutions, by forward
// hooks, and the classifier's 1024 x 10) for four paths at 224 and at 32 pixels.
TEST(SposSupernet, MatchesTheOfficialSupernet) {
  auto rt = make_test_runtime(false, size_t{1} << 30);
  models::SposSupernet net(10, 224);
  EXPECT_EQ(net.num_parameters(), 7374416);
  EXPECT_EQ(net.named_parameters().size(), 335u);
  EXPECT_EQ(net.named_parameters().front().first, "first_conv.0.weight");
  EXPECT_EQ(net.named_parameters()[1].first, "features.0.0.branch_main.0.weight");
  EXPECT_EQ(net.named_parameters().back().first, "classifier.weight");
  EXPECT_EQ(models::SposSupernet(1000, 224).num_parameters(), 8388176);
  const std::vector<int> all0(kSposBlocks, 0), all2(kSposBlocks, 2), all3(kSposBlocks, 3);
  std::vector<int> mixed(kSposBlocks);
  for (int b = 0; b < kSposBlocks; ++b) mixed[b] = b % 4;
  EXPECT_EQ(net.flops(all0), 294828736);
  EXPECT_EQ(net.flops(all2), 339359936);
  EXPECT_EQ(net.flops(all3), 357812160);
  EXPECT_EQ(net.flops(mixed), 335979328);
  models::SposSupernet small(10, 32);
  EXPECT_EQ(small.flops(all0), 6026944);
  EXPECT_EQ(small.flops(all2), 6935744);
  EXPECT_EQ(small.flops(all3), 7312320);
  EXPECT_EQ(small.flops(mixed), 6866752);
}

TEST(SposSupernet, PathsAreCheckedAndParsed) {
  auto rt = make_test_runtime();
  models::SposSupernet net(10, 32);
  auto expect_bad = [](const std::string& text, const std::string& want) {
    auto p = models::parse_spos_path(text);
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(p.status().message()).find(want), std::string::npos) << p.status();
  };
  expect_bad("0,1,2", "has 3 choices: expected 20, one per choice block");
  expect_bad("0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,4", "block 19 has choice 4: expected 0-3");
  expect_bad("0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,x", "'x' is not a whole number");
  auto p = models::parse_spos_path("0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,3");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(net.set_path(*p).ok());
  EXPECT_EQ(std::vector<int>(net.path().begin(), net.path().end()), *p);
  const std::vector<int> bad(kSposBlocks, -1);
  EXPECT_FALSE(net.set_path(bad).ok());
  EXPECT_EQ(std::vector<int>(net.path().begin(), net.path().end()), *p);  // unchanged
  // The path decides the output: a forward through it, shape and finite values.
  NoGradGuard no_grad;
  net.eval();
  Tensor y = net.forward(from_vector({2, 3, 32, 32}, std::vector<float>(2 * 3 * 32 * 32, 0.5f)));
  EXPECT_EQ(y.desc().str(), "f32[2,10]");
}

// losses: 5 SGD steps (momentum 0.9, weight decay 5e-4) of `net` on a pool of two
// synthetic batches of 8 32x32 images; `before` runs before each step (a path draw).
// `keep` receives the optimizer.
std::vector<float> train(nn::Module& net, const std::function<void(int)>& before = nullptr,
                         std::unique_ptr<optim::Sgd>* keep = nullptr) {
  auto opt = optim::Sgd::create(net.parameters(), {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f});
  EXPECT_TRUE(opt.ok()) << opt.status();
  if (!opt.ok()) return {};
  data::SyntheticData src({3, 32, 32}, 10, 2);
  std::vector<float> l;
  for (int it = 0; it < 5; ++it) {
    if (before) before(it);
    auto loss = models::train_step(net, **opt, data::to_device(src.batch_at(it % 2, 8)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return l;
    l.push_back(*loss->item());
  }
  if (keep != nullptr) *keep = std::move(*opt);
  return l;
}

std::unique_ptr<Runtime> seeded_runtime() {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 30;
  o.num_threads = 2;
  o.seed = 5;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  return std::move(rt).value();
}

// The supernet with one path set, and the stand-alone subnet of that path built from a
// supernet made the same way (same seed: same weights), trained on the same data:
// identical losses, bit for bit, over 5 iterations.
TEST(SposSupernet, OnePathTrainsAsItsStandAloneSubnet) {
  auto path = models::parse_spos_path("3,0,1,2,2,1,0,3,3,2,1,0,0,1,2,3,1,1,2,0");
  ASSERT_TRUE(path.ok());
  std::vector<float> super_losses, sub_losses;
  {
    auto rt = seeded_runtime();
    models::SposSupernet net(10, 32);
    ASSERT_TRUE(net.set_path(*path).ok());
    super_losses = train(net);
  }
  {
    auto rt = seeded_runtime();
    models::SposSupernet net(10, 32);
    models::SposSubnet sub(net, *path);
    EXPECT_LT(sub.num_parameters(), net.num_parameters());
    sub_losses = train(sub);
  }
  ASSERT_EQ(super_losses.size(), 5u);
  for (size_t i = 0; i < super_losses.size(); ++i) std::printf("  iter %zu loss %.7f\n", i + 1, super_losses[i]);
  EXPECT_EQ(super_losses, sub_losses);
}

// Five paths drawn by the sampler: every unit on none of them keeps its values bit for
// bit, and SGD holds momentum state for exactly the parameters some drawn path touched.
TEST(SposSupernet, UnitsOffEveryDrawnPathAreUntouched) {
  auto rt = seeded_runtime();
  models::SposSupernet net(10, 32);
  std::vector<std::vector<float>> before;
  for (const Tensor& p : net.parameters()) before.push_back(*p.to_vector());
  models::SposSampler sampler(11);
  std::vector<std::vector<int>> drawn;
  std::unique_ptr<optim::Sgd> opt;
  train(net, [&](int) {
    auto p = sampler.next();
    ASSERT_TRUE(p.ok());
    drawn.push_back(*p);
    ASSERT_TRUE(net.set_path(*p).ok());
  }, &opt);
  ASSERT_EQ(drawn.size(), 5u);
  const auto named = net.named_parameters();
  size_t touched_bytes = 0, untouched = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string& name = named[i].first;
    bool on_some_path = true;
    int block = -1, choice = -1;
    if (std::sscanf(name.c_str(), "features.%d.%d.", &block, &choice) == 2) {
      on_some_path = false;
      for (const auto& p : drawn) on_some_path |= p[block] == choice;
    }
    const std::vector<float> now = *named[i].second.to_vector();
    if (on_some_path) {
      touched_bytes += named[i].second.desc().bytes();
    } else {
      ++untouched;
      EXPECT_EQ(now, before[i]) << name << " is on no drawn path but changed";
    }
  }
  EXPECT_GT(untouched, 0u);
  EXPECT_EQ(opt->state_bytes(), touched_bytes);
}

// Fifty iterations over eight recurring paths (the sampler's first eight draws, in turn)
// on a pool of two synthetic batches: the loss falls (the mean of the last five below 70%
// of the first). With a new uniform draw from the 4^20 paths every iteration it did not
// in 50 iterations (2.29 first, 2.1 at the end, at learning rates 5e-4 to 2e-3): each
// unit is trained on a quarter of the iterations, each time behind different ones, and
// supernets train for many epochs.
TEST(SposSupernet, LossFallsOverFiftyIterationsOfEightRecurringPaths) {
  auto rt = seeded_runtime();
  models::SposSupernet net(10, 32);
  auto opt = optim::AdamW::create(net.parameters(), {.lr = 1e-3f});
  ASSERT_TRUE(opt.ok()) << opt.status();
  data::SyntheticData src({3, 32, 32}, 10, 2);
  models::SposSampler sampler(1);
  std::vector<std::vector<int>> paths;
  for (int i = 0; i < 8; ++i) paths.push_back(*sampler.next());
  std::vector<float> l;
  for (int it = 0; it < 50; ++it) {
    ASSERT_TRUE(net.set_path(paths[it % 8]).ok());
    auto loss = models::train_step(net, **opt, data::to_device(src.batch_at(it % 2, 8)));
    ASSERT_TRUE(loss.ok()) << loss.status();
    l.push_back(*loss->item());
  }
  float tail = 0;
  for (int i = 45; i < 50; ++i) tail += l[i] / 5;
  std::printf("  first loss %.4f, mean of the last five %.4f\n", l[0], tail);
  EXPECT_LT(tail, 0.7f * l[0]);
}

// SpoRun: losses, final weights and figures of 8 SGD iterations of the supernet at 64x64
// (batch 64, where activations outweigh the 28 MiB of parameters; one of two recurring
// paths per iteration) under `ev` and `tma`.
struct SpoRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  size_t peak = 0;
  EvictStats evict;
  TmaFigures tma;
};
SpoRun train_under(const EvictOptions& ev, bool tma) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 30;
  o.num_threads = 2;
  o.seed = 5;
  o.evict = ev;
  o.tma.enabled = tma;
  o.tma.warmup_iterations = 3;
  SpoRun run;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return run;
  models::SposSupernet net(10, 64);
  auto opt = optim::Sgd::create(net.parameters(), {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f});
  EXPECT_TRUE(opt.ok()) << opt.status();
  data::SyntheticData src({3, 64, 64}, 10, 2);
  models::SposSampler sampler(4);
  const std::vector<int> paths[2] = {*sampler.next(), *sampler.next()};
  for (int it = 0; it < 8; ++it) {
    (*rt)->interpreter().mark("iteration", it + 1);
    EXPECT_TRUE(net.set_path(paths[(it / 2) % 2]).ok());
    auto loss = models::train_step(net, **opt, data::to_device(src.batch_at(it % 2, 64)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return run;
    run.losses.push_back(*loss->item());
  }
  for (const Tensor& p : net.parameters()) run.weights.push_back(*p.to_vector());
  run.peak = (*rt)->interpreter().memory_stats()->compute.peak_allocated;
  run.evict = *(*rt)->interpreter().evict_stats();
  run.tma = *(*rt)->interpreter().tma_stats();
  return run;
}

// Under DTE at 40% of the unlimited peak, alone and with TMA, the supernet trains with
// the unlimited run's losses and final weights, bit for bit.
TEST(SposSupernet, TrainsUnderABudgetAndTmaBitForBit) {
  EvictOptions none;
  none.policy = EvictPolicy::kNone;
  const SpoRun ref = train_under(none, false);
  ASSERT_EQ(ref.losses.size(), 8u);
  EvictOptions ev;
  ev.budget_bytes = ref.peak * 4 / 10;
  for (bool tma : {false, true}) {
    SCOPED_TRACE(tma ? "DTE and TMA" : "DTE");
    const SpoRun got = train_under(ev, tma);
    std::printf("  %s at %.1f of %.1f MiB: peak %.1f MiB, %llu drops, %llu swaps, %llu recomputes, %llu TMA hits\n",
                tma ? "DTE+TMA" : "DTE", ev.budget_bytes / 1048576.0, ref.peak / 1048576.0, got.peak / 1048576.0,
                static_cast<unsigned long long>(got.evict.evict_drop),
                static_cast<unsigned long long>(got.evict.evict_swap),
                static_cast<unsigned long long>(got.evict.recomputes), static_cast<unsigned long long>(got.tma.hits));
    EXPECT_LE(got.peak, ev.budget_bytes);
    EXPECT_GT(got.evict.evict_drop + got.evict.evict_swap, 0u);
    if (tma) {
      EXPECT_GT(got.tma.hits, 0u);
    }
    EXPECT_EQ(got.losses, ref.losses);
    EXPECT_EQ(got.weights, ref.weights);
  }
}

// The sampler: the same seed draws the same paths (every rank runs the same one); a FLOPs
// range keeps every draw inside it; an empty range is an error.
TEST(SposSampler, SeededAndWithinItsFlopsRange) {
  auto rt = make_test_runtime();
  models::SposSupernet net(10, 224);
  models::SposSampler a(3), b(3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(*a.next(), *b.next());
  models::SposSampler ranged(3, &net, 320'000'000, 340'000'000);
  for (int i = 0; i < 50; ++i) {
    auto p = ranged.next();
    ASSERT_TRUE(p.ok()) << p.status();
    const int64_t f = net.flops(*p);
    EXPECT_GE(f, 320'000'000);
    EXPECT_LE(f, 340'000'000);
  }
  models::SposSampler none(3, &net, 400'000'000, 0);  // above the largest path's 357.8M
  auto p = none.next();
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("expected a wider range"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace mtc
