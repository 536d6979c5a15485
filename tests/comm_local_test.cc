// Tests of comm/ that need no mpirun: the local backend (a world of one) with every
// collective, the asynchronous Work, argument errors, create()'s errors, the MPI backend
// run without a launcher (a world of one), abort_job, and the host backends' comm thread
// (a waiter running the next task itself).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/internal.h"
#include "gtest/gtest.h"

namespace mtc::comm {
namespace {

std::shared_ptr<Communicator> make(Backend b, bool check = false) {
  auto c = create(CommOptions{.backend = b, .check_arguments = check});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

std::vector<int32_t> iota(size_t n, int32_t from) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(CommLocal, Names) {
  EXPECT_STREQ(data_type_name(DataType::kF32), "f32");
  EXPECT_STREQ(data_type_name(DataType::kI32), "i32");
  EXPECT_EQ(data_type_size(DataType::kF32), 4u);
  EXPECT_STREQ(reduce_op_name(ReduceOp::kAvg), "avg");
  EXPECT_STREQ(backend_name(Backend::kNccl), "nccl");
  EXPECT_EQ(built_backends().rfind("local", 0), 0u);
}

// Every collective of one rank is a copy of its input (kAvg divides by 1), for both
// checking modes and sizes 0, 1 and 1027.
TEST(CommLocal, EveryCollectiveIsACopy) {
  for (bool check : {false, true}) {
    auto c = make(Backend::kLocal, check);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->rank(), 0);
    EXPECT_EQ(c->world_size(), 1);
    EXPECT_EQ(c->backend(), Backend::kLocal);
    EXPECT_FALSE(c->device_memory());
    for (size_t n : {size_t{0}, size_t{1}, size_t{1027}}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " check=", check));
      const std::vector<int32_t> in = iota(n, -500);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        std::vector<int32_t> out(n, 7);
        EXPECT_TRUE(c->all_reduce(in.data(), out.data(), n, DataType::kI32, op)->wait().ok());
        EXPECT_EQ(out, in);
        out.assign(n, 7);
        EXPECT_TRUE(c->reduce_scatter(in.data(), out.data(), n, DataType::kI32, op)->wait().ok());
        EXPECT_EQ(out, in);
      }
      std::vector<int32_t> out(n, 7);
      EXPECT_TRUE(c->all_gather(in.data(), out.data(), n, DataType::kI32)->wait().ok());
      EXPECT_EQ(out, in);
      out.assign(n, 7);
      EXPECT_TRUE(c->all_to_all(in.data(), out.data(), n, DataType::kI32)->wait().ok());
      EXPECT_EQ(out, in);
      out.assign(n, 7);
      const size_t counts[] = {n};
      EXPECT_TRUE(c->all_to_all_v(in.data(), counts, out.data(), counts, DataType::kI32)->wait().ok());
      EXPECT_EQ(out, in);
      std::vector<float> f(n, 2.5f);
      EXPECT_TRUE(c->all_reduce(f.data(), f.data(), n, DataType::kF32, ReduceOp::kAvg)->wait().ok());
      EXPECT_EQ(f, std::vector<float>(n, 2.5f));
      EXPECT_TRUE(c->broadcast(f.data(), n, DataType::kF32, 0)->wait().ok());
      EXPECT_EQ(f, std::vector<float>(n, 2.5f));
    }
    EXPECT_TRUE(c->barrier()->wait().ok());
  }
}

// Works queue in order on the comm thread: copies chained through three buffers, issued
// before any wait, end with the first buffer's contents in the last.
TEST(CommLocal, WorksRunInIssueOrder) {
  auto c = make(Backend::kLocal);
  ASSERT_NE(c, nullptr);
  const size_t n = 1 << 20;
  std::vector<int32_t> a = iota(n, 3), b(n, 0), d(n, 0);
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 20; ++k) {
    works.push_back(c->all_gather(a.data(), b.data(), n, DataType::kI32));
    works.push_back(c->all_to_all(b.data(), d.data(), n, DataType::kI32));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) {
    EXPECT_TRUE((*it)->wait().ok());
    EXPECT_TRUE((*it)->done());
    EXPECT_GE((*it)->seconds(), 0.0);
  }
  EXPECT_EQ(d, a);
}

