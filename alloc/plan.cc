// TMA planner (plan.h): offsets for buffers with known lifetimes by three methods, the
// best plan kept: the MegTaiChi paper's six-rule simulation, greedy by size (and its
// skyline variant), and a branch-and-bound search. Also the lower bound, the validator
// and MiniMalloc's CSV format.
//
// Every method but the simulation works on a Problem: sizes rounded up to the alignment
// and time reduced to "cliques", the maximal sets of buffers live at once, in time order.
// A buffer is live in a contiguous range of cliques, two buffers overlap in time iff their
// ranges meet, and the lower bound is the largest clique's bytes. docs/tma.md describes
// the methods and gives the measured figures.
#include "alloc/plan.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mtc::alloc {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kUnplaced = std::numeric_limits<uint64_t>::max();  // offset of none yet

// Past these the search is not run (the heuristics' plan is kept): the search keeps a list
// of the buffers each buffer overlaps (8 bytes a pair: 16 million pairs are 128 MB), and
// recurses once per buffer.
constexpr int kSearchMaxBuffers = 20000;
constexpr uint64_t kSearchMaxOverlaps = 16'000'000;  // pairs of buffers live at once
// The time plan() keeps back from its methods besides kReservePerBuffer: the search reads
// the clock every 64 nodes on problems up to 2,000 buffers and its threads then join
// (MiniMalloc's B, D, E, G, H ended 0.3-0.9 ms past a 1 s limit with none).
constexpr double kReserveSec = 1.5e-3;
// And per buffer, for keeping and checking the plan after its methods stop: validate()
// took 0.57-0.63 us a buffer on the 30,000 and 60,000 of tma_transformer.sh (17 and 35-38
// ms, 2026-12-01), where 0.6 us was counted and runs ended 2-43 ms past a 1 s limit.
constexpr double kReservePerBuffer = 1e-6;
// The most of the limit that reserve takes: the methods keep at least three quarters. At a
// twentieth, tma_plan_bench's 300,000 buffers (a 2 s limit, 9,335 pieces in time, one of
// them 267,789 buffers) ended at 2.05 s; at a quarter 1.86 s, with the same plan. Up to
// about 48,000 buffers at 1 s the reserve is the same either way.
constexpr double kReserveShare = 0.25;

// reserve_sec: the seconds plan() keeps back from its methods on n buffers at `limit`.
double reserve_sec(double limit, size_t n) {
  return std::min(kReserveShare * limit, kReserveSec + kReservePerBuffer * static_cast<double>(n));
}

// Local improvement runs on problems of at least this many buffers (below, the search).
constexpr int kImproveMinBuffers = 1000;
// Freeing the search's candidate stack when it stops: 2.0 ms for 8 MiB, 4.3 and 6.9 ms for
// 16 MiB (10,160 buffers, 5 and 30 s), 0.25-0.41 ns a byte; 1 ns is counted.
constexpr double kReleaseNsPerByte = 1.0;

// Note [Time by progress]
// The heuristics and the search's index cost about one step per pair of buffers live at
// once, but the cost of a pair varies fivefold between traces (greedy by size: 48 ns a pair
// on micro-batches of a 48-layer GPT, 85 ns on tma_plan_bench's trace; the skyline 50-200
// ns), so a fixed estimate either skipped a method that would have finished (the skyline
// on a 62,000-buffer transformer trace reached the bound in 6 s where its estimate said it
// needed twice that) or let one run past the limit (the search's index, 0.19 s past a 1 s
// limit on 11,514 buffers). Each now measures its own
// rate: past a sixteenth of its steps, it stops when that rate says it cannot finish by
// the deadline, and the time goes to the next method.
//
// Pace: a method's own progress, measured (Note [Time by progress]). hopeless(done) says
// whether a method that has done `done` of `total` steps since `start` should stop: the
// deadline passed, or, past a sixteenth of the steps, the rate so far says it ends after
// the deadline. A method that may not give up (the one asked for alone) passes a Pace
// that only watches the deadline.
struct Pace {
  Clock::time_point start = Clock::now(), deadline = Clock::time_point::max();
  bool may_give_up = false;
  bool hopeless(uint64_t done, uint64_t total) const {
    const Clock::time_point now = Clock::now();
    if (now > deadline) return true;
    if (!may_give_up || done < total / 16 || done == 0) return false;
    const double spent = std::chrono::duration<double>(now - start).count();
    const double left = std::chrono::duration<double>(deadline - now).count();
    return spent * static_cast<double>(total - done) / static_cast<double>(done) > left;
  }
};

// The search's preorders (see preorder()), tried in turn: each solves some of MiniMalloc's
// benchmarks in a few thousand nodes where the other needs millions (docs/tma.md). CTA was
// a third until 2026-12-02: every instance it solves TWA solves too (D, F, K; in 66,004,
// 163,697 and 14,976 nodes against 21,754, 51,092 and 18,916), and in turns each search
// gets a share of the nodes, so it cost the others a third of theirs: without a target at
// 1 s E's TWA search at the goal got a sixth of the nodes where it needs 511,312.
constexpr const char* kPreorders[] = {"TWA", "TAW"};
// A window's search (Note [Window search]) keeps CTA: its preorders run in rounds, not side
// by side, and with TWA and TAW alone greedy's repairs brought 560 of the 1,800 passes of
// GreedysRepairsNeverLoseAndOftenReachTheBound to the bound, against 571 with CTA.
constexpr const char* kWindowPreorders[] = {"TWA", "TAW", "CTA"};
// More preorders for the skyline alone (S: the earlier start first): on micro-batches of
// vit_tiny in flight, ZS gives 1.037x where TWA gives 1.128x, on those of a 48-layer GPT
// 1.0000x where TWA gives 1.0686x (30,704 buffers), and on instances packed by
// construction SZ 1.285x where TWA gives 1.354x (tma_transformer.sh). ZS runs first of
// all the skylines, before greedy by size; CTA (the search's third preorder until
// 2026-12-02, so its skyline runs where it did), SZ and WS after the search's preorders.
constexpr const char* kSkylineFirst = "ZS";
constexpr const char* kSkylinePreorders[] = {"CTA", "SZ", "WS"};

// The search recurses once per buffer placed (a few hundred bytes a level), so it runs on
// threads of its own with this much stack (reserved, touched only as deep as it goes).
constexpr size_t kSearchStackBytes = size_t{64} << 20;

// start_with_stack: runs f on a new thread with a stack of `bytes`; false if none started.
template <typename F>
bool start_with_stack(pthread_t* id, size_t bytes, F& f) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  pthread_attr_setstacksize(&attr, bytes);
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<F*>(arg))();
    return nullptr;
  };
  const bool ok = pthread_create(id, &attr, trampoline, &f) == 0;
  pthread_attr_destroy(&attr);
  return ok;
}

uint64_t align_up(uint64_t x, uint64_t a) { return a <= 1 ? x : (x + a - 1) / a * a; }

// The most bytes a plan may span: int64's maximum, so that every offset and end fits the
// int64 the CSV reader takes (ours and MiniMalloc's).
constexpr uint64_t kMaxPlanBytes = std::numeric_limits<int64_t>::max();

// add_aligned: adds `size` rounded up to `alignment` to `total`; false, leaving `total`
// as it was, when the sum would pass kMaxPlanBytes. No plan of buffers whose rounded sizes
// add up to at most kMaxPlanBytes peaks above that sum.
bool add_aligned(uint64_t& total, uint64_t size, uint64_t alignment) {
  if (alignment > kMaxPlanBytes || size > kMaxPlanBytes) return false;
  const uint64_t rest = alignment <= 1 ? 0 : size % alignment;
  const uint64_t rounded = rest == 0 ? size : size + (alignment - rest);  // < 2^64: both <= kMaxPlanBytes
  if (rounded > kMaxPlanBytes - total) return false;
  total += rounded;
  return true;
}

// too_many_bytes: the error for sizes that fail add_aligned, up to `where` (this line).
std::string too_many_bytes(const char* where, uint64_t alignment) {
  return absl::StrCat(
      "the sizes up to ", where,
      alignment > 1 ? absl::StrCat(", each rounded up to the alignment ", alignment, ",") : "",
      " add up to more than ", kMaxPlanBytes,
      " bytes (2^63 - 1), so a plan could place a buffer past what a CSV integer holds: expected sizes "
      "that total at most that");
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ----------------------------------------------------------------------------------------
// Events and cliques

// Event: a buffer's start or end. Ends sort before starts at the same time: lifetimes are
// half-open, so a buffer that ends at t and one that starts at t do not overlap.
struct Event {
  int64_t time;
  int kind;  // 0: end, 1: start
  int index;
};

std::vector<Event> sorted_events(const std::vector<PlanBuffer>& buffers) {
  std::vector<Event> ev;
  ev.reserve(2 * buffers.size());
  for (int i = 0; i < static_cast<int>(buffers.size()); ++i) {
    ev.push_back({buffers[i].lower, 1, i});
    ev.push_back({buffers[i].upper, 0, i});
  }
  std::sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.kind != b.kind) return a.kind < b.kind;
    return a.index < b.index;
  });
  return ev;
}

// Problem: the buffers as the methods see them.
struct Problem {
  int n = 0;
  int cliques = 0;
  uint64_t alignment = 1;
  std::vector<uint64_t> size;          // bytes, rounded up to the alignment
  std::vector<uint64_t> bytes;         // bytes as asked (the top buffer's end counts these)
  uint64_t pad = 0;                    // max of size - bytes: rounding, < alignment
  std::vector<int> first, last;        // buffer i is live in cliques [first[i], last[i])
  std::vector<uint64_t> length;        // upper - lower, clock ticks (up to 2^64 - 1)
  std::vector<int64_t> lower, upper;   // the lifetime, clock ticks
  std::vector<uint64_t> clique_bytes;  // rounded bytes live in each clique
  uint64_t lower_bound = 0;            // max of clique_bytes
  uint64_t overlaps = 0;               // pairs of buffers live at once
  // Fixed buffers that the buffers of a window's problem must stay clear of (Note [Window
  // search]; none elsewhere): buffer i's are walls[wall_start[i] .. wall_start[i + 1]),
  // each [offset, end), by offset.
  std::vector<int64_t> wall_start;
  std::vector<std::pair<uint64_t, uint64_t>> walls;
};

// make_problem: one sweep over the events. A clique closes at an end that follows a start
// (before it, the live set only grew); the buffers live then are its members.
Problem make_problem(const std::vector<PlanBuffer>& buffers, size_t alignment) {
  Problem p;
  p.n = static_cast<int>(buffers.size());
  p.alignment = std::max<uint64_t>(1, alignment);
  p.size.resize(p.n);
  p.bytes.resize(p.n);
  p.first.resize(p.n);
  p.last.resize(p.n);
  p.length.resize(p.n);
  p.lower.resize(p.n);
  p.upper.resize(p.n);
  for (int i = 0; i < p.n; ++i) {
    p.lower[i] = buffers[i].lower;
    p.upper[i] = buffers[i].upper;
    p.size[i] = align_up(buffers[i].size, p.alignment);
    p.bytes[i] = buffers[i].size;
    p.pad = std::max(p.pad, p.size[i] - p.bytes[i]);
    // In uint64_t: a lifetime may span more than int64 holds; upper > lower keeps it exact.
    p.length[i] = static_cast<uint64_t>(buffers[i].upper) - static_cast<uint64_t>(buffers[i].lower);
  }
  bool grew = false;
  uint64_t live = 0;
  for (const Event& e : sorted_events(buffers)) {
    if (e.kind == 1) {
      p.first[e.index] = p.cliques;
      p.overlaps += live;
      ++live;
      grew = true;
    } else {
      if (grew) {
        ++p.cliques;
        grew = false;
      }
      p.last[e.index] = p.cliques;
      --live;
    }
  }
  std::vector<int64_t> diff(p.cliques + 1, 0);
  for (int i = 0; i < p.n; ++i) {
    diff[p.first[i]] += static_cast<int64_t>(p.size[i]);
    diff[p.last[i]] -= static_cast<int64_t>(p.size[i]);
  }
  p.clique_bytes.resize(p.cliques);
  int64_t run = 0;
  for (int s = 0; s < p.cliques; ++s) {
    run += diff[s];
    p.clique_bytes[s] = static_cast<uint64_t>(run);
    p.lower_bound = std::max(p.lower_bound, p.clique_bytes[s]);
  }
  return p;
}

