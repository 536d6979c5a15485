// Multi-rank tests of comm/'s MPI backend, run by ctest under mpirun with 1, 2, 4 and 8
// ranks (comm_tests.cmake). Every rank computes what every other rank sent from the same
// deterministic inputs (element i of rank r is an integer function of r and i), so each
// collective is checked against a reference on every rank: exactly for i32, and exactly
// for f32 too when the values are small integers (their sums are exact in float); one
// test uses fractional f32 values at 1e-6 relative tolerance.
//
// A test must issue the same collectives on every rank whatever it finds, or the ranks
// deadlock: checks are EXPECT_*, never an early return between collectives. Output comes
// from rank 0; the other ranks print only their failures, prefixed "[rank r]", and the
// exit status is the worst over the ranks.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "gtest/gtest.h"

namespace mtc::comm {
namespace {

std::shared_ptr<Communicator> g_comm;     // backend mpi, no argument check
std::shared_ptr<Communicator> g_checked;  // backend mpi, check_arguments on
int R = 0, W = 1;                         // this rank, the world size

const size_t kSizes[] = {0, 1, 1027, size_t{1} << 20};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};

// value: the input of "rank" r (or any integer key) at element i, in [-100, 100].
int32_t value(long r, size_t i) {
  return static_cast<int32_t>((r * 7919 + static_cast<long>(i) * 104729) % 201) - 100;
}

template <class T>
std::vector<T> input(long key, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(value(key, i));
  return v;
}

// reduce: the reference reduction of the values of ranks 0..W-1 at element i, computed
// as the backends do (a sum in T, then kAvg divides: float division, or integer division
// truncating toward zero).
template <class T>
T reduce(ReduceOp op, int world, auto&& value_of_rank) {
  T acc = value_of_rank(0);
  for (int r = 1; r < world; ++r) {
    const T v = value_of_rank(r);
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::kAvg) acc = acc / static_cast<T>(world);
  return acc;
}

template <class T>
::testing::AssertionResult same(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << ", expected " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure() << "first difference at element " << i << " of " << got.size()
                                           << ": got " << got[i] << ", expected " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
constexpr DataType type_of() {
  return std::is_same_v<T, float> ? DataType::kF32 : DataType::kI32;
}

std::string where(const char* what, size_t n, ReduceOp op) {
  return absl::StrCat(what, " n=", n, " op=", reduce_op_name(op), " rank=", R, "/", W);
}

template <class T>
void all_reduce_case(ReduceOp op, size_t n) {
  SCOPED_TRACE(where("all_reduce", n, op));
  const std::vector<T> send = input<T>(R, n);
  std::vector<T> recv(n, T(-7));
  EXPECT_TRUE(g_comm->all_reduce(send.data(), recv.data(), n, type_of<T>(), op)->wait().ok());
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i)
    want[i] = reduce<T>(op, W, [&](int r) { return static_cast<T>(value(r, i)); });
  EXPECT_TRUE(same(recv, want));
}

TEST(CommMpi, World) {
  EXPECT_EQ(g_comm->backend(), Backend::kMpi);
  EXPECT_EQ(g_comm->rank(), R);
  EXPECT_EQ(g_comm->world_size(), W);
  EXPECT_FALSE(g_comm->device_memory());
  EXPECT_EQ(g_comm->stream(), nullptr);
  EXPECT_TRUE(mpi_initialized());
}

TEST(CommMpi, AllReduce) {
  for (ReduceOp op : kOps) {
    for (size_t n : kSizes) {
      all_reduce_case<int32_t>(op, n);
      all_reduce_case<float>(op, n);
    }
  }
}

TEST(CommMpi, AllReduceInPlace) {
  for (ReduceOp op : kOps) {
    for (size_t n : {size_t{1027}, size_t{1} << 20}) {
      SCOPED_TRACE(where("all_reduce in place", n, op));
      std::vector<int32_t> buf = input<int32_t>(R, n);
      EXPECT_TRUE(g_comm->all_reduce(buf.data(), buf.data(), n, DataType::kI32, op)->wait().ok());
      std::vector<int32_t> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = reduce<int32_t>(op, W, [&](int r) { return value(r, i); });
      EXPECT_TRUE(same(buf, want));
    }
  }
}

// Non-integer f32 values: the sum's order differs between MPI's algorithm and the
// reference, so compare at 1e-6 relative (the values are positive: no cancellation).
TEST(CommMpi, AllReduceFractionalF32) {
  const size_t n = 4099;
  auto frac = [](int r, size_t i) { return 0.5f + static_cast<float>((r * 31 + i * 17) % 1000) / 997.0f; };
  for (ReduceOp op : kOps) {
    SCOPED_TRACE(where("all_reduce fractional f32", n, op));
    std::vector<float> send(n), recv(n);
    for (size_t i = 0; i < n; ++i) send[i] = frac(R, i);
    EXPECT_TRUE(g_comm->all_reduce(send.data(), recv.data(), n, DataType::kF32, op)->wait().ok());
    int bad = 0;
    for (size_t i = 0; i < n && bad < 5; ++i) {
      double want = op == ReduceOp::kMax ? -1e30 : 0.0;
      for (int r = 0; r < W; ++r)
        want = op == ReduceOp::kMax ? std::max(want, double(frac(r, i))) : want + frac(r, i);
      if (op == ReduceOp::kAvg) want /= W;
      if (std::fabs(recv[i] - want) > 1e-6 * std::fabs(want)) {
        ADD_FAILURE() << "element " << i << ": got " << recv[i] << ", expected " << want;
        ++bad;
      }
    }
  }
}

template <class T>
void all_gather_case(size_t n) {
  SCOPED_TRACE(where("all_gather", n, ReduceOp::kSum));
  const std::vector<T> send = input<T>(R, n);
  std::vector<T> recv(n * W, T(-7));
  EXPECT_TRUE(g_comm->all_gather(send.data(), recv.data(), n, type_of<T>())->wait().ok());
  std::vector<T> want;
  for (int r = 0; r < W; ++r) {
    const std::vector<T> block = input<T>(r, n);
    want.insert(want.end(), block.begin(), block.end());
  }
  EXPECT_TRUE(same(recv, want));
}

TEST(CommMpi, AllGather) {
  for (size_t n : kSizes) {
    all_gather_case<int32_t>(n);
    all_gather_case<float>(n);
  }
}

template <class T>
void reduce_scatter_case(ReduceOp op, size_t n) {
  SCOPED_TRACE(where("reduce_scatter", n, op));
  const std::vector<T> send = input<T>(R, n * W);  // block q: what rank q receives the reduction of
  std::vector<T> recv(n, T(-7));
  EXPECT_TRUE(g_comm->reduce_scatter(send.data(), recv.data(), n, type_of<T>(), op)->wait().ok());
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = reduce<T>(op, W, [&](int r) { return static_cast<T>(value(r, R * n + i)); });
  }
  EXPECT_TRUE(same(recv, want));
}

