// Tests of Runtime: creation and its clean failures (unknown device, memory too small or
// too large), the arena's split into the comm and compute regions, the current runtime,
// the seed stream, and parse_bytes, which reads the byte sizes of flags.
#include "mtc/runtime.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mtc/ops.h"

namespace mtc {
namespace {

TEST(ParseBytes, AcceptsSizesWithUnits) {
  struct Case {
    const char* text;
    size_t bytes;
  };
  for (const Case& c : {Case{"1000", 1000}, Case{"0", 0}, Case{"512MiB", size_t{512} << 20},
                        Case{"2GiB", size_t{2} << 30}, Case{"1.5G", size_t{3} << 29},
                        Case{"64k", size_t{64} << 10}, Case{"256 B", 256}, Case{" 3 MB ", size_t{3} << 20},
                        Case{"1TiB", size_t{1} << 40}, Case{"0.5KiB", 512}}) {
    absl::StatusOr<size_t> b = parse_bytes(c.text);
    ASSERT_TRUE(b.ok()) << "'" << c.text << "': " << b.status();
    EXPECT_EQ(*b, c.bytes) << "'" << c.text << "'";
  }
}

TEST(ParseBytes, RejectsJunkWithAMessage) {
  for (const char* text : {"", "abc", "MiB", "-5", "12XB", "1.2.3G", "5 apples", "1e3", "0x10"}) {
    absl::StatusOr<size_t> b = parse_bytes(text);
    ASSERT_FALSE(b.ok()) << "'" << text << "' parsed as " << *b;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << text;
    // The message quotes the text it could not read.
    EXPECT_NE(b.status().message().find(absl::StrCat("'", text, "'")), std::string::npos) << b.status();
  }
  EXPECT_FALSE(parse_bytes("99999999999TiB").ok()) << "out of range";
}

// One budget syntax in every tool: a unit for bytes, a percentage for shares; a bare
// number is refused (mtc-train once read "1" as 1 byte and "0.3" as 30% of the region,
// mtc-replay "0.3" as 30% of the peak).
TEST(ParseBudget, FormsAndTheirMeaning) {
  absl::StatusOr<Budget> none = parse_budget("none");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->kind, Budget::Kind::kNone);
  absl::StatusOr<Budget> bytes = parse_budget("300MiB");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->kind, Budget::Kind::kBytes);
  EXPECT_EQ(bytes->bytes, size_t{300} << 20);
  absl::StatusOr<Budget> one = parse_budget("1B");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->bytes, 1u);
  absl::StatusOr<Budget> region = parse_budget("30%");
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->kind, Budget::Kind::kRegionShare);
  EXPECT_DOUBLE_EQ(region->share, 0.3);
  absl::StatusOr<Budget> peak = parse_budget("35%peak");
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_EQ(peak->kind, Budget::Kind::kPeakShare);
  EXPECT_DOUBLE_EQ(peak->share, 0.35);

  EXPECT_EQ(*resolve_budget(*region, 1000), 300u);
  EXPECT_EQ(*resolve_budget(*peak, 1000, 200), 70u);
  EXPECT_EQ(*resolve_budget(*none, 1000), 0u);
  EXPECT_FALSE(resolve_budget(*peak, 1000).ok()) << "a share of the peak needs the peak";
  absl::StatusOr<size_t> above = resolve_budget(*bytes, size_t{100} << 20);
  ASSERT_FALSE(above.ok());
  EXPECT_NE(above.status().message().find("above the compute region"), std::string::npos) << above.status();
}

TEST(ParseBudget, RefusesAmbiguousAndJunk) {
  for (const char* text : {"1", "0.3", "100", "", "lots", "0%", "101%", "-5%", "30%%", "30%region", "0B", "abc%"}) {
    absl::StatusOr<Budget> b = parse_budget(text);
    EXPECT_FALSE(b.ok()) << "'" << text << "' was accepted";
    if (!b.ok()) {
      EXPECT_NE(b.status().message().find("expected none, bytes with a unit"), std::string::npos) << b.status();
    }
  }
}

TEST(ParseBudget, RuntimeRefusesABudgetAboveTheRegion) {
  RuntimeOptions o;
  o.memory_bytes = size_t{64} << 20;
  o.evict.policy = EvictPolicy::kMtc;
  o.evict.budget_bytes = size_t{1} << 40;
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("above the compute region"), std::string::npos) << rt.status();
  o.evict.budget_bytes = size_t{8} << 20;
  rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  EXPECT_EQ((*rt)->budget_bytes(), size_t{8} << 20);
}

// expect_create_fails: Runtime::create(o) returns `code` with `text` in its message.
void expect_create_fails(const RuntimeOptions& o, absl::StatusCode code, const std::string& text) {
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), code) << rt.status();
  EXPECT_NE(rt.status().message().find(text), std::string::npos) << rt.status();
}

