// Tests of the interpreter's worker side (src/executor.cc) driven command by command:
// the tensor records it keeps (storage, compute path, users, reference counts) and what
// Del (with DTE's fake delete) and failures do to them, which evictions count as forced by
// fragmentation, and compaction when only moving a pinned input makes room; the
// provisional op times of an asynchronous device, and swaps on a device whose copies are
// queued.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor.h"
#include "gtest/gtest.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/shape_ops.h"

namespace mtc {
namespace {

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceOptions o;
    o.memory_bytes = size_t{16} << 20;
    o.comm_bytes = size_t{1} << 20;
    o.num_threads = 1;
    auto d = make_device(o);
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = *d;
    ex_ = std::make_unique<Executor>(*device_, ExecutorOptions{});
  }
  void put(uint64_t id, Shape s, float v) {
    TensorDesc d{s, DType::kF32};
    std::vector<float> vals(d.numel(), v);
    Put p{id, d, std::vector<std::byte>(d.bytes()), false};
    std::memcpy(p.data.data(), vals.data(), d.bytes());
    ASSERT_TRUE(ex_->execute(p).ok());
  }
  absl::Status apply(std::shared_ptr<const OpDef> op, IdList in, IdList out, std::vector<TensorDesc> descs) {
    ApplyOp c{std::move(op), std::move(in), std::move(out), {}};
    for (auto& d : descs) c.output_descs.push_back(d);
    return ex_->execute(c);
  }
  const TensorRecord& rec(uint64_t id) { return ex_->records().at(id); }
  size_t allocated() { return device_->compute_region().stats().allocated; }

  std::shared_ptr<Device> device_;
  std::unique_ptr<Executor> ex_;
};

TEST_F(ExecutorTest, RecordsComputePathUsersAndRefCounts) {
  const TensorDesc d{{256}, DType::kF32};
  put(1, {256}, 1.f);
  put(2, {256}, 2.f);
  auto add = std::make_shared<BinaryOp>(BinaryKind::kAdd);
  ASSERT_TRUE(apply(add, {1, 2}, {3}, {d}).ok());
  ASSERT_TRUE(apply(std::make_shared<ActOp>(ActKind::kRelu), {3}, {4}, {d}).ok());

  const TensorRecord& r3 = rec(3);
  ASSERT_NE(r3.producer, nullptr);
  EXPECT_STREQ(r3.producer->op->name(), "add");
  EXPECT_EQ(r3.producer->inputs, (IdList{1, 2}));
  EXPECT_EQ(r3.producer->outputs, (IdList{3}));
  EXPECT_GE(r3.producer->compute_us, 0.0);
  EXPECT_EQ(r3.state, StorageState::kResident);
  EXPECT_EQ(rec(1).producer, nullptr);  // a Put has no compute path
  EXPECT_EQ(rec(1).users, (std::vector<uint64_t>{3}));
  EXPECT_EQ(rec(3).users, (std::vector<uint64_t>{4}));
  EXPECT_EQ(rec(1).ref_count(), 2u);  // its handle and tensor 3
  EXPECT_EQ(rec(4).ref_count(), 1u);  // only its handle
  EXPECT_GT(rec(4).last_access, rec(1).last_access);

  // Releasing tensor 3 while tensor 4 (computed from it) lives keeps 3's record as a
  // recompute source and frees only its storage ("fake delete").
  const size_t before = allocated();
  Del del{3};
  ASSERT_TRUE(ex_->execute(del).ok());
  ASSERT_EQ(ex_->records().count(3), 1u);
  EXPECT_EQ(rec(3).state, StorageState::kDropped);
  EXPECT_FALSE(rec(3).handle_alive);
  EXPECT_EQ(rec(3).ref_count(), 1u);  // tensor 4
  EXPECT_EQ(allocated(), before - alloc::round_up(d.bytes()));
  // Releasing 4 erases it, and with it 3, which nothing needs any more.
  Del del4{4};
  ASSERT_TRUE(ex_->execute(del4).ok());
  EXPECT_EQ(ex_->records().count(4), 0u);
  EXPECT_EQ(ex_->records().count(3), 0u);
  EXPECT_TRUE(rec(1).users.empty());
  EXPECT_TRUE(rec(2).users.empty());
  EXPECT_EQ(rec(1).ref_count(), 1u);
  for (uint64_t id : {1, 2}) {
    Del x{id};
    ASSERT_TRUE(ex_->execute(x).ok());
  }
  EXPECT_EQ(allocated(), 0u);
  device_->compute_region().check_invariants();
}