TEST(CommLocal, BadArguments) {
  auto c = make(Backend::kLocal);
  ASSERT_NE(c, nullptr);
  std::vector<int32_t> a(8), b(8);
  auto expect = [](const std::shared_ptr<Work>& w, const std::string& message) {
    absl::Status s = w->wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message(), message);
  };
  expect(c->all_reduce(a.data(), nullptr, 3, DataType::kI32, ReduceOp::kSum),
         "all_reduce: recv is null with count=3");
  expect(c->broadcast(a.data(), 3, DataType::kI32, 1), "broadcast: root=1 is out of range for world size 1");
  expect(c->broadcast(nullptr, 3, DataType::kI32, 0), "broadcast: buf is null with count=3");
  expect(c->reduce_scatter(a.data(), a.data(), 3, DataType::kI32, ReduceOp::kSum),
         "reduce_scatter: send and recv are the same buffer (in place is only for all_reduce and broadcast)");
  expect(c->all_to_all(a.data(), b.data(), 3, static_cast<DataType>(5)),
         "all_to_all: unknown data type 5 (expected f32 or i32)");
  const size_t two[] = {2}, three[] = {3}, none[] = {0, 0};
  expect(c->all_to_all_v(a.data(), two, b.data(), three, DataType::kI32),
         "all_to_all_v: recv_counts[0]=3 differs from send_counts[0]=2 on the same rank (0)");
  expect(c->all_to_all_v(a.data(), none, b.data(), two, DataType::kI32),
         "all_to_all_v: send_counts has 2 entries, expected the world size 1");
  // A rejected call does not disturb the queue.
  std::vector<int32_t> in = iota(8, 1);
  EXPECT_TRUE(c->all_reduce(in.data(), b.data(), 8, DataType::kI32, ReduceOp::kMax)->wait().ok());
  EXPECT_EQ(b, in);
}

// Without a launcher, backend mpi is a world of one (in a build with MPI).
TEST(CommLocal, MpiWithoutLauncherIsAWorldOfOne) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr) {
    GTEST_SKIP() << "started by an MPI launcher";
  }
  EXPECT_TRUE(init(nullptr, nullptr).ok());
  EXPECT_FALSE(mpi_initialized());
  auto c = create(CommOptions{.backend = Backend::kMpi});
#ifdef MTC_COMM_HAVE_MPI
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->backend(), Backend::kMpi);
  EXPECT_EQ((*c)->world_size(), 1);
  int32_t x = 41, y = 0;
  EXPECT_TRUE((*c)->all_reduce(&x, &y, 1, DataType::kI32, ReduceOp::kSum)->wait().ok());
  EXPECT_EQ(y, 41);
#else
  EXPECT_EQ(c.status().message(), "comm: backend mpi is not built in (built: " + built_backends() + ")");
#endif
}

// split on a world of one: another world of one, of the same backend and check, whose
// collectives are copies; a negative color is an error naming the rank and the value.
TEST(CommLocal, SplitIsAnotherWorldOfOne) {
  for (Backend b : {Backend::kLocal, Backend::kMpi}) {
#ifndef MTC_COMM_HAVE_MPI
    if (b == Backend::kMpi) continue;
#endif
    for (bool check : {false, true}) {
      SCOPED_TRACE(absl::StrCat(backend_name(b), " check=", check));
      auto c = make(b, check);
      ASSERT_NE(c, nullptr);
      int32_t x = 5, y = 0;
      auto pending = c->all_reduce(&x, &y, 1, DataType::kI32, ReduceOp::kSum);  // runs before the split
      auto sub = c->split(3, -2);
      ASSERT_TRUE(sub.ok()) << sub.status();
      EXPECT_TRUE(pending->done());
      EXPECT_EQ(y, 5);
      EXPECT_EQ((*sub)->rank(), 0);
      EXPECT_EQ((*sub)->world_size(), 1);
      EXPECT_EQ((*sub)->backend(), b);
      const std::vector<int32_t> in = iota(7, 10);
      std::vector<int32_t> out(7);
      EXPECT_TRUE((*sub)->all_gather(in.data(), out.data(), 7, DataType::kI32)->wait().ok());
      EXPECT_EQ(out, in);
      auto twice = (*sub)->split(0, 0);  // a split of a split
      ASSERT_TRUE(twice.ok()) << twice.status();
      EXPECT_EQ((*twice)->world_size(), 1);
      auto bad = c->split(-1, 0);
      EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(bad.status().message(), "split: rank 0 passed color=-1, expected a color >= 0");
    }
  }
}

TEST(CommLocal, UnknownBackend) {
  auto c = create(CommOptions{.backend = static_cast<Backend>(7)});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "comm: unknown backend 7 (built: " + built_backends() + ")");
}

// expect_posting_order: `order` holds 0 .. n-1, each once, in that order.
void expect_posting_order(const std::vector<int>& order, int n) {
  ASSERT_EQ(order.size(), static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) EXPECT_EQ(order[k], k);
}

// drain: returns once `t` has run everything posted before, through a task that wakes it.
void drain(internal::CommThread& t) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> all = done->get_future();
  t.post([done] { done->set_value(); });
  all.wait();
}

