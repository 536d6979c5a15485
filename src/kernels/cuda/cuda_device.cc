// The CUDA device: one cudaMalloc per device at start-up as the arena (no cudaMalloc or
// cudaFree after that), a compute stream for the kernels, a copy stream for host-device
// traffic staged through a pinned host buffer (cudaHostAlloc), events that order the
// two, and the cuDNN, cuBLAS and cuBLASLt handles bound to the compute stream.
//
// Copies: the Device interface promises that a copy's host memory may be reused when it
// returns. copy_to_host waits for its transfer, in pinned chunks. copy_to_device returns
// once its bytes are in the pinned staging ring (16 slots of 8 MiB, used in turn across
// copies): the DMA from a slot is queued behind the kernels issued so far, and the host
// waits only before it refills a slot whose last DMA has not run, so an input batch
// (38.5 MB for ResNet-50 at batch 64) never drains the GPU's queue. Before a transfer the
// copy stream waits for the compute stream (an event), so it never reads or overwrites
// memory a queued kernel still uses; after it the compute stream waits for the copy
// stream. Kernels never wait on the host.
//
// Note [Swaps without waiting]
// DTE's swaps went through copy_to_host, which returns once the bytes are on the host: the
// copy stream first waits for every kernel queued before it, so the host waited for the
// GPU's queue to drain, then each 8 MiB piece went through the one staging slot and a
// memcpy (0.7-1.4 GB/s on an H200 with ResNet-50 at 30% of its peak). swap_out now queues
// one copy from the arena straight into pinned host memory (alloc_host) behind the queued
// kernels and returns; the kernels issued after it wait for it on the GPU, since the
// swapped tensor's block may be handed out again at once. swap_in queues the copy back the
// same way, behind the swap-out on the same stream. The host never reads the bytes, so it
// never waits; free_host waits for the copy stream before it frees pinned memory.
//
// With every file of src/kernels/cuda this is the plug-in libmtc_cuda.so (device.h's
// CudaPlugin): make_cuda_device and cuda_device_count reach libmtc through its table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "device.h"
#include "comm/plugin.h"
#include "kernels/cuda/cuda_util.h"
#include "mtc/status.h"