TEST_F(ExecutorTest, FailedOpLeavesNoRecordAndNoStorage) {
  put(1, {8}, 1.f);
  const size_t before = allocated();
  // An output larger than the region: the op fails, naming itself and the output.
  const TensorDesc huge{{int64_t{1} << 30}, DType::kF32};
  absl::Status s = apply(std::make_shared<ActOp>(ActKind::kRelu), {1}, {2}, {huge});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("relu on f32[8]: output 0 f32[1073741824]"), std::string::npos) << s;
  EXPECT_EQ(ex_->records().count(2), 0u);
  EXPECT_EQ(allocated(), before);
  // A later op on the missing tensor fails cleanly too.
  s = apply(std::make_shared<ScaleOp>(2.f), {2}, {3}, {TensorDesc{{8}, DType::kF32}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  Del del{2};  // the user's handle to the failed output goes away: nothing to free
  EXPECT_TRUE(ex_->execute(del).ok());
}

// A device whose compute region is 3 MiB, and an executor on it, with eviction by policy.
struct SmallExecutor {
  explicit SmallExecutor(EvictPolicy policy, bool move_when_cheaper = true, EvictMode mode = EvictMode::kBoth) {
    DeviceOptions o;
    o.memory_bytes = size_t{4} << 20;
    o.comm_bytes = size_t{1} << 20;
    o.num_threads = 1;
    device = *make_device(o);
    ExecutorOptions eo;
    eo.evict.policy = policy;
    eo.evict.reproducible = true;
    eo.evict.move_when_cheaper = move_when_cheaper;
    eo.evict.mode = mode;
    ex = std::make_unique<Executor>(*device, eo);
  }
  // put: a 1 MiB tensor of f32 holding base + i.
  absl::Status put(uint64_t id, float base, int64_t mib = 1) { return put_kib(id, base, mib << 10); }
  absl::Status put_kib(uint64_t id, float base, int64_t kib, bool persistent = false) {
    const int64_t n = kib << 8;
    TensorDesc desc{{n}, DType::kF32};
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
    Put p{id, desc, std::vector<std::byte>(desc.bytes()), persistent};
    std::memcpy(p.data.data(), v.data(), desc.bytes());
    return ex->execute(p);
  }
  // expect_values: tensor id holds base + i, n values.
  void expect_values(uint64_t id, float base, int64_t n) {
    std::vector<float> got(n);
    GetValue g{id, got.data(), got.size() * sizeof(float), nullptr};
    ASSERT_TRUE(ex->execute(g).ok());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], base + static_cast<float>(i)) << i;
    }
  }
  // split: tensors 1, 2 and 3 of 1 MiB, then 1 and 3 released: 2 MiB free, in two blocks
  // of 1 MiB, with tensor 2 (1e6 + i) between them.
  void split() {
    ASSERT_TRUE(put(1, 0.f).ok());
    ASSERT_TRUE(put(2, 1e6f).ok());
    ASSERT_TRUE(put(3, 0.f).ok());
    Del d1{1}, d3{3};
    ASSERT_TRUE(ex->execute(d1).ok());
    ASSERT_TRUE(ex->execute(d3).ok());
    ASSERT_EQ(device->compute_region().stats().allocated, size_t{1} << 20);
    ASSERT_EQ(device->compute_region().largest_free(), size_t{1} << 20);
    ASSERT_EQ(ex->records().at(2).block.offset, size_t{1} << 20);
  }
  std::shared_ptr<Device> device;
  std::unique_ptr<Executor> ex;
};

