// Tests of the interpreter and the autograd tape as a user sees them: async and synchronous
// modes agree bit for bit, many threads may issue ops at once, a worker error surfaces at
// the next synchronising call and the runtime goes on, Del returns storage, and the
// autograd rules (accumulation, NoGradGuard, scalar loss) hold.
#include "mtc/interpreter.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mtc/ops.h"
#include "mtc/runtime.h"
#include "op_check.h"

namespace mtc {
namespace {

// ScopedEnv: sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

size_t compute_allocated(Runtime& rt) {
  absl::StatusOr<MemoryStats> m = rt.interpreter().memory_stats();
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? m->compute.allocated : 0;
}

size_t comm_allocated(Runtime& rt) {
  absl::StatusOr<MemoryStats> m = rt.interpreter().memory_stats();
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? m->comm.allocated : 0;
}

std::vector<float> values(const Tensor& t) {
  absl::StatusOr<std::vector<float>> v = t.to_vector();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

// ChainResult / run_chain: a chain of 70 ops (elementwise, broadcasting, reductions,
// reshape) and its backward on the current runtime.
struct ChainResult {
  std::vector<float> y, dx, dw;
};
ChainResult run_chain() {
  std::vector<float> xv(24), wv(6);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.7f * static_cast<float>(i)) + 0.1f;
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.5f + 0.1f * static_cast<float>(i);
  Tensor x = from_vector({4, 6}, xv);
  Tensor w = from_vector({6}, wv);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor h = x;
  for (int i = 0; i < 10; ++i) {
    h = add(mul(h, w), scale(h, 0.25f));
    h = sub(h, mean(h, {1}, true));
    h = i % 2 ? gelu(h) : swish(h);
    h = reshape(relu(h), {4, 6});
  }
  Tensor loss = sum(mul(h, h));
  absl::Status s = loss.backward();
  EXPECT_TRUE(s.ok()) << s;
  return {values(h), values(x.grad()), values(w.grad())};
}

class ModeTest : public ::testing::TestWithParam<bool> {
 protected:
  bool synchronous() const { return GetParam(); }
};

TEST(InterpreterModes, AsyncSyncAndEnvGiveIdenticalResults) {
  ChainResult async_r, sync_r, env_r;
  {
    auto rt = make_test_runtime(/*synchronous=*/false);
    ASSERT_FALSE(rt->interpreter().synchronous());
    async_r = run_chain();
  }
  {
    auto rt = make_test_runtime(/*synchronous=*/true);
    ASSERT_TRUE(rt->interpreter().synchronous());
    sync_r = run_chain();
  }
  {
    ScopedEnv env("MTC_INTERP_SYNC", "1");
    auto rt = make_test_runtime(/*synchronous=*/false);
    ASSERT_TRUE(rt->interpreter().synchronous()) << "MTC_INTERP_SYNC=1 must force synchronous mode";
    env_r = run_chain();
  }
  {
    ScopedEnv env("MTC_INTERP_SYNC", "0");
    auto rt = make_test_runtime(/*synchronous=*/false);
    EXPECT_FALSE(rt->interpreter().synchronous()) << "MTC_INTERP_SYNC=0 means async";
  }
  ASSERT_EQ(async_r.y.size(), 24u);
  ASSERT_EQ(async_r.dx.size(), 24u);
  ASSERT_EQ(async_r.dw.size(), 6u);
  // Same kernels in the same order: the results agree exactly, not within a tolerance.
  EXPECT_EQ(async_r.y, sync_r.y);
  EXPECT_EQ(async_r.dx, sync_r.dx);
  EXPECT_EQ(async_r.dw, sync_r.dw);
  EXPECT_EQ(async_r.y, env_r.y);
  EXPECT_EQ(async_r.dx, env_r.dx);
  EXPECT_EQ(async_r.dw, env_r.dw);
  float norm = 0;
  for (float v : async_r.dx) norm += v * v;
  EXPECT_GT(norm, 0) << "the chain's gradient vanished: the comparison would prove little";
}

TEST(InterpreterModes, SynchronousModeExecutesOnIssue) {
  auto rt = make_test_runtime(/*synchronous=*/true);
  Tensor a = ones({8});
  const uint64_t before = rt->interpreter().commands_executed();
  Tensor b = add(a, a);
  // No synchronising call in between: the ApplyOp already ran on this thread.
  EXPECT_EQ(rt->interpreter().commands_executed(), before + 1);
  EXPECT_EQ(values(b), std::vector<float>(8, 2.0f));
}

TEST_P(ModeTest, ManyProducerThreads) {
  auto rt = make_test_runtime(synchronous());
  const size_t baseline = compute_allocated(*rt);
  constexpr int kThreads = 8, kSteps = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      const float step = static_cast<float>(t + 1);
      Tensor inc = full({16}, step);
      Tensor acc = zeros({16});
      for (int s = 1; s <= kSteps; ++s) {
        acc = add(acc, inc);
        if (s % 100 == 0) {  // synchronising calls from many threads at once
          absl::StatusOr<float> total = sum(acc).item();
          ASSERT_TRUE(total.ok()) << total.status();
          EXPECT_EQ(*total, 16 * step * s) << "thread " << t << " step " << s;
        }
      }
      EXPECT_EQ(values(acc), std::vector<float>(16, step * kSteps)) << "thread " << t;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(rt->interpreter().sync().ok());
  EXPECT_EQ(compute_allocated(*rt), baseline) << "every thread's tensors are gone";
}

TEST_P(ModeTest, WorkerErrorSurfacesAtNextSyncAndRuntimeRecovers) {
  RuntimeOptions o;
  o.memory_bytes = size_t{1} << 20;  // 1 MiB arena: 64 KiB comm, 960 KiB compute
  o.comm_bytes = size_t{64} << 10;
  o.num_threads = 1;
  o.synchronous = synchronous();
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  std::vector<float> av(512), bv(512, 1.0f);
  for (int i = 0; i < 512; ++i) av[i] = static_cast<float>(i);
  Tensor a = from_vector({512, 1}, av);
  Tensor b = from_vector({1, 512}, bv);
  const size_t baseline = compute_allocated(**rt);

  // The shapes are valid, so apply() cannot see the failure: the 1 MiB output does not
  // fit in the compute region, and the worker finds out.
  Tensor c = add(a, b);
  EXPECT_FALSE(c.poisoned());
  Tensor d = relu(c);  // depends on the failed op: fails too, but only the first is kept
  // The next synchronising call, even on an unrelated tensor, reports the first error.
  absl::StatusOr<std::vector<float>> av_back = a.to_vector();
  ASSERT_FALSE(av_back.ok());
  const absl::Status& s = av_back.status();
  std::printf("  error: %s\n", std::string(s.message()).c_str());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("add on f32[512,1], f32[1,512]"), std::string::npos) << s;
  EXPECT_NE(s.message().find("output 0 f32[512,512]"), std::string::npos) << s;
  EXPECT_NE(s.message().find("compute region"), std::string::npos) << s;
  EXPECT_NE(s.message().find("1048576 bytes"), std::string::npos) << s;