TEST(CommMpi, ReduceScatter) {
  for (ReduceOp op : kOps) {
    for (size_t n : kSizes) {
      reduce_scatter_case<int32_t>(op, n);
      reduce_scatter_case<float>(op, n);
    }
  }
}

// Calls of 4 MiB and more run as a pairwise exchange (comm/mpi.cc, Note [Pairwise
// reduce-scatter]), in chunks of 1 Mi elements (4 MiB): an all_reduce whose count the ranks do
// not divide (one block one element longer, so one more chunk than the others: the
// other ranks send it empty messages), a reduce_scatter of blocks one element past a
// chunk, and both in place or not.
TEST(CommMpi, LargeCallsInUnevenBlocksAndChunks) {
  const size_t chunk = size_t{1} << 20;
  for (ReduceOp op : kOps) {
    all_reduce_case<int32_t>(op, chunk * W + 1);
    all_reduce_case<float>(op, chunk + 3);
    reduce_scatter_case<int32_t>(op, chunk + 1);
    reduce_scatter_case<float>(op, chunk / W + 1);
  }
  const size_t n = chunk * W + 1;
  std::vector<int32_t> buf = input<int32_t>(R, n);
  EXPECT_TRUE(g_comm->all_reduce(buf.data(), buf.data(), n, DataType::kI32, ReduceOp::kSum)->wait().ok());
  std::vector<int32_t> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = reduce<int32_t>(ReduceOp::kSum, W, [&](int r) { return value(r, i); });
  EXPECT_TRUE(same(buf, want));
}