// ----------------------------------------------------------------------------------------
// Method (a): the MegTaiChi paper's simulation with its six rules.
//
// The events are replayed in time order (frees before allocations at one instant; the
// allocations of one instant largest first) against a memory list: chunks in address
// order, each live (holding a buffer) or idle, with no two idle chunks adjacent. An
// allocation of m bytes, in order of preference:
//   (6) Overwrite & Free: an idle chunk freed at this very instant (the tensor the new one
//       overwrites, as an op's output takes its dying input's memory) of >= m bytes, the
//       smallest such; what it does not need is freed again as an idle chunk above it;
//   (1) Alloc: an idle chunk of exactly m bytes;
//   (2) Alloc & Division: the smallest idle chunk larger than m, split: the buffer takes
//       its low part, the rest stays idle;
//   (3) Swell: no idle chunk is large enough: the largest one swells to m bytes, pushing
//       every chunk above it up (a new chunk on top when none is idle).
// A free: (4) Free: the chunk turns idle; (5) Free & Merge: it merges with idle neighbours.
// The list only records relative positions (swelling moves chunks that were placed long
// ago), so addresses come from the topology map: an edge from each new buffer's nearest
// live neighbour below to it and from it to its nearest live neighbour above. Buffers live
// at once are then joined by a path, and the offsets are the longest paths from the
// bottom (a topological sort), which packs the chunks as low as the recorded order allows.
std::vector<uint64_t> simulate_rules(const std::vector<PlanBuffer>& buffers,
                                     const std::vector<uint64_t>& size) {
  const int n = static_cast<int>(buffers.size());
  struct Chunk {
    uint64_t size;
    int buffer;  // -1: idle
    int prev, next;
    int64_t freed_at;
  };
  std::vector<Chunk> chunks;
  chunks.reserve(2 * n + 1);
  std::set<std::pair<uint64_t, int>> idle;  // (size, chunk)
  std::vector<int> fresh;                   // idle chunks freed at the current instant
  std::vector<int> chunk_of(n, -1);
  int top = -1;  // highest chunk
  std::vector<std::pair<int, int>> edges;  // (below, above), buffer indices
  edges.reserve(2 * n);

  std::vector<Event> ev = sorted_events(buffers);
  // Allocations of one instant: largest first, then the longest lived.
  std::stable_sort(ev.begin(), ev.end(), [&](const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.kind == 1 && size[a.index] != size[b.index]) return size[a.index] > size[b.index];
    if (a.kind == 1) {
      const int64_t la = buffers[a.index].upper, lb = buffers[b.index].upper;
      if (la != lb) return la > lb;
    }
    return a.index < b.index;
  });

  auto unlink = [&](int c) {
    const Chunk& k = chunks[c];
    if (k.prev >= 0) chunks[k.prev].next = k.next;
    if (k.next >= 0) chunks[k.next].prev = k.prev;
    if (top == c) top = k.prev;
  };
  int64_t now = std::numeric_limits<int64_t>::min();
  for (const Event& e : ev) {
    if (e.time != now) {
      now = e.time;
      fresh.clear();
    }
    const int b = e.index;
    if (e.kind == 0) {  // (4) Free, (5) Free & Merge
      int c = chunk_of[b];
      chunks[c].buffer = -1;
      chunks[c].freed_at = now;
      for (int side = 0; side < 2; ++side) {
        const int nb = side == 0 ? chunks[c].prev : chunks[c].next;
        if (nb < 0 || chunks[nb].buffer >= 0) continue;
        idle.erase({chunks[nb].size, nb});
        chunks[c].size += chunks[nb].size;
        unlink(nb);
      }
      idle.insert({chunks[c].size, c});
      fresh.push_back(c);
      continue;
    }
    const uint64_t m = size[b];
    int c = -1;
    for (int f : fresh) {  // (6) Overwrite & Free
      const Chunk& k = chunks[f];
      if (k.buffer >= 0 || k.freed_at != now || k.size < m || !idle.count({k.size, f})) continue;
      if (c < 0 || k.size < chunks[c].size) c = f;
    }
    if (c < 0) {  // (1) Alloc, (2) Alloc & Division
      auto it = idle.lower_bound({m, -1});
      if (it != idle.end()) c = it->second;
    }
    if (c >= 0) {
      idle.erase({chunks[c].size, c});
      if (chunks[c].size > m) {  // division: the rest stays idle above the buffer
        const int r = static_cast<int>(chunks.size());
        chunks.push_back({chunks[c].size - m, -1, c, chunks[c].next, chunks[c].freed_at});
        if (chunks[c].next >= 0) chunks[chunks[c].next].prev = r;
        chunks[c].next = r;
        if (top == c) top = r;
        idle.insert({chunks[r].size, r});
      }
    } else if (!idle.empty()) {  // (3) Swell the largest idle chunk
      c = idle.rbegin()->second;
      idle.erase(std::prev(idle.end()));
    } else {  // nothing idle: a new chunk on top
      c = static_cast<int>(chunks.size());
      chunks.push_back({m, -1, top, -1, now});
      if (top >= 0) chunks[top].next = c;
      top = c;
    }
    chunks[c].size = m;
    chunks[c].buffer = b;
    chunk_of[b] = c;
    int below = chunks[c].prev;
    while (below >= 0 && chunks[below].buffer < 0) below = chunks[below].prev;
    int above = chunks[c].next;
    while (above >= 0 && chunks[above].buffer < 0) above = chunks[above].next;
    if (below >= 0) edges.push_back({chunks[below].buffer, b});
    if (above >= 0) edges.push_back({b, chunks[above].buffer});
  }

  // The topology map: offsets are longest paths, in topological order (Kahn).
  std::vector<int> indegree(n, 0), start(n + 1, 0), succ(edges.size());
  for (const auto& [lo, hi] : edges) {
    ++start[lo + 1];
    ++indegree[hi];
  }
  for (int i = 0; i < n; ++i) start[i + 1] += start[i];
  std::vector<int> fill(start.begin(), start.end() - 1);
  for (const auto& [lo, hi] : edges) succ[fill[lo]++] = hi;
  std::vector<uint64_t> off(n, 0);
  std::vector<int> ready;
  for (int i = 0; i < n; ++i) {
    if (indegree[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    const int u = ready.back();
    ready.pop_back();
    for (int k = start[u]; k < start[u + 1]; ++k) {
      const int v = succ[k];
      off[v] = std::max(off[v], off[u] + size[u]);
      if (--indegree[v] == 0) ready.push_back(v);
    }
  }
  return off;
}

// ----------------------------------------------------------------------------------------
// Method (b): greedy by size. Largest first (then longest lived), each at the lowest
// offset where it fits among the placed buffers it overlaps in time. Those are found with
// a segment tree over the cliques that holds each placed buffer at the O(log) nodes
// covering its range.

class PlacedIndex {
 public:
  // buffers: the number of buffers that may be inserted (ids 0..buffers-1).
  PlacedIndex(int cliques, int buffers) : seen_(buffers, -1) {
    leaves_ = 1;
    while (leaves_ < std::max(cliques, 1)) leaves_ *= 2;
    items_.resize(2 * leaves_);
    count_.assign(2 * leaves_, 0);
  }
  void insert(int b, int lo, int hi) { insert(1, 0, leaves_, lo, hi, b); }
  // collect: calls f(b) once for every placed b whose range meets [lo, hi) (a buffer sits
  // at up to O(log) nodes that meet it, so the calls are filtered by a stamp per call).
  template <typename F>
  void collect(int lo, int hi, F&& f) {
    ++call_;
    auto once = [&](int b) {
      if (seen_[b] == call_) return;
      seen_[b] = call_;
      f(b);
    };
    collect(1, 0, leaves_, lo, hi, once);
  }

 private:
  void insert(int node, int nl, int nr, int lo, int hi, int b) {
    ++count_[node];
    if (lo <= nl && nr <= hi) {
      items_[node].push_back(b);
      return;
    }
    const int mid = (nl + nr) / 2;
    if (lo < mid) insert(2 * node, nl, mid, lo, hi, b);
    if (hi > mid) insert(2 * node + 1, mid, nr, lo, hi, b);
  }
  template <typename F>
  void collect(int node, int nl, int nr, int lo, int hi, F& f) const {
    if (count_[node] == 0 || hi <= nl || nr <= lo) return;
    for (int b : items_[node]) f(b);
    if (nr - nl == 1) return;
    const int mid = (nl + nr) / 2;
    collect(2 * node, nl, mid, lo, hi, f);
    collect(2 * node + 1, mid, nr, lo, hi, f);
  }

  int leaves_ = 1;
  std::vector<std::vector<int>> items_;
  std::vector<int> count_;  // items in the subtree
  std::vector<int64_t> seen_;  // per buffer, the last collect() that reported it
  int64_t call_ = 0;
};

// lowest_fit: the lowest offset where `size` bytes fit among the ranges [offset, end) in
// busy (sorted here): greedy by size's placement, and local improvement's.
uint64_t lowest_fit(std::vector<std::pair<uint64_t, uint64_t>>& busy, uint64_t size) {
  std::sort(busy.begin(), busy.end());
  uint64_t at = 0;
  for (const auto& [lo, hi] : busy) {
    if (lo >= at + size) break;
    at = std::max(at, hi);
  }
  return at;
}

// Note [Greedy's ties]
// Greedy by size places the buffers of one size in one of three orders, and plan() runs
// each in turn while time is left: the earliest start first (then the latest end), the
// latest end first (then the earliest start), and TFLite's, the longest lived first. On
// buffers of one size the first two are interval colouring in the left-edge order (run
// forwards in time, or backwards), which needs no more slots than are ever live at once:
// they peak at the lower bound
// (PlanProperties.GreedyByStartOrEndPlacesBuffersOfOneSizeAtTheBound), where the third
// does not always. On a training trace they follow the allocations' order, or a stack's:
// of the activations of one size, those freed last (the first layers') go lowest. Where
// copies of one pass are in flight at once they are the better by far. On micro-batches
// of vit_tiny in flight greedy by size gave, the longest lived first / the earliest start
// first / the latest end first:
//   10,160 buffers: 1.0372x / 1.0077x / 1.0001x the lower bound
//   30,226 buffers: 1.0363x / 1.0062x / 1.0046x
//   60,198 buffers: 1.0306x / 1.0000x / 1.0060x
// where every skyline stayed at 1.019x or above. Which of the two is better is not known
// before, so both run. The earliest start first goes first: at 60,198 buffers each takes
// about 0.5 s, so at a 1 s limit only one runs after the skyline by ZS. TFLite's is not
// always the worse: on MiniMalloc's B and D the latest end first is 0.6% and 2.0% above
// it, on G and H 1.9% and 3.9% below; the same on the other seven.

// Note [Greedy's repairs]
// Greedy by size places the largest first, and what it places early it never moves. On
// vit_tiny's micro-batches in flight (30,226 buffers) its plan with the latest end first is
// 0.46% above the bound, and the cause is in the buffers of 1 MiB and more: placed, they
// take 161 MiB where their own bound is 160, one 1 MiB buffer of four ticks above the
// rest, and the smaller ones then stack above the hole that left. So with repairs (plan(),
// on 1,000 buffers or more), at the end of each size the placed buffers' own bound is
// taken (their load by clique, summed from differences), and where their top is above it
// a window search (Note [Window search]) re-plans the buffers around those on top at that
// bound before the next size is placed. On that trace the repair after the 1 MiB buffers
// lifts 33 and finds their plan in 36 search nodes; the rest then reach the lower bound
// (1.0000x, from 1.0046x). A repair that keeps nothing is not tried again until the top or
// the bound has risen; the load is summed only once a sixteenth of the cliques' count of
// buffers was placed since the last look (an instance of many sizes would sum it at every
// buffer); repairs take at most 1 / kRepairShare of the pass's time, and only what its
// placements left do not need at their rate so far. (The load kept in a segment tree
// instead, updated at every placement, made the first sizes of vit_tiny's 60,198 place 1.6
// times slower, and the pass's pace gave up at 1 s.) The pace does not count the repairs.
constexpr int kRepairShare = 4;

std::vector<uint64_t> window_search(const Problem& p, const std::vector<uint64_t>& off, uint64_t goal,
                                    Clock::time_point deadline, int64_t* kept);

// greedy_by_size: empty when the pace says it cannot finish in time. repair: with greedy's
// repairs (Note [Greedy's repairs]).
std::vector<uint64_t> greedy_by_size(const Problem& p, const Pace& pace, GreedyTies ties, bool repair = false) {
  std::vector<int> order(p.n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
    if (ties == GreedyTies::kLatestEndFirst) {
      if (p.upper[a] != p.upper[b]) return p.upper[a] > p.upper[b];
      if (p.lower[a] != p.lower[b]) return p.lower[a] < p.lower[b];
    } else if (ties == GreedyTies::kEarliestStartFirst) {
      if (p.lower[a] != p.lower[b]) return p.lower[a] < p.lower[b];
      if (p.upper[a] != p.upper[b]) return p.upper[a] > p.upper[b];
    } else if (p.length[a] != p.length[b]) {
      return p.length[a] > p.length[b];
    }
    return a < b;
  });
  std::vector<uint64_t> off(p.n, kUnplaced);
  PlacedIndex index(p.cliques, p.n);
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // [offset, end) of overlapping placed
  // Its steps are the pairs of buffers live at once, each met when the second of the two is
  // placed (Note [Time by progress]); by buffers, the pace said "go on" on the large first
  // and the later ones, each among more placed, came slower: on tma_trace_gen's packed
  // 30,000 at a 1 s limit it gave up after 0.52 s. The rate is measured from here, past
  // the sort and the index: counted in it, their 11 ms (of 0.54 s, on 60,198 buffers of
  // vit_tiny's micro-batches) weighed sixteen times at the first look, and it gave up
  // with 0.8 s left.
  Pace q = pace;
  q.start = Clock::now();
  uint64_t pairs = 0;
  // place: buffer b at the lowest offset of `plan` where it fits among those `placed` holds,
  // then into `placed`; the pairs it met.
  auto place = [&](PlacedIndex& placed, std::vector<uint64_t>& plan, int b) {
    busy.clear();
    placed.collect(p.first[b], p.last[b], [&](int o) { busy.push_back({plan[o], plan[o] + p.size[o]}); });
    plan[b] = lowest_fit(busy, p.size[b]);
    placed.insert(b, p.first[b], p.last[b]);
    return busy.size();
  };
  // Repairs (Note [Greedy's repairs]): the placed buffers' top, their load by clique (as
  // differences, summed only where a repair may run), and the time repairs may take.
  std::vector<int64_t> diff(repair ? p.cliques + 1 : 0, 0);
  uint64_t top = 0;
  int since = 0;  // buffers placed since the load was last summed
  const Clock::duration repair_budget = (q.deadline - q.start) / kRepairShare;
  Clock::duration repair_spent{0};
  uint64_t failed_top = 0, failed_bound = 0;  // the last repair that kept nothing: not tried again
  std::vector<uint64_t> unrepaired;  // the plan before the first repair kept,
  int unrepaired_k = -1;             // with this many buffers placed
  for (int k = 0; k <= p.n; ++k) {
    // At the end of a size, if enough was placed since the last look to pay for summing
    // the load (a look per cliques / 16 buffers), and repairs have time left.
    if (repair && k > 0 && (k == p.n || (p.size[order[k]] != p.size[order[k - 1]] && 16 * since >= p.cliques)) &&
        repair_spent < repair_budget) {
      const Clock::time_point t = Clock::now();
      since = 0;
      int64_t run = 0, most = 0;
      for (int c = 0; c < p.cliques; ++c) most = std::max(most, run += diff[c]);
      const uint64_t bound = static_cast<uint64_t>(most);
      // The time a repair may take: its share not yet spent, less what the placements
      // left need at their rate so far, with a quarter to spare.
      Clock::duration room = std::min(q.deadline - t, repair_budget - repair_spent);
      if (pairs > 0) {
        const double rest = static_cast<double>(p.overlaps - pairs) / static_cast<double>(pairs);
        const auto need = std::chrono::duration_cast<Clock::duration>((t - q.start) * rest * 1.25);
        room = std::min(room, q.deadline - t - need);
      }
      if (top > bound && (top > failed_top || bound > failed_bound) && room > Clock::duration::zero()) {
        int64_t kept = 0;
        std::vector<uint64_t> repaired = window_search(p, off, bound, t + room, &kept);
        if (kept > 0) {
          if (unrepaired_k < 0) {
            unrepaired = std::move(off);
            unrepaired_k = k;
          }
          off = std::move(repaired);
          top = 0;
          for (int j = 0; j < k; ++j) top = std::max(top, off[order[j]] + p.size[order[j]]);
        }
        if (top > bound) {
          failed_top = top;
          failed_bound = bound;
        }
      }
      const Clock::duration spent = Clock::now() - t;
      repair_spent += spent;
      q.start += spent;  // the pace measures the placements alone
    }
    if (k == p.n) break;
    if ((k & 15) == 15 && q.hopeless(pairs, p.overlaps)) return {};
    const int b = order[k];
    pairs += place(index, off, b);
    if (repair) {
      top = std::max(top, off[b] + p.size[b]);
      diff[p.first[b]] += static_cast<int64_t>(p.size[b]);
      diff[p.last[b]] -= static_cast<int64_t>(p.size[b]);
      ++since;
    }
  }
  // A repair can leave the sizes after it worse placed (Note [Greedy's repairs]): when the
  // plan is above the lower bound, the placements also go on from the plan before the first
  // repair kept, without repairs, by the deadline, and the lower of the two is kept.
  if (unrepaired_k >= 0 && top > p.lower_bound) {
    PlacedIndex again(p.cliques, p.n);
    uint64_t plain_top = 0;
    for (int k = 0; k < unrepaired_k; ++k) {
      const int b = order[k];
      again.insert(b, p.first[b], p.last[b]);
      plain_top = std::max(plain_top, unrepaired[b] + p.size[b]);
    }
    for (int k = unrepaired_k; k < p.n; ++k) {
      if ((k & 15) == 15 && Clock::now() > q.deadline) return off;
      const int b = order[k];
      place(again, unrepaired, b);
      plain_top = std::max(plain_top, unrepaired[b] + p.size[b]);
    }
    if (plain_top < top) return unrepaired;
  }
  return off;
}

// ----------------------------------------------------------------------------------------
// Skyline: the search's own descent without a capacity or backtracking. Repeatedly the
// unplaced buffer that can sit lowest (on the highest placed buffer it overlaps; ties by
// rank) is placed there. Floors keeps each clique's floor (its highest placed end); each
// unplaced buffer waits in the list of a level, a stale lower bound of its floor, and is
// looked at again when that level comes: about one refresh per pair of buffers live at
// once.
//
// Note [Skyline speed]
// Nearly every look is a refresh (17.2 M of them place 61,408 buffers of micro-batches of
// a 48-layer GPT in flight; a buffer there spans 785 cliques on average), so the skyline's
// time is its refreshes': a range maximum and a requeue each. Queries outnumber raises
// 280 to 1 there. Two structures, 2.2-2.4 times faster there than the blocks of maxima and
// radix heap before them (1.63-1.72 s against 0.73-0.74 s on a loaded machine, 2026-11-30;
// 4.5 s with the segment tree and binary heap before those), with the same plans buffer
// for buffer on every instance of benchmarks/tma_transformer.sh:
//  - Floors: blocks of 64 cliques, each clique with the maximum from its block's start to
//    it and from it to the block's end, and the blocks likewise in superblocks of 64. A
//    query across blocks reads two cliques, then up to 62 blocks of one superblock or two
//    blocks and the superblocks between; before, it read every clique in its two end
//    blocks and every block between (about 76 words there). A raise rewrites at most two
//    blocks of cliques and two superblocks of blocks, and marks the whole ones between
//    (the largest raise that covered each whole), so a buffer that lives across 100,000
//    cliques costs no more to place: rewriting every clique of a raise instead (with a
//    sparse table over the blocks, queries in four reads) was as fast here but ran
//    tma_plan_bench's 300,000-buffer trace 1 s past a 2 s limit.
//  - Levels: the keys popped never decrease (a refresh finds a floor above the level it
//    was looked at), so the unplaced buffers wait in one list per level (a hash map from
//    the level, and a binary heap of the levels), and a level's list, sorted by rank, is
//    taken in one go: nothing joins a level once it is taken. That replaced a radix heap of
//    (floor, rank) keys, whose redistributions took a third of the time.
//  - A level's list is already in rank order but for a few joins: each level taken adds
//    its stale buffers in rank order, and there 12,091 lists of 17.2 M buffers held 13,138
//    ascending runs. Merging the runs (sort_runs) instead of sorting the list, and one
//    hash look-up per run of stale buffers that go to one floor, took the skyline by ZS
//    there from 1.12-1.19 s to 0.57-0.71 s (2026-12-01, four interleaved rounds; std::sort
//    was a quarter of plan()'s time at a 1 s limit, where the skyline missed the limit and
//    the rules' 1.1158x was kept).

