// Trace recording (RuntimeOptions::trace_path, mtc-train --record-trace) and replay
// (src/trace/replay.h): a recorded ResNet-20 trace has every event kind mtc emits, replays
// to the real run's peak without a budget, stays under a budget with evictions, reports
// running out of memory as a result, and a malformed trace is an error naming its line.
#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/runtime.h"
#include "trace/replay.h"

namespace mtc {
namespace {

std::string temp_path(const char* name) { return ::testing::TempDir() + name; }

// record: trains resnet20 for `iterations` on a fresh runtime, tracing; returns the peak.
size_t record(const std::string& path, int iterations) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 30;
  o.num_threads = 2;
  o.trace_path = path;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  auto m = models::make_model("resnet20");
  EXPECT_TRUE(m.ok());
  auto opt = optim::Sgd::create(m->net->parameters(), {.lr = 0.05f, .momentum = 0.9f});
  data::SyntheticData src(m->sample_shape, 10, 3);
  for (int it = 1; it <= iterations; ++it) {
    (*rt)->interpreter().mark("iteration", it);
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it % 2, 32)));
    EXPECT_TRUE(loss.ok());
    EXPECT_TRUE(loss->item().ok());
  }
  EXPECT_FALSE(std::ifstream(path).good()) << "the trace must not appear before it is closed";
  EXPECT_TRUE((*rt)->interpreter().close_trace().ok());
  return (*rt)->interpreter().memory_stats()->compute.peak_allocated;
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
  EvictOptions tiny;
  tiny.budget_bytes = 64 << 10;
  auto r = replay(*trace, tiny, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->out_of_memory);
  EXPECT_NE(r->error.find("cannot allocate"), std::string::npos) << r->error;
  std::remove(path.c_str());
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
  EvictOptions none;
  none.policy = EvictPolicy::kNone;
  auto r = replay(*trace, none, 0);
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

}  // namespace
}  // namespace mtc
