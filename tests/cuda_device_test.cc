// The CUDA backend as a whole (src/kernels/cuda/cuda_device.cc): every op with a CPU
// kernel has a CUDA kernel (checked in every build with the backend, GPU or not); without
// a GPU, asking for one is a clear error; with one: the arena is one allocation, copies
// round-trip exactly through the pinned staging buffer, an op without a CUDA kernel is an
// error naming it, op times come from CUDA events, overlapping copies within the device
// (DTE's compaction) keep every byte, CIFAR ResNet-56 trains with the CPU's losses over 20
// iterations, and under a DTE budget of 40% of its peak with the unlimited run's losses
// and weights bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuda_check.h"
#include "device.h"
#include "gtest/gtest.h"
#include "mtc/evict_options.h"
#include "mtc/interpreter.h"
#include "mtc/models.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "mtc/runtime.h"
#include "op_def.h"

namespace mtc {
namespace {

TEST(CudaRegistry, EveryOpWithACpuKernelHasACudaKernel) {
#ifndef MTC_HAVE_CUDA
  GTEST_SKIP() << "built without the CUDA backend (no nvcc or cuDNN at configure time)";
#else
  // The CUDA kernels register themselves as their plug-in loads (docs/library.md).
  ASSERT_TRUE(load_cuda_backend().ok()) << load_cuda_backend();
  std::vector<std::string> missing;
  int both = 0;
  for (const OpSchema* s : all_op_schemas()) {
    // Ops that tests define for themselves (this file's test_cpu_only) are CPU-only on purpose.
    if (s->kernels[static_cast<int>(DeviceType::kCPU)] == nullptr || std::string_view(s->name).starts_with("test_")) {
      continue;
    }
    if (s->kernels[static_cast<int>(DeviceType::kCUDA)] == nullptr) {
      missing.push_back(s->name);
    } else {
      ++both;
    }
  }
  std::printf("  %d ops have CPU and CUDA kernels\n", both);
  EXPECT_TRUE(missing.empty()) << "ops without a CUDA kernel: " << absl::StrJoin(missing, ", ");
#endif
}

TEST(CudaDevice, WithoutAGpuAskingForOneIsAClearError) {
  if (visible_gpus() > 0) GTEST_SKIP() << "a GPU is visible";
  RuntimeOptions o;
  o.device = "cuda";
  auto rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
#ifdef MTC_HAVE_CUDA
  EXPECT_NE(rt.status().message().find("no GPU is visible"), std::string::npos) << rt.status();
#else
  EXPECT_NE(rt.status().message().find("no CUDA backend"), std::string::npos) << rt.status();
#endif
}

// CpuOnlyOp: an op with a CPU kernel and none for CUDA.
struct CpuOnlyOp final : OpDef {
  MTC_OP_SCHEMA("test_cpu_only")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override {
    out.push_back(in[0]);
    return absl::OkStatus();
  }
};
absl::Status cpu_only(const CpuOnlyOp&, const KernelArgs&) { return absl::OkStatus(); }
MTC_REGISTER_KERNEL(CpuOnlyOp, DeviceType::kCPU, cpu_only);

TEST(CudaDevice, AnOpWithoutACudaKernelIsAnErrorNamingIt) {
  MTC_SKIP_WITHOUT_GPU();
  auto rt = cuda_check::make_runtime("cuda");
  ASSERT_NE(rt, nullptr);
  Tensor x = from_vector({4}, std::vector<float>{1, 2, 3, 4});
  Tensor y = rt->interpreter().apply(std::make_shared<CpuOnlyOp>(), std::vector<Tensor>{x})[0];
  absl::Status s = rt->interpreter().sync();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("test_cpu_only has no kernel for device cuda"), std::string::npos) << s;
}

TEST(CudaDevice, ArenaIsOneAllocationAndCopiesRoundTrip) {
  MTC_SKIP_WITHOUT_GPU();
  RuntimeOptions o;
  o.device = "cuda";
  o.memory_bytes = size_t{256} << 20;
  o.comm_bytes = size_t{16} << 20;
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto m = (*rt)->interpreter().memory_stats();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->comm.capacity, size_t{16} << 20);
  EXPECT_EQ(m->compute.capacity, size_t{240} << 20);
  // 20 MiB: more than the two 8 MiB staging halves, so the chunked path runs.
  std::vector<float> v(5 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 100003) * 0.5f - 7.f;
  Tensor t = from_vector({static_cast<int64_t>(v.size())}, v);
  auto back = scale(t, 1.f).to_vector();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, v);
}