// Floors: each clique's floor, with range maxima (Note [Skyline speed]). Two levels of
// blocks of 64: cliques in blocks, blocks in superblocks. Each level keeps, per element,
// the maximum from its block's start to it and from it to the block's end, and per block
// the largest raise that covered it whole (which its elements' figures leave out). Floors
// are at most INT64_MAX (check_total_bytes), kept as int64_t so the compiler's vector max
// applies.
class Floors {
 public:
  explicit Floors(int cliques) {
    const int blocks = (std::max(cliques, 1) + kBlock - 1) / kBlock;
    const int supers = (blocks + kBlock - 1) / kBlock;
    cell_.assign(static_cast<size_t>(blocks) * kBlock, 0);
    pre_ = suf_ = cell_;
    block_.assign(static_cast<size_t>(supers) * kBlock, 0);
    block_pre_ = block_suf_ = block_all_ = block_;
    super_.assign(supers, 0);
    super_all_ = super_;
  }
  // raise: every clique in [lo, hi) to at least h (lo < hi). Touches at most two blocks'
  // cliques, two superblocks' blocks, and the superblocks between.
  void raise(int lo, int hi, uint64_t height) {
    const int64_t h = static_cast<int64_t>(height);
    const int bl = lo / kBlock, bh = (hi - 1) / kBlock;
    if (bl == bh) {
      raise_cells(lo, hi, h);
      raise_blocks(bl, bl + 1, h, /*whole=*/false);
      return;
    }
    raise_cells(lo, (bl + 1) * kBlock, h);
    raise_cells(bh * kBlock, hi, h);
    raise_blocks(bl, bl + 1, h, false);
    raise_blocks(bh, bh + 1, h, false);
    if (bl + 1 < bh) raise_blocks(bl + 1, bh, h, /*whole=*/true);
  }
  // max: the highest floor in [lo, hi) (lo < hi). Reads at most 64 cliques or 64 blocks
  // and the superblocks between.
  uint64_t max(int lo, int hi) const {
    const int bl = lo / kBlock, bh = (hi - 1) / kBlock;
    int64_t m = std::max({block_all_[bl], block_all_[bh], super_all_[bl / kBlock], super_all_[bh / kBlock]});
    if (bl == bh) {
      for (int c = lo; c < hi; ++c) m = std::max(m, cell_[c]);
      return static_cast<uint64_t>(m);
    }
    m = std::max({m, suf_[lo], pre_[hi - 1]});
    const int l = bl + 1, r = bh - 1;  // the whole blocks between
    if (l > r) return static_cast<uint64_t>(m);
    const int sl = l / kBlock, sr = r / kBlock;
    m = std::max({m, super_all_[sl], super_all_[sr]});
    if (sl == sr) {
      for (int b = l; b <= r; ++b) m = std::max(m, block_[b]);
      return static_cast<uint64_t>(m);
    }
    m = std::max({m, block_suf_[l], block_pre_[r]});
    for (int s = sl + 1; s < sr; ++s) m = std::max(m, super_[s]);
    return static_cast<uint64_t>(m);
  }

 private:
  static constexpr int kBlock = 64;

  // raise_cells: cliques [lo, hi), all in one block, and that block's maxima.
  void raise_cells(int lo, int hi, int64_t h) {
    for (int c = lo; c < hi; ++c) cell_[c] = std::max(cell_[c], h);
    redo(cell_, pre_, suf_, lo / kBlock);
  }
  // raise_blocks: blocks [lo, hi) to at least h; whole: raised whole (else some clique of
  // each, already raised cell by cell).
  void raise_blocks(int lo, int hi, int64_t h, bool whole) {
    const int sl = lo / kBlock, sh = (hi - 1) / kBlock;
    for (int s = sl; s <= sh; ++s) {
      const int from = std::max(lo, s * kBlock), to = std::min(hi, (s + 1) * kBlock);
      super_[s] = std::max(super_[s], h);
      if (whole && from == s * kBlock && to == (s + 1) * kBlock) {
        super_all_[s] = std::max(super_all_[s], h);
        continue;
      }
      for (int b = from; b < to; ++b) {
        block_[b] = std::max(block_[b], h);
        if (whole) block_all_[b] = std::max(block_all_[b], h);
      }
      redo(block_, block_pre_, block_suf_, s);
    }
  }
  // redo: block b's maxima from its start and to its end.
  static void redo(const std::vector<int64_t>& v, std::vector<int64_t>& pre, std::vector<int64_t>& suf, int b) {
    const int s = b * kBlock, e = s + kBlock;
    int64_t m = 0;
    for (int c = s; c < e; ++c) pre[c] = m = std::max(m, v[c]);
    m = 0;
    for (int c = e - 1; c >= s; --c) suf[c] = m = std::max(m, v[c]);
  }

  std::vector<int64_t> cell_, pre_, suf_;        // per clique: its floor; maxima from its block's start, to its end
  std::vector<int64_t> block_, block_pre_, block_suf_;  // per block: its highest floor (but super_all_); the same
  std::vector<int64_t> block_all_;               // per block: the largest raise that covered it whole
  std::vector<int64_t> super_, super_all_;       // per superblock: its highest floor; the largest whole raise
};

// sort_runs: sorts v, which is a few ascending runs end to end (a level's list: each level
// taken adds its buffers in rank order; Note [Skyline speed]), merging neighbouring runs
// in passes through `scratch`: O(n log runs) where std::sort is O(n log n).
void sort_runs(std::vector<int>& v, std::vector<int>& scratch) {
  std::vector<size_t> runs{0};  // where each run starts
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) runs.push_back(i);
  }
  while (runs.size() > 1) {
    scratch.resize(v.size());
    std::vector<size_t> next;
    for (size_t k = 0; k < runs.size(); k += 2) {
      const size_t a = runs[k], b = k + 1 < runs.size() ? runs[k + 1] : v.size();
      const size_t e = k + 2 < runs.size() ? runs[k + 2] : v.size();
      auto at = [](std::vector<int>& x, size_t i) { return x.begin() + static_cast<std::ptrdiff_t>(i); };
      std::merge(at(v, a), at(v, b), at(v, b), at(v, e), at(scratch, a));
      next.push_back(a);
    }
    v.swap(scratch);
    runs.swap(next);
  }
}

// skyline: at the deadline (less the time that takes), the buffers not yet placed go at
// their floors in rank order (valid, and quick: one range query and one raise each), so a
// skyline cut short still gives a plan, its first part the skyline's own. Empty when the
// pace may give up and says, before then, that it cannot finish.
std::vector<uint64_t> skyline(const Problem& p, const std::vector<int>& rank, const Pace& pace) {
  Floors floors(p.cliques);
  std::vector<uint64_t> off(p.n, kUnplaced);
  std::vector<int> by_rank(p.n);
  for (int i = 0; i < p.n; ++i) by_rank[rank[i]] = i;
  // The unplaced buffers (by rank) waiting at each level, and the levels, least on top.
  absl::flat_hash_map<uint64_t, std::vector<int>> waiting;
  std::vector<uint64_t> levels;
  std::vector<int>& all = waiting[0];
  all.resize(p.n);
  std::iota(all.begin(), all.end(), 0);
  levels.push_back(0);
  uint64_t placed = 0, looks = 0;
  std::vector<int> now, merged;
  uint64_t last_floor = 0;               // the floor last looked up in `waiting` (0: none)
  std::vector<int>* last_list = nullptr;  // its list
  while (!levels.empty()) {
    std::pop_heap(levels.begin(), levels.end(), std::greater<>());
    const uint64_t level = levels.back();
    levels.pop_back();
    now = std::move(waiting.extract(level).mapped());
    sort_runs(now, merged);
    last_floor = 0;  // none: a stale buffer's floor is above `level`, so never 0
    for (const int r : now) {
      // Late: the deadline comes before the buffers left could be put at their floors
      // (about half a microsecond each on 60,000 buffers; a microsecond is counted).
      if ((++looks & 1023) == 0) {
        if (Clock::now() + std::chrono::microseconds(p.n - placed) <= pace.deadline) {
          if (pace.hopeless(placed, p.n)) return {};  // it would not finish
        } else {
          for (int q = 0; q < p.n; ++q) {
            const int b = by_rank[q];
            if (off[b] != kUnplaced) continue;
            off[b] = floors.max(p.first[b], p.last[b]);
            floors.raise(p.first[b], p.last[b], off[b] + p.size[b]);
          }
          return off;
        }
      }
      const int b = by_rank[r];
      const uint64_t floor = floors.max(p.first[b], p.last[b]);
      if (floor > level) {  // stale: wait at the floor it has now
        if (floor != last_floor) {  // runs of them go to one floor: one look-up for the run
          auto [it, fresh] = waiting.try_emplace(floor);
          if (fresh) {
            levels.push_back(floor);
            std::push_heap(levels.begin(), levels.end(), std::greater<>());
          }
          last_floor = floor;
          last_list = &it->second;  // stays valid until the next insertion, which sets it anew
        }
        last_list->push_back(r);
        continue;
      }
      off[b] = floor;
      floors.raise(p.first[b], p.last[b], floor + p.size[b]);
      ++placed;
    }
  }
  return off;
}

// ----------------------------------------------------------------------------------------
// Local improvement (Note [Local improvement]).
//
// Note [Local improvement]
// A heuristic's plan on a large trace is usually a few percent above the bound because of
// gaps under the buffers at its peak. Starting from a plan (plan_whole gives its best,
// greedy by size's on a tie), each move takes one buffer whose top is the peak, a window
// of time around its lifetime (its own, stretched by up to its length on each side) and a
// band of height under the peak (a random share, 2-60%, of it), lifts out every buffer
// that overlaps the window and reaches into the band, and puts them back one by one, each
// at the lowest offset where it fits among every other buffer it overlaps (the others stay
// where they are): largest first, or in their old order of offset, or the old order with a
// few swapped, chosen at random. The move is kept when the tops of the buffers it moved
// stay below the peak (the peak then falls, or at least one buffer fewer reaches it), or
// reach it but add up to less than before (they settled lower, opening room for later
// moves); otherwise it is undone. Moves repeat until the deadline or the goal. It is weak:
// 0.5-1.2% on micro-batches of vit_tiny in flight at 5-30 s, nothing on the GPT's, nothing
// from a skyline's plan (docs/tma.md); moves that lift only a thin band (1-5% of the peak)
// kept none of 1,000-12,000. Overlaps come from the greedy's segment tree over the
// cliques; the tops from a tree of maxima over the buffers.
class TopTree {
 public:
  explicit TopTree(const std::vector<uint64_t>& top) {
    leaves_ = 1;
    while (leaves_ < static_cast<int>(top.size())) leaves_ *= 2;
    max_.assign(2 * leaves_, 0);
    for (size_t i = 0; i < top.size(); ++i) max_[leaves_ + i] = top[i];
    for (int k = leaves_ - 1; k >= 1; --k) max_[k] = std::max(max_[2 * k], max_[2 * k + 1]);
  }
  uint64_t max() const { return max_[1]; }
  void set(int i, uint64_t v) {
    int k = leaves_ + i;
    max_[k] = v;
    for (k /= 2; k >= 1; k /= 2) max_[k] = std::max(max_[2 * k], max_[2 * k + 1]);
  }
  // some_at_max: a buffer whose top is the maximum, a random one of the subtrees that hold it.
  int some_at_max(std::mt19937_64& rng) const {
    int k = 1;
    while (k < leaves_) {
      const bool l = max_[2 * k] == max_[1], r = max_[2 * k + 1] == max_[1];
      k = 2 * k + (l && r ? static_cast<int>(rng() & 1) : r ? 1 : 0);
    }
    return k - leaves_;
  }

 private:
  int leaves_ = 1;
  std::vector<uint64_t> max_;
};

// improve: the moves until the deadline, the goal or max_moves (0: no limit) moves; the
// moves kept are added to *moves_kept. The random choices come from `seed` alone, so with
// max_moves and time enough the result is the same on every run.
std::vector<uint64_t> improve(const Problem& p, std::vector<uint64_t> off, uint64_t goal, Clock::time_point deadline,
                              uint64_t seed, int64_t max_moves, int64_t* moves_kept) {
  std::mt19937_64 rng(seed);
  PlacedIndex index(p.cliques, p.n);
  std::vector<uint64_t> top(p.n);
  for (int i = 0; i < p.n; ++i) {
    index.insert(i, p.first[i], p.last[i]);
    top[i] = off[i] + p.size[i];
  }
  TopTree tops(top);
  std::vector<char> out(p.n, 0);   // lifted out by the move in progress
  std::vector<int> lifted;
  std::vector<uint64_t> old;
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  std::uniform_real_distribution<double> u(0, 1);
  int64_t move = 0;
  for (; Clock::now() < deadline && tops.max() > goal && (max_moves == 0 || move < max_moves); ++move) {
    const uint64_t peak = tops.max();
    const int b = tops.some_at_max(rng);
    const int len = p.last[b] - p.first[b];
    const int lo = std::max(0, p.first[b] - static_cast<int>(u(rng) * len));
    const int hi = std::min(p.cliques, p.last[b] + static_cast<int>(u(rng) * len));
    const uint64_t band = static_cast<uint64_t>((0.02 + 0.58 * u(rng)) * static_cast<double>(peak));
    lifted.clear();
    index.collect(lo, hi, [&](int v) {
      if (top[v] > peak - std::min(band, peak)) lifted.push_back(v);
    });
    // The order they go back in.
    const double how = u(rng);
    if (how < 0.4) {
      std::sort(lifted.begin(), lifted.end(), [&](int x, int y) {
        return p.size[x] != p.size[y] ? p.size[x] > p.size[y] : p.length[x] > p.length[y];
      });
    } else {
      std::sort(lifted.begin(), lifted.end(), [&](int x, int y) { return off[x] != off[y] ? off[x] < off[y] : x < y; });
      if (how >= 0.7) {
        for (size_t k = 0; k + 1 < lifted.size(); ++k) {
          if (u(rng) < 0.2) std::swap(lifted[k], lifted[k + 1 + rng() % std::min<size_t>(4, lifted.size() - k - 1)]);
        }
      }
    }
    old.resize(lifted.size());
    for (size_t k = 0; k < lifted.size(); ++k) {
      old[k] = off[lifted[k]];
      out[lifted[k]] = 1;
    }
    uint64_t worst = 0;
    for (int v : lifted) {
      if (Clock::now() > deadline) {  // a placement costs microseconds: read every time
        worst = peak + 1;  // out of time: undone below
        break;
      }
      busy.clear();
      index.collect(p.first[v], p.last[v], [&](int w) {
        if (w != v && !out[w]) busy.push_back({off[w], off[w] + p.size[w]});
      });
      const uint64_t at = lowest_fit(busy, p.size[v]);
      off[v] = at;
      out[v] = 0;
      worst = std::max(worst, at + p.size[v]);
      if (worst > peak) break;  // this move cannot be kept
    }
    uint64_t before = 0, after = 0;
    if (worst <= peak) {
      for (size_t k = 0; k < lifted.size(); ++k) {
        before += old[k] + p.size[lifted[k]];
        after += off[lifted[k]] + p.size[lifted[k]];
      }
    }
    if (worst < peak || (worst == peak && after < before)) {
      for (int v : lifted) {
        top[v] = off[v] + p.size[v];
        tops.set(v, top[v]);
      }
      ++*moves_kept;
    } else {
      for (size_t k = 0; k < lifted.size(); ++k) {
        off[lifted[k]] = old[k];
        out[lifted[k]] = 0;
      }
    }
  }
  return off;
}