// HoldOp / ReleaseOp: an op that leaves work in flight on its input, as a data-parallel
// bucket's all-reduce does (OpDef::holds_inputs), and the op that waits for it.
struct HoldOp final : OpDef {
  MTC_OP_SCHEMA("test_hold")
  absl::Status infer(std::span<const TensorDesc>, std::vector<TensorDesc>&) const override { return absl::OkStatus(); }
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
  uint64_t holds_inputs() const override { return 1; }
};
struct ReleaseOp final : OpDef {
  MTC_OP_SCHEMA("test_release")
  absl::Status infer(std::span<const TensorDesc>, std::vector<TensorDesc>&) const override { return absl::OkStatus(); }
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
  uint64_t releases_inputs() const override { return 1; }
};
absl::Status no_kernel_work(const OpDef&, const KernelArgs&) { return absl::OkStatus(); }
MTC_REGISTER_KERNEL(HoldOp, DeviceType::kCPU, no_kernel_work);
MTC_REGISTER_KERNEL(ReleaseOp, DeviceType::kCPU, no_kernel_work);

// A request within the budget that finds no block large enough forces an eviction, which
// evict_fragmented counts; one over the budget forces an eviction it does not count. With
// move_when_cheaper too: sliding tensor 2 down would copy its 1 MiB once, swapping it
// copies it twice, and a move must cost under a quarter of the evictions it saves (Note
// [Compaction]), so it is swapped either way.
TEST(ExecutorEvictions, CountsEvictionsForcedByFragmentation) {
  for (bool move_when_cheaper : {false, true}) {
    SCOPED_TRACE(move_when_cheaper ? "move when cheaper" : "evict first");
    SmallExecutor s(EvictPolicy::kMtc, move_when_cheaper);
    s.split();
    Executor& ex = *s.ex;
    ASSERT_TRUE(s.put(4, 0.f, 2).ok());
    EXPECT_EQ(ex.evict_stats().evict_swap, 1u);  // a Put cannot be recomputed: swapped
    EXPECT_EQ(ex.evict_stats().evict_fragmented, 1u);
    EXPECT_EQ(ex.evict_stats().compactions, 0u);
    EXPECT_EQ(ex.records().at(2).state, StorageState::kSwapped);
    // 2 MiB live of 3: another 2 MiB passes the budget.
    ASSERT_TRUE(s.put(5, 0.f, 2).ok());
    EXPECT_EQ(ex.evict_stats().evict_swap, 2u);
    EXPECT_EQ(ex.evict_stats().evict_fragmented, 1u);
  }
}

// Note [Compaction] (evict/engine.cc): 2 MiB free in two 1 MiB blocks, split by the op's own
// pinned input, which nothing may evict: the input moves down, the output takes the 2 MiB
// above it, and the op computes from the input's moved bytes.
TEST(ExecutorEvictions, MovesAPinnedInputWhenOnlyThatMakesRoom) {
  for (EvictPolicy policy : {EvictPolicy::kMtc, EvictPolicy::kNone}) {
    SCOPED_TRACE(evict_policy_name(policy));
    SmallExecutor s(policy);
    s.split();
    Executor& ex = *s.ex;
    const int64_t n = int64_t{1} << 18;
    ApplyOp cat{std::make_shared<ConcatOp>(0), {2, 2}, {4}, {TensorDesc{{2 * n}, DType::kF32}}};
    ASSERT_TRUE(ex.execute(cat).ok());
    EXPECT_EQ(ex.evict_stats().compactions, 1u);
    EXPECT_EQ(ex.evict_stats().moved_bytes, size_t{1} << 20);
    EXPECT_EQ(ex.evict_stats().evict_swap + ex.evict_stats().evict_drop, 0u);
    EXPECT_EQ(ex.records().at(2).block.offset, 0u);
    EXPECT_EQ(ex.records().at(4).block.offset, size_t{1} << 20);
    s.device->compute_region().check_invariants();
    std::vector<float> got(2 * n);
    GetValue g{4, got.data(), got.size() * sizeof(float), nullptr};
    ASSERT_TRUE(ex.execute(g).ok());
    for (int64_t i = 0; i < 2 * n; ++i) {
      ASSERT_EQ(got[i], 1e6f + static_cast<float>(i % n)) << i;
    }
    if (policy != EvictPolicy::kNone) continue;
    // Without eviction and without room even in pieces, the op fails as before.
    ApplyOp again{std::make_shared<ConcatOp>(0), {2, 2}, {5}, {TensorDesc{{2 * n}, DType::kF32}}};
    absl::Status st = ex.execute(again);
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
    EXPECT_EQ(ex.evict_stats().compactions, 1u);
  }
}

