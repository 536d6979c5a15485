// Randomised tests of alloc::Region, the best-fit allocator, against a brute-force model:
// our own interval map of live blocks, from which free gaps, best fit, free neighbours and
// every statistic are recomputed by a linear scan after each operation.
#include "alloc/region.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mtc::alloc {
namespace {

// Model: the live blocks as the test believes them to be (offset -> size, bytes), and
// the counters Region keeps, updated by the test's own rules.
struct Model {
  size_t capacity = 0;
  std::map<size_t, size_t> live;
  size_t peak_allocated = 0, high_water = 0;
  uint64_t num_allocs = 0, num_frees = 0, num_failures = 0;

  struct Gap {
    size_t offset, size;
  };
  // gaps: the free blocks, address-ordered: what lies between live blocks.
  std::vector<Gap> gaps() const {
    std::vector<Gap> g;
    size_t at = 0;
    for (const auto& [off, size] : live) {
      if (off > at) g.push_back({at, off - at});
      at = off + size;
    }
    if (capacity > at) g.push_back({at, capacity - at});
    return g;
  }
  size_t allocated() const {
    size_t a = 0;
    for (const auto& [off, size] : live) a += size;
    return a;
  }
  // best_fit: the smallest gap that holds `size`, lowest address on ties; or none.
  const Gap* best_fit(const std::vector<Gap>& g, size_t size) const {
    const Gap* best = nullptr;
    for (const Gap& x : g) {
      if (x.size >= size && (best == nullptr || x.size < best->size)) best = &x;
    }
    return best;
  }
  void add(Block b) {
    live.emplace(b.offset, b.size);
    ++num_allocs;
    peak_allocated = std::max(peak_allocated, allocated());
    high_water = std::max(high_water, b.offset + b.size);
  }
  FreeNeighbors neighbors(Block b) const {
    FreeNeighbors n;
    auto it = live.find(b.offset);
    const size_t left_end = it == live.begin() ? 0 : std::prev(it)->first + std::prev(it)->second;
    const size_t right_start = std::next(it) == live.end() ? capacity : std::next(it)->first;
    n.left = b.offset - left_end;
    n.right = right_start - (b.offset + b.size);
    return n;
  }
};

// expect_placed: a block the region handed out lies inside it, is aligned, has the
// rounded size, and overlaps no live block of the model.
void expect_placed(const Model& m, Block b, size_t request) {
  ASSERT_EQ(b.offset % kAlignment, 0u) << "offset " << b.offset;
  ASSERT_EQ(b.size, round_up(request)) << "request " << request;
  ASSERT_LE(b.offset + b.size, m.capacity);
  auto next = m.live.lower_bound(b.offset);
  if (next != m.live.end()) {
    ASSERT_GE(next->first, b.offset + b.size) << "overlaps the block at " << next->first;
  }
  if (next != m.live.begin()) {
    auto prev = std::prev(next);
    ASSERT_LE(prev->first + prev->second, b.offset) << "overlaps the block at " << prev->first;
  }
}

// expect_stats: Region's statistics against the model's brute-force figures.
void expect_stats(const Region& r, const Model& m) {
  const RegionStats s = r.stats();
  const auto g = m.gaps();
  size_t largest = 0, free_total = 0, high_water_now = 0;
  for (const auto& x : g) {
    largest = std::max(largest, x.size);
    free_total += x.size;
  }
  for (const auto& [off, size] : m.live) high_water_now = std::max(high_water_now, off + size);
  ASSERT_EQ(s.capacity, m.capacity);
  ASSERT_EQ(s.allocated, m.allocated());
  ASSERT_EQ(s.free_bytes, free_total);
  ASSERT_EQ(s.allocated + s.free_bytes, s.capacity);
  ASSERT_EQ(s.peak_allocated, m.peak_allocated);
  ASSERT_EQ(s.high_water, m.high_water);
  ASSERT_GE(s.high_water, high_water_now);
  ASSERT_EQ(s.largest_free, largest);
  ASSERT_EQ(r.largest_free(), largest);
  ASSERT_EQ(s.live_blocks, m.live.size());
  ASSERT_EQ(s.free_blocks, g.size());
  ASSERT_EQ(s.num_allocs, m.num_allocs);
  ASSERT_EQ(s.num_frees, m.num_frees);
  ASSERT_EQ(s.num_failures, m.num_failures);
  const double frag = free_total == 0 ? 0.0 : static_cast<double>(free_total - largest) / free_total;
  ASSERT_DOUBLE_EQ(s.fragmentation(), frag);
}

// random_request: request sizes in bytes, weighted toward small ones, with zero, exact
// multiples of the alignment, large ones and ones larger than the whole region.
size_t random_request(std::mt19937_64& gen, size_t capacity) {
  const int kind = std::uniform_int_distribution<int>(0, 99)(gen);
  auto upto = [&](size_t hi) { return std::uniform_int_distribution<size_t>(0, hi)(gen); };
  if (kind < 5) return 0;
  if (kind < 45) return upto(4096);
  if (kind < 60) return upto(64) * kAlignment;                  // already aligned
  if (kind < 85) return upto(capacity / 64);
  if (kind < 97) return upto(capacity / 8);
  if (kind < 99) return capacity / 2 + upto(capacity);          // often too large
  return std::numeric_limits<size_t>::max() - upto(1000);       // would overflow rounding
}

// run_random_ops: `ops` random operations on a region of `capacity` bytes, each checked
// against the model; the full invariant check runs every `check_every` operations.
void run_random_ops(uint64_t seed, size_t capacity, int ops, int check_every) {
  std::mt19937_64 gen(seed);
  Region r("test region", capacity);
  Model m;
  m.capacity = capacity / kAlignment * kAlignment;
  ASSERT_EQ(r.capacity(), m.capacity);
  std::vector<Block> live;  // the same blocks as m.live, for picking one at random
  int failures = 0, placed_at = 0, max_live = 0;
  size_t max_frag_free_blocks = 0;

  for (int op = 0; op < ops; ++op) {
    // Keep the region between empty and full: free more often when many blocks live.
    const double fill = static_cast<double>(m.allocated()) / static_cast<double>(m.capacity);
    const int dice = std::uniform_int_distribution<int>(0, 99)(gen);
    const bool want_free = !live.empty() && dice < 35 + static_cast<int>(40 * fill);
    if (want_free) {
      const size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(gen);
      const Block b = live[i];
      // free_neighbors against brute force, on the block about to go.
      const FreeNeighbors got = r.free_neighbors(b), want = m.neighbors(b);
      ASSERT_EQ(got.left, want.left) << "op " << op << " block " << b.offset;
      ASSERT_EQ(got.right, want.right) << "op " << op << " block " << b.offset;
      r.free(b);
      m.live.erase(b.offset);
      ++m.num_frees;
      live[i] = live.back();
      live.pop_back();
    } else if (dice % 5 == 0) {
      // allocate_at: an aligned offset, inside a free gap half of the time, anywhere else
      // (live, misaligned or past the end) otherwise.
      const auto g = m.gaps();
      const size_t request = std::uniform_int_distribution<size_t>(0, 8192)(gen);
      size_t offset;
      if (!g.empty() && gen() % 2 == 0) {
        const auto& gap = g[gen() % g.size()];
        offset = gap.offset + std::uniform_int_distribution<size_t>(0, gap.size / kAlignment - 1)(gen) * kAlignment;
      } else {
        offset = std::uniform_int_distribution<size_t>(0, m.capacity + 4 * kAlignment)(gen);
        if (gen() % 4 != 0) offset = offset / kAlignment * kAlignment;
      }
      const size_t size = round_up(request);
      const bool bad_range = offset % kAlignment != 0 || offset + size > m.capacity;
      bool is_free = false;
      for (const auto& x : g) is_free |= x.offset <= offset && offset + size <= x.offset + x.size;
      absl::StatusOr<Block> b = r.allocate_at(offset, request);
      if (bad_range) {
        ASSERT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
      } else if (!is_free) {
        ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
        ASSERT_NE(b.status().message().find("is not free"), std::string::npos) << b.status();
        ++m.num_failures;
      } else {
        ASSERT_TRUE(b.ok()) << b.status();
        ASSERT_EQ(b->offset, offset);
        expect_placed(m, *b, request);
        m.add(*b);
        live.push_back(*b);
        ++placed_at;
      }
    } else {
      const size_t request = random_request(gen, m.capacity);
      const auto g = m.gaps();
      const Model::Gap* fit = request > m.capacity ? nullptr : m.best_fit(g, round_up(request));
      ASSERT_EQ(r.fits(request), fit != nullptr) << "request " << request;
      absl::StatusOr<Block> b = r.allocate(request);
      if (fit == nullptr) {
        ASSERT_FALSE(b.ok()) << "request " << request << " got " << b->offset << "+" << b->size;
        ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
        // The message names the request (in bytes, rounded) and the region's state.
        const std::string msg(b.status().message());
        if (request <= m.capacity) {
          ASSERT_NE(msg.find(absl::StrCat(round_up(request), " bytes")), std::string::npos) << msg;
        }
        ASSERT_NE(msg.find(r.state()), std::string::npos) << msg;
        ++m.num_failures;
        ++failures;
      } else {
        ASSERT_TRUE(b.ok()) << b.status() << " with a gap of " << fit->size << " at " << fit->offset;
        ASSERT_EQ(b->offset, fit->offset) << "not the best fit for " << request;
        expect_placed(m, *b, request);
        m.add(*b);
        live.push_back(*b);
      }
    }
    if (op % 997 == 0) {  // reset_peak now and then: peak restarts from current use
      r.reset_peak();
      m.peak_allocated = m.allocated();
      m.high_water = 0;
      for (const auto& [off, size] : m.live) m.high_water = std::max(m.high_water, off + size);
    }
    ASSERT_NO_FATAL_FAILURE(expect_stats(r, m)) << "after op " << op << " (seed " << seed << ")";
    if (op % check_every == 0) r.check_invariants();
    max_live = std::max(max_live, static_cast<int>(live.size()));
    max_frag_free_blocks = std::max(max_frag_free_blocks, m.gaps().size());
  }
  r.check_invariants();
  // The run must have exercised what it claims to: failures, placements, fragmentation.
  EXPECT_GT(failures, 0);
  EXPECT_GT(placed_at, 0);
  EXPECT_GT(max_frag_free_blocks, 10u);
  std::printf("  seed %llu: %d ops, %d failed allocations, %d allocate_at, up to %d live and %zu free blocks\n",
              static_cast<unsigned long long>(seed), ops, failures, placed_at, max_live, max_frag_free_blocks);

  // Free everything: the stats balance to zero and one free block spans the region.
  std::shuffle(live.begin(), live.end(), gen);
  for (const Block& b : live) r.free(b);
  r.check_invariants();
  const RegionStats s = r.stats();
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(s.largest_free, m.capacity);
  EXPECT_EQ(s.free_bytes, m.capacity);
  EXPECT_EQ(s.fragmentation(), 0.0);
  EXPECT_EQ(s.num_allocs, s.num_frees);
}

class RegionRandomTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RegionRandomTest, HundredThousandOpsAgreeWithBruteForce) {
  // An odd capacity: the region rounds it down to the alignment.
  run_random_ops(GetParam(), (size_t{64} << 20) + 1000, 100000, 1000);
}