TEST(CudaDevice, OpTimesComeFromEvents) {
  MTC_SKIP_WITHOUT_GPU();
  auto rt = cuda_check::make_runtime("cuda");
  ASSERT_NE(rt, nullptr);
  Tensor a = from_vector({512, 512}, std::vector<float>(512 * 512, 1.f));
  Tensor b = a;
  for (int i = 0; i < 20; ++i) b = matmul(b, a);
  ASSERT_TRUE(rt->interpreter().sync().ok());
  auto st = rt->interpreter().evict_stats();
  ASSERT_TRUE(st.ok());
  // 20 GEMMs of 2 * 512^3 flops: at least a few microseconds each on any GPU.
  EXPECT_GT(st->compute_us, 20.0);
  std::printf("  20 matmuls of 512x512: %.1f us by CUDA events\n", st->compute_us);
}

// Compaction slides a tensor into the free bytes beside it, so copy_on_device's ranges
// overlap (memmove's meaning, which cudaMemcpy does not give). Both of its paths (pieces
// no longer than the distance, and past 64 of them 8 MiB pieces through the host), down
// and up, against memmove on the host.
TEST(CudaDevice, OverlappingCopiesOnTheDeviceKeepEveryByte) {
  MTC_SKIP_WITHOUT_GPU();
  DeviceOptions o;
  o.type = DeviceType::kCUDA;
  o.memory_bytes = size_t{128} << 20;
  o.comm_bytes = size_t{16} << 20;
  auto dev = make_device(o);
  ASSERT_TRUE(dev.ok()) << dev.status();
  const size_t span = size_t{40} << 20;
  auto block = (*dev)->compute_region().allocate(span);
  ASSERT_TRUE(block.ok()) << block.status();
  std::byte* base = (*dev)->compute_ptr(*block);
  std::vector<uint32_t> init(span / 4);
  for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<uint32_t>(i * 2654435761u);
  struct Case {
    size_t from, to, bytes;
  };
  // 20 MiB moved by 4 KiB (via the host) and by 1 MiB (20 pieces), down and up.
  const Case cases[] = {{size_t{4} << 20, (size_t{4} << 20) - 4096, size_t{20} << 20},
                        {size_t{4} << 20, (size_t{4} << 20) + 4096, size_t{20} << 20},
                        {size_t{4} << 20, size_t{3} << 20, size_t{20} << 20},
                        {size_t{4} << 20, size_t{5} << 20, size_t{20} << 20},
                        {size_t{4} << 20, (size_t{4} << 20) - 4, size_t{1} << 20}};
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("from ", c.from, " to ", c.to, ", ", c.bytes, " bytes"));
    ASSERT_TRUE((*dev)->copy_to_device(base, init.data(), span).ok());
    ASSERT_TRUE((*dev)->copy_on_device(base + c.to, base + c.from, c.bytes).ok());
    std::vector<uint32_t> want = init, got(span / 4);
    std::memmove(reinterpret_cast<std::byte*>(want.data()) + c.to, reinterpret_cast<std::byte*>(want.data()) + c.from,
                 c.bytes);
    ASSERT_TRUE((*dev)->copy_to_host(got.data(), base, span).ok());
    ASSERT_TRUE(got == want);
  }
}

// losses: CIFAR ResNet-56 on `device`, 20 iterations of SGD on synthetic batches.
std::vector<float> resnet56_losses(const char* device, int threads = 2) {
  RuntimeOptions o;
  o.device = device;
  o.memory_bytes = size_t{2} << 30;
  o.num_threads = threads;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return {};
  auto m = models::make_model("resnet56");
  auto opt = optim::Sgd::create(m->net->parameters(), {.lr = 0.002f, .momentum = 0.9f, .weight_decay = 5e-4f});
  data::SyntheticData src(m->sample_shape, 10, 7);
  std::vector<float> losses;
  for (int it = 0; it < 20; ++it) {
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it, 32)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    auto l = loss.ok() ? loss->item() : absl::StatusOr<float>(loss.status());
    EXPECT_TRUE(l.ok()) << l.status();
    if (!l.ok()) break;
    losses.push_back(*l);
  }
  return losses;
}

// The GPU sums in other orders than the CPU, and SGD on random labels amplifies such
// differences from iteration to iteration (docs/data-parallel.md measured it): on an H100
// the losses agreed to 0 at iteration 1 and drifted to 3.9e-2 relative by iteration 8,
// while the CPU's own runs at 1 and 16 threads drift 1.7e-2 apart by iteration 12. So:
// the first loss within 1e-4 relative and the first three within 1e-3 (before the drift
// compounds), and over all 20 the GPU no further from the CPU than 4 times the CPU's own
// spread between 2 threads and 1 (at least 1e-3): a wrong kernel moves the first losses,
// or drifts far faster than summation order does.
double rel(float a, float b) { return std::fabs(a - b) / std::fabs(a); }

