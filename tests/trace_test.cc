// Trace recording (RuntimeOptions::trace_path, mtc-train --record-trace) and replay
// (src/trace/replay.h): a recorded ResNet-20 trace has every event kind mtc emits, replays
// to the real run's peak without a budget, stays under a budget with evictions, reports
// running out of memory as a result, with the region itself as the limit too (its evictions
// by cause, its pinned bytes), stops at the overhead cap and says so, and a malformed
// trace is an error naming its line:
// a last line cut short, a tensor no earlier line made, another format version. A trace
// that ends inside an iteration does not count that iteration (mtc-replay says so).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "alloc/region.h"
#include "gtest/gtest.h"
#include "op_def.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/runtime.h"
#include "tool_run.h"
#include "trace/replay.h"

namespace mtc {
namespace {

std::string temp_path(const char* name) { return ::testing::TempDir() + name; }

// no_eviction: policy none, the unlimited replay that budgets as a share of the peak need.
EvictOptions no_eviction() {
  EvictOptions none;
  none.policy = EvictPolicy::kNone;
  return none;
}

// train_resnet20: `iterations` SGD steps of resnet20 at batch 32 on a runtime made with
// o, each after an "iteration" mark and at_mark(runtime, it); the runtime and the losses.
struct Trained {
  std::unique_ptr<Runtime> rt;
  std::vector<float> losses;
};
Trained train_resnet20(const RuntimeOptions& o, int iterations,
                       const std::function<void(Runtime&, int)>& at_mark = {}) {
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  auto m = models::make_model("resnet20");
  EXPECT_TRUE(m.ok());
  auto opt = optim::Sgd::create(m->net->parameters(), {.lr = 0.05f, .momentum = 0.9f});
  data::SyntheticData src(m->sample_shape, 10, 3);
  Trained t;
  for (int it = 1; it <= iterations; ++it) {
    (*rt)->interpreter().mark("iteration", it);
    if (at_mark) at_mark(**rt, it);
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it % 2, 32)));
    EXPECT_TRUE(loss.ok());
    absl::StatusOr<float> v = loss.ok() ? loss->item() : loss.status();
    EXPECT_TRUE(v.ok());
    t.losses.push_back(v.ok() ? *v : 0.0f);
  }
  t.rt = std::move(*rt);
  return t;
}

// record: trains resnet20 for `iterations` on a fresh runtime, tracing; returns the peak.
size_t record(const std::string& path, int iterations) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 30;
  o.num_threads = 2;
  o.trace_path = path;
  Trained t = train_resnet20(o, iterations);
  EXPECT_FALSE(std::ifstream(path).good()) << "the trace must not appear before it is closed";
  EXPECT_TRUE(t.rt->interpreter().close_trace().ok());
  return t.rt->interpreter().memory_stats()->compute.peak_allocated;
}

TEST(Trace, RecordsAndReplaysResNet20) {
  const std::string path = temp_path("resnet20.jsonl");
  const size_t real_peak = record(path, 3);
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->iterations, 3);
  int kinds[7] = {};
  for (const TraceEvent& e : trace->events) ++kinds[static_cast<int>(e.kind)];
  EXPECT_GT(kinds[static_cast<int>(TraceEvent::Kind::kPut)], 0);
  EXPECT_GT(kinds[static_cast<int>(TraceEvent::Kind::kOp)], 0);
  EXPECT_GT(kinds[static_cast<int>(TraceEvent::Kind::kRelease)], 0);
  EXPECT_GT(kinds[static_cast<int>(TraceEvent::Kind::kGradient)], 0);
  EXPECT_GT(kinds[static_cast<int>(TraceEvent::Kind::kRead)], 0);
  EXPECT_GT(kinds[static_cast<int>(TraceEvent::Kind::kMark)], 0);

  EvictOptions none;
  none.policy = EvictPolicy::kNone;
  auto base = replay(*trace, none, 1);
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_TRUE(base->error.empty()) << base->error;
  EXPECT_EQ(base->counted_iterations, 2);
  EXPECT_NEAR(base->overhead(), 1.0, 1e-9);
  std::printf("  real peak %zu bytes, replayed %zu\n", real_peak, base->peak_bytes);
  EXPECT_EQ(base->peak_bytes, real_peak) << "the replay allocates what the run did";

  for (EvictMode mode : {EvictMode::kDrop, EvictMode::kSwap, EvictMode::kBoth}) {
    EvictOptions ev;
    ev.mode = mode;
    ev.budget_bytes = base->peak_bytes * 4 / 10;
    auto r = replay(*trace, ev, 1);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->error.empty()) << r->error;
    EXPECT_LE(r->peak_bytes, ev.budget_bytes);
    EXPECT_GT(r->stats.evict_drop + r->stats.evict_swap, 0u);
    EXPECT_GT(r->overhead(), 1.0);
    std::printf("  mode %s at 40%%: overhead %.3f\n", evict_mode_name(mode), r->overhead());
  }
  // The region itself as the limit: no budget, a compute region of 40% of the peak.
  {
    EvictOptions ev;
    const size_t region = base->peak_bytes * 4 / 10;
    auto r = replay(*trace, ev, 1, region);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->error.empty()) << r->error;
    EXPECT_EQ(r->region_bytes, region / alloc::kAlignment * alloc::kAlignment);
    EXPECT_LE(r->peak_bytes, region);
    EXPECT_GT(r->stats.evict_drop + r->stats.evict_swap, 0u);
    // Pinned bytes: an op's inputs at least, never more than was held.
    EXPECT_GT(r->peak_pinned_bytes, 0u);
    EXPECT_LE(r->peak_pinned_bytes, r->peak_bytes);
    std::printf("  region at 40%%: overhead %.3f, %llu of %llu evictions for want of a block, pinned at most %zu bytes\n",
                r->overhead(), static_cast<unsigned long long>(r->stats.evict_fragmented),
                static_cast<unsigned long long>(r->stats.evict_drop + r->stats.evict_swap), r->peak_pinned_bytes);
    // The overhead cap: past it, the next regeneration stops the replay, and says so.
    ev.budget_bytes = base->peak_bytes * 4 / 10;
    ev.max_overhead_us = 1;
    auto capped = replay(*trace, ev, 1);
    ASSERT_TRUE(capped.ok()) << capped.status();
    EXPECT_TRUE(capped->capped);
    EXPECT_FALSE(capped->out_of_memory);
    EXPECT_NE(capped->error.find("the overhead cap"), std::string::npos) << capped->error;
  }
  EvictOptions tiny;
  tiny.budget_bytes = 64 << 10;
  auto r = replay(*trace, tiny, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->out_of_memory);
  EXPECT_NE(r->error.find("cannot allocate"), std::string::npos) << r->error;
  std::remove(path.c_str());
}

