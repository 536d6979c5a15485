// The CPU device: one aligned host block as the arena (backed by transparent huge pages
// where the kernel offers them), memcpy as the copy engine, and the OpenMP / OpenBLAS
// thread count set on the interpreter's worker thread.
#include <omp.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "device.h"
#include "mtc/status.h"

extern "C" void openblas_set_num_threads(int);

namespace mtc {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;  // x86-64's transparent huge page

class CpuDevice final : public Device {
 public:
  CpuDevice(int threads, std::byte* base, size_t comm, size_t compute)
      : Device(DeviceType::kCPU, 0, threads), arena_(base) {
    init_regions(base, comm, compute);
  }
  ~CpuDevice() override { std::free(arena_); }

  absl::Status copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status copy_on_device(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status synchronize() override { return absl::OkStatus(); }
  void on_worker_start() override {
    omp_set_num_threads(num_threads_);
    openblas_set_num_threads(num_threads_);
  }
  std::string describe() const override {
    return absl::StrFormat("cpu (%d threads), arena %s: comm %s + compute %s", num_threads_,
                           alloc::format_bytes(comm_->capacity() + compute_->capacity()),
                           alloc::format_bytes(comm_->capacity()),
                           alloc::format_bytes(compute_->capacity()));
  }

 private:
  std::byte* arena_;
};

}  // namespace

int default_threads(int processes) {
  // The cores this process may run on: its affinity mask (taskset, a cgroup's cpuset, a
  // launcher's binding), else every core online.
  cpu_set_t set;
  const int online = static_cast<int>(std::thread::hardware_concurrency());
  int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : online;
  if (cores <= 0) cores = std::max(online, 1);
  // A process the launcher bound to fewer cores than the machine has already has its
  // share; otherwise the processes on this machine split its cores between them, since
  // each taking every core makes them all wait on each other (mpirun -np 4 on 2 cores
  // ran 66-190x slower).
  if (cores >= online) cores /= std::max(processes, 1);
  return std::max(cores, 1);
}

namespace {

// cpu_times: per core listed in /proc/stat ("cpuN user nice system idle iowait irq softirq
// steal ..."), its busy and total jiffies; empty when the file cannot be read.
std::vector<std::pair<int, std::pair<uint64_t, uint64_t>>> cpu_times() {
  std::vector<std::pair<int, std::pair<uint64_t, uint64_t>>> out;
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    int cpu;
    unsigned long long v[8] = {};
    if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2], &v[3], &v[4],
                    &v[5], &v[6], &v[7]) < 5) {
      continue;  // the "cpu " total line, or another line
    }
    uint64_t total = 0;
    for (unsigned long long x : v) total += x;
    const uint64_t idle = v[3] + v[4];  // idle and iowait
    out.push_back({cpu, {total - idle, total}});
  }
  std::fclose(f);
  return out;
}

}  // namespace

int idle_cores(double sample_sec) {
  cpu_set_t set;
  const bool have_set = sched_getaffinity(0, sizeof(set), &set) == 0;
  const auto before = cpu_times();
  std::this_thread::sleep_for(std::chrono::duration<double>(sample_sec));
  const auto after = cpu_times();
  if (before.empty() || before.size() != after.size()) return -1;
  int idle = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const int cpu = before[i].first;
    if (after[i].first != cpu || (have_set && (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)))) continue;
    const uint64_t busy = after[i].second.first - before[i].second.first;
    const uint64_t total = after[i].second.second - before[i].second.second;
    if (total == 0 || 2 * busy < total) ++idle;
  }
  return idle;
}

void Device::init_regions(std::byte* base, size_t comm_bytes, size_t compute_bytes) {
  base_ = base;
  comm_ = std::make_unique<alloc::Region>("comm region", comm_bytes);
  compute_ = std::make_unique<alloc::Region>("compute region", compute_bytes);
}

absl::StatusOr<std::shared_ptr<Device>> make_cpu_device(const DeviceOptions& o) {
  int threads = o.num_threads;
  if (threads <= 0) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    threads = env ? std::atoi(env) : 0;
    if (threads <= 0) threads = default_threads(o.memory_share);
  }
  const size_t comm = o.comm_bytes / alloc::kAlignment * alloc::kAlignment;
  if (o.memory_bytes <= comm) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "memory size %d bytes leaves nothing for the compute region after the comm region's %d",
        o.memory_bytes, comm));
  }
  // An arena of at least one huge page starts on a huge-page boundary and asks for huge
  // pages: with 4 KiB pages a few-hundred-MiB arena misses the TLB on most tensor walks, so
  // a run that touches less of it (under an eviction budget) ran faster than one that
  // touches all of it, and the time per iteration depended on the footprint, not the work.
  // The block is rounded up to whole huge pages; the regions keep the size asked for.
  const size_t total = (o.memory_bytes + alloc::kAlignment - 1) / alloc::kAlignment * alloc::kAlignment;
  const size_t align = total >= kHugePage ? kHugePage : alloc::kAlignment;
  const size_t block = (total + align - 1) / align * align;
  void* p = block < total ? nullptr : std::aligned_alloc(align, block);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot take a %s arena from host memory", alloc::format_bytes(total)));
  }
#ifdef MADV_HUGEPAGE
  // Advice only: a kernel without transparent huge pages refuses it, and 4 KiB pages serve.
  if (align == kHugePage) (void)madvise(p, block, MADV_HUGEPAGE);
#endif
  return std::make_shared<CpuDevice>(threads, static_cast<std::byte*>(p), comm, total - comm);
}

}  // namespace mtc