TEST_P(RegionRandomTest, SmallRegionStaysCoalesced) {
  // A small region fills up often: many failures, frees next to free space on both sides.
  run_random_ops(GetParam() * 7919, 256 * 1024, 50000, 100);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RegionRandomTest, ::testing::Values(1, 2, 3, 42));

TEST(Region, BestFitTakesSmallestHoleThenLowestAddress) {
  Region r("r", 16 * kAlignment);
  std::vector<Block> b;
  for (int i = 0; i < 8; ++i) b.push_back(*r.allocate(i % 2 ? kAlignment : 2 * kAlignment));
  // Layout in units: [0,2) [2,3) [3,5) [5,6) [6,8) [8,9) [9,11) [11,12), then 4 free.
  r.free(b[1]);  // hole of 1 at 2
  r.free(b[4]);  // hole of 2 at 6
  r.free(b[5]);  // merges: hole of 3 at 6
  r.free(b[7]);  // merges with the tail: hole of 5 at 11
  EXPECT_EQ(r.allocate(kAlignment)->offset, 2 * kAlignment);      // exact fit
  EXPECT_EQ(r.allocate(2 * kAlignment)->offset, 6 * kAlignment);  // smallest that fits
  EXPECT_EQ(r.allocate(4 * kAlignment)->offset, 11 * kAlignment);
  r.check_invariants();
}