// Note [Tuning the score]: the candidates, the margin, and replay's use of them.
TEST(ScoreTuning, KeepsTheLeastOverheadBeyondTheMarginAndReplaysIt) {
  const std::string path = temp_path("resnet20_tune.jsonl");
  std::remove(path.c_str());  // a failed run's
  record(path, 4);
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  auto base = replay(*trace, no_eviction(), 2);
  ASSERT_TRUE(base.ok()) << base.status();
  for (EvictMode mode : {EvictMode::kDrop, EvictMode::kBoth}) {
    for (int share : {50, 40}) {
      EvictOptions given;
      given.mode = mode;
      given.budget_bytes = base->peak_bytes * share / 100;
      auto t = tune_score(*trace, given, 2);
      ASSERT_TRUE(t.ok()) << t.status();
      // The given score, the same without beta^ret and DTR's weighting (with swaps
      // allowed DTR's weighting first, then the dtr policy): in that order, each replayed
      // on the trace and its copies.
      const size_t n = mode == EvictMode::kDrop ? 3 : 4;
      const bool drop = mode == EvictMode::kDrop;
      ASSERT_EQ(t->tried.size(), n);
      EXPECT_EQ(t->tried[0].score.beta, given.beta);
      EXPECT_TRUE(t->tried[0].score.free_room);
      EXPECT_EQ(t->tried[1].score.beta, 1.0);
      EXPECT_EQ(t->tried[1].score.free_room, drop);
      EXPECT_EQ(t->tried[2].score.beta, 1.0);
      EXPECT_EQ(t->tried[2].score.free_room, !drop);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(t->tried[i].score.policy, i < 3 ? EvictPolicy::kMtc : EvictPolicy::kDtr);
        EXPECT_EQ(t->tried[i].replays.size(), 1u + kTuneVariants);
      }
      const size_t kept = keep_candidate(t->tried);
      ASSERT_LT(kept, n) << "every candidate ran out of memory at " << share << "%";
      EXPECT_EQ(t->chosen.policy, t->tried[kept].score.policy);
      EXPECT_EQ(t->chosen.beta, t->tried[kept].score.beta);
      EXPECT_EQ(t->chosen.free_room, t->tried[kept].score.free_room);
      EXPECT_FALSE(t->chosen.tune);

      // replay() tunes over its warm-up iterations and replays the whole trace with the
      // score kept: the same figures as replaying that score untuned.
      auto tuned = replay(*trace, given, 2);
      auto plain = replay(*trace, t->chosen, 2);
      ASSERT_TRUE(tuned.ok() && plain.ok());
      EXPECT_TRUE(tuned->tuned);
      EXPECT_FALSE(plain->tuned);
      EXPECT_EQ(tuned->score.policy, t->chosen.policy);
      EXPECT_EQ(tuned->score.beta, t->chosen.beta);
      EXPECT_EQ(tuned->score.free_room, t->chosen.free_room);
      EXPECT_EQ(tuned->overhead(), plain->overhead());
      EXPECT_EQ(tuned->stats.evict_drop, plain->stats.evict_drop);
      std::printf("  %s at %d%%: %s\n", evict_mode_name(mode), share, describe_tuning(*t, 0).c_str());
      if (mode == EvictMode::kDrop) {
        // In drop mode DTR's weighting is the dtr policy's score exactly.
        EvictOptions dtr = given;
        dtr.policy = EvictPolicy::kDtr;
        auto d = replay(*trace, dtr, 2);
        auto w = replay(*trace, t->tried[2].score, 2);
        ASSERT_TRUE(d.ok() && w.ok());
        EXPECT_EQ(w->overhead(), d->overhead());
        EXPECT_EQ(w->stats.evict_drop, d->stats.evict_drop);
        EXPECT_EQ(w->stats.recomputes, d->stats.recomputes);
      }
    }
  }
  // Where every candidate runs out of memory, the given score stays.
  EvictOptions tiny;
  tiny.budget_bytes = 64 << 10;
  auto t = tune_score(*trace, tiny, 2);
  ASSERT_TRUE(t.ok()) << t.status();
  for (const TunedCandidate& c : t->tried) EXPECT_EQ(c.failed(), 1 + kTuneVariants);
  EXPECT_EQ(t->chosen.beta, tiny.beta);
  EXPECT_TRUE(t->chosen.free_room);
  // Without tuning (or without warm-up iterations to tune on) replay keeps the score.
  EvictOptions off;
  off.budget_bytes = base->peak_bytes * 4 / 10;
  off.tune = false;
  auto r = replay(*trace, off, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->tuned);
  off.tune = true;
  r = replay(*trace, off, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->tuned);
  std::remove(path.c_str());
}

