// The NCCL backend: collectives on device buffers, queued on a non-blocking CUDA stream of
// the communicator's own. Plain C++ on the CUDA runtime API and nccl.h (no kernels).
//
// A Work is a pair of CUDA events recorded around the collective on that stream: wait()
// synchronises on the end event and then asks NCCL for an asynchronous error; seconds()
// is the time between the two events. The ncclUniqueId is made on rank 0 and broadcast
// with MPI (for a world of one it is made locally, without MPI). create() makes
// device_ordinal the calling thread's current device; each call switches to it and back.
// split() makes a communicator of a subset with ncclCommSplit (NCCL 2.18 or later), on
// the same device with a stream of its own.
//
// Built as the plug-in libmtc_comm_nccl.so (comm/plugin.h), the only library that links
// NCCL; its MPI set-up goes through libmtc_comm, which loads the MPI plug-in.
//
// kAvg: f32 uses ncclAvg. For i32 NCCL's average divides as unsigned (wrong for negative
// sums), so i32 kAvg is ncclSum followed by a host round trip on the same stream: copy to
// pinned memory, divide there (truncating toward zero, as the MPI backend does), copy
// back. It is slow and meant for small integer buffers (counters), not for bulk data.
#include <cuda_runtime.h>
#include <nccl.h>

#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/internal.h"
#include "comm/plugin.h"
#include "mtc/status.h"

namespace mtc::comm::internal {
namespace {

absl::Status cuda_status(cudaError_t e, const char* what, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", call, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

absl::Status nccl_status(ncclResult_t r, ncclComm_t comm, const char* what, const char* call) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  std::string msg = absl::StrCat(what, ": ", call, " failed: ", ncclGetErrorString(r));
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&msg, " (", last, ")");
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

// DeviceGuard: makes `device` current for a scope and restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device) {
      changed_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
  bool changed_ = false;
};

// NcclState: what the communicator and its Works share; freed when the last goes.
struct NcclState {
  int device = 0;
  int world = 1;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  void* scratch = nullptr;  // barrier's one element, on the device
  std::mutex staging_mu;    // i32 kAvg's pinned host buffer
  void* staging = nullptr;
  size_t staging_bytes = 0;

  ~NcclState() {
    DeviceGuard guard(device);
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (comm != nullptr) ncclCommDestroy(comm);
    if (scratch != nullptr) cudaFree(scratch);
    if (staging != nullptr) cudaFreeHost(staging);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class NcclWork final : public Work {
 public:
  explicit NcclWork(absl::Status failed) : finished_(true), status_(std::move(failed)) {}
  NcclWork(std::shared_ptr<NcclState> st, const char* name, cudaEvent_t start, cudaEvent_t end)
      : st_(std::move(st)), name_(name), start_(start), end_(end) {}
  ~NcclWork() override {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (end_ != nullptr) cudaEventDestroy(end_);
  }

  absl::Status wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return status_;
    status_ = cuda_status(cudaEventSynchronize(end_), name_, "cudaEventSynchronize");
    if (status_.ok()) {
      ncclResult_t async = ncclSuccess;
      status_ =
          nccl_status(ncclCommGetAsyncError(st_->comm, &async), st_->comm, name_, "ncclCommGetAsyncError");
      if (status_.ok()) status_ = nccl_status(async, st_->comm, name_, "the collective");
    }
    if (status_.ok()) {
      float ms = 0;
      status_ = cuda_status(cudaEventElapsedTime(&ms, start_, end_), name_, "cudaEventElapsedTime");
      seconds_ = ms * 1e-3;
    }
    finished_ = true;
    return status_;
  }

  bool done() override {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_ || cudaEventQuery(end_) != cudaErrorNotReady;
  }

  double seconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return seconds_;
  }