// Note [Compaction]: in drop mode, a 1 MiB request finds 1 MiB free in two blocks split by
// the 256 KiB product of a 256 x 256 matmul, the only tensor that may go. Dropping it
// costs its recompute (33.5 ms at the reproducible 1 GFLOP/s), sliding it down one copy
// (26 us at 10 GB/s): it moves, and nothing is evicted; without move_when_cheaper it is
// dropped.
TEST(ExecutorEvictions, MovesInsteadOfEvictingWhenTheCopyIsCheaper) {
  for (bool move_when_cheaper : {true, false}) {
    SCOPED_TRACE(move_when_cheaper ? "move when cheaper" : "evict first");
    SmallExecutor s(EvictPolicy::kMtc, move_when_cheaper, EvictMode::kDrop);
    Executor& ex = *s.ex;
    // In 256 KiB units of the 3 MiB region: a [0, 1), b [1, 2), filler 3 [2, 4), the
    // product 4 [4, 5), filler 5 [5, 7), filler 6 [7, 12); then the first two fillers go.
    const TensorDesc sq{{256, 256}, DType::kF32};
    for (uint64_t id : {1, 2}) {
      std::vector<float> v(256 * 256);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7 + id) % 13) / 13.f;
      Put p{id, sq, std::vector<std::byte>(sq.bytes()), false};
      std::memcpy(p.data.data(), v.data(), sq.bytes());
      ASSERT_TRUE(ex.execute(p).ok());
    }
    ASSERT_TRUE(s.put_kib(3, 0.f, 512).ok());
    ApplyOp mm{std::make_shared<MatmulOp>(), {1, 2}, {4}, {sq}};
    ASSERT_TRUE(ex.execute(mm).ok());
    ASSERT_TRUE(s.put_kib(5, 0.f, 512).ok());
    ASSERT_TRUE(s.put_kib(6, 0.f, 1280).ok());
    ASSERT_EQ(ex.records().at(4).block.offset, size_t{1} << 20);
    std::vector<float> before(256 * 256);
    GetValue g{4, before.data(), before.size() * sizeof(float), nullptr};
    ASSERT_TRUE(ex.execute(g).ok());
    Del d3{3}, d5{5};
    ASSERT_TRUE(ex.execute(d3).ok());
    ASSERT_TRUE(ex.execute(d5).ok());
    ASSERT_TRUE(s.put_kib(7, 0.f, 1024).ok());
    if (move_when_cheaper) {
      EXPECT_EQ(ex.evict_stats().evict_drop, 0u);
      EXPECT_EQ(ex.evict_stats().compactions, 1u);
      EXPECT_EQ(ex.evict_stats().moved_bytes, size_t{256} << 10);
      EXPECT_EQ(ex.records().at(4).block.offset, size_t{512} << 10);
      EXPECT_EQ(ex.records().at(7).block.offset, size_t{768} << 10);
    } else {
      EXPECT_EQ(ex.evict_stats().evict_drop, 1u);
      EXPECT_EQ(ex.evict_stats().compactions, 0u);
      EXPECT_EQ(ex.records().at(4).state, StorageState::kDropped);
    }
    s.device->compute_region().check_invariants();
    std::vector<float> after(256 * 256);  // moved, or recomputed
    GetValue g2{4, after.data(), after.size() * sizeof(float), nullptr};
    ASSERT_TRUE(ex.execute(g2).ok());
    EXPECT_EQ(after, before);
  }
}