// keep_candidate on made-up replays: the last unless another beats the one kept, by more
// than 2% on the mean and in all copies but one; of those that failed in the fewest copies.
TEST(ScoreTuning, KeepCandidateWantsAMarginInMostCopiesAndTheFewestFailures) {
  auto r = [](double overhead, bool oom = false, bool cap = false) {
    ReplayResult x;
    x.compute_us = 100;
    x.recompute_us = 100 * (overhead - 1);
    x.out_of_memory = oom;
    x.capped = cap;
    return x;
  };
  constexpr double F = -1;  // a failed replay (out of memory)
  // c: a candidate whose copies replayed these overheads (F: failed).
  auto c = [&](std::vector<double> overheads) {
    TunedCandidate t;
    for (double o : overheads) t.replays.push_back(o == F ? r(0, true) : r(o));
    return t;
  };
  auto keep = [](std::vector<TunedCandidate> v) { return keep_candidate(v); };
  // One copy each: the margin on the mean.
  EXPECT_EQ(keep({c({1.30}), c({1.30}), c({1.30})}), 2u) << "a tie keeps the last";
  EXPECT_EQ(keep({c({1.28}), c({1.30}), c({1.30})}), 2u) << "1.5% less is within the margin";
  EXPECT_EQ(keep({c({1.20}), c({1.30}), c({1.30})}), 0u);
  EXPECT_EQ(keep({c({1.20}), c({1.21}), c({1.30})}), 1u) << "the first must beat the second by the margin too";
  EXPECT_EQ(keep({c({1.10}), c({1.21}), c({1.30})}), 0u);
  EXPECT_EQ(keep({c({F}), c({1.21}), c({1.30})}), 1u) << "out of memory is never kept";
  {
    std::vector<TunedCandidate> v{c({1.10}), c({1.50}), c({F})};
    v[0].replays[0].capped = true;
    EXPECT_EQ(keep_candidate(v), 1u) << "capped is never kept";
  }
  EXPECT_EQ(keep({c({1.50}), c({F}), c({F})}), 0u);
  EXPECT_EQ(keep({c({F}), c({F}), c({F})}), 3u) << "none: the size";
  // Five copies, paired: a lower mean wins only if it is lower in four of the five.
  const std::vector<double> dtr{1.29, 1.29, 1.30, 1.27, 1.30};
  EXPECT_EQ(keep({c({1.20, 1.20, 1.20, 1.33, 1.20}), c(dtr)}), 0u) << "one copy lost";
  EXPECT_EQ(keep({c({1.20, 1.20, 1.20, 1.33, 1.31}), c(dtr)}), 1u) << "two copies lost";
  EXPECT_EQ(keep({c({1.28, 1.28, 1.29, 1.26, 1.29}), c(dtr)}), 1u) << "every copy won, the mean within 2%";
  EXPECT_EQ(keep({c({1.00, 1.00, 1.00, 1.00, 1.20}), c({1.10, 1.10, 1.10, 1.10, 1.10})}), 0u);
  // Failures: only the candidates with the fewest compete; a copy the other failed is won.
  EXPECT_EQ(keep({c({1.10, 1.10, F, 1.10, 1.10}), c(dtr)}), 1u) << "failed in one copy, the other in none";
  EXPECT_EQ(keep({c({1.10, 1.10, 1.10, 1.10, 1.10}), c({F, 1.30, 1.30, 1.30, 1.30})}), 0u);
  EXPECT_EQ(keep({c({1.10, F, 1.10, 1.10, 1.10}), c({F, 1.30, 1.30, 1.30, 1.30})}), 1u)
      << "as many failures each: failing where the other trained is no win";
  EXPECT_EQ(keep({c({1.10, 1.10, F, 1.10, 1.10}), c({1.20, 1.20, F, 1.30, 1.30})}), 0u) << "both failed: neither";
}

// jittered: every op's time scaled within ±amp, by a seeded draw; nothing else moves.
TEST(ScoreTuning, JitteredCopiesScaleOpTimesAndNothingElse) {
  const std::string path = temp_path("resnet20_jitter.jsonl");
  std::remove(path.c_str());
  record(path, 2);
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const Trace a = jittered(*trace, 0.1, 1), b = jittered(*trace, 0.1, 1), d = jittered(*trace, 0.1, 2);
  ASSERT_EQ(a.events.size(), trace->events.size());
  size_t ops = 0, moved = 0, differ = 0;
  for (size_t k = 0; k < trace->events.size(); ++k) {
    const TraceEvent &e = trace->events[k], &x = a.events[k];
    ASSERT_EQ(x.kind, e.kind);
    EXPECT_EQ(x.in, e.in);
    EXPECT_EQ(x.out, e.out);
    if (e.kind != TraceEvent::Kind::kOp) continue;
    ++ops;
    EXPECT_STREQ(x.op->name(), e.op->name());
    EXPECT_EQ(x.op->num_outputs(), e.op->num_outputs());
    const double us = e.op->recorded_us(), j = x.op->recorded_us();
    EXPECT_GE(j, us * 0.9 - 1e-9);
    EXPECT_LE(j, us * 1.1 + 1e-9);
    if (j != us) ++moved;
    EXPECT_EQ(j, b.events[k].op->recorded_us()) << "the same seed, the same copy";
    if (d.events[k].op->recorded_us() != j) ++differ;
  }
  ASSERT_GT(ops, 100u);
  EXPECT_GT(moved, ops * 9 / 10);
  EXPECT_GT(differ, ops * 9 / 10) << "another seed, another copy";
  // The copy replays: the same tensors, other times.
  auto base = replay(*trace, no_eviction(), 1);
  auto copy = replay(a, no_eviction(), 1);
  ASSERT_TRUE(base.ok() && copy.ok());
  EXPECT_EQ(copy->peak_bytes, base->peak_bytes);
  EXPECT_NE(copy->compute_us, base->compute_us);
  EXPECT_NEAR(copy->compute_us, base->compute_us, 0.1 * base->compute_us);
  std::remove(path.c_str());
}

