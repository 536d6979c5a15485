// comm/'s internals, shared by the backends: a collective's arguments (Call), their local
// validation, the argument check's wire descriptor and comparison, the host Work and the
// comm thread that runs a host backend's queue, and the factories of the backends. No
// MPI, NCCL or CUDA header here: each backend's .cc includes only its own.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace mtc::comm::internal {

enum class Kind : uint8_t {
  kAllReduce = 0,
  kAllGather = 1,
  kReduceScatter = 2,
  kAllToAll = 3,
  kAllToAllV = 4,
  kBroadcast = 5,
  kBarrier = 6,
};
const char* kind_name(Kind k);  // "all_reduce", ...

// Call: one collective's arguments as issued. The uneven counts are copied, since the
// caller's spans need not outlive the call; the buffers are the caller's.
struct Call {
  Kind kind = Kind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;  // broadcast: the buffer
  size_t count = 0;      // per block for all_gather, reduce_scatter and all_to_all
  DataType type = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::vector<size_t> send_counts, recv_counts;  // all_to_all_v only
  // send_total / recv_total: elements read from send / written to recv, except that for
  // all_gather, reduce_scatter and all_to_all they count one block (non-zero exactly when
  // the whole buffer is, which is all their callers ask).
  size_t send_total() const;
  size_t recv_total() const;
};

// Limits: what a backend can carry in one call. MPI counts and displacements are ints.
struct Limits {
  size_t max_count = SIZE_MAX;  // per count argument and per all_to_all_v displacement
  const char* why = "";         // named in the message, e.g. "MPI counts are int"
};

// validate: the checks one rank can make alone. InvalidArgument names the collective and
// the bad value ("broadcast: root=5 is out of range for world size 4"). Reads no buffer.
absl::Status validate(const Call& c, int rank, int world, const Limits& limits);

// Descriptor: the fixed-size form of a call that the argument check exchanges. Fields a
// collective does not use are zero, so that comparing whole descriptors is right.
struct Descriptor {
  uint8_t kind = 0, type = 0, op = 0, bad = 0;  // bad: the call failed validate() on its rank
  int32_t root = 0;
  uint64_t count = 0;
};
static_assert(sizeof(Descriptor) == 16, "the descriptor is exchanged as raw bytes");
Descriptor describe(const Call& c, bool bad);
std::string describe_text(const Descriptor& d);  // "all_reduce count=12 f32 sum"

// Exchange: an all-gather of fixed-size byte records between every rank, in call order
// (MPI_Allgather on a communicator of its own). The argument check runs over it.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // all_gather: `bytes` from each rank into all (world * bytes, rank r's at r * bytes).
  virtual absl::Status all_gather(const void* mine, void* all, size_t bytes) = 0;
  // split: the Exchange of a split communicator (the ranks of this one with the same
  // color, ordered by key). Collective over this Exchange's ranks.
  virtual absl::StatusOr<std::unique_ptr<Exchange>> split(int color, int key) = 0;
};

// check_call: the argument check of one call, made collectively. `local` is the call's
// own validate() result on this rank. Every rank gets a failure when any rank's call
// differs from rank 0's or failed validation, or (all_to_all_v) when recv_counts[r] on
// rank q differs from send_counts[q] on rank r. `ex` may be null for a world of one.
// On this rank a local failure is returned as it is (it is the most precise message).
absl::Status check_call(Exchange* ex, const Call& c, const absl::Status& local, int rank, int world);

// SplitPlan: what Communicator::split makes of every rank's (color, key): this rank's
// rank in its new communicator, that communicator's size, and its members (their ranks in
// the parent, in new rank order).
struct SplitPlan {
  int rank = 0;
  int world = 1;
  std::vector<int> members;
};
// SplitRecord: one rank's part of a split, as exchanged (ok: its own set-up for the new
// communicator succeeded; the host backends have none and pass 1).
struct SplitRecord {
  int32_t color = 0, key = 0, ok = 1;
};
static_assert(sizeof(SplitRecord) == 3 * sizeof(int32_t), "exchanged as three i32");
// plan_split: every rank's record (one per parent rank) -> this rank's plan. Every rank
// judges the same records, so every rank fails alike: InvalidArgument naming the first
// rank with a negative color, FailedPrecondition naming the first whose set-up failed.
absl::StatusOr<SplitPlan> plan_split(std::span<const SplitRecord> all, int rank);
// agree_split: the records all-gathered over `parent` (host buffers: the local and MPI
// backends), then plan_split.
absl::StatusOr<SplitPlan> agree_split(Communicator& parent, int color, int key);

