// Dispatch cost of the interpreter: one op on tiny tensors, so that the kernel is nothing
// and what is timed is issue (shape inference, handles, enqueue), execution on the worker
// (allocation, kernel-table lookup, record keeping) and the Del of the dropped output.
// Each benchmark iteration issues a batch of ops and syncs once; per-op = time / batch.
// Target: at most 10 microseconds per op. The last line printed is the verdict.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"

namespace {

constexpr int kBatch = 1000;             // ops issued between two syncs
constexpr double kTargetUsPerOp = 10.0;  // microseconds

std::unique_ptr<mtc::Runtime> make_runtime(bool synchronous) {
  mtc::RuntimeOptions o;
  o.memory_bytes = size_t{64} << 20;
  o.num_threads = 1;
  o.synchronous = synchronous;
  auto rt = mtc::Runtime::create(o);
  if (!rt.ok()) {
    std::fprintf(stderr, "dispatch_bench: %s\n", std::string(rt.status().message()).c_str());
    std::exit(1);
  }
  return std::move(rt).value();
}

void sync_or_die(mtc::Runtime& rt, benchmark::State& state) {
  absl::Status s = rt.interpreter().sync();
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
}

// set_per_op: the "per_op" column, seconds per op (the console prints e.g. "968ns").
void set_per_op(benchmark::State& state) {
  state.counters["per_op"] = benchmark::Counter(
      kBatch, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// BM_Add: add of two f32[1] tensors whose output is dropped at once (ApplyOp + Del).
// Arg 0: async, 1: synchronous mode.
void BM_Add(benchmark::State& state) {
  auto rt = make_runtime(state.range(0) != 0);
  const float one = 1.0f;
  mtc::Tensor a = mtc::from_vector({1}, {&one, 1}), b = mtc::from_vector({1}, {&one, 1});
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(mtc::add(a, b));
    sync_or_die(*rt, state);
  }
  set_per_op(state);
}
BENCHMARK(BM_Add)->ArgName("sync")->Arg(0)->Arg(1)->UseRealTime();

// BM_AddChain: x = add(x, b), each op waiting on the one before, as in a model's forward.
void BM_AddChain(benchmark::State& state) {
  auto rt = make_runtime(state.range(0) != 0);
  const float one = 1.0f;
  mtc::Tensor x = mtc::from_vector({1}, {&one, 1}), b = mtc::from_vector({1}, {&one, 1});
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) x = mtc::add(x, b);
    sync_or_die(*rt, state);
  }
  set_per_op(state);
}
BENCHMARK(BM_AddChain)->ArgName("sync")->Arg(0)->Arg(1)->UseRealTime();

// FigureReporter: the console table, and the per-op figures kept for the verdict.
class FigureReporter : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal, so logs and pipes stay plain.
  FigureReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      auto it = r.counters.find("per_op");
      if (it != r.counters.end() && !r.error_occurred) us_per_op[r.benchmark_name()] = it->second.value * 1e6;
    }
  }
  std::map<std::string, double> us_per_op;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  FigureReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  if (reporter.us_per_op.empty()) return 0;
  double worst = 0;
  std::printf("\ndispatch cost per op (issue + execute + Del, f32[1] add, batches of %d):\n", kBatch);
  for (const auto& [name, us] : reporter.us_per_op) {
    std::printf("  %-28s %7.3f us/op\n", name.c_str(), us);
    worst = std::max(worst, us);
  }
  std::printf("dispatch: worst %.3f us/op, target <= %.0f us/op: %s\n", worst, kTargetUsPerOp,
              worst <= kTargetUsPerOp ? "PASS" : "FAIL");
  return 0;
}