// The runtime tunes once its first two iterations are done, when they evicted anything,
// and reports it; a reproducible run, or one told not to, keeps its score.
TEST(ScoreTuning, TheRuntimeTunesAfterTwoIterations) {
  auto run = [](size_t budget, bool tune, bool reproducible) {
    RuntimeOptions o;
    o.memory_bytes = size_t{1} << 30;
    o.num_threads = 2;
    o.evict.mode = EvictMode::kDrop;
    o.evict.budget_bytes = budget;
    o.evict.tune = tune;
    o.evict.reproducible = reproducible;
    std::vector<std::string> lines;
    Trained t = train_resnet20(o, 4, [&](Runtime& rt, int) {
      auto line = rt.interpreter().dte_tuning();
      EXPECT_TRUE(line.ok()) << line.status();
      lines.push_back(line.ok() ? *line : "");
    });
    return std::pair{lines, t.losses};
  };
  const size_t budget = 24 << 20;  // about 40% of resnet20's peak at batch 32
  auto [lines, losses] = run(budget, true, false);
  EXPECT_EQ(lines[0], "");
  EXPECT_EQ(lines[1], "");
  EXPECT_TRUE(absl::StartsWith(lines[2], "kept ")) << lines[2];
  EXPECT_EQ(lines[3], lines[2]) << "tuned once";
  EXPECT_NE(lines[2].find("DTR"), std::string::npos) << lines[2];
  std::printf("  %s\n", lines[2].c_str());
  // The score decides what is evicted, never a value: the losses of an untuned run.
  auto [off_lines, off_losses] = run(budget, false, false);
  EXPECT_EQ(off_lines[3], "");
  EXPECT_EQ(losses, off_losses);
  EXPECT_EQ(run(budget, true, true).first[3], "") << "a reproducible run is not tuned";
  EXPECT_EQ(run(0, true, false).first[3], "") << "nothing evicted: nothing to tune";
}

TEST(Trace, SharesAndAliasesAreHandles) {
  // A hand-written trace: a view (alias) and a second handle keep the storage until the
  // last of the three handles goes.
  const std::string path = temp_path("handles.jsonl");
  {
    std::ofstream f(path);
    f << R"({"mtc_trace":1,"device":"cpu","compute_bytes":1048576,"comm_bytes":0,"budget_bytes":0,"bytes_per_us":1000})" "\n"
      << R"({"e":"mark","mark":"iteration","index":1})" "\n"
      << R"({"e":"put","id":1,"shape":[1024],"dtype":"f32"})" "\n"
      << R"({"e":"op","op":"view","in":[1],"out":[2],"shapes":[[32,32]],"dtypes":["f32"],"us":1,"aliases":[[0,0]]})" "\n"
      << R"({"e":"share","id":3,"of":2})" "\n"
      << R"({"e":"release","id":1})" "\n"
      << R"({"e":"release","id":2})" "\n"
      << R"({"e":"op","op":"relu","in":[3],"out":[4],"shapes":[[32,32]],"dtypes":["f32"],"us":5})" "\n"
      << R"({"e":"release","id":3})" "\n"
      << R"({"e":"read","id":4})" "\n";
  }
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  auto r = replay(*trace, no_eviction(), 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->error.empty()) << r->error;
  EXPECT_EQ(r->peak_bytes, 2u * 4096) << "the view holds no storage of its own";
  EXPECT_DOUBLE_EQ(r->compute_us, 6.0);
  std::remove(path.c_str());
}

TEST(Trace, MalformedTraceNamesTheLine) {
  const std::string path = temp_path("bad.jsonl");
  {
    std::ofstream f(path);
    f << R"({"mtc_trace":1,"device":"cpu","compute_bytes":1048576})" "\n"
      << R"({"e":"put","id":1,"shape":[4],"dtype":"f32"})" "\n"
      << R"({"e":"op","op":"relu","in":[1],"out":[2],"shapes":[[4]]})" "\n";
  }
  auto trace = load_trace(path);
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.status().message().find("line 3"), std::string::npos) << trace.status();
  EXPECT_NE(trace.status().message().find("\"us\""), std::string::npos) << trace.status();
  EXPECT_FALSE(load_trace(temp_path("missing.jsonl")).ok());
  std::remove(path.c_str());
}

// ------------------------------------------------------------------------------------------
// Traces cut short, unknown tensors, other versions.

constexpr const char* kHeader =
    R"({"mtc_trace":1,"device":"cpu","compute_bytes":1048576,"comm_bytes":0,"budget_bytes":0,"bytes_per_us":1000})";

// write_trace: the header and `lines`, each ending in a newline unless `final_newline`
// is false for the last one.
std::string write_trace(const std::string& name, const std::vector<std::string>& lines,
                        bool final_newline = true) {
  const std::string path = temp_path(name.c_str());
  std::ofstream f(path, std::ios::binary);
  f << kHeader << "\n";
  for (size_t i = 0; i < lines.size(); ++i)
    f << lines[i] << (i + 1 < lines.size() || final_newline ? "\n" : "");
  return path;
}