  // Reported once; the tensors of the failed ops say so when read.
  EXPECT_TRUE((*rt)->interpreter().sync().ok());
  absl::StatusOr<std::vector<float>> dv = d.to_vector();
  EXPECT_EQ(dv.status().code(), absl::StatusCode::kFailedPrecondition) << dv.status();

  // The runtime keeps working, and the failed op left no storage behind.
  EXPECT_EQ(compute_allocated(**rt), baseline);
  Tensor e = add(a, a);
  std::vector<float> ev = values(e);
  ASSERT_EQ(ev.size(), 512u);
  for (int i = 0; i < 512; ++i) ASSERT_EQ(ev[i], 2.0f * i);

  // memory_stats is a synchronising call too.
  Tensor f = mul(b, a);
  absl::StatusOr<MemoryStats> m = (*rt)->interpreter().memory_stats();
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
  EXPECT_NE(m.status().message().find("mul on f32[1,512], f32[512,1]"), std::string::npos) << m.status();
  EXPECT_TRUE((*rt)->interpreter().memory_stats().ok());
}

TEST_P(ModeTest, DelFreesStorage) {
  auto rt = make_test_runtime(synchronous());
  const size_t baseline = compute_allocated(*rt);
  {
    Tensor a = zeros({1000});  // 4000 bytes, 4096 in the region
    Tensor b = ones({1000});
    Tensor c = add(a, b);
    EXPECT_EQ(values(c), std::vector<float>(1000, 1.0f));
    EXPECT_EQ(compute_allocated(*rt), baseline + 3 * 4096);
  }
  EXPECT_EQ(compute_allocated(*rt), baseline);

  // Autograd history holds saved tensors until backward releases them; the gradient
  // lives, in the comm/gradient region, until the user clears it.
  Tensor x = ones({1000});
  x.set_requires_grad(true);
  const size_t with_x = compute_allocated(*rt);
  EXPECT_EQ(with_x, baseline + 4096);
  {
    Tensor loss = sum(mul(x, x));
    ASSERT_TRUE(loss.backward().ok());
  }
  EXPECT_EQ(values(x.grad()), std::vector<float>(1000, 2.0f));
  EXPECT_EQ(compute_allocated(*rt), with_x) << "only x remains in the compute region";
  EXPECT_EQ(comm_allocated(*rt), 4096u) << "x's gradient is in the gradient region";
  x.set_grad(Tensor());
  EXPECT_EQ(compute_allocated(*rt), with_x);
  EXPECT_EQ(comm_allocated(*rt), 0u);
  x = Tensor();
  EXPECT_EQ(compute_allocated(*rt), baseline);
}

TEST_P(ModeTest, GradientsAccumulateAcrossBackwardPasses) {
  auto rt = make_test_runtime(synchronous());
  Tensor x = from_vector({3}, std::vector<float>{1, 2, 3});
  x.set_requires_grad(true);
  ASSERT_TRUE(sum(mul(x, x)).backward().ok());
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2, 4, 6}));
  ASSERT_TRUE(sum(mul(x, x)).backward().ok());
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4, 8, 12})) << "the second pass adds to .grad";

  // The same graph cannot be walked twice: its saved tensors were freed.
  Tensor loss = sum(mul(x, x));
  ASSERT_TRUE(loss.backward().ok());
  absl::Status again = loss.backward();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_NE(again.message().find("a second time"), std::string::npos) << again;
}