// check_enabled: CommOptions::check_arguments or MTC_COMM_CHECK=1 in the environment.
bool check_enabled(const CommOptions& opts);

// divide: buf[i] /= divisor for kAvg after a sum (f32: float division; i32: C++'s integer
// division, which truncates toward zero).
void divide(void* buf, size_t count, DataType t, int divisor);

// CommThread: runs posted tasks one at a time in FIFO order, on a thread of its own or,
// when the thread is idle and a task is the next to run, on the thread that waits for it
// (run_if_next): a caller that blocks on a collective at once (the collective ops'
// kernels) then runs it without two hand-overs between threads, which cost about 0.1 ms
// per call on a loaded machine against a few us for a small all-reduce itself; such a
// caller posts without waking the comm thread at all (Note [Waiting at once]). The
// destructor runs what is still queued and then joins: every rank expects this rank to
// take part in the collectives it issued.
class CommThread {
 public:
  // Queue: the tasks and the state both threads share; a HostWork keeps a weak reference,
  // so a Work outliving its communicator never runs anything.
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<uint64_t, std::function<void()>>> tasks;  // (ticket, task)
    uint64_t next_ticket = 0;
    bool busy = false;  // a task is running, on either thread
    bool stop = false;
  };
  explicit CommThread(std::string name);
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  // post: queues `task`; returns its ticket. wake false: the caller waits at once and so
  // runs the task itself, and the comm thread is not woken for it (Note [Waiting at once]).
  uint64_t post(std::function<void()> task, bool wake = true);
  const std::shared_ptr<Queue>& queue() const { return q_; }
  // run_if_next: runs the task of `ticket` on the calling thread when it is the first
  // queued and no task is running; false (nothing run) otherwise.
  static bool run_if_next(Queue& q, uint64_t ticket);

 private:
  static void loop(const std::shared_ptr<Queue>& q);
  std::shared_ptr<Queue> q_;
  std::thread thread_;
};

// HostWork: a Work finished by a comm thread's task (or at once, for a call rejected up
// front). wait() runs the task itself when the comm thread has not started it and nothing
// is ahead of it (CommThread::run_if_next).
class HostWork final : public Work {
 public:
  HostWork() = default;
  explicit HostWork(absl::Status failed) : done_(true), status_(std::move(failed)) {}
  absl::Status wait() override;
  bool done() override;
  double seconds() const override;
  bool interval(TimePoint* start, TimePoint* end) const override;
  // finish: the collective ran from `start` to now with status `s`.
  void finish(absl::Status s, TimePoint start);
  // bind: the queue and ticket of the task that finishes this Work.
  void bind(std::weak_ptr<CommThread::Queue> q, uint64_t ticket);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
  double seconds_ = 0;
  TimePoint start_{}, end_{};
  bool timed_ = false;  // finished by a run (not failed up front)
  std::weak_ptr<CommThread::Queue> queue_;
  uint64_t ticket_ = 0;
};

// HostQueue: the part the local and MPI backends share: validate a call, queue it on the
// comm thread behind its argument check (when on), time it and finish its Work.
class HostQueue {
 public:
  // run: performs the collective on the comm thread; the check (if any) has passed.
  using Runner = std::function<absl::Status(const Call&)>;
  HostQueue(std::string name, int rank, int world, Limits limits, std::unique_ptr<Exchange> check,
            bool check_on, Runner run);
  ~HostQueue();
  std::shared_ptr<Work> issue(Call c);
  // run: runs `task` on the comm thread after everything queued before it and waits for
  // it (a split of the backend's MPI communicator, in order with its collectives).
  absl::Status run(std::function<absl::Status()> task);
  bool check_on() const { return check_on_; }

 private:
  int rank_, world_;
  Limits limits_;
  std::unique_ptr<Exchange> check_;
  bool check_on_;
  Runner run_;
  CommThread thread_;  // last: joined before the members it uses are destroyed
};

