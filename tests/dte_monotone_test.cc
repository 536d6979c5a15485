// DTE is monotone in the budget: a budget at which a training trace replays without
// running out of memory is followed, in a fine sweep up to the unlimited peak, by no
// budget at which it runs out. Traces of ResNet-56 and ViT-tiny at small batches are
// recorded in-process and replayed through the executor for the mtc policy in modes both,
// drop and swap. Before the fixes this test came with (Note [Regeneration order] and
// feeds() in src/executor.cc), drop mode ran out of memory at budgets above ones that
// succeeded, on both models; docs/dte.md has the figures.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "alloc/region.h"
#include "gtest/gtest.h"
#include "mtc/data.h"
#include "mtc/models.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"
#include "op_def.h"
#include "trace/replay.h"

namespace mtc {
namespace {

// record: three training iterations of `model` at `batch`, traced to `path`. The trace's
// gamma is the fixed one of reproducible runs, so the sweep's decisions do not depend on
// this machine's copy speed.
void record(const std::string& model, int batch, const std::string& path) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 30;
  o.num_threads = 1;
  o.evict.reproducible = true;
  o.trace_path = path;
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto m = models::make_model(model);
  ASSERT_TRUE(m.ok()) << m.status();
  auto opt = optim::Sgd::create(m->net->parameters(), {.lr = 0.05f, .momentum = 0.9f});
  ASSERT_TRUE(opt.ok()) << opt.status();
  data::SyntheticData src(m->sample_shape, 10, 3);
  for (int it = 1; it <= 3; ++it) {
    (*rt)->interpreter().mark("iteration", it);
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it, batch)));
    ASSERT_TRUE(loss.ok()) << loss.status();
    ASSERT_TRUE(loss->item().ok());
  }
  ASSERT_TRUE((*rt)->interpreter().close_trace().ok());
}

// floor_bytes: no budget below the largest op's inputs, outputs and scratch can work.
size_t floor_bytes(const Trace& t) {
  absl::flat_hash_map<uint64_t, size_t> bytes;
  size_t most = 0;
  for (const TraceEvent& e : t.events) {
    if (e.kind == TraceEvent::Kind::kPut) bytes[e.id] = alloc::round_up(e.desc.bytes());
    if (e.kind != TraceEvent::Kind::kOp) continue;
    size_t need = 0;
    for (uint64_t in : e.in) need += bytes[in];
    std::vector<TensorDesc> outs;
    EXPECT_TRUE(e.op->infer({}, outs).ok());
    for (size_t i = 0; i < e.out.size(); ++i) need += bytes[e.out[i]] = alloc::round_up(outs[i].bytes());
    for (size_t b : e.op->recorded_scratch()) need += alloc::round_up(b);
    most = std::max(most, need);
  }
  return most;
}

// expect_monotone: replays `trace` under kSteps budgets evenly spaced from floor_bytes to
// the unlimited peak, in each mode; once one succeeds, every larger one must.
void expect_monotone(const std::string& model, int batch) {
  const std::string path = ::testing::TempDir() + model + "_monotone.jsonl";
  record(model, batch, path);
  auto trace = load_trace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  std::remove(path.c_str());
  EvictOptions none;
  none.policy = EvictPolicy::kNone;
  auto base = replay(*trace, none, 1);
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_TRUE(base->error.empty()) << base->error;
  const size_t lo = floor_bytes(*trace), hi = base->peak_bytes;
  ASSERT_LT(lo, hi);
  constexpr int kSteps = 150;
  for (EvictMode mode : {EvictMode::kBoth, EvictMode::kDrop, EvictMode::kSwap}) {
    std::string line;  // one mark per budget: '.' ran, 'X' out of memory
    size_t first_ok = 0;
    for (int i = 0; i < kSteps; ++i) {
      EvictOptions ev;
      ev.mode = mode;
      ev.reproducible = true;
      ev.budget_bytes = lo + (hi - lo) * i / (kSteps - 1);
      auto r = replay(*trace, ev, 1);
      ASSERT_TRUE(r.ok()) << r.status();
      line += r->out_of_memory ? 'X' : '.';
      if (!r->out_of_memory && first_ok == 0) first_ok = ev.budget_bytes;
      EXPECT_FALSE(first_ok != 0 && r->out_of_memory)
          << model << " batch " << batch << ", mode " << evict_mode_name(mode) << ": the budget of "
          << ev.budget_bytes << " bytes ran out of memory, a smaller one of " << first_ok << " did not: "
          << r->error;
    }
    std::printf("  %s batch %d, mode %s, %.2f..%.2f MiB: %s\n", model.c_str(), batch, evict_mode_name(mode),
                lo / 1048576.0, hi / 1048576.0, line.c_str());
  }
}

TEST(DteMonotone, ResNet56) { expect_monotone("resnet56", 2); }
TEST(DteMonotone, VitTiny) { expect_monotone("vit_tiny", 1); }

}  // namespace
}  // namespace mtc
