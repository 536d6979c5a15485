// Communicator: collectives between the ranks of one job, on raw buffers.
//
// Every collective is issued in call order onto the communicator's own queue (a comm
// thread for the MPI and local backends, a CUDA stream for NCCL) and returns a Work at
// once, so a caller can overlap it with its own computation; Work::wait() blocks until it
// has finished and returns its status. Every rank must issue the same collectives in the
// same order with matching arguments (counts, type, op, root). With
// CommOptions::check_arguments (MTC_COMM_CHECK=1) the ranks first exchange each call's
// arguments and a mismatch is an error naming the ranks and what each passed.
//
// Buffers: host memory for the MPI and local backends, device memory for NCCL. A buffer
// must stay valid, and must not be written, until the Work that uses it is done. send and
// recv may be the same buffer (in place) for all_reduce and broadcast only.
//
// Layouts: all_gather's recv holds world_size() blocks of `count` elements, rank r's at
// r * count; reduce_scatter's send holds world_size() blocks of `count`, rank r receives
// the reduction of block r; all_to_all sends block r of `send` to rank r and receives
// rank r's block into block r of `recv` (even: `count` elements each; uneven: the
// counts per rank, blocks packed in rank order).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtc::comm {

enum class DataType : uint8_t { kF32 = 0, kI32 = 1 };
size_t data_type_size(DataType t);
const char* data_type_name(DataType t);  // "f32", "i32"

// kAvg: the sum divided by world_size() (for i32, truncated toward zero).
enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1, kMax = 2 };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max"

enum class Backend : uint8_t { kLocal = 0, kMpi = 1, kNccl = 2 };
const char* backend_name(Backend b);  // "local", "mpi", "nccl"

// Work: one collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // wait: blocks until the collective has finished; its status (the same on every call).
  virtual absl::Status wait() = 0;
  // done: whether wait() would return at once.
  virtual bool done() = 0;
  // seconds: how long the collective ran on its queue, from its start (after the work
  // queued before it) to its end; valid after wait().
  virtual double seconds() const = 0;
  // interval: when it started and ended on its queue, on the host's steady clock; valid
  // after wait(). False where a backend cannot say (nccl: the time is the device's).
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual bool interval(TimePoint* start, TimePoint* end) const { return false; }
};

// WaitsAtOnce: while one lives, this thread promises to wait() for every Work it issues
// before it issues anything else (the collective ops' kernels do). A host backend then
// queues the call without waking its comm thread when nothing is queued or running: the
// wait runs it on this thread (Note [Waiting at once], comm/host.cc). A call nobody waits
// for would run only when the comm thread wakes for another one.
class WaitsAtOnce {
 public:
  WaitsAtOnce();
  ~WaitsAtOnce();
  WaitsAtOnce(const WaitsAtOnce&) = delete;
  WaitsAtOnce& operator=(const WaitsAtOnce&) = delete;
  static bool active();  // on this thread

 private:
  bool prev_;
};

struct CommOptions {
  // kLocal needs world size 1. kMpi needs the process started by mpirun (or a build
  // with MPI and a world of one). kNccl needs CUDA, NCCL and, for more than one rank,
  // MPI to broadcast the unique id.
  Backend backend = Backend::kLocal;
  int device_ordinal = 0;  // NCCL: the GPU of this rank
  // check_arguments: exchange and compare every call's arguments first (debug mode).
  // Also on when the environment has MTC_COMM_CHECK=1.
  bool check_arguments = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Backend backend() const = 0;
  // device_memory: buffers live on the GPU (NCCL) rather than in host memory.
  bool device_memory() const { return backend() == Backend::kNccl; }

  virtual std::shared_ptr<Work> all_reduce(const void* send, void* recv, size_t count, DataType t,
                                           ReduceOp op) = 0;
  virtual std::shared_ptr<Work> all_gather(const void* send, void* recv, size_t count, DataType t) = 0;
  virtual std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, size_t count, DataType t,
                                               ReduceOp op) = 0;
  virtual std::shared_ptr<Work> all_to_all(const void* send, void* recv, size_t count, DataType t) = 0;
  // all_to_all_v: send_counts[r] elements to rank r, recv_counts[r] from rank r; both
  // spans have world_size() entries, and recv_counts[r] on this rank must equal
  // send_counts[this rank] on rank r.
  virtual std::shared_ptr<Work> all_to_all_v(const void* send, std::span<const size_t> send_counts, void* recv,
                                             std::span<const size_t> recv_counts, DataType t) = 0;
  virtual std::shared_ptr<Work> broadcast(void* buf, size_t count, DataType t, int root) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;

  // stream: NCCL's CUDA stream (a cudaStream_t), null for host backends.
  virtual void* stream() const { return nullptr; }

  // split: a new communicator over the ranks of this one that pass the same color,
  // ranked by key (ties by their rank here), as MPI_Comm_split. Collective: every rank
  // of this communicator calls it, after the collectives it issued before (they run
  // first). The ranks first exchange their (color, key), so a bad color on any rank
  // fails the call on every rank with InvalidArgument naming that rank ("split: rank 2
  // passed color=-1, expected a color >= 0"). The new communicator has this one's
  // backend, device and argument check; its queue is its own (mpi: MPI_Comm_split;
  // nccl: ncclCommSplit and a stream of its own; local: another world of one).
  virtual absl::StatusOr<std::shared_ptr<Communicator>> split(int color, int key) = 0;
};

// create: a communicator over every rank of the job. Fails with a Status naming what is
// missing (a backend not built in, MPI not started, a world size the backend cannot
// serve).
absl::StatusOr<std::shared_ptr<Communicator>> create(const CommOptions& opts);

// ---- MPI start-up and job abort (launch/ reads rank and world size) ----

// init / finalize: start and stop MPI when this build has it and the process was started
// by an MPI launcher (OMPI_COMM_WORLD_SIZE or PMIX_RANK is set); otherwise nothing. init is called once, before
// create(); it asks for MPI_THREAD_MULTIPLE (comm threads, and callers waiting for a
// collective not yet started, make MPI calls).
absl::Status init(int* argc, char*** argv);
void finalize();
bool mpi_initialized();
// abort_job: tells every rank to stop (MPI_Abort under MPI) after printing `message` to
// stderr; exits with `status` when there is no MPI. Never returns.
[[noreturn]] void abort_job(int status, const std::string& message);

// built_backends: "local,mpi" or "local,mpi,nccl", for messages.
std::string built_backends();

}  // namespace mtc::comm