TEST_P(ModeTest, NoGradGuardRecordsNoHistory) {
  auto rt = make_test_runtime(synchronous());
  Tensor x = from_vector({2}, std::vector<float>{3, 4});
  x.set_requires_grad(true);
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_mode_enabled());
    Tensor y = mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.meta() == nullptr || y.meta()->grad_fn == nullptr);
    EXPECT_EQ(sum(y).backward().code(), absl::StatusCode::kInvalidArgument);
    // Grad mode is per thread: another thread still records history.
    std::thread([&x] {
      EXPECT_TRUE(grad_mode_enabled());
      EXPECT_TRUE(mul(x, x).requires_grad());
    }).join();
  }
  EXPECT_TRUE(grad_mode_enabled());
  Tensor z = mul(x, x);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_FALSE(x.grad().defined()) << "nothing under the guard reached x's gradient";
}

TEST_P(ModeTest, BackwardOnNonScalarIsAnError) {
  auto rt = make_test_runtime(synchronous());
  Tensor x = ones({2, 3});
  x.set_requires_grad(true);
  absl::Status s = mul(x, x).backward();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("f32[2,3]"), std::string::npos) << s;
  EXPECT_NE(s.message().find("single element"), std::string::npos) << s;
  EXPECT_FALSE(x.grad().defined());
  // A loss whose forward failed reports that failure instead.
  Tensor bad = sum(add(x, ones({4})));
  absl::Status b = bad.backward();
  EXPECT_EQ(b.code(), absl::StatusCode::kInvalidArgument) << b;
  EXPECT_NE(b.message().find("add on f32[2,3], f32[4]"), std::string::npos) << b;
}

INSTANTIATE_TEST_SUITE_P(Modes, ModeTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Sync" : "Async"; });

}  // namespace
}  // namespace mtc