 private:
  std::shared_ptr<NcclState> st_;
  const char* name_ = "";
  cudaEvent_t start_ = nullptr, end_ = nullptr;
  mutable std::mutex mu_;
  bool finished_ = false;
  absl::Status status_;
  double seconds_ = 0;
};

ncclDataType_t nccl_type(DataType t) { return t == DataType::kF32 ? ncclFloat32 : ncclInt32; }

// DivideJob: i32 kAvg's division, run by the stream as a host function.
struct DivideJob {
  void* buf;
  size_t count;
  int divisor;
};

void CUDART_CB run_divide(void* p) {
  auto* job = static_cast<DivideJob*>(p);
  divide(job->buf, job->count, DataType::kI32, job->divisor);
  delete job;
}

class NcclCommunicator final : public CallCommunicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclState> st, int rank, std::unique_ptr<Exchange> check, bool check_on)
      : st_(std::move(st)), rank_(rank), check_(std::move(check)), check_on_(check_on) {}
  int rank() const override { return rank_; }
  int world_size() const override { return st_->world; }
  Backend backend() const override { return Backend::kNccl; }
  void* stream() const override { return st_->stream; }
  absl::StatusOr<std::shared_ptr<Communicator>> split(int color, int key) override;

 protected:
  std::shared_ptr<Work> issue(Call c) override;

 private:
  absl::Status device_pointers(const Call& c) const;
  absl::Status launch(const Call& c);
  absl::Status divide_on_host(void* dev, size_t count, const char* name);

  std::shared_ptr<NcclState> st_;
  int rank_;
  std::unique_ptr<Exchange> check_;
  bool check_on_;
  std::mutex issue_mu_;  // the check's exchange and the enqueue happen in one order
};

// device_pointers (argument check only): a host pointer given to NCCL would fault on the
// device, far from the call that passed it.
absl::Status NcclCommunicator::device_pointers(const Call& c) const {
  const char* name = kind_name(c.kind);
  auto check = [&](const void* p, size_t n, const char* what) -> absl::Status {
    if (p == nullptr || n == 0) return absl::OkStatus();
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so the next call does not see it
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", what, " is not CUDA memory (nccl needs device buffers)"));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", what, " is host memory (nccl needs device buffers)"));
    }
    if (a.type == cudaMemoryTypeDevice && a.device != st_->device) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", what, " is memory of GPU ", a.device,
                                                     ", but this communicator's GPU is ", st_->device));
    }
    return absl::OkStatus();
  };
  MTC_RETURN_IF_ERROR(check(c.send, c.send_total(), c.kind == Kind::kBroadcast ? "buf" : "send"));
  if (c.recv != c.send) MTC_RETURN_IF_ERROR(check(c.recv, c.recv_total(), "recv"));
  return absl::OkStatus();
}

std::shared_ptr<Work> NcclCommunicator::issue(Call c) {
  const char* name = kind_name(c.kind);
  std::lock_guard<std::mutex> lock(issue_mu_);
  absl::Status local = validate(c, rank_, st_->world, Limits{});
  if (check_on_) {
    if (local.ok()) local = device_pointers(c);
    // Made here, on the caller's thread, before anything is queued: every rank then
    // either queues the collective or fails it.
    if (absl::Status s = check_call(check_.get(), c, local, rank_, st_->world); !s.ok()) {
      return std::make_shared<NcclWork>(std::move(s));
    }
  } else if (!local.ok()) {
    return std::make_shared<NcclWork>(std::move(local));
  }
  DeviceGuard guard(st_->device);
  cudaEvent_t start = nullptr, end = nullptr;
  absl::Status s = cuda_status(cudaEventCreate(&start), name, "cudaEventCreate");
  if (s.ok()) s = cuda_status(cudaEventCreate(&end), name, "cudaEventCreate");
  if (s.ok()) s = cuda_status(cudaEventRecord(start, st_->stream), name, "cudaEventRecord");
  if (s.ok()) s = launch(c);
  if (s.ok()) s = cuda_status(cudaEventRecord(end, st_->stream), name, "cudaEventRecord");
  if (!s.ok()) {
    if (start != nullptr) cudaEventDestroy(start);
    if (end != nullptr) cudaEventDestroy(end);
    return std::make_shared<NcclWork>(std::move(s));
  }
  return std::make_shared<NcclWork>(st_, name, start, end);
}