// A task posted to an idle comm thread, with nothing ahead of it, runs on the thread that
// asks for it (run_if_next true); otherwise (the comm thread took it first) it runs on the
// comm thread. Either way exactly once, one task at a time, in posting order.
TEST(CommThread, AWaiterRunsTheNextTaskItselfOnlyWhenNothingIsAheadOfIt) {
  internal::CommThread t("mtc-test-comm");
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<int> running{0}, overlaps{0};
  std::vector<int> order;
  std::mutex order_mu;
  int inline_runs = 0;
  for (int k = 0; k < 1000; ++k) {
    auto ran_on = std::make_shared<std::promise<std::thread::id>>();
    std::future<std::thread::id> where = ran_on->get_future();
    const uint64_t ticket = t.post([&, k, ran_on] {
      if (running.fetch_add(1) != 0) overlaps.fetch_add(1);
      {
        std::lock_guard<std::mutex> lock(order_mu);
        order.push_back(k);
      }
      running.fetch_sub(1);
      ran_on->set_value(std::this_thread::get_id());
    });
    const bool here = internal::CommThread::run_if_next(*t.queue(), ticket);
    const std::thread::id ran = where.get();
    EXPECT_EQ(here, ran == me) << "task " << k;
    inline_runs += here ? 1 : 0;
  }
  EXPECT_EQ(overlaps.load(), 0);
  expect_posting_order(order, 1000);
  // The comm thread sleeps between tasks and is woken by each post: the waiter, already
  // running, gets to nearly every task first (all of them on an idle machine).
  EXPECT_GT(inline_runs, 0);
  std::printf("%d of 1000 tasks ran on the waiting thread\n", inline_runs);
}

// While the comm thread runs a task, a waiter never starts a later one, its own or
// another's: it waits, and the comm thread runs them in order afterwards.
TEST(CommThread, AWaiterNeverOvertakesARunningOrEarlierTask) {
  internal::CommThread t("mtc-test-comm");
  std::promise<void> release, started;
  std::shared_future<void> go = release.get_future().share();
  std::vector<int> order;
  std::mutex order_mu;
  auto record = [&](int k) {
    std::lock_guard<std::mutex> lock(order_mu);
    order.push_back(k);
  };
  t.post([&, go] {
    started.set_value();
    go.wait();
    record(0);
  });
  started.get_future().wait();  // the comm thread is inside task 0
  const uint64_t t1 = t.post([&] { record(1); });
  const uint64_t t2 = t.post([&] { record(2); });
  EXPECT_FALSE(internal::CommThread::run_if_next(*t.queue(), t1));  // a task is running
  EXPECT_FALSE(internal::CommThread::run_if_next(*t.queue(), t2));  // and t1 is ahead of it
  release.set_value();
  drain(t);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

// A task posted without a wake (comm::WaitsAtOnce) to an idle comm thread is left to its
// waiter: the comm thread stays asleep, and run_if_next runs the task here. Nor does an
// inline run with nothing queued behind it wake the comm thread at its end. (A post that
// wakes it has it run the task at once: the first check fails if wake is ignored.)
TEST(CommThread, APostWithoutAWakeLeavesTheCommThreadAsleep) {
  internal::CommThread t("mtc-test-comm");
  drain(t);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // back in its wait
  const std::thread::id me = std::this_thread::get_id();
  for (int k = 0; k < 5; ++k) {
    std::atomic<bool> ran{false};
    std::thread::id where;
    const uint64_t ticket = t.post(
        [&] {
          where = std::this_thread::get_id();
          ran = true;
        },
        /*wake=*/false);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(ran.load()) << "post " << k << ": the comm thread ran a task posted without a wake";
    if (!ran.load()) {
      EXPECT_TRUE(internal::CommThread::run_if_next(*t.queue(), ticket)) << "post " << k;
      EXPECT_EQ(where, me) << "post " << k;
    }
  }
}

// A post without a wake behind a running task, its waiter not asking for it, still runs:
// the comm thread takes it when the running one ends. The same behind a task a waiter
// runs: run_if_next wakes the comm thread at its end for what was queued meanwhile.
TEST(CommThread, APostWithoutAWakeBehindAnotherTaskRunsWithoutItsWaiter) {
  internal::CommThread t("mtc-test-comm");
  for (const bool ahead_inline : {false, true}) {
    std::promise<void> release, started;
    std::shared_future<void> go = release.get_future().share();
    auto ran = std::make_shared<std::promise<void>>();
    std::future<void> second = ran->get_future();
    const uint64_t first = t.post(
        [&started, go] {
          started.set_value();
          go.wait();
        },
        /*wake=*/!ahead_inline);
    std::thread runner;
    if (ahead_inline) {
      runner = std::thread([&] { internal::CommThread::run_if_next(*t.queue(), first); });
    }
    started.get_future().wait();  // the first task is running, on one thread or the other
    t.post([ran] { ran->set_value(); }, /*wake=*/false);
    release.set_value();
    EXPECT_EQ(second.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << (ahead_inline ? "behind a task its waiter ran" : "behind a task the comm thread ran");
    if (runner.joinable()) runner.join();
  }
}

TEST(CommLocalDeathTest, AbortJobPrintsAndExits) {
  EXPECT_EXIT(abort_job(3, "comm_local_test: stopping the job"), ::testing::ExitedWithCode(3),
              "comm_local_test: stopping the job");
}

}  // namespace
}  // namespace mtc::comm