// iteration_lines: iteration `it` of a small training-like program: forward, backward
// and step marks, one op of 10 us in each phase; ids from 10 * it.
std::vector<std::string> iteration_lines(int it) {
  const std::string a = std::to_string(10 * it), b = std::to_string(10 * it + 1),
                    c = std::to_string(10 * it + 2);
  return {
      R"({"e":"mark","mark":"iteration","index":)" + std::to_string(it) + "}",
      R"({"e":"put","id":)" + a + R"(,"shape":[256],"dtype":"f32"})",
      R"({"e":"mark","mark":"forward","index":0})",
      R"({"e":"op","op":"relu","in":[)" + a + "],\"out\":[" + b +
          R"(],"shapes":[[256]],"dtypes":["f32"],"us":10})",
      R"({"e":"mark","mark":"backward","index":0})",
      R"({"e":"op","op":"relu_grad","in":[)" + b + "],\"out\":[" + c +
          R"(],"shapes":[[256]],"dtypes":["f32"],"us":10})",
      R"({"e":"mark","mark":"step","index":0})",
      R"({"e":"op","op":"sgd","in":[1,)" + c + R"(],"out":[],"shapes":[],"us":10,"mutates":[0]})",
      R"({"e":"release","id":)" + a + "}",
      R"({"e":"release","id":)" + b + "}",
      R"({"e":"release","id":)" + c + "}",
  };
}

// program: a parameter, then `complete` whole iterations, then the first `partial` lines
// of one more (0: none).
std::vector<std::string> program(int complete, size_t partial) {
  std::vector<std::string> lines = {R"({"e":"put","id":1,"shape":[256],"dtype":"f32","persistent":true})"};
  for (int it = 1; it <= complete; ++it) {
    for (std::string& l : iteration_lines(it)) lines.push_back(std::move(l));
  }
  const std::vector<std::string> last = iteration_lines(complete + 1);
  for (size_t i = 0; i < partial && i < last.size(); ++i) lines.push_back(last[i]);
  return lines;
}

// Note [Regeneration order] in evict/engine.cc: an op's inputs are all pinned before any
// of them is regenerated. In drop mode at a budget of four 256 KiB tensors: B is dropped
// to make room for Z, then C = add(A, B) regenerates B, which needs a block. A, just
// marked as used but cheap to recompute, scores lowest of what is resident; left
// unpinned (as until 2026-11-27) it was evicted for B and recomputed in its turn: two
// recomputes where one serves, the expensive Y or Z going instead.
TEST(TraceRegeneration, AnOpsResidentInputStaysWhileAnotherIsRegenerated) {
  const std::string path = temp_path("regeneration.jsonl");
  {
    std::ofstream f(path);
    f << R"({"mtc_trace":1,"device":"cpu","compute_bytes":4194304,"comm_bytes":0,"budget_bytes":0,"bytes_per_us":1000})"
      << "\n";
    auto op = [](int in0, int in1, int out, int us) {
      return absl::StrCat(R"({"e":"op","op":")", in1 ? "add" : "relu", R"(","in":[)", in0, in1 ? absl::StrCat(",", in1) : "",
                          R"(],"out":[)", out, R"(],"shapes":[[65536]],"dtypes":["f32"],"us":)", us, "}\n");
    };
    f << R"({"e":"put","id":1,"shape":[65536],"dtype":"f32"})" << "\n"
      << op(1, 0, 2, 1)       // B, cheap
      << op(1, 0, 3, 1)       // A, cheap
      << op(1, 0, 4, 1000)    // Y, dear
      << op(1, 0, 5, 1000)    // Z, dear: B (the stalest cheap one) is dropped for it
      << op(3, 2, 6, 1);      // C = add(A, B): B is regenerated
  }
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EvictOptions ev;
  ev.mode = EvictMode::kDrop;
  ev.budget_bytes = 4 * 262144;
  auto r = replay(*trace, ev, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->error.empty()) << r->error;
  EXPECT_EQ(r->stats.recomputes, 1u) << "B alone; A stayed resident while B was regenerated";
  // A, B and the input x of B's recompute, pinned at once as B's block is installed.
  EXPECT_EQ(r->peak_pinned_bytes, 3u * 262144);
  std::remove(path.c_str());
}

// Note [Room for scratch] in src/executor.cc. A 4 MiB region, no budget: X, Y, W of 1 MiB
// at [0, 1), [1, 2), [2, 3) MiB; X and W released, so 3 MiB are free in two pieces around
// Y. relu(Y)'s 0.5 MiB output goes to [0, 0.5), and its kernel asks 2.5 MiB of scratch:
// 2.5 MiB are free but the largest block is 2 MiB, and while the kernel runs Y cannot
// move (nor the output, nor anything be evicted). Made room for before the kernel runs,
// Y slides down and the request is met; without it the replay ran out of memory.
TEST(TraceRegeneration, ScratchFindsItsBlockWhereTheInputsCouldMove) {
  const std::string path = temp_path("scratch-room.jsonl");
  {
    std::ofstream f(path);
    f << R"({"mtc_trace":1,"device":"cpu","compute_bytes":4194304,"comm_bytes":0,"budget_bytes":0,"bytes_per_us":1000})"
      << "\n";
    for (int id : {1, 2, 3}) f << R"({"e":"put","id":)" << id << R"(,"shape":[262144],"dtype":"f32"})" << "\n";
    f << R"({"e":"release","id":1})" << "\n" << R"({"e":"release","id":3})" << "\n";
    f << R"({"e":"op","op":"relu","in":[2],"out":[4],"shapes":[[131072]],"dtypes":["f32"],"us":10,)"
      << R"("scratch":[2621440]})" << "\n";
  }
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EvictOptions ev;
  ev.mode = EvictMode::kDrop;
  auto r = replay(*trace, ev, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->error.empty()) << r->error;
  EXPECT_FALSE(r->out_of_memory);
  EXPECT_EQ(r->stats.compactions, 1u);
  EXPECT_EQ(r->stats.moved_bytes, 1048576u) << "Y alone moved";
  std::remove(path.c_str());
}