absl::Status NcclCommunicator::divide_on_host(void* dev, size_t count, const char* name) {
  const size_t bytes = count * sizeof(int32_t);
  std::lock_guard<std::mutex> lock(st_->staging_mu);
  if (st_->staging_bytes < bytes) {
    // Earlier round trips queued on the stream may still use the old buffer.
    MTC_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(st_->stream), name, "cudaStreamSynchronize"));
    if (st_->staging != nullptr) cudaFreeHost(st_->staging);
    st_->staging = nullptr;
    st_->staging_bytes = 0;
    MTC_RETURN_IF_ERROR(cuda_status(cudaMallocHost(&st_->staging, bytes), name, "cudaMallocHost"));
    st_->staging_bytes = bytes;
  }
  MTC_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(st_->staging, dev, bytes, cudaMemcpyDeviceToHost, st_->stream), name,
                  "cudaMemcpyAsync"));
  auto* job = new DivideJob{st_->staging, count, st_->world};
  if (absl::Status s =
          cuda_status(cudaLaunchHostFunc(st_->stream, run_divide, job), name, "cudaLaunchHostFunc");
      !s.ok()) {
    delete job;
    return s;
  }
  return cuda_status(cudaMemcpyAsync(dev, st_->staging, bytes, cudaMemcpyHostToDevice, st_->stream), name,
                     "cudaMemcpyAsync");
}

absl::Status NcclCommunicator::launch(const Call& c) {
  const char* name = kind_name(c.kind);
  ncclComm_t comm = st_->comm;
  cudaStream_t stream = st_->stream;
  const ncclDataType_t dt = nccl_type(c.type);
  const size_t es = data_type_size(c.type);
  const bool i32_avg = c.op == ReduceOp::kAvg && c.type == DataType::kI32;
  const ncclRedOp_t op = c.op == ReduceOp::kMax               ? ncclMax
                         : c.op == ReduceOp::kAvg && !i32_avg ? ncclAvg
                                                              : ncclSum;
  switch (c.kind) {
    case Kind::kAllReduce:
      if (c.count == 0) return absl::OkStatus();
      MTC_RETURN_IF_ERROR(nccl_status(ncclAllReduce(c.send, c.recv, c.count, dt, op, comm, stream), comm,
                                      name, "ncclAllReduce"));
      if (i32_avg) return divide_on_host(c.recv, c.count, name);
      return absl::OkStatus();
    case Kind::kAllGather:
      if (c.count == 0) return absl::OkStatus();
      return nccl_status(ncclAllGather(c.send, c.recv, c.count, dt, comm, stream), comm, name,
                         "ncclAllGather");
    case Kind::kReduceScatter:
      if (c.count == 0) return absl::OkStatus();
      MTC_RETURN_IF_ERROR(nccl_status(ncclReduceScatter(c.send, c.recv, c.count, dt, op, comm, stream), comm,
                                      name, "ncclReduceScatter"));
      if (i32_avg) return divide_on_host(c.recv, c.count, name);
      return absl::OkStatus();
    case Kind::kAllToAll:
    case Kind::kAllToAllV: {
      if (c.kind == Kind::kAllToAll && c.count == 0) return absl::OkStatus();
      const auto* send = static_cast<const char*>(c.send);
      auto* recv = static_cast<char*>(c.recv);
      absl::Status s = nccl_status(ncclGroupStart(), comm, name, "ncclGroupStart");
      if (!s.ok()) return s;
      size_t soff = 0, roff = 0;
      for (int r = 0; r < st_->world && s.ok(); ++r) {
        const size_t sn = c.kind == Kind::kAllToAll ? c.count : c.send_counts[r];
        const size_t rn = c.kind == Kind::kAllToAll ? c.count : c.recv_counts[r];
        if (sn > 0)
          s = nccl_status(ncclSend(send + soff * es, sn, dt, r, comm, stream), comm, name, "ncclSend");
        if (s.ok() && rn > 0) {
          s = nccl_status(ncclRecv(recv + roff * es, rn, dt, r, comm, stream), comm, name, "ncclRecv");
        }
        soff += sn;
        roff += rn;
      }
      // The group is closed whatever happened inside it, or NCCL stays in group mode.
      absl::Status end = nccl_status(ncclGroupEnd(), comm, name, "ncclGroupEnd");
      return s.ok() ? end : s;
    }
    case Kind::kBroadcast:
      if (c.count == 0) return absl::OkStatus();
      return nccl_status(ncclBroadcast(c.recv, c.recv, c.count, dt, c.root, comm, stream), comm, name,
                         "ncclBroadcast");
    case Kind::kBarrier:
      return nccl_status(ncclAllReduce(st_->scratch, st_->scratch, 1, ncclInt32, ncclSum, comm, stream), comm,
                         name, "ncclAllReduce");
  }
  return absl::InternalError(absl::StrCat("comm: unknown collective ", static_cast<int>(c.kind)));
}

