// Device: one compute device of a rank (the CPU, or one GPU) and its memory arena.
//
// The arena is taken once at start-up (one aligned host block on the CPU, one cudaMalloc
// on a GPU) and split as m = m1 + m2: [0, m1) is the comm/gradient region, [m1, m) the
// compute region. Only the kernels and the copy engine differ between device types.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "alloc/region.h"
#include "op_def.h"

namespace mtc {

struct DeviceOptions {
  DeviceType type = DeviceType::kCPU;
  int ordinal = 0;            // which GPU; 0 on the CPU
  size_t memory_bytes = 0;    // m = m1 + m2; 0 picks a default (see runtime.h)
  int memory_share = 1;       // processes sharing the device: a default size is divided by it
  size_t comm_bytes = 0;      // m1; 0 picks a default
  int num_threads = 0;        // CPU kernel threads; 0: OMP_NUM_THREADS or default_threads
};

class Device {
 public:
  virtual ~Device() = default;
  DeviceType type() const { return type_; }
  int ordinal() const { return ordinal_; }
  int num_threads() const { return num_threads_; }

  alloc::Region& comm_region() { return *comm_; }
  alloc::Region& compute_region() { return *compute_; }
  // Pointers into the arena for blocks of either region.
  std::byte* comm_ptr(alloc::Block b) const { return base_ + b.offset; }
  std::byte* compute_ptr(alloc::Block b) const { return base_ + comm_->capacity() + b.offset; }

  // Copies between host memory and this device's memory, and within the device. When
  // one returns, its host memory may be reused, copy_to_host's bytes are on the host, and
  // every op issued afterwards sees the copied bytes (the CUDA device orders its copies
  // with the kernels by events and may return from copy_to_device before the DMA ran).
  // copy_on_device's ranges may overlap (memmove's meaning).
  virtual absl::Status copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  // Host memory for the bytes of tensors DTE swaps out, and the copies to and from it.
  // alloc_host: `bytes` of host memory the device copies to and from directly (pinned on
  // CUDA), or null when none can be had; free_host returns it, once no copy uses it.
  // swap_out may return before its bytes are on the host (CUDA, copies_async()): the host
  // must not read them, and every kernel and copy issued afterwards, a later swap_in
  // from the same memory among them, is ordered after it, so `src` may be reused at once.
  // When swap_in returns, its host memory may take the next swap_out. Without an override
  // they are new[], delete[], copy_to_host and copy_to_device.
  virtual std::byte* alloc_host(size_t bytes) { return new (std::nothrow) std::byte[bytes]; }
  virtual void free_host(std::byte* p) { delete[] p; }
  virtual absl::Status swap_out(void* host, const void* src, size_t bytes) { return copy_to_host(host, src, bytes); }
  virtual absl::Status swap_in(void* dst, const void* host, size_t bytes) { return copy_to_device(dst, host, bytes); }
  virtual bool copies_async() const { return false; }
  // synchronize: waits for all work issued on this device.
  virtual absl::Status synchronize() = 0;
  // on_worker_start: called on the interpreter's worker thread before its first command
  // (binds the GPU, sets the CPU thread count).
  virtual void on_worker_start() {}

  // Op timing on a device whose kernels run asynchronously (CUDA): a kernel returns once
  // its work is enqueued, so the host clock around it measures only the launch. The
  // executor then brackets each op with start_timer() / stop_timer(id) (events on the
  // stream) and later collects the finished ones, without synchronising per op. Host
  // devices run kernels synchronously and keep the defaults (host clock).
  virtual bool async_kernels() const { return false; }
  virtual uint64_t start_timer() { return 0; }
  virtual void stop_timer(uint64_t id) {}
  // collect_timers: appends (id, microseconds) for every timed op that has finished, in
  // issue order; with `wait`, waits for all of them.
  virtual void collect_timers(bool wait, std::vector<std::pair<uint64_t, double>>& done) {}
  virtual std::string describe() const = 0;

 protected:
  Device(DeviceType t, int ordinal, int threads) : type_(t), ordinal_(ordinal), num_threads_(threads) {}
  void init_regions(std::byte* base, size_t comm_bytes, size_t compute_bytes);

  DeviceType type_;
  int ordinal_;
  int num_threads_;
  std::byte* base_ = nullptr;
  std::unique_ptr<alloc::Region> comm_;
  std::unique_ptr<alloc::Region> compute_;
};

// visible_gpus: the GPUs this process can use (CUDA_VISIBLE_DEVICES applied by the CUDA
// runtime); 0 in a build without the CUDA backend, where its plug-in cannot be loaded, or
// on a machine without a GPU. It loads the plug-in (and with it the CUDA libraries).
int visible_gpus();

// default_threads: CPU kernel threads when none are asked for: the cores this process may
// run on, divided among `processes` processes on the machine unless a launcher already
// bound this one to its share. At least 1.
int default_threads(int processes);

// idle_cores: of the cores this process may run on, how many were mostly idle (busy under
// half the time) over `sample_sec` seconds, read from /proc/stat; -1 when that cannot be
// read. A core another process keeps busy is not counted.
int idle_cores(double sample_sec);

// make_device: the device the options name, with its arena taken. Fails with a Status
// (not a crash) when the memory cannot be had or the device type is not built in.
absl::StatusOr<std::shared_ptr<Device>> make_device(const DeviceOptions& opts);

// The CUDA backend (src/kernels/cuda) is the plug-in libmtc_cuda.so (comm/plugin.h),
// loaded on the first make_device of a cuda device or visible_gpus(); its kernels register
// themselves in the op registry as it loads. Its entry point mtc_cuda_plugin returns:
struct CudaPlugin {
  uint32_t abi;  // plugin::kPluginAbi
  absl::StatusOr<std::shared_ptr<Device>> (*make)(const DeviceOptions& opts);
  int (*device_count)();  // cudaGetDeviceCount, 0 on an error
};
inline constexpr const char* kCudaPluginLibrary = "libmtc_cuda.so";
// load_cuda_backend: loads the plug-in now (once; later calls return the first outcome),
// so that its kernels are in the op registry. Unavailable in a build without it, or with
// plugin::load's message when it cannot be loaded.
absl::Status load_cuda_backend();
inline constexpr const char* kCudaPluginEntry = "mtc_cuda_plugin";

}  // namespace mtc