TEST(RuntimeCreate, UnknownDeviceFailsCleanly) {
  RuntimeOptions o;
  o.device = "tpu";
  o.memory_bytes = size_t{1} << 20;
  expect_create_fails(o, absl::StatusCode::kInvalidArgument, "unknown device 'tpu'");
}

#ifndef MTC_HAVE_CUDA
TEST(RuntimeCreate, CudaWithoutTheBackendFailsCleanly) {
  RuntimeOptions o;
  o.device = "cuda";
  o.memory_bytes = size_t{1} << 20;
  expect_create_fails(o, absl::StatusCode::kUnavailable, "no CUDA backend");
}
#endif

TEST(RuntimeCreate, MemoryTooSmallForTheRegionsFailsCleanly) {
  RuntimeOptions o;
  o.memory_bytes = 4096;
  o.comm_bytes = 8192;  // m1 > m: nothing left for the compute region
  expect_create_fails(o, absl::StatusCode::kInvalidArgument, "nothing for the compute region");
}

TEST(RuntimeCreate, ArenaThatCannotBeHadFailsCleanly) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 60;  // 1 EiB: no machine has it
  expect_create_fails(o, absl::StatusCode::kResourceExhausted, "1073741824.00 GiB");
}

TEST(RuntimeCreate, TinyArenaFailsAtTheFirstTensorThatDoesNotFit) {
  RuntimeOptions o;
  o.memory_bytes = 4096;  // comm 256, compute 3840 bytes
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  Tensor small = ones({16});
  EXPECT_EQ(*sum(small).item(), 16.0f);
  Tensor big = zeros({4096});  // 16 KiB
  absl::Status s = (*rt)->interpreter().sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("f32[4096]"), std::string::npos) << s;
  EXPECT_NE(s.message().find("16.0 KiB"), std::string::npos) << s;
  EXPECT_EQ(*sum(small).item(), 16.0f) << "the runtime keeps working";
}

TEST(RuntimeCreate, ArenaSplitsIntoCommAndComputeRegions) {
  RuntimeOptions o;
  o.memory_bytes = (size_t{64} << 20) + 100;  // rounded up to the alignment
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  absl::StatusOr<MemoryStats> m = (*rt)->interpreter().memory_stats();
  ASSERT_TRUE(m.ok()) << m.status();
  const size_t total = (size_t{64} << 20) + 256;
  EXPECT_EQ(m->comm.capacity, (size_t{4} << 20) + 0) << "m1 defaults to 1/16 of the arena";
  EXPECT_EQ(m->comm.capacity + m->compute.capacity, total);
  EXPECT_EQ(m->compute.allocated, 0u);
  EXPECT_EQ(m->compute.largest_free, m->compute.capacity);

  o.comm_bytes = size_t{1} << 20;
  auto rt2 = Runtime::create(o);
  ASSERT_TRUE(rt2.ok()) << rt2.status();
  m = (*rt2)->interpreter().memory_stats();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->comm.capacity, size_t{1} << 20);
  EXPECT_EQ(m->compute.capacity, total - (size_t{1} << 20));
}

TEST(RuntimeCreate, SynchronousOptionReachesTheInterpreter) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 20;
  o.synchronous = true;
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  EXPECT_TRUE((*rt)->interpreter().synchronous());
}

TEST(Runtime, CurrentIsTheLastCreatedOrTheOneMadeCurrent) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 20;
  auto a = Runtime::create(o);
  auto b = Runtime::create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(&Runtime::current(), b->get());
  EXPECT_EQ(ones({2}).interpreter(), &(*b)->interpreter());
  (*a)->make_current();
  EXPECT_EQ(&Runtime::current(), a->get());
  EXPECT_EQ(ones({2}).interpreter(), &(*a)->interpreter());
}

TEST(Runtime, SeedStreamIsReproducibleAndDistinct) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 20;
  o.seed = 7;
  auto a = Runtime::create(o);
  auto b = Runtime::create(o);
  o.seed = 8;
  auto c = Runtime::create(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<uint64_t> sa, sb, sc;
  for (int i = 0; i < 100; ++i) {
    sa.push_back((*a)->next_seed());
    sb.push_back((*b)->next_seed());
    sc.push_back((*c)->next_seed());
  }
  EXPECT_EQ(sa, sb) << "the same seed gives the same stream";
  EXPECT_NE(sa, sc);
  std::sort(sa.begin(), sa.end());
  EXPECT_EQ(std::unique(sa.begin(), sa.end()), sa.end()) << "no seed repeats";
}

}  // namespace
}  // namespace mtc