// local_setup: this rank's device, stream and scratch; nothing that needs the others.
absl::Status local_setup(NcclState& st, int device) {
  const char* what = "comm: backend nccl";
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat(what, " needs a GPU, but cudaGetDeviceCount found none",
                     e != cudaSuccess ? absl::StrCat(" (", cudaGetErrorString(e), ")") : std::string()));
  }
  if (device < 0 || device >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": device_ordinal=", device, " is out of range: this machine has ", n, " GPUs"));
  }
  st.device = device;
  MTC_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), what, "cudaSetDevice"));
  MTC_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking), what,
                                  "cudaStreamCreateWithFlags"));
  MTC_RETURN_IF_ERROR(cuda_status(cudaMalloc(&st.scratch, sizeof(int32_t)), what, "cudaMalloc"));
  return cuda_status(cudaMemset(st.scratch, 0, sizeof(int32_t)), what, "cudaMemset");
}

// split: the new communicator's stream and scratch are set up first; then every rank's
// (color, key, set-up ok) is all-gathered over this communicator (through a small device
// buffer) and judged alike on every rank, so a bad color or a failed set-up fails the
// call everywhere before any rank enters ncclCommSplit. The argument check's MPI
// exchange, when on, is split the same way.
absl::StatusOr<std::shared_ptr<Communicator>> NcclCommunicator::split(int color, int key) {
  const char* what = "split";
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  DeviceGuard guard(st_->device);
  auto st = std::make_shared<NcclState>();
  absl::Status local = local_setup(*st, st_->device);
  const SplitRecord mine{color, key, local.ok() ? 1 : 0};
  const size_t bytes = sizeof(SplitRecord) * (1 + static_cast<size_t>(st_->world));
  void* dev = nullptr;
  MTC_RETURN_IF_ERROR(cuda_status(cudaMalloc(&dev, bytes), what, "cudaMalloc"));
  std::vector<SplitRecord> all(static_cast<size_t>(st_->world));
  auto* dev_mine = static_cast<SplitRecord*>(dev);
  absl::Status s = cuda_status(cudaMemcpy(dev_mine, &mine, sizeof mine, cudaMemcpyHostToDevice), what, "cudaMemcpy");
  if (s.ok()) s = all_gather(dev_mine, dev_mine + 1, 3, DataType::kI32)->wait();
  if (s.ok()) {
    s = cuda_status(cudaMemcpy(all.data(), dev_mine + 1, sizeof(SplitRecord) * all.size(), cudaMemcpyDeviceToHost),
                    what, "cudaMemcpy");
  }
  cudaFree(dev);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("split: exchanging colors and keys: ", s.message()));
  if (!local.ok()) return local;
  MTC_ASSIGN_OR_RETURN(SplitPlan plan, plan_split(all, rank_));
  st->world = plan.world;

  std::lock_guard<std::mutex> lock(issue_mu_);  // the check's exchange is used under it
  std::unique_ptr<Exchange> check;
  if (check_ != nullptr) {
    MTC_ASSIGN_OR_RETURN(check, check_->split(color, key));
  }
  MTC_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(st_->stream), what, "cudaStreamSynchronize"));
  MTC_RETURN_IF_ERROR(
      nccl_status(ncclCommSplit(st_->comm, color, key, &st->comm, nullptr), st_->comm, what, "ncclCommSplit"));
  int rank = 0, world = 0;
  MTC_RETURN_IF_ERROR(nccl_status(ncclCommUserRank(st->comm, &rank), st->comm, what, "ncclCommUserRank"));
  MTC_RETURN_IF_ERROR(nccl_status(ncclCommCount(st->comm, &world), st->comm, what, "ncclCommCount"));
  if (rank != plan.rank || world != plan.world) {
    return absl::InternalError(absl::StrCat("split: ncclCommSplit made rank ", rank, " of ", world,
                                            ", expected rank ", plan.rank, " of ", plan.world));
  }
  return std::shared_ptr<Communicator>(
      std::make_shared<NcclCommunicator>(std::move(st), rank, std::move(check), check_on_));
