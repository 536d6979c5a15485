// tma_plan_bench: the TMA planner's figures (alloc/plan.h; docs/tma.md).
//  1. MiniMalloc's eleven "challenging" instances (A..K): each method alone (the paper's
//     rules, greedy by size, skyline) and plan() with the best known peak as its target,
//     peak and seconds per row; target: every instance at its best known peak within 10 s.
//  2. A training-like trace of 60,000 buffers (fixed seed; see make_training_trace):
//     plan() with the runtime's alignment (256 bytes) and a 2 s limit; target: planned in
//     under 2 s at no more than 1.01x its lower bound. The paper's rules alone are shown
//     too; --slow adds greedy by size and the skyline by the search's first preorder alone
//     (seconds at this size; plan() paces them and stops those that cannot finish).
// A plain program (not Google Benchmark): one run per row, as the targets are about single
// runs. The last line is the verdict: PASS, or FAIL naming what missed.
//
//   tma_plan_bench [--data DIR] [--time-limit S] [--buffers N] [--seed S] [--skip-minimalloc]
//                  [--slow] [--write-trace FILE]
//
// The instances (A.1048576.csv .. K.1048576.csv, from MiniMalloc's public benchmark set; not
// in this repository) are read from --data DIR, else from $MTC_BENCH_DATA/minimalloc; with
// neither (and no --skip-minimalloc) it exits 2 saying so.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "alloc/plan.h"

namespace {

using mtc::alloc::PlanBuffer;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// make_training_trace: about `count` buffers of one training iteration of a deep network,
// on a clock of 10 ticks per op. Forward op k (tick 10k) allocates its output, read by the
// next op or two (residual links); about half the outputs are saved for the backward pass
// and live until their op's backward step. Each op also takes 0-2 short-lived workspaces
// [10k+1, 10k+2..5). The backward pass walks the ops in reverse: a gradient of the op's
// input (read by the next backward op), 0-2 workspaces, a weight gradient that lives a few
// ops, and the saved activation is freed. Activation sizes follow the network's stage
// (halving spatial size, doubling channels) times a per-op factor; workspaces and weight
// gradients are log-uniform. Every size is rounded to 256 bytes.
std::vector<PlanBuffer> make_training_trace(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto log_uniform = [&](double lo, double hi) { return std::exp(uniform(std::log(lo), std::log(hi))); };
  auto bytes = [](double b) { return static_cast<size_t>(std::max(1.0, std::round(b / 256.0))) * 256; };
  std::vector<PlanBuffer> out;
  const int ops = std::max(1, count / 4);  // ~5 buffers per op: enough, then cut
  const int stages = 4;
  struct Saved {
    size_t size;
    bool saved;
  };
  std::vector<Saved> act(ops);
  std::vector<int64_t> act_start(ops);
  int64_t id = 0;
  auto add = [&](int64_t lo, int64_t hi, size_t size) { out.push_back({id++, lo, hi, size}); };
  // Forward.
  for (int k = 0; k < ops; ++k) {
    const int stage = k * stages / ops;
    const double base = 1048576.0 / (1 << stage);  // bytes: spatial size halves per stage
    const double factor = std::vector<double>{0.25, 0.5, 1, 1, 1, 2, 4}[rng() % 7];
    act[k] = {bytes(base * factor * uniform(0.8, 1.2)), uniform(0, 1) < 0.5};
    act_start[k] = 10 * int64_t{k};
    const int readers = (rng() % 4 == 0) ? 3 : 1;  // a residual link is read 3 ops later
    if (!act[k].saved) add(act_start[k], 10 * int64_t{k + readers} + 1, act[k].size);
    for (int w = static_cast<int>(rng() % 3); w > 0; --w) {
      add(10 * int64_t{k} + 1, 10 * int64_t{k} + 2 + static_cast<int64_t>(rng() % 4), bytes(log_uniform(4096, 16e6)));
    }
  }
  // Backward, op ops-1 first, at ticks after the forward pass.
  const int64_t turn = 10 * int64_t{ops} + 10;
  for (int j = 0; j < ops; ++j) {
    const int k = ops - 1 - j;
    const int64_t t = turn + 10 * int64_t{j};
    if (act[k].saved) add(act_start[k], t + 2, act[k].size);  // freed after its backward op
    add(t + 1, t + 12, act[k].size);                           // gradient of the op's input
    for (int w = static_cast<int>(rng() % 3); w > 0; --w) {
      add(t + 1, t + 2 + static_cast<int64_t>(rng() % 4), bytes(log_uniform(4096, 16e6)));
    }
    add(t + 3, t + 10 * (1 + static_cast<int64_t>(rng() % 5)), bytes(log_uniform(16384, 8e6)));  // weight grad
  }
  // Cut to `count`: the last buffers made are the backward pass's first ops' (its end).
  if (static_cast<int>(out.size()) > count) out.resize(count);
  return out;
}

struct Row {
  std::string name;
  size_t buffers = 0, lower_bound = 0, target = 0;
  size_t rules = 0, greedy = 0, skyline = 0;
  double rules_s = 0, greedy_s = 0, skyline_s = 0;
  size_t peak = 0;
  double seconds = 0;
  std::string method;
};

}  // namespace