TEST(CudaTraining, ResNet56LossesMatchTheCpu) {
  MTC_SKIP_WITHOUT_GPU();
  const std::vector<float> cpu = resnet56_losses("cpu");
  const std::vector<float> cpu1 = resnet56_losses("cpu", 1);
  const std::vector<float> gpu = resnet56_losses("cuda");
  ASSERT_EQ(cpu.size(), 20u);
  ASSERT_EQ(cpu1.size(), 20u);
  ASSERT_EQ(gpu.size(), 20u);
  double spread = 0, worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double r = rel(cpu[i], gpu[i]), q = rel(cpu[i], cpu1[i]);
    std::printf("  iteration %2zu: cpu %.6f cuda %.6f relative %.2e (cpu 1 thread %.6f, %.2e)\n", i + 1, cpu[i],
                gpu[i], r, cpu1[i], q);
    ASSERT_TRUE(std::isfinite(gpu[i])) << "iteration " << i + 1;
    if (i == 0) {
      EXPECT_LE(r, 1e-4) << "iteration 1";
    }
    if (i < 3) {
      EXPECT_LE(r, 1e-3) << "iteration " << i + 1;
    }
    spread = std::max(spread, q);
    worst = std::max(worst, r);
  }
  std::printf("  largest: cuda against cpu %.2e, cpu 1 thread against 2 %.2e\n", worst, spread);
  EXPECT_LE(worst, 4 * std::max(spread, 1e-3));
}

// ResNet-20 under DTE on the GPU: 6 iterations at batch 64 with the unlimited run's
// losses and final weights bit for bit at 40% of its peak. Recomputes run the same
// cuDNN algorithms (the choices are cached per process and problem) and swaps copy
// exact bytes, so nothing may differ.
struct GpuRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  size_t peak = 0;
  EvictStats evict;
};
GpuRun resnet20_under(const EvictOptions& ev) {
  RuntimeOptions o;
  o.device = "cuda";
  o.memory_bytes = size_t{1} << 30;
  o.seed = 3;
  o.evict = ev;
  GpuRun run;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return run;
  auto m = models::make_model("resnet20");
  auto opt = optim::Sgd::create(m->net->parameters(), {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f});
  data::SyntheticData src(m->sample_shape, 10, 4);
  for (int it = 0; it < 6; ++it) {
    (*rt)->interpreter().mark("iteration", it + 1);
    auto loss = models::train_step(*m->net, **opt, data::to_device(src.batch_at(it, 64)));
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) return run;
    run.losses.push_back(*loss->item());
  }
  for (const Tensor& p : m->net->parameters()) run.weights.push_back(*p.to_vector());
  run.peak = (*rt)->interpreter().memory_stats()->compute.peak_allocated;
  run.evict = *(*rt)->interpreter().evict_stats();
  return run;
}

TEST(CudaTraining, ResNet20UnderADteBudgetMatchesTheUnlimitedRunBitForBit) {
  MTC_SKIP_WITHOUT_GPU();
  EvictOptions none;
  none.policy = EvictPolicy::kNone;
  const GpuRun ref = resnet20_under(none);
  ASSERT_EQ(ref.losses.size(), 6u);
  for (EvictMode mode : {EvictMode::kBoth, EvictMode::kDrop, EvictMode::kSwap}) {
    EvictOptions ev;
    ev.mode = mode;
    ev.budget_bytes = ref.peak * 4 / 10;
    SCOPED_TRACE(static_cast<int>(mode));
    const GpuRun got = resnet20_under(ev);
    std::printf("  mode %d at %.1f of %.1f MiB: peak %.1f MiB, %llu drops, %llu swaps, %llu recomputes, "
                "%llu compactions\n",
                static_cast<int>(mode), ev.budget_bytes / 1048576.0, ref.peak / 1048576.0, got.peak / 1048576.0,
                static_cast<unsigned long long>(got.evict.evict_drop),
                static_cast<unsigned long long>(got.evict.evict_swap),
                static_cast<unsigned long long>(got.evict.recomputes),
                static_cast<unsigned long long>(got.evict.compactions));
    EXPECT_LE(got.peak, ev.budget_bytes);
    EXPECT_GT(got.evict.evict_drop + got.evict.evict_swap, 0u);
    EXPECT_EQ(got.losses, ref.losses);
    EXPECT_EQ(got.weights, ref.weights);
  }
}

}  // namespace
}  // namespace mtc