namespace mtc {
namespace {

constexpr size_t kStagingBytes = size_t{8} << 20;  // one slot of the pinned staging ring
constexpr int kStagingSlots = 16;                  // host-to-device slots; one more for device-to-host

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, std::byte* base, size_t comm, size_t compute)
      : Device(DeviceType::kCUDA, ordinal, 1) {
    init_regions(base, comm, compute);
  }

  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    if (compute_stream_) cudaStreamSynchronize(compute_stream_);
    if (copy_stream_) cudaStreamSynchronize(copy_stream_);
    if (cublaslt_) cublasLtDestroy(cublaslt_);
    if (cublas_) cublasDestroy(cublas_);
    if (cudnn_) cudnnDestroy(cudnn_);
    for (cudaEvent_t e : {compute_done_, copy_done_}) {
      if (e) cudaEventDestroy(e);
    }
    for (cudaEvent_t e : staged_) {
      if (e) cudaEventDestroy(e);
    }
    for (const std::deque<Timer>* q : {&running_, &spare_}) {
      for (const Timer& t : *q) {
        cudaEventDestroy(t.start);
        cudaEventDestroy(t.stop);
      }
    }
    if (staging_) cudaFreeHost(staging_);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    if (compute_stream_) cudaStreamDestroy(compute_stream_);
    if (base_) cudaFree(base_);
  }

  // init: streams, events, the pinned staging buffer and the library handles.
  absl::Status init() {
    MTC_CUDA(cudaSetDevice(ordinal_));
    MTC_CUDA(cudaStreamCreateWithFlags(&compute_stream_, cudaStreamNonBlocking));
    MTC_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&compute_done_, &copy_done_}) {
      MTC_CUDA(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    for (cudaEvent_t& e : staged_) MTC_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    MTC_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&staging_), (kStagingSlots + 1) * kStagingBytes,
                           cudaHostAllocDefault));
    MTC_CUDA(cudnnCreate(&cudnn_));
    MTC_CUDA(cudnnSetStream(cudnn_, compute_stream_));
    MTC_CUDA(cublasCreate(&cublas_));
    MTC_CUDA(cublasSetStream(cublas_, compute_stream_));
    MTC_CUDA(cublasLtCreate(&cublaslt_));
    cudaDeviceProp prop;
    MTC_CUDA(cudaGetDeviceProperties(&prop, ordinal_));
    name_ = prop.name;
    return absl::OkStatus();
  }

  absl::Status copy_to_device(void* dst, const void* src, size_t bytes) override {
    MTC_RETURN_IF_ERROR(after_compute());
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    for (size_t off = 0; off < bytes; off += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, bytes - off);
      const int k = next_slot_;
      next_slot_ = (next_slot_ + 1) % kStagingSlots;
      std::byte* slot = staging_ + static_cast<size_t>(k) * kStagingBytes;
      MTC_CUDA(cudaEventSynchronize(staged_[k]));  // the DMA that last read this slot is done
      std::memcpy(slot, s + off, n);
      MTC_CUDA(cudaMemcpyAsync(d + off, slot, n, cudaMemcpyHostToDevice, copy_stream_));
      MTC_CUDA(cudaEventRecord(staged_[k], copy_stream_));
    }
    return before_compute();
  }

  absl::Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    MTC_RETURN_IF_ERROR(after_compute());
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    std::byte* slot = staging_ + static_cast<size_t>(kStagingSlots) * kStagingBytes;  // its own slot
    for (size_t off = 0; off < bytes; off += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, bytes - off);
      MTC_CUDA(cudaMemcpyAsync(slot, s + off, n, cudaMemcpyDeviceToHost, copy_stream_));
      MTC_CUDA(cudaStreamSynchronize(copy_stream_));
      std::memcpy(d + off, slot, n);
    }
    return absl::OkStatus();
  }

  // DTE's swaps: directly between the arena and pinned host memory, on the copy stream,
  // and the host does not wait (Note [Swaps without waiting]).
  std::byte* alloc_host(size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();  // a failed allocation is no kernel's error
      return nullptr;
    }
    return static_cast<std::byte*>(p);
  }
  void free_host(std::byte* p) override {
    if (p == nullptr) return;
    cudaStreamSynchronize(copy_stream_);  // no copy still reads or writes it
    cudaFreeHost(p);
  }
  absl::Status swap_out(void* host, const void* src, size_t bytes) override {
    MTC_RETURN_IF_ERROR(after_compute());
    MTC_CUDA(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, copy_stream_));
    return before_compute();
  }
  absl::Status swap_in(void* dst, const void* host, size_t bytes) override {
    MTC_RETURN_IF_ERROR(after_compute());
    MTC_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, copy_stream_));
    return before_compute();
  }
  bool copies_async() const override { return true; }

  absl::Status copy_on_device(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return absl::OkStatus();
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    const size_t dist = d > s ? static_cast<size_t>(d - s) : static_cast<size_t>(s - d);
    if (dist >= bytes) {
      MTC_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_stream_));
      return absl::OkStatus();
    }
    // Overlapping ranges (compaction slides a tensor into the free bytes beside it), which
    // cudaMemcpy does not allow: pieces no longer than the distance, the front piece first
    // when moving down (the back one when moving up), so that no piece overwrites bytes not
    // yet read. Past 64 such pieces, 8 MiB pieces through the pinned device-to-host slot,
    // each read whole before it is written, in the same order.
    const bool via_host = dist < bytes / 64;
    const size_t piece = via_host ? kStagingBytes : dist;
    const size_t n = (bytes + piece - 1) / piece;
    std::byte* slot = staging_ + static_cast<size_t>(kStagingSlots) * kStagingBytes;
    for (size_t k = 0; k < n; ++k) {
      const size_t off = (d < s ? k : n - 1 - k) * piece, len = std::min(piece, bytes - off);
      if (!via_host) {
        MTC_CUDA(cudaMemcpyAsync(d + off, s + off, len, cudaMemcpyDeviceToDevice, compute_stream_));
        continue;
      }
      MTC_CUDA(cudaMemcpyAsync(slot, s + off, len, cudaMemcpyDeviceToHost, compute_stream_));
      MTC_CUDA(cudaMemcpyAsync(d + off, slot, len, cudaMemcpyHostToDevice, compute_stream_));
      MTC_CUDA(cudaStreamSynchronize(compute_stream_));
    }
    return absl::OkStatus();
  }

  absl::Status synchronize() override {
    MTC_CUDA(cudaStreamSynchronize(compute_stream_));
    MTC_CUDA(cudaStreamSynchronize(copy_stream_));
    return absl::OkStatus();
  }

  void on_worker_start() override { cudaSetDevice(ordinal_); }

  // Op timing with an event pair per op on the compute stream; collected in issue order
  // once the stop event has passed (cudaEventQuery), so nothing waits per op.
  bool async_kernels() const override { return true; }
  uint64_t start_timer() override {
    Timer t;
    if (!spare_.empty()) {
      t = spare_.back();
      spare_.pop_back();
    } else if (cudaEventCreate(&t.start) != cudaSuccess || cudaEventCreate(&t.stop) != cudaSuccess) {
      return 0;  // untimed: the op keeps its previous time
    }
    t.id = ++timers_;
    cudaEventRecord(t.start, compute_stream_);
    running_.push_back(t);
    return t.id;
  }
  void stop_timer(uint64_t id) override {
    if (id != 0 && !running_.empty() && running_.back().id == id)
      cudaEventRecord(running_.back().stop, compute_stream_);
  }
  void collect_timers(bool wait, std::vector<std::pair<uint64_t, double>>& done) override {
    while (!running_.empty()) {
      const Timer t = running_.front();
      if (wait) {
        cudaEventSynchronize(t.stop);
      } else if (cudaEventQuery(t.stop) == cudaErrorNotReady) {
        break;
      }
      float ms = 0;
      if (cudaEventElapsedTime(&ms, t.start, t.stop) != cudaSuccess) ms = 0;
      cudaGetLastError();  // a failed query is no kernel's error
      done.emplace_back(t.id, 1e3 * ms);
      running_.pop_front();
      spare_.push_back(t);
    }
  }

  std::string describe() const override {
    return absl::StrFormat("cuda:%d (%s), arena %s: comm %s + compute %s", ordinal_, name_,
                           alloc::format_bytes(comm_->capacity() + compute_->capacity()),
                           alloc::format_bytes(comm_->capacity()), alloc::format_bytes(compute_->capacity()));
  }

  cudaStream_t compute_stream() const { return compute_stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasHandle_t cublas() const { return cublas_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }

 private:
  // after_compute: the copy stream waits for the kernels issued so far.
  absl::Status after_compute() {
    MTC_CUDA(cudaEventRecord(compute_done_, compute_stream_));
    MTC_CUDA(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
    return absl::OkStatus();
  }
  // before_compute: kernels issued from now on wait for the copies (on the GPU; the
  // host does not wait).
  absl::Status before_compute() {
    MTC_CUDA(cudaEventRecord(copy_done_, copy_stream_));
    MTC_CUDA(cudaStreamWaitEvent(compute_stream_, copy_done_, 0));
    return absl::OkStatus();
  }

  struct Timer {
    uint64_t id = 0;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  std::deque<Timer> running_, spare_;  // timers in flight, in issue order; reusable ones
  uint64_t timers_ = 0;

  std::string name_;
  cudaStream_t compute_stream_ = nullptr, copy_stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr, copy_done_ = nullptr;
  cudaEvent_t staged_[kStagingSlots] = {};  // per slot: the DMA that last read it
  int next_slot_ = 0;                       // the slot the next host-to-device chunk takes
  std::byte* staging_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
};

CudaDevice& cuda_device(KernelContext& ctx) {
  MTC_CHECK(ctx.device().type() == DeviceType::kCUDA, "a CUDA kernel on a ",
            device_type_name(ctx.device().type()), " device");
  return static_cast<CudaDevice&>(ctx.device());
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

absl::StatusOr<std::shared_ptr<Device>> make_cuda_device(const DeviceOptions& o) {
  const int count = cuda_device_count();
  if (count == 0) {
    return absl::UnavailableError("device cuda: no GPU is visible (cudaGetDeviceCount found none)");
  }
  if (o.ordinal < 0 || o.ordinal >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device cuda:", o.ordinal, ": expected an ordinal in [0, ", count, ")"));
  }
  MTC_CUDA(cudaSetDevice(o.ordinal));
  size_t free_bytes = 0, total_bytes = 0;
  MTC_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  // 0: 90% of what is free now, as runtime.h says.
  size_t total = o.memory_bytes != 0 ? o.memory_bytes : free_bytes / 10 * 9 / std::max(1, o.memory_share);
  total = total / alloc::kAlignment * alloc::kAlignment;
  size_t comm = o.comm_bytes != 0 ? o.comm_bytes : total / 16;
  comm = comm / alloc::kAlignment * alloc::kAlignment;
  if (total <= comm) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory size %d bytes leaves nothing for the compute region after the comm region's %d", total,
        comm));
  }
  void* p = nullptr;
  if (cudaMalloc(&p, total) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of the failed allocation
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot take a %s arena on cuda:%d (%s free of %s)", alloc::format_bytes(total),
                        o.ordinal, alloc::format_bytes(free_bytes), alloc::format_bytes(total_bytes)));
  }
  auto d = std::make_shared<CudaDevice>(o.ordinal, static_cast<std::byte*>(p), comm, total - comm);
  MTC_RETURN_IF_ERROR(d->init());
  return d;
}

namespace {
const CudaPlugin kPlugin = {.abi = plugin::kPluginAbi, .make = make_cuda_device, .device_count = cuda_device_count};
}  // namespace

namespace cuda {

cudaStream_t stream(KernelContext& ctx) { return cuda_device(ctx).compute_stream(); }
cudnnHandle_t cudnn(KernelContext& ctx) { return cuda_device(ctx).cudnn(); }
cublasHandle_t cublas(KernelContext& ctx) { return cuda_device(ctx).cublas(); }
cublasLtHandle_t cublaslt(KernelContext& ctx) { return cuda_device(ctx).cublaslt(); }

absl::Status status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": CUDA error ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}
absl::Status status(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuDNN error ", cudnnGetErrorString(s)));
}
absl::Status status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": cuBLAS error ", cublasGetStatusName(s), ": ", cublasGetStatusString(s)));
}

}  // namespace cuda
}  // namespace mtc

// The plug-in's entry point (comm/plugin.h).
extern "C" __attribute__((visibility("default"))) const void* mtc_cuda_plugin() { return &mtc::kPlugin; }