// ----------------------------------------------------------------------------------------
// Preorders: the rank that breaks ties between buffers that can sit at the same offset,
// in the skyline and the search. Keys, all descending: T, the most bytes live at once
// anywhere in the buffer's lifetime; W, its width (upper - lower, ticks); C, the cliques
// it spans; Z, its size; A, its area (size x width).

std::vector<int> preorder(const Problem& p, const std::string& keys) {
  // T: the most bytes in any clique of the buffer's range, by a tree of maxima over the
  // cliques (a loop over each range cost 25 ms on 60,000 long-lived buffers).
  std::vector<uint64_t> total(p.n, 0);
  if (keys.find('T') != std::string::npos) {
    int leaves = 1;
    while (leaves < p.cliques) leaves *= 2;
    std::vector<uint64_t> tree(2 * leaves, 0);
    for (int c = 0; c < p.cliques; ++c) tree[leaves + c] = p.clique_bytes[c];
    for (int k = leaves - 1; k >= 1; --k) tree[k] = std::max(tree[2 * k], tree[2 * k + 1]);
    for (int i = 0; i < p.n; ++i) {
      uint64_t m = 0;
      for (int l = p.first[i] + leaves, r = p.last[i] + leaves; l < r; l /= 2, r /= 2) {
        if (l & 1) m = std::max(m, tree[l++]);
        if (r & 1) m = std::max(m, tree[--r]);
      }
      total[i] = m;
    }
  }
  auto key = [&](int i, char k) -> double {
    switch (k) {
      case 'T': return static_cast<double>(total[i]);
      case 'W': return static_cast<double>(p.length[i]);
      case 'C': return p.last[i] - p.first[i];
      case 'Z': return static_cast<double>(p.size[i]);
      case 'A': return static_cast<double>(p.size[i]) * static_cast<double>(p.length[i]);
      case 'S': return -static_cast<double>(p.first[i]);
    }
    return 0;
  };
  // The keys computed once per buffer (up to three, as every preorder here has), then sorted.
  struct Keyed {
    double k[3];
    int i;
  };
  std::vector<Keyed> keyed(p.n);
  const size_t nk = std::min<size_t>(keys.size(), 3);
  for (int i = 0; i < p.n; ++i) {
    keyed[i] = Keyed{{0, 0, 0}, i};
    for (size_t c = 0; c < nk; ++c) keyed[i].k[c] = key(i, keys[c]);
  }
  std::sort(keyed.begin(), keyed.end(), [](const Keyed& a, const Keyed& b) {
    for (int c = 0; c < 3; ++c) {
      if (a.k[c] != b.k[c]) return a.k[c] > b.k[c];
    }
    return a.i < b.i;
  });
  std::vector<int> rank(p.n);
  for (int r = 0; r < p.n; ++r) rank[keyed[r].i] = r;
  return rank;
}

// Note [Ties at random]
// In ZS order (the largest first, then the earlier start) many buffers tie: the same size
// starting in the same clique (a micro-batch's copies of one op's outputs). The order
// within a tie decides which of them takes a low slot, and on micro-batches of vit_tiny in
// flight that moves the skyline's plan between 1.0186x and 1.0372x of the bound (10,160
// buffers; by index order 1.0372x, by width 1.0248x). A skyline costs 20-130 ms there, so
// after the other heuristics, on problems of 1,000 buffers or more, plan() runs the skyline
// by ZS again with the ties shuffled (seeds 1, 2, ...) for up to kRandomTies tries and half
// of the time left: 12 tries gave 1.0186x on those 10,160 (100 gave no better), 1.0170x on
// 30,226 (1.0294x by index order), 1.0244x on 60,198 (1.0306x).
constexpr int kRandomTies = 16;

// shuffled_ties: `rank` (from preorder(p, "ZS")) with each run of buffers of equal size
// and first clique shuffled, from `seed` alone.
std::vector<int> shuffled_ties(const Problem& p, const std::vector<int>& rank, uint64_t seed) {
  std::vector<int> order(p.n);
  for (int i = 0; i < p.n; ++i) order[rank[i]] = i;
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && p.size[order[j]] == p.size[order[i]] && p.first[order[j]] == p.first[order[i]]) ++j;
    std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(i), order.begin() + static_cast<std::ptrdiff_t>(j), rng);
    i = j;
  }
  std::vector<int> out(p.n);
  for (int r = 0; r < p.n; ++r) out[order[r]] = r;
  return out;
}

// ----------------------------------------------------------------------------------------
// Method (c): branch and bound on the decision problem "every buffer below capacity C".
//
// Canonical placements: every plan can be pushed down until each buffer rests on one it
// overlaps (or on 0) without raising its peak; sorted by (offset, rank), such a plan
// places each buffer at its floor, the highest end among the placed buffers it overlaps.
// So a node places one unplaced buffer at its floor, and its children only buffers whose
// (floor, rank) is not below it. Pruned:
//  - section inference: in every clique, the unplaced buffers there stack above the lowest
//    of their floors (and above the current offset), so that floor plus their bytes must
//    fit below C;
//  - dominance: a buffer is not placed at or above the lowest end any unplaced buffer
//    could take (that one could drop into the gap below, a plan no worse);
//  - hatless: when the buffer just placed overlaps no unplaced one, it changed nothing for
//    the others, so if the subtree fails no other choice at this node can succeed;
//  - symmetry: of identical buffers (same lifetime and size) the lower rank goes first;
//  - decomposition: when no unplaced buffer spans a clique boundary, the two sides are
//    independent and solved one after the other, so a failure on one side never
//    re-searches the other.
// Limited by time, and by nodes: searches of the preorders take turns and resume where
// they paused (Note [Searches in turns]), or on larger problems restart with doubling
// limits in rounds.

// SearchIndex: what every search of one Problem reads and none writes: who overlaps whom,
// each clique's members, and twins. Shared by the searches of parallel threads.
struct SearchIndex {
  // complete: false when the pace gave up on building it (then nothing else is filled).
  SearchIndex(const Problem& p, const Pace& pace) {
    // Overlap lists: pairs whose clique ranges meet, found in order of first clique.
    std::vector<int> by_first(p.n);
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int a, int b) {
      return p.first[a] != p.first[b] ? p.first[a] < p.first[b] : a < b;
    });
    std::vector<int> degree(p.n, 0);
    // Both passes count as steps of the pace: 2n.
    auto for_pairs = [&](int pass, auto&& f) {
      for (int i = 0; i < p.n; ++i) {
        if ((i & 255) == 255 && pace.hopeless(static_cast<uint64_t>(pass) * p.n + i, 2 * static_cast<uint64_t>(p.n))) {
          return false;
        }
        const int a = by_first[i];
        for (int j = i + 1; j < p.n && p.first[by_first[j]] < p.last[a]; ++j) f(a, by_first[j]);
      }
      return true;
    };
    if (!for_pairs(0, [&](int a, int b) {
          ++degree[a];
          ++degree[b];
        })) {
      return;
    }
    adj_start.assign(p.n + 1, 0);
    for (int i = 0; i < p.n; ++i) adj_start[i + 1] = adj_start[i] + degree[i];
    adj.resize(adj_start[p.n]);
    std::vector<int64_t> fill(adj_start.begin(), adj_start.end() - 1);
    if (!for_pairs(1, [&](int a, int b) {
          adj[fill[a]++] = b;
          adj[fill[b]++] = a;
        })) {
      return;
    }
    // Members of each clique.
    member_start.assign(p.cliques + 1, 0);
    for (int i = 0; i < p.n; ++i) {
      for (int s = p.first[i]; s < p.last[i]; ++s) ++member_start[s + 1];
    }
    for (int s = 0; s < p.cliques; ++s) member_start[s + 1] += member_start[s];
    members.resize(member_start[p.cliques]);
    std::vector<int64_t> at(member_start.begin(), member_start.end() - 1);
    for (int i = 0; i < p.n; ++i) {
      for (int s = p.first[i]; s < p.last[i]; ++s) members[at[s]++] = i;
    }
    // Twins: the previous buffer (by index) of the same lifetime and size (as asked: with
    // alignment, the top buffer's own bytes count). Twins tie on every preorder key, so
    // their ranks keep index order.
    twin_prev.assign(p.n, -1);
    absl::flat_hash_map<Twin, int> last_of;
    for (int i = 0; i < p.n; ++i) {
      auto [it, inserted] = last_of.try_emplace(Twin{p.first[i], p.last[i], p.length[i], p.bytes[i]}, i);
      if (!inserted) {
        twin_prev[i] = it->second;
        it->second = i;
      }
    }
    complete = true;
  }

  struct Twin {
    int first, last;
    uint64_t length;
    uint64_t size;
    bool operator==(const Twin&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Twin& k) {
      return H::combine(std::move(h), k.first, k.last, k.length, k.size);
    }
  };

  bool complete = false;
  std::vector<int64_t> adj_start;
  std::vector<int> adj;           // the buffers each buffer overlaps
  std::vector<int64_t> member_start;
  std::vector<int> members;       // the buffers of each clique
  std::vector<int> twin_prev;     // the previous twin, or -1
};

// Note [Searches in turns]
// Each of the search's preorders solves some of MiniMalloc's instances in 500 to 500,000
// nodes where the others need millions, so they are run side by side. Run as tasks with node
// limits doubling at each round, every round started its search again from nothing: B
// took 1,227,923 nodes where its one preorder that succeeds (TAW) needs 206,898, H
// 1,179,146 for 158,121. On problems up to kTurnsMaxBuffers buffers, each search now runs
// on a thread of its own and pauses after its share of nodes (a Baton hands the turn back
// to the scheduler); at its next turn it goes on where it stopped. A search ends only
// when it finds a plan, proves there is none, is no longer wanted (its capacity is at or
// above the best plan, or below what is proven infeasible) or the time is up. One search
// runs at a time per thread asked for, so the planner still uses `threads` cores. Above
// kTurnsMaxBuffers the rounds stay: six paused searches would each hold a candidate stack
// (16 MiB on 10,160 buffers).
constexpr int kTurnsMaxBuffers = 2000;
// Note [Turns without a barrier]
// With threads > 1 the scheduler used to run `threads` searches at once and wait for all of
// them before the next turn: a goal search's turn is twice a halfway one's, so a core idled
// while the longer turn ran. Now each search that hands its turn back rings a Doorbell and
// the scheduler gives the freed core the next search in turn at once; the order of turns and
// each search's nodes a turn are as before (with one thread the schedule is the same).
// MiniMalloc's E with two threads and no target (three runs each, interleaved with the
// binary before): its plan at 1,048,576 after 1.25-1.29 s against 1.50-1.61 s, the same 3.07
// million nodes in 1.8-1.9 s of CPU either way, so 1.4-1.5 cores busy against 1.2. Turns four
// and sixteen times longer took E to 1.10 and 1.00 s (1.6 cores; so the two hand-overs
// between threads a turn are the likely cost, not measured); not kept: the turns and the
// shares were chosen on one thread, and were not measured again there.
// Retiring a paused search (waking it to unwind, joining its thread): 0.09 ms measured on
// MiniMalloc's J (eight of them in 0.7 ms), but 0.03-3.6 ms each on a busier day, when the
// eight left at the end of D took 1.1-7.6 ms one after another (seven runs) and D's runs
// ended up to 16 ms past a 1 s limit (2026-12-01). Now the searches left at the end are all
// woken first and then joined, so their wake-ups overlap: 0.4-2.6 ms for the eight on D and
// J in 50 runs of 54, 3.9-10.6 ms in the other four. 0.45 ms a search is counted (2.7 ms
// for six; with 0.15 ms, D and J still ended up to 8 ms late in 8 runs of 16).
constexpr double kRetireSec = 4.5e-4;

// Note [Turn length]
// A search's turn is kTurnWork / n nodes at the goal (at least first_limit: 2n, or 1,000),
// a node's work growing with the buffers: 8,800-23,500 nodes on MiniMalloc's A-K, about 5
// ms (0.2-0.4 us a node). Turns of first_limit nodes (1,000 there, about 0.3 ms) spent
// nearly half the time handing turns over: each hand-over wakes the scheduler and the
// next search's thread, and cost 0.1-0.25 ms here (B without a target: 1,236,898 nodes
// in about 1,850 turns took 0.73-0.95 s in two sets of runs; 1,137,947 in 72 turns of this
// length 0.47-0.54 s; not traced further). With these turns E reaches its bound without a
// target in 0.71-0.83 s, where it stayed at 1.1025x at 1 s (docs/tma.md).
constexpr int64_t kTurnWork = 4'000'000;
// A search a step down from the best plan gets an eighth of the goal's turn (halfway's gets
// half), as the rounds give it a quarter of their nodes: it is there to lower a plan
// quickly, not to take the goal's time. The plans it found on MiniMalloc's D and J took
// 256-8,833 nodes each. With half a turn, as halfway's, E took 1,948,500 nodes to its bound
// without a target (its goal's TWA search got a quarter of them) and missed the 1 s limit
// in two runs of three that morning; with an eighth, 1,604,970, and the other instances of
// A-K that reach their bound 15-20% fewer nodes (C the same 8,450). D's plan at 1,046,528,
// found by its halfway search, came sooner (0.39-0.60 s against 0.67-0.77, three runs each
// interleaved; 2026-12-02). The earlier trial of shares (docs/tma.md, "MiniMalloc's A-K
// without a target") lost D at these shares, with three preorders and turns of 1,000 nodes.
constexpr int kStepDownTurnDiv = 8;

// Doorbell: rung by each search that hands its turn back, so that the scheduler, with
// several searches running, takes up whichever pauses first.
class Doorbell {
 public:
  void ring() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++rings_;
    }
    cv_.notify_one();
  }
  // wait: until a ring since the last wait (at once if one came meanwhile).
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return rings_ > 0; });
    rings_ = 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t rings_ = 0;
};

// Baton: passes the turn between the scheduler and one search's thread.
class Baton {
 public:
  // Scheduler, before the first turn: the doorbell rung each time the search hands its
  // turn back (pauses or ends).
  void set_doorbell(Doorbell* door) { door_ = door; }
  // Scheduler: the search may run until `limit` nodes in all; returns at once.
  void resume(int64_t limit) { hand(true, [&] { limit_ = limit; }); }
  // Scheduler: whether the turn is back (the search paused or ended).
  bool paused() {
    std::lock_guard<std::mutex> lock(mu_);
    return !search_turn_;
  }
  // Scheduler, once paused(): whether the search has ended.
  bool ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  // Scheduler: a paused (or not yet started) search ends without running further.
  void cancel() { hand(true, [&] { cancelled_ = true; }); }
  // Search: waits for its first turn; false when cancelled before it.
  bool begin(int64_t* limit) { return await(limit); }
  // Search: hands the turn back and waits for the next; false when cancelled meanwhile.
  bool pause(int64_t* limit) {
    hand(false, [] {});
    return await(limit);
  }
  // Search: ended; the turn is the scheduler's for good.
  void end() { hand(false, [&] { ended_ = true; }); }

 private:
  // hand: the turn to the search (or to the scheduler), after `also` under the lock.
  template <typename F>
  void hand(bool to_search, F&& also) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      also();
      search_turn_ = to_search;
      cv_.notify_all();
    }
    if (!to_search && door_ != nullptr) door_->ring();
  }
  bool await(int64_t* limit) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return search_turn_; });
    *limit = limit_;
    return !cancelled_;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool search_turn_ = false, cancelled_ = false, ended_ = false;
  int64_t limit_ = 0;
  Doorbell* door_ = nullptr;
};

// Note [Tight cliques]
// At every node the search checks each clique of its part: the unplaced buffers of clique
// s stack above their lowest floor (at least the current offset), so that floor plus their
// bytes total_[s] must fit the limit. Reading every clique's lowest floor meant a pass over
// each unplaced buffer's cliques at every node: 40% of the search's time on MiniMalloc's B
// (perf). Two cheaper tests decide most cliques without it: cur_off + total_[s] over the
// limit prunes at once, and where limit - total_[s] is at least the highest floor of any
// unplaced buffer, no floor of s can exceed it, so s passes. Only the other ("tight")
// cliques need their lowest floor, read from their member lists, or, when those lists
// are longer than the unplaced buffers' spans, by the pass as before. The release-date
// bound (stack_fits) reads its clique's floors from the members it walks anyway. The same
// nodes are pruned: the search visits the same nodes as before, in the same order (A..K
// with their targets: the same node counts), each faster: B 0.51 s against 0.64, E 0.96
// against 1.32, H 0.46 against 1.02 (2026-11-30).