// Note [Compaction], evacuation: the free bytes lie in two segments split by a tensor whose
// bytes work in flight still uses (a HoldOp's), which never moves, so no segment's gaps
// hold the request and sliding cannot help; tensor 2 moves out of its segment, into the
// free block of the other, and its old place and the gap beside it make the block.
// Without eviction (policy none), and in drop mode, where a Put may not be dropped,
// nothing can be evicted and only the move serves.
TEST(ExecutorEvictions, MovesATensorIntoAnotherSegmentsFreeBlock) {
  for (EvictPolicy policy : {EvictPolicy::kMtc, EvictPolicy::kNone}) {
    SCOPED_TRACE(evict_policy_name(policy));
    SmallExecutor s(policy, /*move_when_cheaper=*/true, EvictMode::kDrop);
    Executor& ex = *s.ex;
    // In 512 KiB units of the 3 MiB region: persistent 1 at [0, 2), tensor 2 at [2, 3),
    // tensor 3 at [3, 4), persistent 4 at [4, 5), tensor 5 at [5, 6); then 3 and 5 go.
    ASSERT_TRUE(s.put_kib(1, 0.f, 1024, /*persistent=*/true).ok());
    ASSERT_TRUE(s.put_kib(2, 5e5f, 512).ok());
    ASSERT_TRUE(s.put_kib(3, 0.f, 512).ok());
    ASSERT_TRUE(s.put_kib(4, 0.f, 512, /*persistent=*/true).ok());
    ASSERT_TRUE(s.put_kib(5, 0.f, 512).ok());
    ASSERT_EQ(ex.records().at(4).block.offset, size_t{2} << 20);
    ApplyOp hold{std::make_shared<HoldOp>(), {4}, {}, {}};
    ASSERT_TRUE(ex.execute(hold).ok());
    Del d3{3}, d5{5};
    ASSERT_TRUE(ex.execute(d3).ok());
    ASSERT_TRUE(ex.execute(d5).ok());
    ASSERT_EQ(s.device->compute_region().largest_free(), size_t{512} << 10);
    ASSERT_TRUE(s.put_kib(6, 0.f, 1024).ok());
    EXPECT_EQ(ex.evict_stats().evict_swap + ex.evict_stats().evict_drop, 0u);
    EXPECT_EQ(ex.evict_stats().compactions, 1u);
    EXPECT_EQ(ex.evict_stats().moved_bytes, size_t{512} << 10);
    EXPECT_EQ(ex.records().at(2).block.offset, size_t{5} << 19);
    EXPECT_EQ(ex.records().at(6).block.offset, size_t{1} << 20);
    s.device->compute_region().check_invariants();
    s.expect_values(2, 5e5f, int64_t{512} << 8);
  }
}

// Note [Compaction]: persistent tensors (parameters, optimizer state, gradients the comm
// region could not take) move like any other, but not one whose bytes work in flight
// still uses. In 512 KiB units of the 3 MiB region: tensor 1 [0, 1), persistent 2 [1, 2),
// tensor 3 [2, 3), tensor 4 [3, 6); then 1 and 3 go, and 1 MiB is asked for with nothing
// to evict (policy none). While a HoldOp's work holds 2, nothing can make the block; once
// a ReleaseOp has run, 2 slides down and the request takes [1, 3).
TEST(ExecutorEvictions, MovesPersistentTensorsButNotOnesWorkInFlightHolds) {
  SmallExecutor s(EvictPolicy::kNone);
  Executor& ex = *s.ex;
  ASSERT_TRUE(s.put_kib(1, 0.f, 512).ok());
  ASSERT_TRUE(s.put_kib(2, 7e5f, 512, /*persistent=*/true).ok());
  ASSERT_TRUE(s.put_kib(3, 0.f, 512).ok());
  ASSERT_TRUE(s.put_kib(4, 0.f, 1536).ok());
  ASSERT_EQ(ex.records().at(2).block.offset, size_t{512} << 10);
  Del d1{1}, d3{3};
  ASSERT_TRUE(ex.execute(d1).ok());
  ASSERT_TRUE(ex.execute(d3).ok());
  ApplyOp hold{std::make_shared<HoldOp>(), {2}, {}, {}};
  ASSERT_TRUE(ex.execute(hold).ok());
  EXPECT_EQ(ex.records().at(2).address_holds, 1u);
  absl::Status st = s.put_kib(5, 0.f, 1024);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(ex.records().at(2).block.offset, size_t{512} << 10);
  EXPECT_EQ(ex.evict_stats().compactions, 0u);
  ApplyOp release{std::make_shared<ReleaseOp>(), {2}, {}, {}};
  ASSERT_TRUE(ex.execute(release).ok());
  EXPECT_EQ(ex.records().at(2).address_holds, 0u);
  ASSERT_TRUE(s.put_kib(5, 0.f, 1024).ok());
  EXPECT_EQ(ex.evict_stats().compactions, 1u);
  EXPECT_EQ(ex.evict_stats().moved_bytes, size_t{512} << 10);
  EXPECT_EQ(ex.records().at(2).block.offset, 0u);
  EXPECT_EQ(ex.records().at(5).block.offset, size_t{512} << 10);
  s.device->compute_region().check_invariants();
  s.expect_values(2, 7e5f, int64_t{512} << 8);
}