// Note [Recompute cycles] in evict/engine.cc. Drop mode, a budget of `slots` 256 KiB
// tensors: x (a Put), y = relu(x), dear; per i, g_i = relu(y) and h_i = relu(g_i), cheap;
// y and the g_i released (recompute sources); fillers relu(x), dearer still, crowd out
// the h_i; then one op reads every h_i. Each h_i's regeneration recomputes g_i from y,
// and y, unpinned between them and cheaper than a filler, goes for the next block.
std::string cycle_trace(int k, int fillers) {
  const std::string path = temp_path("cycle.jsonl");
  std::ofstream f(path);
  f << R"({"mtc_trace":1,"device":"cpu","compute_bytes":67108864,"comm_bytes":0,"budget_bytes":0,"bytes_per_us":1000})"
    << "\n";
  auto op = [&](const std::string& name, const std::string& in, int out, int us) {
    f << R"({"e":"op","op":")" << name << R"(","in":[)" << in << R"(],"out":[)" << out
      << R"(],"shapes":[[65536]],"dtypes":["f32"],"us":)" << us << "}\n";
  };
  f << R"({"e":"put","id":1,"shape":[65536],"dtype":"f32"})" << "\n";
  op("relu", "1", 2, 100);  // y
  std::string hs;
  for (int i = 0; i < k; ++i) {
    op("relu", "2", 100 + i, 1);                        // g_i
    op("relu", std::to_string(100 + i), 200 + i, 1);    // h_i
    f << R"({"e":"release","id":)" << 100 + i << "}\n";
    if (i > 0) hs += ",";
    hs += std::to_string(200 + i);
  }
  f << R"({"e":"release","id":2})" << "\n";
  for (int j = 0; j < fillers; ++j) op("relu", "1", 300 + j, 10000);
  op("sum_all", hs, 400, 1);
  return path;
}

// Runs cycle_trace in drop mode with `slots` 256 KiB tensors of budget.
ReplayResult run_cycle_trace(const Trace& trace, int slots, uint32_t max_recomputes, bool plan) {
  EvictOptions ev;
  ev.mode = EvictMode::kDrop;
  ev.budget_bytes = slots * size_t{262144};
  ev.max_recomputes_per_op = max_recomputes;
  ev.plan_regeneration = plan;
  auto r = replay(trace, ev, 0);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : ReplayResult{};
}

// Note [Planned regeneration]: y, recomputed first (the oldest of the set), is held until
// the last g_i that reads it has been recomputed, so it goes only once: y, each g_i and
// each h_i, 13 recomputes and no cycle, where regenerating each h_i down its own chain
// recomputes y twice (below).
TEST(TraceRegeneration, APlannedRegenerationRecomputesASharedInputOnce) {
  const std::string path = cycle_trace(6, 8);
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ReplayResult r = run_cycle_trace(*trace, 9, 0, /*plan=*/true);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.stats.recomputes, 13u);
  EXPECT_EQ(r.stats.recompute_cycles, 0u);
  // Seven slots hold x and the six h_i with no room to compute one of them: out of memory
  // in any order.
  r = run_cycle_trace(*trace, 7, 2, /*plan=*/true);
  EXPECT_TRUE(r.out_of_memory);
  EXPECT_NE(r.error.find("sum_all on f32[65536]"), std::string::npos) << r.error;
  std::remove(path.c_str());
}

TEST(TraceRegeneration, ATensorRecomputedTwiceForOneOpIsKept) {
  const std::string path = cycle_trace(6, 8);
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  auto run = [&](int slots, uint32_t max_recomputes) {
    return run_cycle_trace(*trace, slots, max_recomputes, /*plan=*/false);
  };
  // Each input down its own chain (plan_regeneration off). Nine slots: each g_i and h_i
  // once, and y twice, then kept: 14 recomputes. Without the keep (until 2026-11-27), y
  // went again before every h_i but the first: 18.
  ReplayResult r = run(9, 0);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.stats.recomputes, 14u);
  EXPECT_EQ(r.stats.recompute_cycles, 1u);
  // With the keep, no tensor is recomputed a third time: a limit of 2 does not stop it.
  r = run(9, 2);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.stats.recomputes, 14u);
  // Seven slots cannot hold the op's regeneration: past the limit, the op stops with an
  // out-of-memory error naming it, the tensor and the count.
  r = run(7, 2);
  EXPECT_TRUE(r.out_of_memory);
  EXPECT_NE(r.error.find("sum_all on f32[65536]"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("a recompute storm: f32[65536] (op relu) was recomputed 2 times"), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("expected a larger --budget"), std::string::npos) << r.error;
  std::remove(path.c_str());
}

TEST(TraceCutShort, WholeIterationsAreAllCounted) {
  auto trace = load_trace(write_trace("whole.jsonl", program(3, 0)));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->iterations, 3);
  EXPECT_TRUE(trace->last_iteration_complete);
  EXPECT_TRUE(trace->cut_short.empty()) << trace->cut_short;
  auto r = replay(*trace, no_eviction(), 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->counted_iterations, 3);
  EXPECT_DOUBLE_EQ(r->compute_us, 90.0);
}