// Note [Parts in place]
// The parts of the splits in force sit on one vector, each split's parts pushed together
// and popped when its search returns. A search holds references into it (a part's buffer
// list is `from` below it), so it must never reallocate: the splits in force are nested,
// each dividing one part of the split outside it into at least two, so they hold at most
// 2 x cliques parts, the room run() reserves. It was a deque, whose indexing and pushes
// took 7.5% of the search on MiniMalloc's E (perf).

// Note [Counts kept]
// A node used to begin with a pass over its part's unplaced buffers for their count, the
// cliques they span and their highest floor (30% of the search's time on MiniMalloc's E,
// perf), and to read the lowest floor of every tight clique. Now the part keeps the count
// and the spans as place() takes buffers out and puts them back; the highest floor is a
// bound passed down (placing u raises no floor above u's end); and only the cliques whose
// lowest floor may have risen since the node above are read: those of u and of the
// buffers whose floor u raised. Every other clique passed at the node above, and still
// passes: its unplaced bytes did not grow and its lowest floor did not rise, and the
// offset's own test (cur_off plus the clique's bytes) is made for every clique, skipped
// only when a bound on the part's most bytes clears them all. The same nodes are pruned,
// in the same order: with their targets, A..K took the same node counts to the one, E in
// 0.61x the time and B in 0.53x (docs/tma.md, "Counts kept instead of counted").
class BranchAndBound {
 public:
  enum class Outcome { kFound, kNotFound, kAborted };

  // cancel: when set (by another thread), a run stops as at its deadline.
  BranchAndBound(const Problem& p, const SearchIndex& index, const std::atomic<bool>* cancel)
      : p_(p), ix_(index), cancel_(cancel) {}

  // late: no time left before `deadline` for a run and freeing what the search holds.
  bool late(Clock::time_point deadline) const { return Clock::now() + release_time() >= deadline; }

  // nodes: search nodes of the last run.
  int64_t nodes() const { return nodes_; }

  // set_baton: past its node limit, a run pauses on `baton` for more nodes instead of
  // stopping (Note [Searches in turns]); null: it stops.
  void set_baton(Baton* baton) { baton_ = baton; }

  // run: one search at capacity C, preorder keys `keys` (see preorder()), at most
  // node_limit nodes, until deadline. kNotFound is a proof that nothing fits below C.
  Outcome run(uint64_t capacity, const std::string& keys, int64_t node_limit, Clock::time_point deadline,
              std::vector<uint64_t>* offsets) {
    const Problem& p = p_;
    capacity_ = capacity;
    limit_ = capacity + p.pad;
    keys_ = keys;
    node_limit_ = node_limit;
    deadline_ = deadline;
    nodes_ = 0;
    if (p.lower_bound > limit_) return Outcome::kNotFound;
    off_.assign(p.n, kUnplaced);
    solution_.assign(p.n, kUnplaced);
    minoff_.assign(p.n, 0);
    walled_ = !p.walls.empty();
    if (walled_) {
      for (int i = 0; i < p.n; ++i) minoff_[i] = floor_at(i, 0);
    }
    rank_.assign(p.n, 0);
    total_ = p.clique_bytes;
    low_.assign(p.cliques, kUnplaced);
    cuts_.assign(std::max(p.cliques - 1, 0), 0);
    std::vector<int> diff(p.cliques + 1, 0);
    for (int i = 0; i < p.n; ++i) {
      if (p.last[i] - p.first[i] < 2) continue;
      ++diff[p.first[i]];
      --diff[p.last[i] - 1];
    }
    int run = 0;
    for (int k = 0; k + 1 < p.cliques; ++k) cuts_[k] = run += diff[k];
    cands_.clear();
    if (static_cast<int>(splits_.size()) < p.n + 2) splits_.resize(p.n + 2);
    if (static_cast<int>(alive_.size()) < p.n + 2) alive_.resize(p.n + 2);
    parts_.clear();
    parts_.reserve(2 * static_cast<size_t>(p.cliques) + 2);  // never outgrown (Note [Parts in place])
    minoff_log_.clear();
    // Top-level parts: cut wherever no buffer spans the boundary.
    std::vector<int> cut;
    for (int k = 0; k + 1 < p.cliques; ++k) {
      if (cuts_[k] == 0) cut.push_back(k);
    }
    std::vector<int> all(p.n);
    std::iota(all.begin(), all.end(), 0);
    const Outcome r = split_and_solve(all, 0, p.cliques, cut, 0, -1, 0);
    if (r == Outcome::kFound) *offsets = solution_;
    return r;
  }

 private:
  struct Part {
    std::vector<int> buffers;  // unplaced when the part was made
    int lo, hi;                // cliques [lo, hi)
    // Kept as buffers are placed and unplaced (Note [Counts kept]): how many of `buffers`
    // are unplaced, the cliques they span (summed), and the highest floor among them when
    // the part was made.
    int alive = 0;
    int64_t spans = 0;
    uint64_t max_floor = 0;
  };

  // split_and_solve: the unplaced buffers of `buffers` in cliques [lo, hi), cut after each
  // clique in `cut`, solved part by part, the part with the most bytes left first (fail
  // first). Each part gets its own preorder, T taken from the bytes still unplaced; as
  // ranks are new, the canonical order restarts at the current offset with any rank.
  // `placed`: the buffer placed last (-1: none).
  Outcome split_and_solve(const std::vector<int>& buffers, int lo, int hi, const std::vector<int>& cut,
                          uint64_t cur_off, int placed, int depth) {
    const size_t base = parts_.size();
    std::vector<int> bounds;
    bounds.reserve(cut.size() + 2);
    bounds.push_back(lo);
    for (int k : cut) bounds.push_back(k + 1);
    bounds.push_back(hi);
    // A reallocation would leave the searches above with dangling references: never
    // happens (Note [Parts in place]), and checked.
    if (parts_.size() + bounds.size() - 1 > parts_.capacity()) std::abort();
    for (size_t j = 0; j + 1 < bounds.size(); ++j) parts_.push_back({{}, bounds[j], bounds[j + 1]});
    for (int u : buffers) {
      if (off_[u] != kUnplaced) continue;
      const size_t j = std::upper_bound(bounds.begin(), bounds.end(), p_.first[u]) - bounds.begin() - 1;
      Part& part = parts_[base + j];
      part.buffers.push_back(u);
      ++part.alive;
      part.spans += p_.last[u] - p_.first[u];
      part.max_floor = std::max(part.max_floor, minoff_[u]);
    }
    std::vector<std::pair<uint64_t, size_t>> order;
    for (size_t j = base; j < parts_.size(); ++j) {
      if (parts_[j].buffers.empty()) continue;
      uint64_t most = 0;
      for (int s = parts_[j].lo; s < parts_[j].hi; ++s) most = std::max(most, total_[s]);
      order.push_back({most, j});
    }
    std::sort(order.begin(), order.end(), std::greater<>());
    std::vector<std::pair<int, int>> saved;  // (buffer, rank) to restore
    struct Keyed {
      double k[3];
      int u;
    };
    std::vector<Keyed> keyed;
    for (const auto& [most, j] : order) {
      keyed.clear();
      for (int u : parts_[j].buffers) {
        saved.push_back({u, rank_[u]});
        Keyed e{{0, 0, 0}, u};
        for (size_t c = 0; c < keys_.size() && c < 3; ++c) e.k[c] = key(u, keys_[c]);
        keyed.push_back(e);
      }
      std::sort(keyed.begin(), keyed.end(), [](const Keyed& a, const Keyed& b) {
        for (int c = 0; c < 3; ++c) {
          if (a.k[c] != b.k[c]) return a.k[c] > b.k[c];
        }
        return a.u < b.u;
      });
      for (size_t r = 0; r < keyed.size(); ++r) rank_[keyed[r].u] = static_cast<int>(r);
    }
    Outcome r = Outcome::kFound;
    for (const auto& [most, j] : order) {
      r = search(j, cur_off, -1, placed, depth, parts_[j].buffers, parts_[j].max_floor, parts_[j].lo, parts_[j].hi,
                 kUnplaced);
      if (r != Outcome::kFound) break;
    }
    for (const auto& [u, rk] : saved) rank_[u] = rk;
    parts_.resize(base);
    return r;
  }

  // key: a preorder key of buffer i now (T counts only unplaced bytes).
  double key(int i, char k) const {
    const Problem& p = p_;
    switch (k) {
      case 'T': {
        uint64_t t = 0;
        for (int s = p.first[i]; s < p.last[i]; ++s) t = std::max(t, total_[s]);
        return static_cast<double>(t);
      }
      case 'W': return static_cast<double>(p.length[i]);
      case 'C': return p.last[i] - p.first[i];
      case 'Z': return static_cast<double>(p.size[i]);
      case 'A': return static_cast<double>(p.size[i]) * static_cast<double>(p.length[i]);
    }
    return 0;
  }

  // search: a node of part `part`; the buffer placed last (`placed`, -1: none) went to
  // cur_off with rank cur_rank.
  // `from`: the part's buffers, or a list of them that holds every unplaced one.
  // `max_floor`: at least the highest floor of the part's unplaced buffers. Cliques
  // [changed_lo, changed_hi): where a lowest floor may have risen since the node above
  // (Note [Counts kept]); the whole part at a part's first node. `max_total`: at least the
  // most unplaced bytes of any of the part's cliques (kUnplaced: not known).
  Outcome search(size_t part, uint64_t cur_off, int cur_rank, int placed, int depth, const std::vector<int>& from,
                 uint64_t max_floor, int changed_lo, int changed_hi, uint64_t max_total) {
    if (++nodes_ > node_limit_ && (baton_ == nullptr || !baton_->pause(&node_limit_))) return Outcome::kAborted;
    // A node scans the unplaced buffers of its part: past a few thousand buffers each takes
    // a fraction of a millisecond, so the clock is read at every node there; below, every
    // 64 nodes (a node took up to 3.3 us on MiniMalloc's D, so 256 of them 0.85 ms). The
    // search stops early enough to free its candidate stack by the deadline
    // (kReleaseNsPerByte).
    if ((nodes_ & (p_.n > 2000 ? 0 : 63)) == 0 &&
        (late(deadline_) || cancel_->load(std::memory_order_relaxed))) {
      return Outcome::kAborted;
    }
    const Problem& p = p_;
    const int lo = parts_[part].lo, hi = parts_[part].hi;
    const size_t n_alive = parts_[part].alive;
    const int64_t spans = parts_[part].spans;  // cliques the unplaced buffers span, summed
    if (n_alive == 0) return Outcome::kFound;
    // Note [Search memory]: the unplaced buffers become this depth's own list only when
    // they are at most half of `from`, so the lists down one branch hold at most about
    // twice the part's buffers, not a list per depth (10,000 buffers deep, that was 400
    // MiB); a list that is not copied is `from` itself, scanned past its placed ones.
    std::vector<int>& own = alive_[depth];
    own.clear();
    if (2 * n_alive <= from.size()) {
      for (int u : from) {
        if (off_[u] == kUnplaced) own.push_back(u);
      }
      own.shrink_to_fit();
    } else if (own.capacity() > 0) {
      std::vector<int>().swap(own);
    }
    const std::vector<int>& alive = own.empty() ? from : own;
    // Section inference: the unplaced buffers of a clique stack above their floors, so the
    // lowest floor (at least the current offset) plus their bytes must fit; the lowest
    // floor is read only where it can decide (Note [Tight cliques]).
    if (max_total > limit_ - cur_off) {  // cur_off is below the limit: a buffer starts there
      uint64_t most = 0;
      for (int s = lo; s < hi; ++s) {
        if (cur_off + total_[s] > limit_) return Outcome::kNotFound;  // each below 2^63: no wrap
        most = std::max(most, total_[s]);
      }
      max_total = most;
    }
    tight_.clear();
    int64_t members = 0;
    for (int s = std::max(changed_lo, lo); s < std::min(changed_hi, hi); ++s) {
      if (limit_ - total_[s] >= max_floor) continue;
      tight_.push_back(s);
      members += ix_.member_start[s + 1] - ix_.member_start[s];
    }
    auto over = [&](int s, uint64_t low) { return low != kUnplaced && std::max(low, cur_off) + total_[s] > limit_; };
    if (members <= spans) {
      for (int s : tight_) {
        if (over(s, lowest_floor(s))) return Outcome::kNotFound;
      }
    } else {
      std::fill(low_.begin() + lo, low_.begin() + hi, kUnplaced);
      for (int u : alive) {
        if (off_[u] != kUnplaced) continue;
        const uint64_t m = minoff_[u];
        for (int s = p.first[u]; s < p.last[u]; ++s) low_[s] = std::min(low_[s], m);
      }
      for (int s : tight_) {
        if (over(s, low_[s])) return Outcome::kNotFound;
      }
    }
    // Where the last buffer went, the exact least top of each clique's stack (one machine
    // with release dates): max over t of t + the bytes whose floor is >= t.
    if (placed >= 0) {
      for (int s = std::max(lo, p.first[placed]); s < std::min(hi, p.last[placed]); ++s) {
        if (!stack_fits(s, cur_off)) return Outcome::kNotFound;
      }
    }
    // The least end any unplaced buffer could take, for dominance below.
    uint64_t min_height = kUnplaced;
    for (int u : alive) {
      if (off_[u] == kUnplaced) min_height = std::min(min_height, minoff_[u] + p.size[u]);
    }
    // The candidates: unplaced buffers in canonical order after the last one, below the
    // least end any could take (dominance), fitting the capacity. They go on cands_, one
    // stack for every depth: this node's are [base, end), deeper nodes push theirs above
    // and take them off before returning. A vector per depth, each kept at its largest,
    // held 2 million ints in 3,355 vectors on 10,160 buffers, and freeing them when the
    // search stopped took 9-15 ms past its deadline; the stack takes 2 ms. They are written
    // in place into room for every unplaced buffer, then the stack is cut to them: pushed
    // one by one, the pushes took 4.6% of the search on MiniMalloc's B.
    const size_t base = cands_.size();
    cands_.resize(base + n_alive);  // grows geometrically
    size_t end = base;
    for (int u : alive) {
      if (off_[u] != kUnplaced) continue;
      const uint64_t m = minoff_[u];
      if ((m > cur_off || (m == cur_off && rank_[u] > cur_rank)) && m < min_height && m + p.bytes[u] <= capacity_) {
        cands_[end++] = u;
      }
    }
    cands_.resize(end);
    std::sort(cands_.begin() + static_cast<std::ptrdiff_t>(base), cands_.end(), [&](int a, int b) {
      return minoff_[a] != minoff_[b] ? minoff_[a] < minoff_[b] : rank_[a] < rank_[b];
    });
    Outcome result = Outcome::kNotFound;
    for (size_t k = base; k < end; ++k) {
      const int u = cands_[k];  // by index: deeper pushes may move the stack
      if (ix_.twin_prev[u] >= 0 && off_[ix_.twin_prev[u]] == kUnplaced) continue;
      bool hatless = true;
      const Outcome r = place(part, u, depth, alive, max_floor, max_total, &hatless);
      if (r != Outcome::kNotFound) {
        result = r;
        break;
      }
      if (hatless) break;
    }
    cands_.resize(base);
    return result;
  }

  // floor_at: the lowest offset at or above h where buffer v clears its walls (a window's
  // problem: walled_).
  uint64_t floor_at(int v, uint64_t h) const {
    const Problem& p = p_;
    for (int64_t k = p.wall_start[v]; k < p.wall_start[v + 1]; ++k) {
      const auto& [a, e] = p.walls[k];
      if (a >= h + p.size[v]) break;  // by offset: no later wall reaches down to h
      h = std::max(h, e);
    }
    return h;
  }