// CallCommunicator: the Communicator methods as Calls, handed to issue(); every backend
// derives from it, so the arguments are gathered the same way for all.
class CallCommunicator : public Communicator {
 public:
  std::shared_ptr<Work> all_reduce(const void* send, void* recv, size_t count, DataType t,
                                   ReduceOp op) override;
  std::shared_ptr<Work> all_gather(const void* send, void* recv, size_t count, DataType t) override;
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, size_t count, DataType t,
                                       ReduceOp op) override;
  std::shared_ptr<Work> all_to_all(const void* send, void* recv, size_t count, DataType t) override;
  std::shared_ptr<Work> all_to_all_v(const void* send, std::span<const size_t> send_counts, void* recv,
                                     std::span<const size_t> recv_counts, DataType t) override;
  std::shared_ptr<Work> broadcast(void* buf, size_t count, DataType t, int root) override;
  std::shared_ptr<Work> barrier() override;

 protected:
  virtual std::shared_ptr<Work> issue(Call c) = 0;
};

// The local backend's factory (local.cc, in libmtc_comm).
absl::StatusOr<std::shared_ptr<Communicator>> make_local(const CommOptions& opts, Backend reported);

// MPI services for the rest of comm/ (communicator.cc). They forward to the MPI plug-in,
// which is loaded when the job was started by an MPI launcher or backend mpi is asked
// for; otherwise (one rank without mpirun) they answer for a world of one without it.
absl::Status mpi_init(int* argc, char*** argv);
void mpi_finalize();
bool mpi_is_initialized();
[[noreturn]] void mpi_abort(int status);
int mpi_world_rank();  // 0 when MPI is not initialized
int mpi_world_size();  // 1 when MPI is not initialized
// mpi_all_ok: true on every rank when `ok` is true on every rank (a MIN all-reduce on a
// communicator of its own), so that a set-up step failing on one rank fails on all.
absl::StatusOr<bool> mpi_all_ok(bool ok);
// mpi_broadcast: `bytes` from world rank `root` to every rank.
absl::Status mpi_broadcast(void* data, size_t bytes, int root);
// mpi_exchange: an Exchange over a duplicate of MPI_COMM_WORLD (for the argument check).
absl::StatusOr<std::unique_ptr<Exchange>> mpi_exchange();
// launched_by_mpi: OMPI_COMM_WORLD_SIZE or PMIX_RANK is set.
bool launched_by_mpi();

// The plug-ins' tables (comm/plugin.h): libmtc_comm_mpi.so's entry point
// mtc_comm_mpi_plugin returns an MpiPlugin, libmtc_comm_nccl.so's mtc_comm_nccl_plugin an
// NcclPlugin. `abi` is plugin::kPluginAbi and comes first.
struct MpiPlugin {
  uint32_t abi;
  absl::Status (*init)(int* argc, char*** argv);
  void (*finalize)();
  bool (*is_initialized)();
  void (*abort)(int status);
  int (*world_rank)();
  int (*world_size)();
  absl::StatusOr<bool> (*all_ok)(bool ok);
  absl::Status (*broadcast)(void* data, size_t bytes, int root);
  absl::StatusOr<std::unique_ptr<Exchange>> (*exchange)();
  absl::StatusOr<std::shared_ptr<Communicator>> (*make)(const CommOptions& opts);
};
struct NcclPlugin {
  uint32_t abi;
  absl::StatusOr<std::shared_ptr<Communicator>> (*make)(const CommOptions& opts);
};
inline constexpr const char* kMpiPluginLibrary = "libmtc_comm_mpi.so";
inline constexpr const char* kMpiPluginEntry = "mtc_comm_mpi_plugin";
inline constexpr const char* kNcclPluginLibrary = "libmtc_comm_nccl.so";
inline constexpr const char* kNcclPluginEntry = "mtc_comm_nccl_plugin";
// mpi_plugin: the MPI plug-in, loaded now if it was not (Unimplemented in a build
// without MPI; plugin::load's errors when it cannot be loaded).
absl::StatusOr<const MpiPlugin*> mpi_plugin();

}  // namespace mtc::comm::internal
