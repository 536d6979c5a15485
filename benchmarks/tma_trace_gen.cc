// tma_trace_gen: the TMA planner's large instances (issue 20's benchmark), written as
// MiniMalloc CSVs (id,lower,upper,size) for mtc-plan. Two kinds, each at the buffer counts
// asked for (--sizes), from fixed seeds:
//
//  - micro-batches of a recorded iteration: NAME-mb-N.csv repeats the buffers of one
//    training iteration that mtc-train recorded (--tma_problem FILE) as micro-batches in
//    flight at once, as a pipeline schedule keeps them: copy j starts j x (span / 4) ticks
//    after the first, plus a jitter of up to a tenth of that stagger (seeded), so about
//    four copies are live at any time, each at another point of its forward or backward
//    pass. The copies are taken until N buffers or more. (Repetition across layers is the
//    model's own: benchmarks/tma_transformer.sh records the GPT at the depth that gives N.)
//  - packed by construction: packed-N.csv cuts the rectangle [0, 4096 ticks) x [0, 1 GiB)
//    into N buffers, each cut splitting a piece in time or in bytes at a random point
//    (bytes in multiples of 256): every byte is used at every tick, so the lower bound,
//    1 GiB, is the optimum, and a plan at it packs perfectly.
//
//   tma_trace_gen --out DIR [--sizes 10000,30000,60000] [--seed 1] [--base NAME=FILE]...
//
// Prints one line per file: its name, buffers, overlapping pairs and lower bound. Bad input
// (a flag, a size, an unreadable base) exits 2 naming it, before anything is written.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "alloc/plan.h"

namespace {

using mtc::alloc::PlanBuffer;

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "tma_trace_gen: %s\n", what.c_str());
  std::fprintf(stderr,
               "usage: tma_trace_gen --out DIR [--sizes 10000,30000,60000] [--seed 1] [--base NAME=FILE]...\n");
  std::exit(2);
}

// pairs: buffers live at once (a sweep; ends before starts at one tick).
uint64_t pairs(const std::vector<PlanBuffer>& b) {
  std::vector<std::pair<int64_t, int>> ev;
  for (const PlanBuffer& x : b) {
    ev.push_back({x.lower, 1});
    ev.push_back({x.upper, 0});
  }
  std::sort(ev.begin(), ev.end());
  uint64_t live = 0, n = 0;
  for (const auto& [t, start] : ev) {
    if (start) {
      n += live;
      ++live;
    } else {
      --live;
    }
  }
  return n;
}

// micro_batches: copies of `base` staggered by a quarter of its span (jittered) until at
// least `count` buffers.
std::vector<PlanBuffer> micro_batches(const std::vector<PlanBuffer>& base, int count, std::mt19937_64& rng) {
  int64_t lo = base.front().lower, hi = base.front().upper;
  for (const PlanBuffer& b : base) {
    lo = std::min(lo, b.lower);
    hi = std::max(hi, b.upper);
  }
  const int64_t stagger = std::max<int64_t>(1, (hi - lo) / 4);
  std::uniform_int_distribution<int64_t> jitter(0, std::max<int64_t>(0, stagger / 10));
  std::vector<PlanBuffer> out;
  int64_t shift = 0;
  while (static_cast<int>(out.size()) < count) {
    for (const PlanBuffer& b : base) {
      out.push_back({static_cast<int64_t>(out.size()), b.lower - lo + shift, b.upper - lo + shift, b.size});
    }
    shift += stagger + jitter(rng);
  }
  return out;
}