  // release_time: what freeing the candidate stack takes, at kReleaseNsPerByte.
  Clock::duration release_time() const {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::nano>(kReleaseNsPerByte * static_cast<double>(cands_.capacity() * sizeof(int))));
  }

  // lowest_floor: the least floor of clique s's unplaced buffers; kUnplaced when none is.
  uint64_t lowest_floor(int s) const {
    uint64_t low = kUnplaced;
    for (int64_t k = ix_.member_start[s]; k < ix_.member_start[s + 1]; ++k) {
      const int v = ix_.members[k];
      if (off_[v] != kUnplaced) continue;
      low = std::min(low, minoff_[v]);
    }
    return low;
  }

  // stack_fits: the release-date bound of clique s, which passed search()'s section
  // inference (so its lowest floor, at least cur_off, plus its bytes fit the limit).
  bool stack_fits(int s, uint64_t cur_off) {
    const Problem& p = p_;
    stack_.resize(ix_.member_start[s + 1] - ix_.member_start[s]);
    size_t n = 0;
    uint64_t high = 0, base = kUnplaced;
    for (int64_t k = ix_.member_start[s]; k < ix_.member_start[s + 1]; ++k) {
      const int v = ix_.members[k];
      if (off_[v] != kUnplaced) continue;
      const uint64_t f = std::max(minoff_[v], cur_off);
      high = std::max(high, f);
      base = std::min(base, f);
      stack_[n++] = {f, p.size[v]};
    }
    stack_.resize(n);
    if (n == 0) return true;
    const uint64_t slack = limit_ - base - total_[s];
    if (high - base <= slack) return true;  // no gap between floors exceeds the slack
    // A floor at most base + slack passes (it plus every byte fits), and the bytes above a
    // higher floor all sit on floors higher still: only those are sorted and summed.
    stack_.erase(std::remove_if(stack_.begin(), stack_.end(), [&](const auto& e) { return e.first - base <= slack; }),
                 stack_.end());
    std::sort(stack_.begin(), stack_.end(), std::greater<>());
    uint64_t above = 0;
    for (const auto& [floor, bytes] : stack_) {
      above += bytes;
      if (floor + above > limit_) return false;
    }
    return true;
  }

  // place: u at its floor, then the subtree below; undone before returning. hatless: set
  // false when u overlaps an unplaced buffer.
  Outcome place(size_t part, int u, int depth, const std::vector<int>& alive, uint64_t max_floor, uint64_t max_total,
                bool* hatless) {
    const Problem& p = p_;
    const uint64_t o = minoff_[u], h = o + p.size[u];
    const size_t minoff_mark = minoff_log_.size();
    off_[u] = o;
    solution_[u] = o;
    Part& mine = parts_[part];
    --mine.alive;
    mine.spans -= p.last[u] - p.first[u];
    for (int s = p.first[u]; s < p.last[u]; ++s) total_[s] -= p.size[u];
    int changed_lo = p.first[u], changed_hi = p.last[u];  // cliques whose lowest floor may rise
    uint64_t raised = h;  // the highest floor raised (above h only past a wall)
    for (int64_t k = ix_.adj_start[u]; k < ix_.adj_start[u + 1]; ++k) {
      const int v = ix_.adj[k];
      if (off_[v] != kUnplaced) continue;
      *hatless = false;
      if (minoff_[v] < h) {
        minoff_log_.push_back({v, minoff_[v]});
        if (walled_) {
          minoff_[v] = floor_at(v, h);
          raised = std::max(raised, minoff_[v]);
        } else {
          minoff_[v] = h;
        }
        changed_lo = std::min(changed_lo, p.first[v]);
        changed_hi = std::max(changed_hi, p.last[v]);
      }
    }
    // No floor rose above `raised`; u's own may have been the highest (a bound, not the
    // maximum).
    const uint64_t child_max_floor = *hatless ? max_floor : std::max(max_floor, raised);
    const int lo = parts_[part].lo, hi = parts_[part].hi;
    std::vector<int>& cut = splits_[depth];
    cut.clear();
    for (int k = p.first[u]; k + 1 < p.last[u]; ++k) {
      if (--cuts_[k] == 0 && k >= lo && k + 1 < hi) cut.push_back(k);
    }
    Outcome r;
    if (cut.empty()) {
      r = search(part, o, rank_[u], u, depth + 1, alive, child_max_floor, changed_lo, changed_hi, max_total);
    } else {
      const std::vector<int> cuts = cut;  // splits_ is reused below
      r = split_and_solve(alive, lo, hi, cuts, o, u, depth + 1);
    }
    for (int k = p.first[u]; k + 1 < p.last[u]; ++k) ++cuts_[k];
    while (minoff_log_.size() > minoff_mark) {
      minoff_[minoff_log_.back().first] = minoff_log_.back().second;
      minoff_log_.pop_back();
    }
    for (int s = p.first[u]; s < p.last[u]; ++s) total_[s] += p.size[u];
    ++mine.alive;
    mine.spans += p.last[u] - p.first[u];
    off_[u] = kUnplaced;
    return r;
  }

  const Problem& p_;
  const SearchIndex& ix_;
  const std::atomic<bool>* cancel_;
  Baton* baton_ = nullptr;
  // Per run.
  bool walled_ = false;    // the problem has walls (Note [Window search])
  uint64_t capacity_ = 0;  // every buffer must end (offset + bytes asked) at or below it
  uint64_t limit_ = 0;     // capacity_ + pad: bound on a clique's stack of rounded sizes
  std::string keys_;
  int64_t node_limit_ = 0, nodes_ = 0;
  Clock::time_point deadline_;
  std::vector<uint64_t> off_, solution_;
  std::vector<uint64_t> minoff_;  // floor of each unplaced buffer: highest placed end it overlaps
  std::vector<int> rank_;         // preorder within the buffer's part
  std::vector<uint64_t> total_;   // unplaced bytes per clique
  std::vector<uint64_t> low_;     // per clique, the lowest floor of its unplaced buffers (scratch)
  std::vector<int> tight_;        // the cliques whose lowest floor can decide (scratch; Note [Tight cliques])
  std::vector<std::pair<uint64_t, uint64_t>> stack_;  // (floor, bytes) in one clique (scratch)
  std::vector<int> cuts_;         // unplaced buffers live in both clique k and k + 1
  std::vector<Part> parts_;  // the splits in force, outermost first (Note [Parts in place])
  std::vector<std::vector<int>> alive_, splits_;  // per depth
  std::vector<int> cands_;                         // every depth's candidates, deepest on top
  std::vector<std::pair<int, uint64_t>> minoff_log_;
};

// Note [Window search]
// A window search re-plans part of a plan with the search. The buffers above the goal that
// overlap in time form a cluster; its window is the cliques they span, widened on each side
// by a quarter of that span (counted as 16 cliques if shorter), doubled at each try (up to
// twelve tries). The buffers wholly inside the window are lifted, and the search looks for
// their offsets at the goal with every other buffer that overlaps the window staying where
// it is, a wall: a lifted buffer's floor is the lowest offset at or above the placed ends
// it overlaps that clears its walls. The search's pruning stays sound (it counts none of
// the walls' bytes, and a plan pushed down still rests each buffer on a placed one, a wall
// or 0). A plan found is kept: the lifted buffers end at or below the goal and clear every
// other buffer. A window that the search proves cannot be planned at the goal is widened;
// one of more than kWindowMaxBuffers buffers, or one the search ran out of nodes
// (kWindowWork / buffers) or time on, ends the cluster's tries. The lifted buffers are few
// (33 in the repair of Note [Greedy's repairs], 6-95 in those that kept a plan on
// vit_tiny's micro-batches), and the search then finds a plan in tens to a thousand nodes
// where it finds one at all; the windows it did not plan took their whole budget. The
// searches run on a thread of their own with the search's stack.
constexpr int kWindowMaxBuffers = 1000;
// The search nodes a window gets, over its preorders and rounds: kWindowWork / buffers (a
// node's work grows with them), at least 1,000.
constexpr int64_t kWindowWork = 500'000;

// windows_here: window_search on the calling thread.
std::vector<uint64_t> windows_here(const Problem& p, std::vector<uint64_t> off, uint64_t goal,
                                   Clock::time_point deadline, int64_t* kept) {
  // The clusters: the clique ranges of the buffers above the goal, overlapping ones merged.
  std::vector<std::pair<int, int>> above;
  for (int i = 0; i < p.n; ++i) {
    if (off[i] != kUnplaced && off[i] + p.size[i] > goal) above.push_back({p.first[i], p.last[i]});
  }
  std::sort(above.begin(), above.end());
  std::vector<std::pair<int, int>> clusters;
  for (const auto& [a, b] : above) {
    if (!clusters.empty() && a < clusters.back().second) {
      clusters.back().second = std::max(clusters.back().second, b);
    } else {
      clusters.push_back({a, b});
    }
  }
  const std::atomic<bool> never{false};
  for (const auto& [c0, c1] : clusters) {
    for (int widen = 0; widen < 12 && Clock::now() < deadline; ++widen) {
      const int margin = static_cast<int>((std::max<int64_t>(c1 - c0, 16) << widen) / 4);
      const int w0 = std::max(0, c0 - margin), w1 = std::min(p.cliques, c1 + margin);
      std::vector<int> lifted, walls;
      for (int i = 0; i < p.n; ++i) {
        if (off[i] == kUnplaced) continue;  // not placed yet: not in the plan
        if (p.first[i] >= w0 && p.last[i] <= w1) {
          lifted.push_back(i);
        } else if (p.first[i] < w1 && p.last[i] > w0) {
          walls.push_back(i);
        }
      }
      if (static_cast<int>(lifted.size()) > kWindowMaxBuffers) break;
      std::vector<PlanBuffer> sub;
      sub.reserve(lifted.size());
      for (int i : lifted) sub.push_back({static_cast<int64_t>(sub.size()), p.lower[i], p.upper[i], p.bytes[i]});
      Problem sp = make_problem(sub, p.alignment);
      sp.wall_start.assign(sp.n + 1, 0);
      for (int k = 0; k < sp.n; ++k) {
        const int i = lifted[k];
        const size_t from = sp.walls.size();
        for (int w : walls) {
          if (p.first[w] < p.last[i] && p.first[i] < p.last[w]) sp.walls.push_back({off[w], off[w] + p.size[w]});
        }
        std::sort(sp.walls.begin() + static_cast<std::ptrdiff_t>(from), sp.walls.end());
        sp.wall_start[k + 1] = static_cast<int64_t>(sp.walls.size());
      }
      Pace q;
      q.deadline = deadline;
      const SearchIndex index(sp, q);
      if (!index.complete) return off;
      BranchAndBound bnb(sp, index, &never);
      std::vector<uint64_t> sub_off;
      bool proved = false, found = false;  // a proof holds for every preorder
      const int64_t most = std::max<int64_t>(1000, kWindowWork / sp.n);
      int64_t nodes = 0;
      for (int64_t limit = 1000; !found && !proved && nodes < most && Clock::now() < deadline; limit *= 2) {
        for (const char* keys : kWindowPreorders) {
          const BranchAndBound::Outcome r = bnb.run(goal, keys, std::min(limit, most - nodes), deadline, &sub_off);
          nodes += bnb.nodes();
          found = r == BranchAndBound::Outcome::kFound;
          proved = r == BranchAndBound::Outcome::kNotFound;
          if (found || proved || nodes >= most) break;
        }
      }
      if (found) {
        for (int k = 0; k < sp.n; ++k) off[lifted[k]] = sub_off[k];
        ++*kept;
        break;
      }
      if (!proved) break;  // out of nodes or time: a wider window would need more
    }
  }
  return off;
}

// window_search: the plan `off` with each cluster of buffers above `goal` re-planned in its
// window where the search finds a plan by `deadline`; windows kept added to *kept. On a
// thread with the search's stack (the plan as it was if none starts).
std::vector<uint64_t> window_search(const Problem& p, const std::vector<uint64_t>& off, uint64_t goal,
                                    Clock::time_point deadline, int64_t* kept) {
  std::vector<uint64_t> out;
  auto body = [&] { out = windows_here(p, off, goal, deadline, kept); };
  pthread_t id;
  if (!start_with_stack(&id, kSearchStackBytes, body)) return off;
  pthread_join(id, nullptr);
  return out;
}

// ----------------------------------------------------------------------------------------
// CSV helpers

std::string trim(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

}  // namespace

// ------------------------------------------------------------------------------------------
// Public API

absl::Status check_buffers(const std::vector<PlanBuffer>& buffers) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    const PlanBuffer& b = buffers[i];
    if (b.lower >= b.upper) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer id ", b.id, " (index ", i, "): lower ", b.lower, " >= upper ", b.upper,
          ": expected a half-open lifetime [lower, upper) with lower < upper"));
    }
    if (b.size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer id ", b.id, " (index ", i, "): size 0: expected a size of at least 1 byte"));
    }
  }
  return absl::OkStatus();
}

absl::Status check_total_bytes(const std::vector<PlanBuffer>& buffers, size_t alignment) {
  uint64_t total = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!add_aligned(total, buffers[i].size, std::max<size_t>(1, alignment))) {
      return absl::InvalidArgumentError(absl::StrCat("buffer id ", buffers[i].id, " (index ", i,
                                                     "): ", too_many_bytes("this buffer", alignment)));
    }
  }
  return absl::OkStatus();
}

size_t lower_bound(const std::vector<PlanBuffer>& buffers) {
  size_t live = 0, peak = 0;
  for (const Event& e : sorted_events(buffers)) {
    if (e.kind == 1) {
      live += buffers[e.index].size;
      peak = std::max(peak, live);
    } else {
      live -= buffers[e.index].size;
    }
  }
  return peak;
}

size_t peak_of(const std::vector<PlanBuffer>& buffers, const std::vector<size_t>& offsets) {
  size_t peak = 0;
  for (size_t i = 0; i < buffers.size() && i < offsets.size(); ++i) {
    peak = std::max(peak, offsets[i] + buffers[i].size);
  }
  return peak;
}

absl::Status validate(const std::vector<PlanBuffer>& buffers, const std::vector<size_t>& offsets,
                      size_t alignment, const std::vector<std::string>& names) {
  if (absl::Status s = check_buffers(buffers); !s.ok()) return s;
  if (offsets.size() != buffers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the plan has ", offsets.size(), " offsets for ",
                                                   buffers.size(), " buffers: expected one offset per buffer"));
  }
  if (alignment == 0) alignment = 1;
  auto id = [&](size_t i) { return names.size() == buffers.size() ? names[i] : absl::StrCat(buffers[i].id); };
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (offsets[i] % alignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat("buffer id ", id(i), ": offset ", offsets[i],
                                                     " is not a multiple of the alignment ", alignment));
    }
    if (offsets[i] > std::numeric_limits<size_t>::max() - buffers[i].size) {
      return absl::InvalidArgumentError(absl::StrCat("buffer id ", id(i), ": offset ", offsets[i], " + size ",
                                                     buffers[i].size, " overflows"));
    }
  }
  // Sweep: the live buffers, by offset, never overlap in memory, so a new buffer can only
  // collide with its neighbours in that order.
  std::set<std::pair<size_t, int>> live;
  for (const Event& e : sorted_events(buffers)) {
    const int i = e.index;
    if (e.kind == 0) {
      live.erase({offsets[i], i});
      continue;
    }
    const size_t lo = offsets[i], hi = lo + buffers[i].size;
    int other = -1;
    auto it = live.lower_bound({lo, -1});
    if (it != live.end() && it->first < hi) other = it->second;
    if (other < 0 && it != live.begin()) {
      auto below = std::prev(it);
      if (below->first + buffers[below->second].size > lo) other = below->second;
    }
    if (other >= 0) {
      const PlanBuffer& a = buffers[other];
      const PlanBuffer& b = buffers[i];
      return absl::InvalidArgumentError(absl::StrCat(
          "buffers id ", id(other), " (live [", a.lower, ", ", a.upper, "), bytes [", offsets[other], ", ",
          offsets[other] + a.size, ")) and id ", id(i), " (live [", b.lower, ", ", b.upper, "), bytes [", lo,
          ", ", hi, ")) are live at the same time and overlap in memory: expected disjoint byte ranges"));
    }
    live.insert({lo, i});
  }
  return absl::OkStatus();
}