#else
  (void)color;
  (void)key;
  return absl::UnimplementedError(absl::StrCat(what, ": backend nccl needs NCCL 2.18 or later (ncclCommSplit); ",
                                               "this build has NCCL ", NCCL_MAJOR, ".", NCCL_MINOR));
#endif
}

absl::StatusOr<std::shared_ptr<Communicator>> make_nccl(const CommOptions& opts) {
  const char* what = "comm: backend nccl";
  const int rank = mpi_world_rank();
  const int world = mpi_world_size();
  auto st = std::make_shared<NcclState>();
  st->world = world;
  absl::Status local = local_setup(*st, opts.device_ordinal);
  // Every step that can fail on one rank is agreed on before the next collective, so a
  // failure on one rank fails create() on all instead of leaving the others waiting.
  MTC_ASSIGN_OR_RETURN(bool all_ok, mpi_all_ok(local.ok()));
  if (!local.ok()) return local;
  if (!all_ok) return absl::FailedPreconditionError(absl::StrCat(what, ": set-up failed on another rank"));

  struct IdMessage {
    int32_t ok;
    ncclUniqueId id;
  } msg{};  // zeroed: the bytes travel as they are
  ncclResult_t id_result = ncclSuccess;
  if (rank == 0) {
    id_result = ncclGetUniqueId(&msg.id);
    msg.ok = id_result == ncclSuccess ? 1 : 0;
  }
  if (world > 1) MTC_RETURN_IF_ERROR(mpi_broadcast(&msg, sizeof msg, 0));
  if (!msg.ok) {
    if (rank == 0) return nccl_status(id_result, nullptr, what, "ncclGetUniqueId");
    return absl::InternalError(absl::StrCat(what, ": ncclGetUniqueId failed on rank 0"));
  }

  bool check_on = check_enabled(opts);
  std::unique_ptr<Exchange> check;
  if (world > 1) {
    MTC_ASSIGN_OR_RETURN(bool none_wants, mpi_all_ok(!check_on));  // on for all when on for any
    check_on = !none_wants;
    if (check_on) {
      MTC_ASSIGN_OR_RETURN(check, mpi_exchange());
    }
  }
  MTC_RETURN_IF_ERROR(
      nccl_status(ncclCommInitRank(&st->comm, world, msg.id, rank), nullptr, what, "ncclCommInitRank"));
  return std::shared_ptr<Communicator>(
      std::make_shared<NcclCommunicator>(std::move(st), rank, std::move(check), check_on));
}

const NcclPlugin kPlugin = {.abi = plugin::kPluginAbi, .make = make_nccl};

}  // namespace
}  // namespace mtc::comm::internal

// The plug-in's entry point (comm/plugin.h).
extern "C" __attribute__((visibility("default"))) const void* mtc_comm_nccl_plugin() {
  return &mtc::comm::internal::kPlugin;
}