// packed: `count` pieces of [0, 4096) x [0, 1 GiB), cut one at a time (the oldest piece
// first, so pieces shrink evenly), each in time or in bytes at a random point.
std::vector<PlanBuffer> packed(int count, std::mt19937_64& rng) {
  struct Piece {
    int64_t lower, upper;
    uint64_t units;  // 256-byte units
  };
  std::deque<Piece> q{{0, 4096, (uint64_t{1} << 30) / 256}};
  std::uniform_real_distribution<double> u(0, 1);
  while (static_cast<int>(q.size()) < count) {
    const Piece p = q.front();
    q.pop_front();
    const bool can_time = p.upper - p.lower >= 2, can_bytes = p.units >= 2;
    if (!can_time && !can_bytes) {
      q.push_back(p);  // a one-tick, 256-byte piece: cannot be cut
      continue;
    }
    const bool in_time = can_time && (!can_bytes || u(rng) < 0.5);
    if (in_time) {
      const int64_t at = p.lower + 1 + static_cast<int64_t>(u(rng) * static_cast<double>(p.upper - p.lower - 1));
      q.push_back({p.lower, at, p.units});
      q.push_back({at, p.upper, p.units});
    } else {
      const uint64_t at = 1 + static_cast<uint64_t>(u(rng) * static_cast<double>(p.units - 1));
      q.push_back({p.lower, p.upper, at});
      q.push_back({p.lower, p.upper, p.units - at});
    }
  }
  std::vector<PlanBuffer> out;
  for (const Piece& p : q) out.push_back({static_cast<int64_t>(out.size()), p.lower, p.upper, p.units * 256});
  return out;
}

// write: the CSV to DIR/NAME (a temporary file renamed over it), and its line.
void write(const std::string& dir, const std::string& name, const std::vector<PlanBuffer>& b) {
  const std::string path = dir + "/" + name, tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "tma_trace_gen: cannot write %s: %s\n", tmp.c_str(), std::strerror(errno));
    std::exit(1);
  }
  std::fprintf(f, "id,lower,upper,size\n");
  for (const PlanBuffer& x : b) {
    std::fprintf(f, "%lld,%lld,%lld,%zu\n", static_cast<long long>(x.id), static_cast<long long>(x.lower),
                 static_cast<long long>(x.upper), x.size);
  }
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "tma_trace_gen: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  std::printf("%-22s buffers %6zu  pairs %10llu  lower bound %zu\n", name.c_str(), b.size(),
              static_cast<unsigned long long>(pairs(b)), mtc::alloc::lower_bound(b));
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  std::vector<int> sizes = {10000, 30000, 60000};
  uint64_t seed = 1;
  std::vector<std::pair<std::string, std::string>> bases;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--out") {
      out = value();
    } else if (a == "--sizes") {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(value(), ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(s, &n) || n < 1) usage_error("--sizes: '" + std::string(s) + "': expected counts >= 1");
        sizes.push_back(n);
      }
    } else if (a == "--seed") {
      const std::string v = value();
      if (!absl::SimpleAtoi(v, &seed)) usage_error("--seed '" + v + "': expected a non-negative integer");
    } else if (a == "--base") {
      const std::string v = value();
      const size_t eq = v.find('=');
      if (eq == 0 || eq == std::string::npos || eq + 1 == v.size()) {
        usage_error("--base '" + v + "': expected NAME=FILE (a CSV that mtc-train --tma_problem wrote)");
      }
      bases.push_back({v.substr(0, eq), v.substr(eq + 1)});
    } else {
      usage_error("unknown argument " + a);
    }
  }
  if (out.empty()) usage_error("--out DIR is required");
  // Read every base before writing anything.
  std::vector<std::vector<PlanBuffer>> base_buffers;
  for (const auto& [name, file] : bases) {
    absl::StatusOr<mtc::alloc::CsvProblem> p = mtc::alloc::read_minimalloc_csv(file);
    if (!p.ok()) usage_error("--base " + name + ": " + std::string(p.status().message()));
    if (p->buffers.empty()) usage_error("--base " + name + ": " + file + " has no buffers");
    base_buffers.push_back(std::move(p->buffers));
  }
  if (std::FILE* probe = std::fopen((out + "/.tma_trace_gen").c_str(), "w"); probe != nullptr) {
    std::fclose(probe);
    std::remove((out + "/.tma_trace_gen").c_str());
  } else {
    usage_error("--out " + out + ": not a folder this program can write in");
  }
  for (size_t k = 0; k < bases.size(); ++k) {
    for (int n : sizes) {
      std::mt19937_64 rng(seed * 1000003 + k * 101 + static_cast<uint64_t>(n));
      write(out, bases[k].first + "-mb-" + std::to_string(n) + ".csv", micro_batches(base_buffers[k], n, rng));
    }
  }
  for (int n : sizes) {
    std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(n));
    write(out, "packed-" + std::to_string(n) + ".csv", packed(n, rng));
  }
  return 0;
}