std::vector<size_t> plan_paper_rules(const std::vector<PlanBuffer>& buffers, size_t alignment) {
  const uint64_t a = std::max<size_t>(1, alignment);
  std::vector<uint64_t> size(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) size[i] = align_up(buffers[i].size, a);
  std::vector<uint64_t> off = simulate_rules(buffers, size);
  return std::vector<size_t>(off.begin(), off.end());
}

std::vector<size_t> plan_greedy_by_size(const std::vector<PlanBuffer>& buffers, size_t alignment, GreedyTies ties,
                                        bool repair) {
  const Problem p = make_problem(buffers, alignment);
  std::vector<uint64_t> off = greedy_by_size(p, Pace{}, ties, repair);
  return std::vector<size_t>(off.begin(), off.end());
}

std::vector<size_t> plan_skyline(const std::vector<PlanBuffer>& buffers, size_t alignment, double time_limit_sec) {
  const Clock::time_point start = Clock::now();
  const Problem p = make_problem(buffers, alignment);
  const Clock::time_point deadline =
      time_limit_sec < 0 ? Clock::time_point::max()
                         : start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                       std::min(time_limit_sec, 1e7)));
  std::vector<uint64_t> off = skyline(p, preorder(p, kPreorders[0]), Pace{.start = start, .deadline = deadline});
  return std::vector<size_t>(off.begin(), off.end());
}

std::vector<size_t> plan_improved(const std::vector<PlanBuffer>& buffers, const std::vector<size_t>& start,
                                  size_t alignment, double time_limit_sec, int64_t max_moves, int64_t* moves_kept) {
  const Clock::time_point t0 = Clock::now();
  const Problem p = make_problem(buffers, alignment);
  int64_t kept = 0;
  std::vector<uint64_t> off = improve(p, std::vector<uint64_t>(start.begin(), start.end()), 0,
                                      t0 + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(std::min(time_limit_sec, 1e7))),
                                      /*seed=*/p.n, max_moves, &kept);
  if (moves_kept != nullptr) *moves_kept = kept;
  return std::vector<size_t>(off.begin(), off.end());
}

namespace {

absl::StatusOr<PlanResult> plan_whole(const std::vector<PlanBuffer>& buffers, const PlanOptions& options,
                                      Clock::time_point t0, bool search = true, bool halfway = false);

// time_pieces: the buffers' indices cut where nothing is live across (every buffer ends
// at or before the cut or starts at or after it), in time order. No buffer of one piece
// is live with a buffer of another, so each piece can be planned alone from offset 0.
std::vector<std::vector<int>> time_pieces(const std::vector<PlanBuffer>& buffers) {
  std::vector<int> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return buffers[a].lower < buffers[b].lower; });
  std::vector<std::vector<int>> pieces;
  int64_t reach = std::numeric_limits<int64_t>::min();  // the latest end so far
  for (int i : order) {
    if (pieces.empty() || buffers[i].lower >= reach) pieces.emplace_back();
    pieces.back().push_back(i);
    reach = std::max(reach, buffers[i].upper);
  }
  return pieces;
}

// Note [Time cuts]: a problem whose buffers fall into pieces with nothing live across
// (micro-batches, iterations, phases of a program) is planned piece by piece: the peak is
// the largest piece's, and the lower bound the largest piece's bound. A first pass gives
// every piece the heuristics (at most a tenth of the time, shared by size); then the
// pieces whose peak is above the goal (the lower bound, or the target when higher) share
// what time is left, each searched toward the goal, the fewest buffers first (below). The
// heuristics run on the whole problem first, and a plan at the goal from them ends it
// there. Four of MiniMalloc's instances one after another in time (1,107 buffers) stayed
// at 1.245x for 10 s planned whole; in pieces they reach the bound in 1.7 s.
// kPiecesAgainShare: pieces above the goal after their turns are searched again while at
// least this share of the limit is left.
constexpr double kPiecesAgainShare = 0.1;
absl::StatusOr<PlanResult> plan_in_pieces(const std::vector<PlanBuffer>& buffers, const PlanOptions& options,
                                          const std::vector<std::vector<int>>& pieces, Clock::time_point t0) {
  const double limit = std::min(options.time_limit_sec, 1e7);
  // As in plan_whole: room for assembling and checking the whole plan after the pieces.
  const double reserve = reserve_sec(limit, buffers.size());
  const Clock::time_point deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit - reserve));
  auto left = [&] { return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()); };
  // The heuristics on the whole problem first (a tenth of the time): a piece's plan alone
  // can differ from the same method's on the whole (the paper's simulation carries its
  // free blocks across a cut), and plan() keeps the best of every method.
  PlanOptions first = options;
  first.time_limit_sec = 0.1 * limit;
  absl::StatusOr<PlanResult> whole = plan_whole(buffers, first, t0, /*search=*/false);
  if (!whole.ok()) return whole.status();
  PlanResult res;
  res.lower_bound = whole->lower_bound;
  const size_t goal = std::max<size_t>(res.lower_bound, options.target_peak);
  if (whole->peak <= goal) return whole;  // at the goal already: nothing to split
  res.offsets.assign(buffers.size(), 0);
  struct Piece {
    std::vector<PlanBuffer> buffers;
    PlanResult result;
  };
  std::vector<Piece> parts(pieces.size());
  auto adopt = [&](size_t k, PlanResult r) {
    res.search_nodes += r.search_nodes;
    res.improve_moves += r.improve_moves;
    if (parts[k].result.offsets.empty() || r.peak < parts[k].result.peak ||
        (r.peak == parts[k].result.peak && r.optimal)) {
      parts[k].result = std::move(r);
    }
  };
  for (size_t k = 0; k < pieces.size(); ++k) {
    for (int i : pieces[k]) parts[k].buffers.push_back(buffers[i]);
    PlanOptions o = options;
    o.target_peak = goal;
    o.time_limit_sec = std::min(left(), 0.1 * limit * static_cast<double>(pieces[k].size()) / buffers.size());
    absl::StatusOr<PlanResult> r = plan_whole(parts[k].buffers, o, Clock::now(), /*search=*/false);
    if (!r.ok()) return r.status();
    adopt(k, *std::move(r));
  }
  // Then the pieces above the goal share what time is left, the fewest buffers first (the
  // highest peak first among equals): each gets an equal share of the time left when its
  // turn comes, so the time a quick piece leaves goes to those after it. Pieces still above
  // the goal after their turn are searched again, the highest first, while at least
  // kPiecesAgainShare of the limit is left (a search started again starts from nothing, but
  // the time would go unused). Without a target from the caller, the search also tries
  // capacities halfway to a piece's best plan, as it does on a whole problem, so that a
  // piece that cannot reach the goal still comes down.
  auto above_goal = [&] {
    std::vector<size_t> high;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (parts[k].result.peak > goal && !parts[k].result.optimal) high.push_back(k);
    }
    std::sort(high.begin(), high.end(), [&](size_t a, size_t b) { return parts[a].result.peak > parts[b].result.peak; });
    return high;
  };
  std::vector<size_t> high = above_goal();
  std::stable_sort(high.begin(), high.end(),
                   [&](size_t a, size_t b) { return parts[a].buffers.size() < parts[b].buffers.size(); });
  for (int pass = 0;; ++pass) {
    for (size_t j = 0; j < high.size() && left() > 0; ++j) {
      PlanOptions o = options;
      o.target_peak = goal;
      o.time_limit_sec = left() / static_cast<double>(high.size() - j);
      absl::StatusOr<PlanResult> r =
          plan_whole(parts[high[j]].buffers, o, Clock::now(), /*search=*/true, /*halfway=*/options.target_peak == 0);
      if (!r.ok()) return r.status();
      adopt(high[j], *std::move(r));
    }
    if (pass == 1 || left() < kPiecesAgainShare * limit) break;
    high = above_goal();
  }
  // The whole: each piece's offsets in place; the peak, method and optimality the highest
  // piece's (a plan cannot peak below that piece's own optimum).
  size_t top = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    for (size_t j = 0; j < pieces[k].size(); ++j) res.offsets[pieces[k][j]] = parts[k].result.offsets[j];
    if (parts[k].result.peak > parts[top].result.peak) top = k;
  }
  res.peak = parts[top].result.peak;
  res.method = parts[top].result.method;
  res.optimal = res.peak == res.lower_bound || parts[top].result.optimal;
  if (whole->peak < res.peak) {
    res.offsets = std::move(whole->offsets);
    res.peak = whole->peak;
    res.method = whole->method;
    res.optimal = res.peak == res.lower_bound;
  }
  if (absl::Status s = validate(buffers, res.offsets, options.alignment); !s.ok()) {
    return absl::InternalError(absl::StrCat("plan: the plan in ", pieces.size(), " pieces does not validate: ",
                                            s.message()));
  }
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace

absl::StatusOr<PlanResult> plan(const std::vector<PlanBuffer>& buffers, const PlanOptions& options) {
  const Clock::time_point t0 = Clock::now();
  if (absl::Status s = check_buffers(buffers); !s.ok()) return s;
  if (options.alignment == 0) {
    return absl::InvalidArgumentError("plan: alignment 0: expected a positive number of bytes (1 for none)");
  }
  if (absl::Status s = check_total_bytes(buffers, options.alignment); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("plan: ", s.message()));
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: threads ", options.threads, ": expected a count >= 1, or 0 for every core"));
  }
  if (!(options.time_limit_sec >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: time limit ", options.time_limit_sec, " s: expected a number of seconds >= 0"));
  }
  if (const std::vector<std::vector<int>> pieces = time_pieces(buffers); pieces.size() > 1) {
    return plan_in_pieces(buffers, options, pieces, t0);  // Note [Time cuts]
  }
  return plan_whole(buffers, options, t0);
}