int main(int argc, char** argv) {
  std::string data;  // --data, else $MTC_BENCH_DATA/minimalloc
  std::string write_trace;
  double time_limit = 10.0;
  int buffers = 60000;
  uint64_t seed = 1;
  bool skip_minimalloc = false;
  bool slow = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tma_plan_bench: error: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--data") {
      data = value("--data");
    } else if (a == "--time-limit") {
      time_limit = std::atof(value("--time-limit").c_str());
    } else if (a == "--buffers") {
      buffers = std::atoi(value("--buffers").c_str());
    } else if (a == "--seed") {
      seed = std::strtoull(value("--seed").c_str(), nullptr, 10);
    } else if (a == "--write-trace") {
      write_trace = value("--write-trace");
    } else if (a == "--skip-minimalloc") {
      skip_minimalloc = true;
    } else if (a == "--slow") {
      slow = true;
    } else {
      std::fprintf(stderr,
                   "tma_plan_bench: error: unknown argument '%s': expected --data DIR, --time-limit S, "
                   "--buffers N, --seed S, --write-trace FILE, --skip-minimalloc or --slow\n",
                   a.c_str());
      return 2;
    }
  }
  if (!skip_minimalloc && data.empty()) {
    const char* root = std::getenv("MTC_BENCH_DATA");
    if (root == nullptr || *root == '\0') {
      std::fprintf(stderr,
                   "tma_plan_bench: error: no benchmark data: pass --data DIR (the folder of MiniMalloc's "
                   "A.1048576.csv .. K.1048576.csv) or set MTC_BENCH_DATA to the folder holding minimalloc/ "
                   "(or --skip-minimalloc)\n");
      return 2;
    }
    data = std::string(root) + "/minimalloc";
  }
  std::vector<std::string> failures;

  if (!skip_minimalloc) {
    std::vector<Row> rows;
    for (char c = 'A'; c <= 'K'; ++c) {
      Row r;
      r.name = std::string(1, c);
      const std::string path = data + "/" + r.name + ".1048576.csv";
      auto problem = mtc::alloc::read_minimalloc_csv(path);
      if (!problem.ok()) {
        std::fprintf(stderr, "tma_plan_bench: error: %s\n", std::string(problem.status().message()).c_str());
        return 2;
      }
      const std::vector<PlanBuffer>& b = problem->buffers;
      r.buffers = b.size();
      r.lower_bound = mtc::alloc::lower_bound(b);
      r.target = c == 'C' ? 1039360 : 1048576;  // best known (data README)
      Clock::time_point t0 = Clock::now();
      r.rules = mtc::alloc::peak_of(b, mtc::alloc::plan_paper_rules(b));
      r.rules_s = since(t0);
      t0 = Clock::now();
      r.greedy = mtc::alloc::peak_of(b, mtc::alloc::plan_greedy_by_size(b));
      r.greedy_s = since(t0);
      t0 = Clock::now();
      r.skyline = mtc::alloc::peak_of(b, mtc::alloc::plan_skyline(b));
      r.skyline_s = since(t0);
      mtc::alloc::PlanOptions o;
      o.time_limit_sec = time_limit;
      o.target_peak = r.target;
      auto res = mtc::alloc::plan(b, o);
      if (!res.ok()) {
        std::fprintf(stderr, "tma_plan_bench: error: %s: %s\n", path.c_str(), std::string(res.status().message()).c_str());
        return 1;
      }
      r.peak = res->peak;
      r.seconds = res->seconds;
      r.method = res->method;
      if (r.peak > r.target) failures.push_back(r.name + " above its best known peak");
      if (r.seconds > 10.0) failures.push_back(r.name + " over 10 s");
      rows.push_back(r);
      std::fflush(stdout);
    }
    std::printf("MiniMalloc challenging instances: peak / lower bound, seconds (plan(): target = best known)\n");
    std::printf("%-4s %7s %10s %15s %15s %15s %10s %8s %-8s\n", "inst", "buffers", "lower", "rules", "greedy",
                "skyline", "plan()", "sec", "method");
    double total = 0;
    for (const Row& r : rows) {
      auto ratio = [&](size_t peak) { return static_cast<double>(peak) / r.lower_bound; };
      std::printf("%-4s %7zu %10zu %7.3fx %.4fs %7.3fx %.4fs %7.3fx %.4fs %10zu %8.3f %-8s\n", r.name.c_str(), r.buffers,
                  r.lower_bound, ratio(r.rules), r.rules_s, ratio(r.greedy), r.greedy_s, ratio(r.skyline), r.skyline_s,
                  r.peak, r.seconds, r.method.c_str());
      total += r.seconds;
    }
    std::printf("total plan() time %.3f s\n\n", total);
  }

  // The training-like trace.
  const Clock::time_point g0 = Clock::now();
  const std::vector<PlanBuffer> trace = make_training_trace(buffers, seed);
  const double gen_s = since(g0);
  if (!write_trace.empty()) {
    absl::Status s = mtc::alloc::write_minimalloc_csv(write_trace, trace, std::vector<size_t>(trace.size(), 0));
    if (!s.ok()) {
      std::fprintf(stderr, "tma_plan_bench: error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const size_t lb = mtc::alloc::lower_bound(trace);
  std::printf("training-like trace: %zu buffers (seed %llu, made in %.3f s), lower bound %zu bytes (%.1f MiB)\n",
              trace.size(), static_cast<unsigned long long>(seed), gen_s, lb, lb / 1048576.0);
  std::printf("%-10s %12s %8s %9s\n", "method", "peak", "x LB", "sec");
  auto show = [&](const char* name, const std::vector<size_t>& off, double s) {
    const size_t peak = mtc::alloc::peak_of(trace, off);
    const bool valid = mtc::alloc::validate(trace, off, 256).ok();
    std::printf("%-10s %12zu %8.4f %9.3f%s\n", name, peak, static_cast<double>(peak) / lb, s, valid ? "" : " INVALID");
    if (!valid) failures.push_back(std::string(name) + " plan invalid");
  };
  Clock::time_point t0 = Clock::now();
  std::vector<size_t> off = mtc::alloc::plan_paper_rules(trace, 256);
  show("rules", off, since(t0));
  if (slow) {
    t0 = Clock::now();
    off = mtc::alloc::plan_greedy_by_size(trace, 256);
    show("greedy", off, since(t0));
    t0 = Clock::now();
    off = mtc::alloc::plan_skyline(trace, 256);
    show("skyline", off, since(t0));
  }
  mtc::alloc::PlanOptions o;
  o.alignment = 256;
  o.time_limit_sec = 2.0;
  auto res = mtc::alloc::plan(trace, o);
  if (!res.ok()) {
    std::fprintf(stderr, "tma_plan_bench: error: %s\n", std::string(res.status().message()).c_str());
    return 1;
  }
  const double ratio = static_cast<double>(res->peak) / lb;
  std::printf("%-10s %12zu %8.4f %9.3f (kept: %s)\n", "plan()", res->peak, ratio, res->seconds, res->method.c_str());
  if (ratio > 1.01) failures.push_back("training trace above 1.01x its lower bound");
  if (res->seconds >= 2.0) failures.push_back("training trace not planned in under 2 s");

  if (failures.empty()) {
    std::printf("PASS\n");
    return 0;
  }
  std::string what;
  for (const std::string& f : failures) what += (what.empty() ? "" : "; ") + f;
  std::printf("FAIL: %s\n", what.c_str());
  return 1;
}