// Note [Compaction], repacking: no segment's free bytes hold the request, and no window's
// tensors fit the free gaps outside it as they lie. In 256 KiB units of the 3 MiB region:
// tensor 1 [0, 2), a gap [2, 3), held 2 [3, 4), a gap [4, 5), tensor 3 [5, 7), a gap
// [7, 8), held 4 [8, 9), tensor 5 [9, 12); 768 KiB is asked for. Tensor 3 packs down to
// [4, 6), tensor 1 moves into the gap that makes, [6, 8), and the request takes [0, 3).
TEST(ExecutorEvictions, RepacksSegmentsWhenNoWindowCanBeCleared) {
  SmallExecutor s(EvictPolicy::kNone);
  Executor& ex = *s.ex;
  ASSERT_TRUE(s.put_kib(1, 1e5f, 512).ok());
  ASSERT_TRUE(s.put_kib(10, 0.f, 256).ok());
  ASSERT_TRUE(s.put_kib(2, 0.f, 256, /*persistent=*/true).ok());
  ASSERT_TRUE(s.put_kib(11, 0.f, 256).ok());
  ASSERT_TRUE(s.put_kib(3, 3e5f, 512).ok());
  ASSERT_TRUE(s.put_kib(12, 0.f, 256).ok());
  ASSERT_TRUE(s.put_kib(4, 0.f, 256, /*persistent=*/true).ok());
  ASSERT_TRUE(s.put_kib(5, 0.f, 768).ok());
  ASSERT_EQ(ex.records().at(5).block.offset, size_t{9} << 18);
  for (uint64_t id : {2, 4}) {
    ApplyOp hold{std::make_shared<HoldOp>(), {id}, {}, {}};
    ASSERT_TRUE(ex.execute(hold).ok());
  }
  for (uint64_t id : {10, 11, 12}) {
    Del d{id};
    ASSERT_TRUE(ex.execute(d).ok());
  }
  ASSERT_EQ(s.device->compute_region().largest_free(), size_t{256} << 10);
  ASSERT_TRUE(s.put_kib(6, 0.f, 768).ok());
  EXPECT_EQ(ex.evict_stats().compactions, 1u);
  EXPECT_EQ(ex.evict_stats().moved_bytes, size_t{1} << 20);
  EXPECT_EQ(ex.records().at(3).block.offset, size_t{4} << 18);
  EXPECT_EQ(ex.records().at(1).block.offset, size_t{6} << 18);
  EXPECT_EQ(ex.records().at(6).block.offset, 0u);
  s.device->compute_region().check_invariants();
  s.expect_values(1, 1e5f, int64_t{512} << 8);
  s.expect_values(3, 3e5f, int64_t{512} << 8);
}