namespace {

// plan_whole: plan()'s methods on the whole problem (checked by plan()), from t0; the
// heuristics alone without `search`. With `halfway` the search also tries capacities
// halfway to the best plan when a target is given (as it always does without one).
absl::StatusOr<PlanResult> plan_whole(const std::vector<PlanBuffer>& buffers, const PlanOptions& options,
                                      Clock::time_point t0, bool search, bool halfway) {
  const double limit = std::min(options.time_limit_sec, 1e7);
  const int n = static_cast<int>(buffers.size());
  // The methods stop early enough for what follows them (keeping and checking the plan;
  // the search's threads finishing their last nodes and joining).
  const double reserve = reserve_sec(limit, buffers.size());
  const Clock::time_point deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit - reserve));
  PlanResult res;
  res.lower_bound = lower_bound(buffers);
  if (n == 0) {
    res.method = "none";
    res.optimal = true;
    res.seconds = seconds_since(t0);
    return res;
  }
  const Problem p = make_problem(buffers, options.alignment);
  const uint64_t goal = std::max<uint64_t>(res.lower_bound, options.target_peak);
  res.peak = std::numeric_limits<size_t>::max();
  // consider: keeps the plan when it is the best so far; its peak (none for no plan).
  auto consider = [&](const std::vector<uint64_t>& off, const char* method) -> size_t {
    if (off.empty()) return std::numeric_limits<size_t>::max();
    std::vector<size_t> o(off.begin(), off.end());
    const size_t peak = peak_of(buffers, o);
    if (peak < res.peak) {
      res.peak = peak;
      res.offsets = std::move(o);
      res.method = method;
    }
    return peak;
  };
  auto done = [&] { return res.peak <= goal; };

  // Heuristics first, the best kept: the simulation always (O(n log n)); then the skyline
  // and greedy by size, each given at least a millisecond: a small problem gets them even
  // when the thread lost the time left to the scheduler (found under the sanitizers on a
  // loaded machine). The skyline by ZS first (the best on micro-batches in flight, where
  // the rules stay 4-12% above the bound; about 0.7 s on 30,704 buffers), then greedy by
  // size, then the skyline with the other preorders, the search's and kSkylinePreorders,
  // while time is left, each of these paced by its own progress (Note [Time by progress]).
  // On tma_plan_bench's 60,000-buffer trace the first reaches the bound in 0.2 s, where
  // greedy by size takes 12 s for 1.00001x and the skyline by TWA 11 s.
  // pace: a method's pace to the deadline, or to `share` of the time left (greedy by size's
  // passes, below), and at least floor_sec either way.
  const double floor_sec = std::min(limit, 1e-3);
  const Clock::duration least =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(floor_sec));
  auto pace = [&](double share = 1.0) {
    Pace q;
    q.start = Clock::now();
    const Clock::duration left = deadline - q.start;
    q.deadline = q.start + std::max(std::chrono::duration_cast<Clock::duration>(left * share), least);
    q.may_give_up = true;
    return q;
  };
  // A skyline or local improvement is started only with time for its setup and for
  // finishing cut short (a microsecond a buffer, measured at about half that on 60,000).
  auto time_left = [&] { return Clock::now() + std::chrono::microseconds(n) < deadline; };
  consider(simulate_rules(buffers, p.size), "rules");
  std::vector<int> zs;  // the ZS preorder, kept for the skylines with ties at random
  if (!done() && (n <= 2000 || time_left())) {
    // Not paced: its refreshes come unevenly (on tma_plan_bench's 60,000-buffer trace the
    // first sixteenth of its buffers said it could not finish in 2 s; it finishes, at the
    // lower bound, in 0.2 s). Cut short at the deadline it still gives a plan.
    Pace q = pace();
    q.may_give_up = false;
    zs = preorder(p, kSkylineFirst);
    consider(skyline(p, zs, q), "skyline");
  }
  // Greedy by size with each of its ties in turn (Note [Greedy's ties]); the best plan and
  // its peak are kept for local improvement below. Each may take nine tenths of the time
  // left, no more (but at least the millisecond every method gets): on the packed 60,000 at
  // 5 s one pass ran to 4.94 s for 1.3256x, where the skyline by SZ after it gives 1.2583x
  // (at three quarters that pass was cut short on vit_tiny's 60,198 at 1 s, where it
  // reaches the bound in 0.5-0.9 s on the development machine; docs/tma.md).
  // Past 2,000 buffers, when one gives up (its pace), so would the next, with as many pairs
  // to meet: it is not started. On fewer, a pass that gave up was descheduled, not slow.
  std::vector<uint64_t> greedy;
  size_t greedy_peak = std::numeric_limits<size_t>::max();
  for (GreedyTies ties : {GreedyTies::kEarliestStartFirst, GreedyTies::kLatestEndFirst, GreedyTies::kLongestFirst}) {
    if (done()) break;
    std::vector<uint64_t> off = greedy_by_size(p, pace(0.9), ties, /*repair=*/n >= kImproveMinBuffers);
    if (off.empty()) {
      if (n > 2000) break;
      continue;
    }
    const size_t peak = consider(off, "greedy");
    if (peak < greedy_peak) {
      greedy = std::move(off);
      greedy_peak = peak;
    }
  }
  // On up to 2,000 buffers the skyline by the search's first preorder (plan_skyline's)
  // always runs too, as greedy by size does, so plan() is no worse than either alone.
  for (size_t k = 0; k < std::size(kPreorders) && !done() && ((k == 0 && n <= 2000) || time_left()); ++k) {
    consider(skyline(p, preorder(p, kPreorders[k]), pace()), "skyline");
  }
  for (size_t k = 0; k < std::size(kSkylinePreorders) && !done() && time_left(); ++k) {
    consider(skyline(p, preorder(p, kSkylinePreorders[k]), pace()), "skyline");
  }
  // The skyline by ZS with its ties at random (Note [Ties at random]), on 1,000 buffers or
  // more, within half of the time left.
  if (!zs.empty() && n >= kImproveMinBuffers && !done() && time_left()) {
    const Clock::time_point now = Clock::now();
    const Clock::time_point until = now + (deadline - now) / 2;
    for (uint64_t seed = 1; seed <= kRandomTies && !done() && Clock::now() + std::chrono::microseconds(n) < until;
         ++seed) {
      Pace q = pace();
      q.deadline = until;
      consider(skyline(p, shuffled_ties(p, zs, seed), q), "skyline");
    }
  }
  // Local improvement of the best plan (Note [Local improvement]), on problems too large
  // for the search to place quickly: all the time left when the search will not run, half
  // of it when it will. Greedy by size's plan is the start when it ties with the best: the
  // moves lower it where they do not lower the skyline's (micro-batches of vit_tiny in
  // flight, both at 1.0372x: from greedy's 1.0248x at 30 s, from the skyline's none).
  // Started from greedy's plan even when a skyline's is better, they gave 1.0183x where
  // the skyline's 1.0244x stood (60,198 buffers, 30 s), but 1.2613x where plan() gives
  // 1.2390x now (the 10,000 packed, 5 s): from the best, as here, the reverse.
  const bool will_search = search && n <= kSearchMaxBuffers && p.overlaps <= kSearchMaxOverlaps;
  if (!done() && time_left() && n >= kImproveMinBuffers) {
    const Clock::time_point now = Clock::now();
    const Clock::time_point until = will_search ? now + (deadline - now) / 2 : deadline;
    std::vector<uint64_t> from(res.offsets.begin(), res.offsets.end());
    if (!greedy.empty() && greedy_peak == res.peak) {
      from = std::move(greedy);
    }
    consider(improve(p, std::move(from), goal, until, /*seed=*/n, /*max_moves=*/0, &res.improve_moves), "improved");
  }

  // Then the search: each preorder at the goal, and (when no target was given and the
  // goal stays out of reach) each at halfway between the goal and the best plan so far
  // and a step down from it. On up to kTurnsMaxBuffers buffers these searches take turns
  // (Note [Searches in turns]); above, tasks come in rounds and every round doubles the
  // node limit. A capacity proved infeasible moves the goal up. With threads > 1 the
  // searches run that many at once, and the first plan at the goal stops the others.
  bool proved = false;
  std::optional<SearchIndex> index;  // built only when it can be built in the time left
  if (will_search && !done() && Clock::now() < deadline) {
    index.emplace(p, pace());
    if (!index->complete) index.reset();
  }
  if (index) {
    // A plan's peak is some offset (a multiple of the alignment) plus some buffer's bytes:
    // next_end(x) is the least such value above x, the next capacity worth a search.
    std::vector<uint64_t> residues;
    for (int i = 0; i < n; ++i) residues.push_back(p.bytes[i] % p.alignment);
    std::sort(residues.begin(), residues.end());
    residues.erase(std::unique(residues.begin(), residues.end()), residues.end());
    auto next_end = [&](uint64_t x) {
      uint64_t best = kUnplaced;
      for (uint64_t r : residues) {
        uint64_t e = x - x % p.alignment + r;
        if (e <= x) e += p.alignment;
        best = std::min(best, e);
      }
      return best;
    };
    const uint64_t floor = std::max<uint64_t>(res.lower_bound, goal);

    std::mutex mu;  // guards everything below, and res
    std::atomic<bool> stop{false};
    uint64_t lo = floor == 0 ? 0 : next_end(floor - 1);  // capacities: real bytes
    bool lo_proven = floor == res.lower_bound;           // nothing below lo fits
    uint64_t hi = res.peak;
    uint64_t next_task = 0;
    int64_t nodes = 0;
    const int preorders = static_cast<int>(std::size(kPreorders));
    const int per_round = options.target_peak > 0 && !halfway ? preorders : 3 * preorders;
    const int64_t first_limit = std::max<int64_t>(2 * n, 1000);
    // capacity: the capacity of task kind and preorder k now (the goal, halfway to the best
    // plan, an eighth of the way down from it), or none when no search there is wanted.
    auto capacity = [&](int k) -> std::optional<uint64_t> {
      const uint64_t cap = k < preorders ? lo : k < 2 * preorders ? lo + (hi - lo) / 2 : hi - std::max<uint64_t>(1, (hi - lo) / 8);
      if (cap >= hi || (k >= preorders && cap <= lo)) return std::nullopt;
      return cap;
    };
    // handle: what a search's outcome at `cap` tells (with mu held, or no other thread).
    auto handle = [&](BranchAndBound::Outcome r, uint64_t cap, const std::vector<uint64_t>& off) {
      if (r == BranchAndBound::Outcome::kFound) {
        consider(off, "search");
        hi = std::min<uint64_t>(hi, res.peak);
      } else if (r == BranchAndBound::Outcome::kNotFound && cap >= lo) {
        lo = next_end(cap);
        lo_proven = true;
      }
    };
    auto worker = [&] {
      BranchAndBound bnb(p, *index, &stop);
      std::vector<uint64_t> off;
      while (true) {
        uint64_t cap = 0;
        int64_t node_limit = 0;
        const char* keys = nullptr;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (done() || lo >= hi || bnb.late(deadline)) {
            stop = true;
            return;
          }
          const uint64_t task = next_task++;
          const int k = static_cast<int>(task % per_round);
          keys = kPreorders[k % preorders];
          const std::optional<uint64_t> c = capacity(k);
          if (!c) continue;
          cap = *c;
          node_limit = first_limit << std::min<uint64_t>(task / per_round, 40);
          // The step down from the best plan gets a quarter of the nodes: it is there to
          // lower a plan the goal's tasks have not, not to take their time.
          if (k >= 2 * preorders) node_limit = std::max(first_limit, node_limit / 4);
        }
        const BranchAndBound::Outcome r = bnb.run(cap, keys, node_limit, deadline, &off);
        std::lock_guard<std::mutex> lock(mu);
        nodes += bnb.nodes();
        handle(r, cap, off);
      }
    };
    const int threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    if (n <= kTurnsMaxBuffers) {
      // Note [Searches in turns]: one search per task kind and preorder (the goal, halfway
      // to the best plan, an eighth of the way down from it; the same capacities as the
      // rounds below), each given `turn` nodes a turn at the goal, half that halfway and
      // kStepDownTurnDiv-th of it a step down (Note [Turn length]).
      const int64_t turn = std::max<int64_t>(first_limit, kTurnWork / n);
      struct Turned {
        // stop: the rounds' flag, never set in turns (a search is cancelled by its baton).
        Turned(const Problem& p, const SearchIndex& ix, const std::atomic<bool>* stop) : bnb(p, ix, stop) {}
        BranchAndBound bnb;
        Baton baton;
        uint64_t cap = 0;
        int64_t granted = 0;
        BranchAndBound::Outcome outcome = BranchAndBound::Outcome::kAborted;
        std::vector<uint64_t> off;
        std::function<void()> body;
        pthread_t thread{};
      };
      std::vector<std::unique_ptr<Turned>> live(per_round);
      // join: slot k's search, cancelled or ended, joined and counted.
      auto join = [&](int k) {
        pthread_join(live[k]->thread, nullptr);
        nodes += live[k]->bnb.nodes();
        live[k].reset();
      };
      // retire: a paused search of slot k cancelled, or an ended one, joined and counted.
      auto retire = [&](int k) {
        live[k]->baton.cancel();
        join(k);
      };
      // The searches stop early enough to be retired, every slot's, by the deadline; at
      // most a quarter of the limit is kept back for it, as for the rest (kReserveShare): at
      // 5 ms (the random traces' test) nine searches' kRetireSec left the search no time.
      const Clock::time_point until =
          deadline - std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::min(per_round * kRetireSec, kReserveShare * limit)));
      // Note [Turns without a barrier]: a thread that frees takes the next search in turn at
      // once, instead of every `threads` searches waiting for the slowest of them.
      Doorbell door;
      std::vector<char> running(per_round, 0);
      int n_running = 0;
      int next = 0;                  // the slot whose turn comes first
      bool could_not_start = false;  // a search's thread failed to start
      for (;;) {
        if (!done() && lo < hi && Clock::now() < until) {
          bool any = n_running > 0;
          for (int k = 0; k < per_round; ++k) {
            if (running[k]) continue;
            const std::optional<uint64_t> cap = capacity(k);
            if (live[k] && (live[k]->cap >= hi || live[k]->cap < lo)) retire(k);
            if (!live[k] && cap) {
              auto t = std::make_unique<Turned>(p, *index, &stop);
              Turned* raw = t.get();
              t->cap = *cap;
              t->bnb.set_baton(&t->baton);
              t->baton.set_doorbell(&door);
              const char* keys = kPreorders[k % preorders];
              t->body = [raw, keys, &until] {
                int64_t limit = 0;
                if (raw->baton.begin(&limit)) raw->outcome = raw->bnb.run(raw->cap, keys, limit, until, &raw->off);
                raw->baton.end();
              };
              if (start_with_stack(&t->thread, kSearchStackBytes, t->body)) {
                live[k] = std::move(t);
              } else {
                could_not_start = true;
              }
            }
            any = any || live[k] != nullptr;
          }
          if (!any) {
            if (could_not_start) worker();  // no thread could start: the rounds, on this stack
            break;
          }
          // Each free thread takes the next paused search in turn.
          for (int j = 0; j < per_round && n_running < threads; ++j) {
            const int k = next;
            next = (next + 1) % per_round;
            if (!live[k] || running[k]) continue;
            live[k]->granted += k < preorders ? turn : k < 2 * preorders ? turn / 2 : turn / kStepDownTurnDiv;
            live[k]->baton.resume(live[k]->granted);
            running[k] = 1;
            ++n_running;
          }
        }
        if (n_running == 0) break;
        door.wait();  // a running search handed its turn back
        for (int k = 0; k < per_round; ++k) {
          if (!running[k] || !live[k]->baton.paused()) continue;
          running[k] = 0;
          --n_running;
          if (live[k]->baton.ended()) {
            handle(live[k]->outcome, live[k]->cap, live[k]->off);
            retire(k);
          }
        }
      }
      // Every search left is woken before any is joined (kRetireSec).
      for (int k = 0; k < per_round; ++k) {
        if (live[k]) live[k]->baton.cancel();
      }
      for (int k = 0; k < per_round; ++k) {
        if (live[k]) join(k);
      }
    } else {
      std::vector<pthread_t> workers;
      for (int t = 0; t < threads; ++t) {
        pthread_t id;
        if (start_with_stack(&id, kSearchStackBytes, worker)) workers.push_back(id);
      }
      if (workers.empty()) worker();  // no thread could start: search here, on this stack
      for (pthread_t id : workers) pthread_join(id, nullptr);
    }
    proved = lo >= hi && lo_proven;
    res.search_nodes = nodes;
  }

  if (absl::Status s = validate(buffers, res.offsets, options.alignment); !s.ok()) {
    return absl::InternalError(absl::StrCat("plan: the ", res.method, " plan does not validate: ", s.message()));
  }
  res.optimal = res.peak == res.lower_bound || proved;
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// MiniMalloc CSV

absl::StatusOr<CsvProblem> read_minimalloc_csv(const std::string& path, size_t alignment) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, expected a CSV file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  const std::string body = text.str();
  enum Column { kId, kLower, kUpper, kSize, kOffset, kColumns };
  static const char* kNames[kColumns] = {"id", "lower", "upper", "size", "offset"};
  int column_of[kColumns] = {-1, -1, -1, -1, -1};
  int fields = 0;
  bool have_header = false;
  CsvProblem out;
  absl::flat_hash_map<std::string, int> line_of_id;
  uint64_t total = 0;  // sizes rounded up to the alignment
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const std::vector<absl::string_view> cells = absl::StrSplit(line, ',');
    const std::string where = absl::StrCat(path, ":", line_no, ": ");
    if (!have_header) {
      have_header = true;
      fields = static_cast<int>(cells.size());
      for (int k = 0; k < fields; ++k) {
        const std::string name = absl::AsciiStrToLower(trim(cells[k]));
        int c = 0;
        while (c < kColumns && name != kNames[c]) ++c;
        if (c == kColumns) {
          return absl::InvalidArgumentError(absl::StrCat(where, "unknown column '", name,
                                                         "': expected a header of id, lower, upper, size "
                                                         "and optionally offset"));
        }
        if (column_of[c] >= 0) {
          return absl::InvalidArgumentError(absl::StrCat(where, "column '", name, "' appears twice"));
        }
        column_of[c] = k;
      }
      for (int c = 0; c < kOffset; ++c) {
        if (column_of[c] < 0) {
          return absl::InvalidArgumentError(absl::StrCat(where, "the header has no '", kNames[c],
                                                         "' column: expected id, lower, upper and size"));
        }
      }
      continue;
    }
    if (static_cast<int>(cells.size()) != fields) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, cells.size(), " fields, expected ", fields, " as in the header"));
    }
    // The id is a string, as MiniMalloc's; PlanBuffer::id is its value when it is an integer.
    std::string id = trim(cells[column_of[kId]]);
    if (id.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "the id is empty: expected a name or a number"));
    }
    int64_t v[kColumns] = {0, 0, 0, 0, 0};
    if (!absl::SimpleAtoi(id, &v[kId])) v[kId] = static_cast<int64_t>(out.buffers.size());
    for (int c = kLower; c < kColumns; ++c) {
      if (column_of[c] < 0) continue;
      const std::string cell = trim(cells[column_of[c]]);
      if (!absl::SimpleAtoi(cell, &v[c])) {
        return absl::InvalidArgumentError(absl::StrCat(where, kNames[c], " '", cell, "' is not an integer"));
      }
    }
    if (v[kLower] >= v[kUpper]) {
      return absl::InvalidArgumentError(absl::StrCat(where, "lower ", v[kLower], " >= upper ", v[kUpper],
                                                     ": expected lower < upper (the buffer is live over "
                                                     "[lower, upper))"));
    }
    if (v[kSize] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "size ", v[kSize], ": expected a size of at least 1 byte"));
    }
    if (column_of[kOffset] >= 0 && v[kOffset] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, "offset ", v[kOffset], ": expected an offset >= 0"));
    }
    if (column_of[kOffset] >= 0 && v[kOffset] > std::numeric_limits<int64_t>::max() - v[kSize]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "offset ", v[kOffset], " + size ", v[kSize], " ends past ", kMaxPlanBytes,
                       " (2^63 - 1): expected a buffer that ends at or below it"));
    }
    if (!add_aligned(total, static_cast<uint64_t>(v[kSize]), std::max<size_t>(1, alignment))) {
      return absl::InvalidArgumentError(absl::StrCat(where, too_many_bytes("this line", alignment)));
    }
    if (auto [it, inserted] = line_of_id.try_emplace(id, line_no); !inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "id ", id, " repeats line ", it->second, ": expected unique ids"));
    }
    out.buffers.push_back({v[kId], v[kLower], v[kUpper], static_cast<size_t>(v[kSize])});
    out.ids.push_back(std::move(id));
    if (column_of[kOffset] >= 0) out.offsets.push_back(static_cast<size_t>(v[kOffset]));
  }
  if (!have_header) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": empty: expected a header line id,lower,upper,size and one line per buffer"));
  }
  return out;
}

absl::Status write_minimalloc_csv(const std::string& path, const std::vector<PlanBuffer>& buffers,
                                  const std::vector<size_t>& offsets, const std::vector<std::string>& ids) {
  if (offsets.size() != buffers.size() || (!ids.empty() && ids.size() != buffers.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("write ", path, ": ", offsets.size(), " offsets and ", ids.size(), " ids for ",
                     buffers.size(), " buffers: expected one offset per buffer, and one id or none"));
  }
  // Nothing is written that read_minimalloc_csv could not read back.
  for (size_t i = 0; i < buffers.size(); ++i) {
    const std::string id = ids.empty() ? absl::StrCat(buffers[i].id) : ids[i];
    if (id.empty() || id != trim(id) || id.find_first_of(",\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("write ", path, ": id '", id,
                       "' could not be read back: expected a non-empty id without "
                       "commas, line breaks or surrounding spaces"));
    }
    if (buffers[i].size > kMaxPlanBytes || offsets[i] > kMaxPlanBytes - buffers[i].size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "write ", path, ": buffer id ", id, ": offset ", offsets[i], " + size ", buffers[i].size,
          " ends past ", kMaxPlanBytes, " (2^63 - 1), which the CSV reader cannot take back"));
    }
  }
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  bool ok = std::fputs("id,lower,upper,size,offset\n", f) >= 0;
  for (size_t i = 0; ok && i < buffers.size(); ++i) {
    const PlanBuffer& b = buffers[i];
    const std::string id = ids.empty() ? absl::StrCat(b.id) : ids[i];
    ok = std::fprintf(f, "%s,%lld,%lld,%zu,%zu\n", id.c_str(), static_cast<long long>(b.lower),
                      static_cast<long long>(b.upper), b.size, offsets[i]) > 0;
  }
  // On disk before the rename, so that PATH is never a file cut short.
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(saved ? saved : errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(e)));
  }
  return absl::OkStatus();
}

}  // namespace mtc::alloc