TEST(TraceCutShort, AnIterationWithoutItsStepIsNotCounted) {
  // The run died after iteration 3's forward op: its backward and step marks never came.
  auto trace = load_trace(write_trace("inside.jsonl", program(2, 4)));
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->iterations, 2) << "complete iterations only";
  EXPECT_FALSE(trace->last_iteration_complete);
  EXPECT_EQ(trace->cut_iteration, 3);
  EXPECT_NE(trace->cut_short.find("'backward'"), std::string::npos) << trace->cut_short;
  auto r = replay(*trace, no_eviction(), 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->counted_iterations, 2);
  EXPECT_DOUBLE_EQ(r->compute_us, 60.0) << "iteration 3's forward op is not counted";
  auto skipped = replay(*trace, no_eviction(), 1);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->counted_iterations, 1);
  EXPECT_DOUBLE_EQ(skipped->compute_us, 30.0);
}

TEST(TraceCutShort, APartialFileEndsInsideItsLastIteration) {
  // FILE.partial is a trace its run never closed: even with every mark, the last
  // iteration may have lost its last ops.
  const std::vector<std::string> lines = program(3, 0);
  const std::string closed = write_trace("run.jsonl", lines);
  const std::string partial = write_trace("run.jsonl.partial", lines);
  auto whole = load_trace(closed);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->last_iteration_complete);
  auto cut = load_trace(partial);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_FALSE(cut->last_iteration_complete);
  EXPECT_EQ(cut->iterations, 2);
  EXPECT_EQ(cut->cut_iteration, 3);
  EXPECT_NE(cut->cut_short.find(".partial"), std::string::npos) << cut->cut_short;
  auto r = replay(*cut, no_eviction(), 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->counted_iterations, 2);
  EXPECT_DOUBLE_EQ(r->compute_us, 60.0);
}