// A large f32 all_reduce of fractional values: within 1e-6 of the sum, and bit for bit the
// same on every rank (each block is summed on one rank and then gathered).
TEST(CommMpi, LargeAllReduceIsTheSameOnEveryRank) {
  const size_t n = (size_t{1} << 20) + 5;  // 4 MiB and 20 bytes
  auto frac = [](int r, size_t i) { return 0.5f + static_cast<float>((r * 31 + i * 17) % 1000) / 997.0f; };
  std::vector<float> send(n), recv(n);
  for (size_t i = 0; i < n; ++i) send[i] = frac(R, i);
  ASSERT_TRUE(g_comm->all_reduce(send.data(), recv.data(), n, DataType::kF32, ReduceOp::kSum)->wait().ok());
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    double want = 0;
    for (int r = 0; r < W; ++r) want += frac(r, i);
    if (std::fabs(recv[i] - want) > 1e-6 * want) {
      ADD_FAILURE() << "element " << i << ": got " << recv[i] << ", expected " << want;
      ++bad;
    }
  }
  std::vector<float> all(n * W);
  ASSERT_TRUE(g_comm->all_gather(recv.data(), all.data(), n, DataType::kF32)->wait().ok());
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(std::memcmp(all.data() + r * n, recv.data(), n * sizeof(float)), 0) << "rank " << r << " differs";
  }
}

// key: the input key of what rank `from` sends rank `to` in all_to_all(_v).
long key(int from, int to) { return 1000L * from + to; }

template <class T>
void all_to_all_case(size_t n) {
  SCOPED_TRACE(where("all_to_all", n, ReduceOp::kSum));
  std::vector<T> send, recv(n * W, T(-7)), want;
  for (int q = 0; q < W; ++q) {
    const std::vector<T> block = input<T>(key(R, q), n);
    send.insert(send.end(), block.begin(), block.end());
    const std::vector<T> from = input<T>(key(q, R), n);
    want.insert(want.end(), from.begin(), from.end());
  }
  EXPECT_TRUE(g_comm->all_to_all(send.data(), recv.data(), n, type_of<T>())->wait().ok());
  EXPECT_TRUE(same(recv, want));
}

TEST(CommMpi, AllToAll) {
  for (size_t n : kSizes) {
    all_to_all_case<int32_t>(n);
    all_to_all_case<float>(n);
  }
}

// all_to_all_v with the counts count(from, to): uneven, with zeros.
template <class T>
void all_to_all_v_case(const char* pattern, auto&& count) {
  SCOPED_TRACE(absl::StrCat("all_to_all_v ", pattern, " rank=", R, "/", W));
  std::vector<size_t> send_counts(W), recv_counts(W);
  std::vector<T> send, want;
  for (int q = 0; q < W; ++q) {
    send_counts[q] = count(R, q);
    recv_counts[q] = count(q, R);
    const std::vector<T> block = input<T>(key(R, q), send_counts[q]);
    send.insert(send.end(), block.begin(), block.end());
    const std::vector<T> from = input<T>(key(q, R), recv_counts[q]);
    want.insert(want.end(), from.begin(), from.end());
  }
  std::vector<T> recv(want.size(), T(-7));
  EXPECT_TRUE(
      g_comm->all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, type_of<T>())->wait().ok());
  EXPECT_TRUE(same(recv, want));
}

TEST(CommMpi, AllToAllVUneven) {
  auto mixed = [](int from, int to) -> size_t {
    return ((from * 3 + to * 5) % 4) * 257;
  };  // 0, 257, 514, 771
  auto rank0_silent = [](int from, int to) -> size_t { return from == 0 ? 0 : 1 + from + 2 * to; };
  auto to_last_only = [](int from, int to) -> size_t { return to == W - 1 ? 1027 : 0; };
  auto nothing = [](int, int) -> size_t { return 0; };
  all_to_all_v_case<int32_t>("mixed", mixed);
  all_to_all_v_case<float>("mixed", mixed);
  all_to_all_v_case<int32_t>("rank 0 sends nothing", rank0_silent);
  all_to_all_v_case<int32_t>("only to the last rank", to_last_only);
  all_to_all_v_case<float>("nothing at all", nothing);
}