TEST(Region, ZeroByteRequestTakesOneUnit) {
  Region r("r", 4 * kAlignment);
  Block a = *r.allocate(0), b = *r.allocate(0);
  EXPECT_EQ(a.size, kAlignment);
  EXPECT_NE(a.offset, b.offset);
  EXPECT_EQ(r.stats().allocated, 2 * kAlignment);
}

TEST(Region, HugeRequestsFailWithoutWrapping) {
  // round_up must not wrap around: a request near SIZE_MAX is too large, not zero bytes.
  Region r("r", 1 << 20);
  for (size_t req : {std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max() - 255,
                     std::numeric_limits<size_t>::max() - 256}) {
    EXPECT_FALSE(r.fits(req)) << req;
    absl::StatusOr<Block> b = r.allocate(req);
    ASSERT_FALSE(b.ok()) << req << " got a block of " << b->size;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
    absl::StatusOr<Block> at = r.allocate_at(kAlignment, req);
    EXPECT_FALSE(at.ok()) << req;
    // An offset so large that offset + size wraps is out of range too.
    absl::StatusOr<Block> wrap = r.allocate_at(std::numeric_limits<size_t>::max() / kAlignment * kAlignment, 1);
    EXPECT_EQ(wrap.status().code(), absl::StatusCode::kInvalidArgument) << wrap.status();
  }
  r.check_invariants();
  EXPECT_EQ(r.stats().allocated, 0u);
}