// HostMemoryDevice: a 4 MiB arena in host memory (1 MiB comm, 3 MiB compute) whose copies
// are memcpy, for the devices below to change one behaviour each.
class HostMemoryDevice : public Device {
 public:
  HostMemoryDevice()
      : Device(DeviceType::kCPU, 0, 1),
        arena_(static_cast<std::byte*>(std::aligned_alloc(4096, size_t{4} << 20)), &std::free) {
    init_regions(arena_.get(), size_t{1} << 20, size_t{3} << 20);
  }
  absl::Status copy_to_device(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status copy_on_device(void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status synchronize() override { return absl::OkStatus(); }

 private:
  std::unique_ptr<std::byte, decltype(&std::free)> arena_;
};

// An asynchronous device as the executor sees one (Device::async_kernels): the host's
// memory and kernels, but each op's time arrives only when the test releases it, as a
// GPU's event times arrive some ops after the op was issued. Timer n measures 100 n us.
class HeldTimerDevice final : public HostMemoryDevice {
 public:
  bool async_kernels() const override { return true; }
  uint64_t start_timer() override { return ++next_; }
  void stop_timer(uint64_t id) override { issued_.push_back(id); }
  void collect_timers(bool wait, std::vector<std::pair<uint64_t, double>>& done) override {
    if (!wait && !released_) return;
    for (uint64_t id : issued_) done.emplace_back(id, 100.0 * static_cast<double>(id));
    issued_.clear();
  }
  std::string describe() const override { return "host memory, held op timings"; }
  bool released_ = false;

 private:
  uint64_t next_ = 0;
  std::vector<uint64_t> issued_;
};

// Note [Provisional op times] (src/executor.cc): until an op's timing arrives its compute
// path's time is the last measured run with the same key, else its work at the rate
// measured so far; never 0, which DTE's cost would read as free to recompute.
TEST(ExecutorAsync, OpTimesAreProvisionalUntilTheirTimingsArrive) {
  HeldTimerDevice device;
  Executor ex(device, ExecutorOptions{});
  const TensorDesc d{{256}, DType::kF32}, d2{{512}, DType::kF32};
  auto put = [&](uint64_t id, const TensorDesc& desc) {
    Put p{id, desc, std::vector<std::byte>(desc.bytes()), false};
    return ex.execute(p);
  };
  auto apply = [&](std::shared_ptr<const OpDef> op, IdList in, uint64_t out, const TensorDesc& desc) {
    ApplyOp c{std::move(op), std::move(in), {out}, {}};
    c.output_descs.push_back(desc);
    return ex.execute(c);
  };
  auto us = [&](uint64_t id) { return ex.records().at(id).producer->compute_us; };
  auto add = std::make_shared<BinaryOp>(BinaryKind::kAdd);
  auto relu = std::make_shared<ActOp>(ActKind::kRelu);
  ASSERT_TRUE(put(1, d).ok());
  ASSERT_TRUE(put(2, d).ok());
  ASSERT_TRUE(put(9, d2).ok());

  // Nothing measured yet: the add's work at 1 GFLOP/s (256 flops, 3 KiB moved).
  ASSERT_TRUE(apply(add, {1, 2}, 3, d).ok());  // timer 1
  const std::vector<TensorDesc> in_d{d, d}, out_d{d};
  const OpCost c = add->cost(in_d, out_d);
  EXPECT_DOUBLE_EQ(us(3), (c.flops + c.bytes_read + c.bytes_written) * 1e-3);
  EXPECT_GT(us(3), 0.0);

  // The add's timing (100 us) arrives before the relu runs: the add's path takes it, and
  // the relu, not measured yet, gets its work at the add's measured rate.
  device.released_ = true;
  ASSERT_TRUE(apply(relu, {3}, 4, d).ok());  // timer 2, collected by the next op
  EXPECT_DOUBLE_EQ(us(3), 100.0);
  const std::vector<TensorDesc> r_in{d};
  const OpCost rc = relu->cost(r_in, out_d);
  EXPECT_NEAR(us(4), (rc.flops + rc.bytes_read + rc.bytes_written) * 100.0 /
                         (c.flops + c.bytes_read + c.bytes_written), 1e-9);
  EXPECT_GT(us(4), 0.0);

  // A second add of the same shapes starts from the first's measured 100 us (the relu's
  // 200 us arrive as it is issued). Then, timings held: an add of other shapes does not
  // share the key and gets its work at the rate of both measured runs.
  ASSERT_TRUE(apply(add, {1, 2}, 5, d).ok());  // timer 3
  EXPECT_DOUBLE_EQ(us(4), 200.0);
  EXPECT_DOUBLE_EQ(us(5), 100.0);
  device.released_ = false;
  ASSERT_TRUE(apply(add, {9, 9}, 6, d2).ok());  // timer 4
  const std::vector<TensorDesc> in_d2{d2, d2}, out_d2{d2};
  const OpCost c2 = add->cost(in_d2, out_d2);
  const double work = c.flops + c.bytes_read + c.bytes_written, work_relu = rc.flops + rc.bytes_read + rc.bytes_written;
  EXPECT_NEAR(us(6), (c2.flops + c2.bytes_read + c2.bytes_written) * 300.0 / (work + work_relu), 1e-9);
  EXPECT_DOUBLE_EQ(us(5), 100.0);  // its own timing still held

  // Reading the totals waits for the timings in flight; each path then holds its own.
  EXPECT_DOUBLE_EQ(ex.evict_stats().compute_us, 100.0 + 200.0 + 300.0 + 400.0);
  EXPECT_DOUBLE_EQ(us(5), 300.0);
  EXPECT_DOUBLE_EQ(us(6), 400.0);
}

// A device whose swaps are queued, as Note [Swaps without waiting] has them on a GPU:
// swap_out takes its source's bytes at once (the kernels after it are ordered after the
// copy) but writes them into the host memory only when its queue runs (at a swap_in,
// synchronize or free_host), so an engine that read swapped bytes on the host would read
// 0xCD. Host memory comes from alloc_host and goes back through free_host, both counted.
class QueuedSwapDevice final : public HostMemoryDevice {
 public:
  std::byte* alloc_host(size_t bytes) override {
    ++allocs;
    return new std::byte[bytes];
  }
  void free_host(std::byte* p) override {
    run_queue();
    ++frees;
    delete[] p;
  }
  absl::Status swap_out(void* host, const void* src, size_t bytes) override {
    const auto* s = static_cast<const std::byte*>(src);
    queue_.emplace_back(static_cast<std::byte*>(host), std::vector<std::byte>(s, s + bytes));
    std::memset(host, 0xCD, bytes);  // what the host holds until the copy runs
    return absl::OkStatus();
  }
  absl::Status swap_in(void* dst, const void* host, size_t bytes) override {
    run_queue();  // queued behind the swap-outs
    std::memcpy(dst, host, bytes);
    return absl::OkStatus();
  }
  bool copies_async() const override { return true; }
  absl::Status synchronize() override {
    run_queue();
    return absl::OkStatus();
  }
  std::string describe() const override { return "host memory, queued swaps"; }
  int allocs = 0, frees = 0;

 private:
  void run_queue() {
    for (auto& [host, bytes] : queue_) std::memcpy(host, bytes.data(), bytes.size());
    queue_.clear();
  }
  std::vector<std::pair<std::byte*, std::vector<std::byte>>> queue_;
};

// Swaps on a device whose copies are queued (Device::copies_async): the engine swaps
// through the device's host memory and copies and never reads the bytes itself, the
// tensors come back whole, a swap's time is its bytes at gamma (10 GB/s when reproducible),
// not the host's time to queue it, and every host buffer goes back to the device.
TEST(ExecutorAsync, QueuedSwapsUseTheDevicesHostMemoryAndCostTheirBytesAtGamma) {
  QueuedSwapDevice device;
  {
    ExecutorOptions eo;
    eo.evict.policy = EvictPolicy::kMtc;
    eo.evict.mode = EvictMode::kSwap;
    eo.evict.reproducible = true;
    Executor ex(device, eo);
    const int64_t n = int64_t{1} << 18;  // 1 MiB of f32
    auto put = [&](uint64_t id) {
      const TensorDesc desc{{n}, DType::kF32};
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(id * 1000000 + i);
      Put p{id, desc, std::vector<std::byte>(desc.bytes()), false};
      std::memcpy(p.data.data(), v.data(), desc.bytes());
      return ex.execute(p);
    };
    // The 3 MiB region holds three: each Put past them swaps one out.
    for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(put(id).ok()) << id;
    EXPECT_EQ(ex.evict_stats().evict_swap, 2u);
    for (uint64_t id = 1; id <= 5; ++id) {
      std::vector<float> got(n);
      GetValue g{id, got.data(), got.size() * sizeof(float), nullptr};
      ASSERT_TRUE(ex.execute(g).ok()) << id;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], static_cast<float>(id * 1000000 + i)) << "tensor " << id << ", value " << i;
      }
    }
    const EvictStats st = ex.evict_stats();
    EXPECT_GT(st.swapped_in_bytes, 0u);
    EXPECT_DOUBLE_EQ(st.swap_us, static_cast<double>(st.swapped_out_bytes + st.swapped_in_bytes) / 1e4);
    EXPECT_GT(device.allocs, 0);
  }
  EXPECT_EQ(device.frees, device.allocs);
}

}  // namespace
}  // namespace mtc