template <class T>
void broadcast_case(int root, size_t n) {
  SCOPED_TRACE(absl::StrCat("broadcast root=", root, " n=", n, " rank=", R, "/", W));
  std::vector<T> buf = R == root ? input<T>(root, n) : std::vector<T>(n, T(-7));
  EXPECT_TRUE(g_comm->broadcast(buf.data(), n, type_of<T>(), root)->wait().ok());
  EXPECT_TRUE(same(buf, input<T>(root, n)));
}

TEST(CommMpi, BroadcastFromEachRoot) {
  for (int root = 0; root < W; ++root) {
    for (size_t n : kSizes) {
      broadcast_case<int32_t>(root, n);
      broadcast_case<float>(root, n);
    }
  }
}

// barrier: no rank leaves it before the last has entered (rank 0 enters 300 ms late).
TEST(CommMpi, Barrier) {
  ASSERT_TRUE(g_comm->barrier()->wait().ok());  // line the ranks up
  const auto start = std::chrono::steady_clock::now();
  if (R == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto work = g_comm->barrier();
  EXPECT_TRUE(work->wait().ok());
  EXPECT_TRUE(work->done());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (W > 1) {
    EXPECT_GE(ms, 150.0) << "the barrier let this rank through before rank 0 arrived";
  }
}

// Many Works in flight before any wait: they run in issue order (ten in-place sums of the
// same buffer multiply it by W each time) and each ends with its own result.
TEST(CommMpi, ManyOutstandingInOrder) {
  std::vector<int32_t> chain(33, 1);
  std::vector<std::shared_ptr<Work>> chain_works;
  std::vector<std::vector<int32_t>> sends, recvs;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 40; ++k) {
    const size_t n = 1 + 97 * k;
    sends.push_back(input<int32_t>(R + k, n));
    recvs.emplace_back(n, -7);
  }
  for (int k = 0; k < 40; ++k) {
    works.push_back(
        g_comm->all_reduce(sends[k].data(), recvs[k].data(), sends[k].size(), DataType::kI32, kOps[k % 3]));
    if (k < 10)
      chain_works.push_back(
          g_comm->all_reduce(chain.data(), chain.data(), chain.size(), DataType::kI32, ReduceOp::kSum));
  }
  auto barrier = g_comm->barrier();
  EXPECT_TRUE(barrier->wait().ok());
  for (int k = 39; k >= 0; --k) {  // wait in reverse: each Work keeps its own status
    EXPECT_TRUE(works[k]->done()) << "work " << k << " issued before the barrier is not done after it";
    EXPECT_TRUE(works[k]->wait().ok());
    EXPECT_GE(works[k]->seconds(), 0.0);
    const size_t n = sends[k].size();
    std::vector<int32_t> want(n);
    for (size_t i = 0; i < n; ++i)
      want[i] = reduce<int32_t>(kOps[k % 3], W, [&](int r) { return value(r + k, i); });
    EXPECT_TRUE(same(recvs[k], want)) << "work " << k;
  }
  for (auto& w : chain_works) EXPECT_TRUE(w->wait().ok());
  int32_t want = 1;
  for (int k = 0; k < 10; ++k) want *= W;
  EXPECT_TRUE(same(chain, std::vector<int32_t>(chain.size(), want)));
}

// ---- the argument check (CommOptions::check_arguments, MTC_COMM_CHECK=1) ----