TEST(Region, FailureMessageNamesRequestAndState) {
  Region r("compute region", 1 << 20);
  Block a = *r.allocate(600 * 1024);
  absl::StatusOr<Block> b = r.allocate(512 * 1024);
  ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(b.status().message());
  std::printf("  message: %s\n", msg.c_str());
  EXPECT_NE(msg.find("512.0 KiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("524288 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("600.0 KiB of 1.0 MiB allocated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("largest free block 424.0 KiB"), std::string::npos) << msg;
  r.free(a);
  EXPECT_TRUE(r.allocate(512 * 1024).ok());
}

// move: a live block slides into the free bytes below it (overlapping its old range); the
// free list stays coalesced, live_blocks lists blocks by offset, and the move is neither an
// allocation nor a free.
TEST(Region, MoveSlidesABlockIntoTheFreeBytesBesideIt) {
  Region r("r", 8 * kAlignment);
  Block a = *r.allocate(2 * kAlignment), b = *r.allocate(3 * kAlignment), c = *r.allocate(kAlignment);
  r.free(a);  // free: [0,2) and [6,8); b at [2,5), c at [5,6)
  ASSERT_EQ(r.largest_free(), 2 * kAlignment);
  const RegionStats before = r.stats();
  Block moved = r.move(b, kAlignment);  // into [1,4): overlaps [2,5)
  EXPECT_EQ(moved, (Block{kAlignment, 3 * kAlignment}));
  r.check_invariants();
  EXPECT_EQ(r.stats().num_allocs, before.num_allocs);
  EXPECT_EQ(r.stats().num_frees, before.num_frees);
  EXPECT_EQ(r.stats().allocated, before.allocated);
  EXPECT_EQ(r.live_blocks(), (std::vector<Block>{moved, c}));
  EXPECT_EQ(r.free_neighbors(c).left, kAlignment);  // [4,5) freed by the move
  Block c2 = r.move(c, 4 * kAlignment);
  r.check_invariants();
  EXPECT_EQ(r.largest_free(), 3 * kAlignment);  // [5,8) in one block
  EXPECT_EQ(r.live_blocks(), (std::vector<Block>{moved, c2}));
}

TEST(Region, EmptyRegion) {
  Region r("empty", 100);  // rounds down to 0 bytes
  EXPECT_EQ(r.capacity(), 0u);
  EXPECT_EQ(r.allocate(0).status().code(), absl::StatusCode::kResourceExhausted);
  r.check_invariants();
  EXPECT_EQ(r.stats().fragmentation(), 0.0);
}

}  // namespace
}  // namespace mtc::alloc
