// Tests of comm/'s NCCL backend on one rank: every collective on cudaMalloc'd buffers,
// against the same results as the host backends, when this machine has a GPU (skipped
// with a message otherwise); and create()'s error when there is no GPU or no NCCL.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "gtest/gtest.h"

#ifdef MTC_COMM_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace mtc::comm {
namespace {

#ifdef MTC_COMM_HAVE_NCCL

int gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// DeviceVec: a cudaMalloc'd copy of a host vector.
template <class T>
class DeviceVec {
 public:
  explicit DeviceVec(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n_, 1) * sizeof(T)), cudaSuccess);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  DeviceVec(size_t n, T fill) : DeviceVec(std::vector<T>(n, fill)) {}
  ~DeviceVec() { cudaFree(p_); }
  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> v(n_);
    if (n_ > 0) {
      EXPECT_EQ(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

TEST(CommNccl, EveryCollectiveOnOneRank) {
  if (gpus() == 0) GTEST_SKIP() << "no GPU on this machine (cudaGetDeviceCount found none)";
  for (bool check : {false, true}) {
    auto made = create(CommOptions{.backend = Backend::kNccl, .device_ordinal = 0, .check_arguments = check});
    ASSERT_TRUE(made.ok()) << made.status();
    std::shared_ptr<Communicator> c = *made;
    EXPECT_EQ(c->backend(), Backend::kNccl);
    EXPECT_TRUE(c->device_memory());
    EXPECT_NE(c->stream(), nullptr);
    EXPECT_EQ(c->world_size(), 1);
    for (size_t n : {size_t{0}, size_t{1}, size_t{1027}, size_t{1} << 20}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " check=", check));
      std::vector<int32_t> in(n);
      std::iota(in.begin(), in.end(), -700);
      std::vector<float> fin(in.begin(), in.end());
      DeviceVec<int32_t> src(in);
      DeviceVec<float> fsrc(fin);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        DeviceVec<int32_t> out(n, 7);
        EXPECT_TRUE(c->all_reduce(src.get(), out.get(), n, DataType::kI32, op)->wait().ok());
        EXPECT_EQ(out.host(), in);
        DeviceVec<float> fout(n, 7);
        EXPECT_TRUE(c->reduce_scatter(fsrc.get(), fout.get(), n, DataType::kF32, op)->wait().ok());
        EXPECT_EQ(fout.host(), fin);
      }
      DeviceVec<int32_t> inplace(in);
      EXPECT_TRUE(
          c->all_reduce(inplace.get(), inplace.get(), n, DataType::kI32, ReduceOp::kSum)->wait().ok());
      EXPECT_EQ(inplace.host(), in);
      DeviceVec<int32_t> out(n, 7);
      EXPECT_TRUE(c->all_gather(src.get(), out.get(), n, DataType::kI32)->wait().ok());
      EXPECT_EQ(out.host(), in);
      DeviceVec<int32_t> out2(n, 7);
      EXPECT_TRUE(c->all_to_all(src.get(), out2.get(), n, DataType::kI32)->wait().ok());
      EXPECT_EQ(out2.host(), in);
      DeviceVec<int32_t> out3(n, 7);
      const size_t counts[] = {n};
      EXPECT_TRUE(c->all_to_all_v(src.get(), counts, out3.get(), counts, DataType::kI32)->wait().ok());
      EXPECT_EQ(out3.host(), in);
      EXPECT_TRUE(c->broadcast(fsrc.get(), n, DataType::kF32, 0)->wait().ok());
      EXPECT_EQ(fsrc.host(), fin);
    }
    auto b = c->barrier();
    EXPECT_TRUE(b->wait().ok());
    EXPECT_TRUE(b->done());
    EXPECT_GE(b->seconds(), 0.0);
  }
}

// Many Works in flight: in-place i32 avg (the host round trip) and sums, in stream order.
TEST(CommNccl, OutstandingWorks) {
  if (gpus() == 0) GTEST_SKIP() << "no GPU on this machine (cudaGetDeviceCount found none)";
  auto made = create(CommOptions{.backend = Backend::kNccl});
  ASSERT_TRUE(made.ok()) << made.status();
  std::vector<int32_t> in(4099);
  std::iota(in.begin(), in.end(), -2000);
  DeviceVec<int32_t> buf(in);
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 50; ++k) {
    works.push_back((*made)->all_reduce(buf.get(), buf.get(), in.size(), DataType::kI32,
                                        k % 2 ? ReduceOp::kAvg : ReduceOp::kSum));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) EXPECT_TRUE((*it)->wait().ok());
  EXPECT_EQ(buf.host(), in);
}

TEST(CommNccl, CheckRejectsHostBuffers) {
  if (gpus() == 0) GTEST_SKIP() << "no GPU on this machine (cudaGetDeviceCount found none)";
  auto made = create(CommOptions{.backend = Backend::kNccl, .check_arguments = true});
  ASSERT_TRUE(made.ok()) << made.status();
  std::vector<float> host(16);
  DeviceVec<float> dev(16, 1.0f);
  absl::Status s = (*made)->all_reduce(host.data(), dev.get(), 16, DataType::kF32, ReduceOp::kSum)->wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("all_reduce: send is"), std::string::npos) << s;
}

// split on one rank: ncclCommSplit gives a world of one on the same GPU with a stream of
// its own, whose collectives work; a negative color fails before NCCL sees it.
TEST(CommNccl, SplitOnOneRank) {
  if (gpus() == 0) GTEST_SKIP() << "no GPU on this machine (cudaGetDeviceCount found none)";
  for (bool check : {false, true}) {
    SCOPED_TRACE(absl::StrCat("check=", check));
    auto made = create(CommOptions{.backend = Backend::kNccl, .device_ordinal = 0, .check_arguments = check});
    ASSERT_TRUE(made.ok()) << made.status();
    auto sub = (*made)->split(1, 0);
    ASSERT_TRUE(sub.ok()) << sub.status();
    EXPECT_EQ((*sub)->rank(), 0);
    EXPECT_EQ((*sub)->world_size(), 1);
    EXPECT_EQ((*sub)->backend(), Backend::kNccl);
    EXPECT_NE((*sub)->stream(), (*made)->stream());
    const std::vector<float> in = {1.5f, -2.f, 3.f};
    DeviceVec<float> send(in), recv(3, 0.f);
    EXPECT_TRUE((*sub)->all_reduce(send.get(), recv.get(), 3, DataType::kF32, ReduceOp::kSum)->wait().ok());
    EXPECT_EQ(recv.host(), in);
    auto bad = (*made)->split(-4, 0);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.status().message(), "split: rank 0 passed color=-4, expected a color >= 0");
  }
}

TEST(CommNccl, NoGpuIsAClearError) {
  if (gpus() > 0) GTEST_SKIP() << "this machine has a GPU";
  auto made = create(CommOptions{.backend = Backend::kNccl});
  EXPECT_EQ(made.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      made.status().message().rfind("comm: backend nccl needs a GPU, but cudaGetDeviceCount found none", 0),
      0u)
      << made.status();
}

#else

TEST(CommNccl, NotBuiltIn) {
  auto made = create(CommOptions{.backend = Backend::kNccl});
  EXPECT_EQ(made.status().message(), "comm: backend nccl is not built in (built: " + built_backends() + ")");
  GTEST_SKIP() << "built without NCCL (built: " << built_backends() << ")";
}

#endif

}  // namespace
}  // namespace mtc::comm