TEST(CommMpiCheck, MatchingCallsPass) {
  std::vector<float> send = input<float>(R, 1027), recv(1027 * W);
  EXPECT_TRUE(
      g_checked->all_reduce(send.data(), recv.data(), 1027, DataType::kF32, ReduceOp::kSum)->wait().ok());
  EXPECT_TRUE(g_checked->all_gather(send.data(), recv.data(), 1027, DataType::kF32)->wait().ok());
  std::vector<size_t> counts(W, 3);
  EXPECT_TRUE(g_checked->all_to_all_v(send.data(), counts, recv.data(), counts, DataType::kF32)->wait().ok());
  EXPECT_TRUE(g_checked->broadcast(send.data(), 5, DataType::kF32, W - 1)->wait().ok());
  EXPECT_TRUE(same(std::vector<float>(send.begin(), send.begin() + 5), input<float>(W - 1, 5)));
  EXPECT_TRUE(g_checked->barrier()->wait().ok());
}

TEST(CommMpiCheck, DifferentCountsFailOnEveryRank) {
  if (W == 1) GTEST_SKIP() << "needs two ranks or more";
  std::vector<float> send(12, 1.0f), recv(12);
  const size_t count = R == W - 1 ? 10 : 12;
  absl::Status s =
      g_checked->all_reduce(send.data(), recv.data(), count, DataType::kF32, ReduceOp::kSum)->wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(),
            absl::StrCat("all_reduce: ranks disagree: rank 0 passed all_reduce count=12 f32 sum, rank ",
                         W - 1, " passed all_reduce count=10 f32 sum"));
  // The communicator still works after a rejected call.
  EXPECT_TRUE(
      g_checked->all_reduce(send.data(), recv.data(), 12, DataType::kF32, ReduceOp::kSum)->wait().ok());
  EXPECT_TRUE(same(recv, std::vector<float>(12, float(W))));
}

TEST(CommMpiCheck, DifferentCollectivesFail) {
  if (W == 1) GTEST_SKIP() << "needs two ranks or more";
  std::vector<int32_t> buf(8, 1), recv(8);
  absl::Status s =
      R == 1 ? g_checked->broadcast(buf.data(), 8, DataType::kI32, 0)->wait()
             : g_checked->all_reduce(buf.data(), recv.data(), 8, DataType::kI32, ReduceOp::kMax)->wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(
                "rank 0 passed all_reduce count=8 i32 max, rank 1 passed broadcast count=8 i32 root=0"),
            std::string::npos)
      << s;
}

TEST(CommMpiCheck, UnevenCountsThatDoNotPairFail) {
  if (W == 1) GTEST_SKIP() << "needs two ranks or more";
  std::vector<size_t> send_counts(W, 1), recv_counts(W, 1);
  if (R == W - 1) recv_counts[0] = 2;  // rank 0 sends it only 1
  std::vector<int32_t> send(W, 5), recv(W + 1);
  absl::Status s =
      g_checked->all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, DataType::kI32)->wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), absl::StrCat("all_to_all_v: ranks disagree: rank ", W - 1,
                                      " passed recv_counts[0]=2, rank 0 passed send_counts[", W - 1, "]=1"));
}

TEST(CommMpiCheck, BadArgumentsOnOneRankFailEveryRank) {
  if (W == 1) GTEST_SKIP() << "needs two ranks or more";
  std::vector<float> send(5, 1.0f), recv(5);
  const float* p = R == 1 ? nullptr : send.data();
  absl::Status s = g_checked->all_reduce(p, recv.data(), 5, DataType::kF32, ReduceOp::kSum)->wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  if (R == 1) {
    EXPECT_EQ(s.message(), "all_reduce: send is null with count=5");
  } else {
    EXPECT_EQ(s.message(),
              "all_reduce: rank 1 passed invalid arguments to all_reduce count=5 f32 sum (its own error "
              "says which)");
  }
  EXPECT_TRUE(g_checked->barrier()->wait().ok());
}

// MTC_COMM_CHECK=1 on one rank only turns the check on for all (they agree at create()).
TEST(CommMpiCheck, EnvironmentOnOneRank) {
  if (W == 1) GTEST_SKIP() << "needs two ranks or more";
  if (R == W - 1) setenv("MTC_COMM_CHECK", "1", 1);
  auto c = create(CommOptions{.backend = Backend::kMpi});
  unsetenv("MTC_COMM_CHECK");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<int32_t> buf(4, 1);
  absl::Status s = (*c)->broadcast(buf.data(), R == 0 ? 3 : 4, DataType::kI32, 0)->wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(
      s.message().find("broadcast: ranks disagree: rank 0 passed broadcast count=3 i32 root=0, rank 1 passed "
                       "broadcast count=4 i32 root=0"),
      std::string::npos)
      << s;
}