TEST(TraceCutShort, ALastLineWithoutItsNewline) {
  // Cut inside the line: an error naming it.
  std::vector<std::string> lines = program(2, 4);
  lines.back().resize(lines.back().size() / 2);
  const std::string path = write_trace("torn.jsonl", lines, /*final_newline=*/false);
  auto torn = load_trace(path);
  ASSERT_FALSE(torn.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(torn.status()));
  const std::string m(torn.status().message());
  EXPECT_NE(m.find(absl::StrCat("trace ", path, " line ", lines.size() + 1, ": ")), std::string::npos) << m;
  EXPECT_NE(m.find("cut short"), std::string::npos) << m;

  // Cut between the line's end and its newline: the line is whole, the iteration is not.
  auto close = load_trace(write_trace("no-newline.jsonl", program(3, 0), /*final_newline=*/false));
  ASSERT_TRUE(close.ok()) << close.status();
  EXPECT_FALSE(close->last_iteration_complete);
  EXPECT_EQ(close->iterations, 2);
  EXPECT_NE(close->cut_short.find("newline"), std::string::npos) << close->cut_short;

  // A malformed line followed by a newline is not a cut: it stays "not valid JSON".
  auto bad =
      load_trace(write_trace("bad-last.jsonl", {R"({"e":"mark","mark":"iteration","index":1})", "{\"e\":"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 3: not valid JSON"), std::string::npos) << bad.status();
  EXPECT_EQ(bad.status().message().find("cut short"), std::string::npos) << bad.status();
}

TEST(TraceUnknownTensor, IsAnErrorNamingTheLine) {
  const std::string put1 = R"({"e":"put","id":1,"shape":[4],"dtype":"f32"})";
  const std::string mark = R"({"e":"mark","mark":"iteration","index":1})";
  const struct {
    std::vector<std::string> lines;
    int line;  // of the file (the header is line 1)
    const char* what;
  } cases[] = {
      {{mark, put1,
        R"({"e":"op","op":"conv2d","in":[1,77],"out":[2],"shapes":[[4]],"dtypes":["f32"],"us":1})"},
       4,
       "op 'conv2d' reads tensor 77, which no earlier line made"},
      {{mark, put1, R"({"e":"release","id":1})",
        R"({"e":"op","op":"relu","in":[1],"out":[2],"shapes":[[4]],"us":1})"},
       5,
       "op 'relu' reads tensor 1, which line 4 released"},
      {{put1, R"({"e":"release","id":9})"}, 3, "release of tensor 9, which no earlier line made"},
      {{put1, R"({"e":"read","id":9})"}, 3, "read of tensor 9, which no earlier line made"},
      {{put1, R"({"e":"gradient","id":9})"}, 3, "gradient of tensor 9, which no earlier line made"},
      {{put1, R"({"e":"share","id":2,"of":9})"}, 3, "share of tensor 9, which no earlier line made"},
      {{put1, put1}, 3, "put makes tensor 1, which line 2 made and no line has released"},
      {{put1, R"({"e":"op","op":"relu","in":[1],"out":[1],"shapes":[[4]],"us":1})"},
       3,
       "op 'relu' makes tensor 1, which line 2 made and no line has released"},
  };
  int k = 0;
  for (const auto& c : cases) {
    const std::string path = write_trace("unknown" + std::to_string(k++) + ".jsonl", c.lines);
    auto trace = load_trace(path);
    ASSERT_FALSE(trace.ok()) << c.what;
    EXPECT_TRUE(absl::IsInvalidArgument(trace.status()));
    const std::string m(trace.status().message());
    EXPECT_NE(m.find(absl::StrCat("trace ", path, " line ", c.line, ": ", c.what)), std::string::npos) << m;
  }
}

TEST(TraceUnknownTensor, ReplayOfABuiltTraceNamesTheLine) {
  // replay() checks handles too, for traces built in memory; it names the event's line.
  auto trace = load_trace(write_trace("built.jsonl", program(1, 0)));
  ASSERT_TRUE(trace.ok()) << trace.status();
  TraceEvent read;
  read.kind = TraceEvent::Kind::kRead;
  read.id = 77;
  read.line = 42;
  trace->events.push_back(read);
  auto r = replay(*trace, no_eviction(), 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 42: read of tensor 77"), std::string::npos) << r.status();
}

TEST(TraceVersion, AnotherVersionSaysSo) {
  const std::string v2 = temp_path("v2.jsonl");
  std::ofstream(v2) << R"({"mtc_trace":2,"device":"cpu","compute_bytes":1048576})"
                       "\n";
  auto t = load_trace(v2);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(t.status()));
  EXPECT_NE(
      t.status().message().find(absl::StrCat("trace ", v2, ": format version 2, this mtc reads version 1")),
      std::string::npos)
      << t.status();
  EXPECT_EQ(t.status().message().find("is this an mtc trace?"), std::string::npos) << t.status();

  const std::string other = temp_path("other.jsonl");
  std::ofstream(other) << R"({"format":"something else"})"
                          "\n";
  auto o = load_trace(other);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("is this an mtc trace?"), std::string::npos) << o.status();
}

// ------------------------------------------------------------------------------------------
// mtc-replay, the binary (its path comes from the build).

// run_replay: the tool's status and its output, stdout and stderr together, or stderr alone.
ToolRun run_replay(const std::string& args, bool stderr_only = false) {
  return run_tool(std::string(MTC_REPLAY_BINARY) + " " + args +
                  (stderr_only ? " 2>&1 1>/dev/null" : " 2>&1"));
}

TEST(TraceReplayCli, NotesAnIterationCutShort) {
  const std::string path = write_trace("cli-inside.jsonl", program(3, 4));
  const ToolRun r = run_replay("--trace=" + path + " --budget=none --skip=1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("3 iterations (2 counted)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("note: trace ends inside iteration 4: that iteration is not counted"),
            std::string::npos)
      << r.output;
  const ToolRun whole =
      run_replay("--trace=" + write_trace("cli-whole.jsonl", program(3, 0)) + " --budget=none");
  ASSERT_EQ(whole.status, 0) << whole.output;
  EXPECT_EQ(whole.output.find("note:"), std::string::npos) << whole.output;
}

// --jitter replays a copy with other op times: the same seed the same copy, another seed
// another, and the line says so.
TEST(TraceReplayCli, JitterReplaysASeededCopy) {
  std::vector<std::string> lines = program(3, 0);
  for (std::string& l : lines) absl::StrReplaceAll({{R"("us":10)", R"("us":10000)"}}, &l);  // 30 ms an iteration
  const std::string path = write_trace("cli-jitter.jsonl", lines);
  auto compute_line = [&](const std::string& args) {
    const ToolRun r = run_replay("--trace=" + path + " --budget=none " + args);
    EXPECT_EQ(r.status, 0) << r.output;
    return r.output.substr(0, r.output.find('\n'));  // "trace: ...: compute X ms/iter"
  };
  const std::string recorded = compute_line(""), one = compute_line("--jitter=0.1 --jitter_seed=1");
  EXPECT_NE(one, recorded);
  EXPECT_EQ(compute_line("--jitter=0.1 --jitter_seed=1"), one);
  EXPECT_NE(compute_line("--jitter=0.1 --jitter_seed=2"), one);
  const ToolRun r = run_replay("--trace=" + path + " --budget=none --jitter=0.1 --jitter_seed=3");
  EXPECT_NE(r.output.find("copy: every op's time scaled by 1 + 0.1*u, u uniform in [-1, 1], seed 3"),
            std::string::npos)
      << r.output;
}

TEST(TraceReplayCli, BadTracesExitTwoWithOneLine) {
  const std::string v2 = temp_path("cli-v2.jsonl");
  std::ofstream(v2) << R"({"mtc_trace":2,"device":"cpu","compute_bytes":1048576})"
                       "\n";
  const std::string unknown = write_trace(
      "cli-unknown.jsonl", {R"({"e":"mark","mark":"iteration","index":1})",
                            R"({"e":"op","op":"conv2d","in":[77],"out":[2],"shapes":[[4]],"us":1})"});
  const struct {
    std::string path, message;
  } cases[] = {
      {v2, "mtc-replay: error: trace " + v2 + ": format version 2, this mtc reads version 1"},
      {unknown, "mtc-replay: error: trace " + unknown +
                    " line 3: op 'conv2d' reads tensor 77, which no earlier line made"},
  };
  for (const auto& c : cases) {
    const ToolRun r = run_replay("--trace=" + c.path + " --budget=none", /*stderr_only=*/true);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_EQ(r.output.rfind(c.message, 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

TEST(TraceReplayCli, BadLimitsExitTwoBeforeAnyReplay) {
  const std::string path = write_trace("cli-limits.jsonl", program(3, 0));
  const struct {
    std::string args, message;
  } cases[] = {
      {"--limit=disk", "mtc-replay: error: --limit: 'disk': expected budget, region, or both comma-separated"},
      {"--max_overhead=1", "mtc-replay: error: --max_overhead '1': expected a number above 1"},
      {"--max_overhead=lots", "mtc-replay: error: --max_overhead 'lots': expected a number above 1"},
      {"--max_recomputes_per_op=-2", "mtc-replay: error: --max_recomputes_per_op -2: expected a count >= 0"},
      {"--jitter=1", "mtc-replay: error: --jitter '1': expected a number in [0, 1)"},
      {"--jitter=-0.1", "mtc-replay: error: --jitter '-0.1': expected a number in [0, 1)"},
      {"--jitter=0.1 --jitter_seed=0", "mtc-replay: error: --jitter_seed 0: expected a seed >= 1"},
  };
  for (const auto& c : cases) {
    const ToolRun r = run_replay("--trace=" + path + " --budget=none " + c.args, /*stderr_only=*/true);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_EQ(r.output.rfind(c.message, 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

}  // namespace
}  // namespace mtc