// ---- bad arguments, the same on every rank: each rank rejects the call alone ----

void expect_invalid(const std::shared_ptr<Work>& w, const std::string& message) {
  EXPECT_TRUE(w->done());
  absl::Status s = w->wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), message);
  EXPECT_EQ(w->wait(), s) << "wait() must return the same status every time";
}

TEST(CommMpi, BadArguments) {
  std::vector<int32_t> a(64), b(64 * W);
  expect_invalid(g_comm->all_reduce(nullptr, a.data(), 4, DataType::kI32, ReduceOp::kSum),
                 "all_reduce: send is null with count=4");
  expect_invalid(g_comm->all_gather(a.data(), nullptr, 4, DataType::kI32),
                 "all_gather: recv is null with count=4");
  expect_invalid(
      g_comm->all_gather(a.data(), a.data(), 4, DataType::kI32),
      "all_gather: send and recv are the same buffer (in place is only for all_reduce and broadcast)");
  expect_invalid(g_comm->broadcast(a.data(), 4, DataType::kI32, W),
                 absl::StrCat("broadcast: root=", W, " is out of range for world size ", W));
  expect_invalid(g_comm->broadcast(a.data(), 4, DataType::kI32, -1),
                 absl::StrCat("broadcast: root=-1 is out of range for world size ", W));
  std::vector<size_t> long_counts(W + 1, 0), counts(W, 0);
  expect_invalid(
      g_comm->all_to_all_v(a.data(), long_counts, b.data(), counts, DataType::kI32),
      absl::StrCat("all_to_all_v: send_counts has ", W + 1, " entries, expected the world size ", W));
  expect_invalid(
      g_comm->all_to_all_v(a.data(), counts, b.data(), long_counts, DataType::kI32),
      absl::StrCat("all_to_all_v: recv_counts has ", W + 1, " entries, expected the world size ", W));
  // Counts above INT_MAX are rejected before any buffer is read, not truncated.
  const size_t huge = size_t{INT_MAX} + 1;
  expect_invalid(g_comm->all_reduce(a.data(), b.data(), huge, DataType::kF32, ReduceOp::kSum),
                 "all_reduce: count=2147483648 is above 2147483647 (MPI counts are int)");
  expect_invalid(g_comm->reduce_scatter(a.data(), b.data(), 4, DataType::kF32, static_cast<ReduceOp>(9)),
                 "reduce_scatter: unknown reduce op 9 (expected sum, avg or max)");
  // Zero elements with null buffers are fine.
  EXPECT_TRUE(g_comm->all_reduce(nullptr, nullptr, 0, DataType::kF32, ReduceOp::kSum)->wait().ok());
  EXPECT_TRUE(g_comm->all_to_all_v(nullptr, counts, nullptr, counts, DataType::kF32)->wait().ok());
}

// split: the ranks of each color, ordered by key (ties by rank), with collectives of their
// own; done on both communicators (with and without the check), with a collective queued
// before it, and again on the result.
TEST(CommMpi, Split) {
  for (const auto& parent : {g_comm, g_checked}) {
    // Two colors by parity; the keys -(r / 2), distinct within a color, reverse its order.
    int32_t x = R + 1, total = 0;
    auto pending = parent->all_reduce(&x, &total, 1, DataType::kI32, ReduceOp::kSum);
    const int color = R % 2, key = -(R / 2);
    auto sub = parent->split(color, key);
    ASSERT_TRUE(sub.ok()) << sub.status();
    EXPECT_TRUE(pending->wait().ok());
    EXPECT_EQ(total, W * (W + 1) / 2);
    std::vector<int> members;  // this color's ranks in the new order: descending
    for (int r = W - 1; r >= 0; --r) {
      if (r % 2 == color) members.push_back(r);
    }
    const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), R) - members.begin());
    EXPECT_EQ((*sub)->backend(), Backend::kMpi);
    EXPECT_EQ((*sub)->world_size(), static_cast<int>(members.size()));
    EXPECT_EQ((*sub)->rank(), want_rank);
    // all_gather of the parent ranks gives the members in the new order.
    std::vector<int32_t> got(members.size(), -1);
    const int32_t me = R;
    EXPECT_TRUE((*sub)->all_gather(&me, got.data(), 1, DataType::kI32)->wait().ok());
    EXPECT_EQ(std::vector<int32_t>(members.begin(), members.end()), got);
    // A sum over the color only.
    int32_t s = 0;
    EXPECT_TRUE((*sub)->all_reduce(&me, &s, 1, DataType::kI32, ReduceOp::kSum)->wait().ok());
    EXPECT_EQ(s, std::accumulate(members.begin(), members.end(), 0));
    // Split again: everyone alone.
    auto alone = (*sub)->split((*sub)->rank(), 0);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ((*alone)->world_size(), 1);
    EXPECT_EQ((*alone)->rank(), 0);
    int32_t a = 0;
    EXPECT_TRUE((*alone)->all_reduce(&me, &a, 1, DataType::kI32, ReduceOp::kSum)->wait().ok());
    EXPECT_EQ(a, R);
  }
}

// Equal keys keep the parent's order; one color takes everyone.
TEST(CommMpi, SplitTiesKeepTheParentsOrder) {
  auto sub = g_comm->split(7, 0);
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ((*sub)->world_size(), W);
  EXPECT_EQ((*sub)->rank(), R);
}

// A negative color on one rank fails the split on every rank, naming that rank; the
// parent still works afterwards.
TEST(CommMpi, SplitBadColorFailsEveryRank) {
  auto bad = g_comm->split(R == W - 1 ? -3 : 0, R);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), absl::StrCat("split: rank ", W - 1, " passed color=-3, expected a color >= 0"));
  int32_t one = 1, n = 0;
  EXPECT_TRUE(g_comm->all_reduce(&one, &n, 1, DataType::kI32, ReduceOp::kSum)->wait().ok());
  EXPECT_EQ(n, W);
}

TEST(CommMpi, CreateErrors) {
  auto local = create(CommOptions{.backend = Backend::kLocal});
  if (W == 1) {
    EXPECT_TRUE(local.ok()) << local.status();
  } else {
    EXPECT_EQ(local.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(local.status().message(),
              absl::StrCat("comm: backend local serves a world of one, but this job has ", W,
                           " ranks: use backend mpi or nccl"));
  }
#ifndef MTC_COMM_HAVE_NCCL
  auto nccl = create(CommOptions{.backend = Backend::kNccl});
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(nccl.status().message(), "comm: backend nccl is not built in (built: " + built_backends() + ")");
#endif
  EXPECT_EQ(built_backends().rfind("local,mpi", 0), 0u) << built_backends();
}

// RankFailures: on ranks other than 0, gtest's printer is replaced by this one, which
// prints failures only, each marked with its rank.
class RankFailures : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailures(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::printf("[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                r.message());
    std::fflush(stdout);
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace mtc::comm

int main(int argc, char** argv) {
  using namespace mtc::comm;
  if (absl::Status s = init(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "comm_mpitest: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  auto comm = create(CommOptions{.backend = Backend::kMpi});
  auto checked = create(CommOptions{.backend = Backend::kMpi, .check_arguments = true});
  if (!comm.ok() || !checked.ok()) {
    abort_job(1, absl::StrCat("comm_mpitest: create failed: ",
                              (comm.ok() ? checked.status() : comm.status()).ToString()));
  }
  g_comm = *comm;
  g_checked = *checked;
  R = g_comm->rank();
  W = g_comm->world_size();
  if (R != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailures(R));
  }
  int result = RUN_ALL_TESTS();
  g_comm.reset();
  g_checked.reset();
  int worst = result;
  if (mpi_initialized()) MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (R == 0 && worst != 0 && result == 0)
    std::printf("FAILED on another rank: see the [rank r] lines above\n");
  finalize();
  return worst;
}
