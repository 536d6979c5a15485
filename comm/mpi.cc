// The MPI backend (host memory) and the MPI services the rest of comm/ uses: start-up,
// finalize, abort, and small set-up collectives (the NCCL unique id, the argument check).
// Built as the plug-in libmtc_comm_mpi.so (comm/plugin.h): everything here has internal
// linkage and reaches libmtc_comm through the table mtc_comm_mpi_plugin returns, so the
// only library that links libmpi is this one.
//
// Each MpiCommunicator owns an MPI_Comm_dup of MPI_COMM_WORLD (or, made by split(), an
// MPI_Comm_split of its parent's) and a comm thread that runs
// its collectives in issue order with blocking MPI calls, so that a caller overlaps them
// with its own work (a caller that waits for one the thread has not started, with nothing
// ahead of it, runs it itself: CommThread in comm/internal.h). Communicators of comm/ set MPI_ERRORS_RETURN and turn error codes
// into Status; MPI_COMM_WORLD's handler is left to the program.
//
// Thread level: init asks for MPI_THREAD_MULTIPLE (comm threads and the caller make MPI
// calls at once). MPI_THREAD_SERIALIZED is accepted: every MPI call of comm/ then holds
// one process-wide mutex. A blocking collective holds it until it completes, so with
// SERIALIZED a process should keep one communicator's work in flight at a time, and its
// own MPI calls must not overlap comm/'s.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/internal.h"
#include "comm/plugin.h"
#include "mtc/status.h"

namespace mtc::comm::internal {
namespace {

static_assert(sizeof(int) == sizeof(int32_t), "i32 is carried as MPI_INT");

int g_thread_level = -1;  // MPI_Query_thread's answer, read when first needed

std::mutex& serial_mutex() {
  static std::mutex mu;
  return mu;
}

// MpiLock: the process-wide lock below MPI_THREAD_MULTIPLE, nothing at MULTIPLE.
class MpiLock {
 public:
  MpiLock() {
    if (g_thread_level < 0) MPI_Query_thread(&g_thread_level);
    if (g_thread_level < MPI_THREAD_MULTIPLE) lock_ = std::unique_lock<std::mutex>(serial_mutex());
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

bool finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

// mpi_status: OK for MPI_SUCCESS, else Internal with MPI's own description of the code.
absl::Status mpi_status(int rc, const char* what, const char* call) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  return absl::InternalError(absl::StrCat(
      what, ": ", call, " failed: ", len > 0 ? std::string(text, len) : absl::StrCat("error ", rc)));
}

absl::Status thread_level_ok(const char* who) {
  if (g_thread_level < 0) MPI_Query_thread(&g_thread_level);
  if (g_thread_level >= MPI_THREAD_SERIALIZED) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(who, ": MPI provides only ", thread_level_name(g_thread_level),
                   "; comm/ needs MPI_THREAD_SERIALIZED or better (MPI_THREAD_MULTIPLE asked), since its "
                   "comm thread makes "
                   "the MPI calls: use an MPI built with thread support"));
}

// errors_return: `comm`, just made, with MPI_ERRORS_RETURN set (freed when that fails).
// The caller holds the MPI lock.
absl::StatusOr<MPI_Comm> errors_return(MPI_Comm comm, const char* what) {
  if (absl::Status s =
          mpi_status(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), what, "MPI_Comm_set_errhandler");
      !s.ok()) {
    MPI_Comm_free(&comm);
    return s;
  }
  return comm;
}

// dup_world: a duplicate of MPI_COMM_WORLD (or of `parent`) whose errors come back as
// codes. Collective over the parent's ranks.
absl::StatusOr<MPI_Comm> dup(MPI_Comm parent, const char* what) {
  MpiLock lock;
  MPI_Comm comm = MPI_COMM_NULL;
  if (absl::Status s = mpi_status(MPI_Comm_dup(parent, &comm), what, "MPI_Comm_dup"); !s.ok()) return s;
  return errors_return(comm, what);
}

void free_comm(MPI_Comm* comm) {
  if (*comm == MPI_COMM_NULL || finalized()) return;  // after MPI_Finalize MPI has freed it
  MpiLock lock;
  MPI_Comm_free(comm);
}

// split_comm: MPI_Comm_split of `parent` (color >= 0, checked by the caller), with errors
// coming back as codes. Collective over the parent's ranks.
absl::StatusOr<MPI_Comm> split_comm(MPI_Comm parent, int color, int key, const char* what) {
  MpiLock lock;
  MPI_Comm comm = MPI_COMM_NULL;
  if (absl::Status s = mpi_status(MPI_Comm_split(parent, color, key, &comm), what, "MPI_Comm_split"); !s.ok())
    return s;
  return errors_return(comm, what);
}

// MpiExchange: the argument check's all-gather on a communicator of its own, so that its
// messages never meet the collectives' own.
class MpiExchange final : public Exchange {
 public:
  explicit MpiExchange(MPI_Comm comm) : comm_(comm) {}
  ~MpiExchange() override { free_comm(&comm_); }
  absl::Status all_gather(const void* mine, void* all, size_t bytes) override {
    if (bytes > static_cast<size_t>(INT_MAX)) return absl::InternalError("argument check record too large");
    MpiLock lock;
    const int n = static_cast<int>(bytes);
    return mpi_status(MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, comm_), "argument check",
                      "MPI_Allgather");
  }
  absl::StatusOr<std::unique_ptr<Exchange>> split(int color, int key) override {
    MTC_ASSIGN_OR_RETURN(MPI_Comm sub, split_comm(comm_, color, key, "argument check"));
    return std::unique_ptr<Exchange>(std::make_unique<MpiExchange>(sub));
  }

 private:
  MPI_Comm comm_;
};

MPI_Datatype mpi_type(DataType t) { return t == DataType::kF32 ? MPI_FLOAT : MPI_INT; }
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }  // avg: sum, then divide

// A non-null address for empty buffers: some MPI builds check pointers even for count 0.
char g_empty[1];
const void* or_empty(const void* p) { return p != nullptr ? p : g_empty; }
void* or_empty(void* p) { return p != nullptr ? p : g_empty; }

// Note [Pairwise reduce-scatter]
// Open MPI 4.1's MPI_Reduce_scatter_block and MPI_Allreduce are slow on large buffers
// where ranks share cores: on 4 ranks on 2 cores, reduce_scatter of 128 MiB took 1.29 to
// 1.48 s (each of its four algorithms, chosen through coll_tuned's dynamic rules, 1.3 to
// 2.9 s) and all_reduce 0.84 s, where all_gather moved 128 MiB in 33 ms. The pairwise
// exchange (MPICH's algorithm for long commutative reduce-scatters) took 70 to 99 ms: at
// step k = 1 .. p-1 each rank r sends rank r+k that rank's block and receives from rank
// r-k its contribution to block r (MPI_Sendrecv), which it adds to its own. So calls of
// at least kPairwiseBytes of send buffer run that way: reduce_scatter as it is, all_reduce
// as that reduce-scatter over p near-equal blocks followed by MPI_Allgatherv (MPICH's
// long-message all-reduce). The threshold is where the two crossed, measured with
// mtc-bench-comm (the lesser of two interleaved runs each): reduce_scatter 1.22x faster
// this way at 2 MiB, 1.85x at 8 MiB, 18-22x at 32-128 MiB, and 0.78-0.88x at 32-512 KiB;
// all_reduce 0.86x at 2 MiB, 1.36x at 8 MiB, 8.5-10.7x at 32-128 MiB. Block r is summed
// on rank r alone, its own part first, then r-1, r-2, ...: every rank ends with the same
// values, in every run, though rounded in another order than MPI's. The received part
// passes through a buffer of at most kPairwiseChunkBytes, so a call needs little memory
// beyond its own.
constexpr size_t kPairwiseBytes = size_t{4} << 20;
constexpr size_t kPairwiseChunkBytes = size_t{4} << 20;
constexpr int kPairwiseTag = 7301;

template <typename T>
void accumulate(T* into, const T* from, size_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    for (size_t i = 0; i < n; ++i) into[i] = std::max(into[i], from[i]);
  } else {
    for (size_t i = 0; i < n; ++i) into[i] += from[i];
  }
}

// pairwise_reduce: block `rank` of `send` (blocks at elements off[i], len[i] long) reduced
// over the ranks into `mine` (len[rank] elements; `mine` may be send's own block). Every
// step runs as many MPI_Sendrecv calls on every rank (the longest block's chunks, shorter
// blocks sending empty messages at the end), so that each call meets its peer's.
absl::Status pairwise_reduce(MPI_Comm comm, int rank, int world, const Call& c, const std::vector<size_t>& off,
                             const std::vector<size_t>& len, void* mine) {
  const char* name = kind_name(c.kind);
  const MPI_Datatype dt = mpi_type(c.type);
  constexpr size_t kElem = 4;  // f32 and i32
  const char* send = static_cast<const char*>(c.send);
  char* own = static_cast<char*>(mine);
  if (own != send + off[rank] * kElem) std::memcpy(own, send + off[rank] * kElem, len[rank] * kElem);
  const size_t chunk = kPairwiseChunkBytes / kElem;
  const size_t longest = *std::max_element(len.begin(), len.end());
  const size_t rounds = (longest + chunk - 1) / chunk;
  std::vector<char> tmp(std::min(len[rank], chunk) * kElem + 1);
  for (int k = 1; k < world; ++k) {
    const int to = (rank + k) % world, from = (rank - k + world) % world;
    for (size_t i = 0; i < rounds; ++i) {
      const size_t at = i * chunk;
      const size_t s = at < len[to] ? std::min(chunk, len[to] - at) : 0;
      const size_t g = at < len[rank] ? std::min(chunk, len[rank] - at) : 0;
      MTC_RETURN_IF_ERROR(mpi_status(MPI_Sendrecv(or_empty(send + (off[to] + std::min(at, len[to])) * kElem),
                                                  static_cast<int>(s), dt, to, kPairwiseTag, tmp.data(),
                                                  static_cast<int>(g), dt, from, kPairwiseTag, comm,
                                                  MPI_STATUS_IGNORE),
                                     name, "MPI_Sendrecv"));
      if (c.type == DataType::kF32) {
        accumulate(reinterpret_cast<float*>(own + at * kElem), reinterpret_cast<const float*>(tmp.data()), g, c.op);
      } else {
        accumulate(reinterpret_cast<int32_t*>(own + at * kElem), reinterpret_cast<const int32_t*>(tmp.data()), g,
                   c.op);
      }
    }
  }
  return absl::OkStatus();
}

// run_mpi: one collective on `comm` (this process its rank `rank` of `world`), blocking,
// on the comm thread. Counts were checked against INT_MAX by validate() (Limits), so the
// casts below are exact. Collectives of zero elements return at once: every rank passed
// the same count.
absl::Status run_mpi(MPI_Comm comm, int rank, int world, const Call& c) {
  const char* name = kind_name(c.kind);
  const MPI_Datatype dt = mpi_type(c.type);
  const int n = static_cast<int>(c.count);
  MpiLock lock;
  switch (c.kind) {
    case Kind::kAllReduce: {
      if (n == 0) return absl::OkStatus();
      if (world > 1 && c.count * 4 >= kPairwiseBytes) {  // Note [Pairwise reduce-scatter]
        std::vector<size_t> off(world), len(world);
        std::vector<int> counts(world), displs(world);
        for (int r = 0; r < world; ++r) {
          len[r] = c.count / world + (static_cast<size_t>(r) < c.count % world ? 1 : 0);
          off[r] = r == 0 ? 0 : off[r - 1] + len[r - 1];
          counts[r] = static_cast<int>(len[r]);
          displs[r] = static_cast<int>(off[r]);
        }
        MTC_RETURN_IF_ERROR(
            pairwise_reduce(comm, rank, world, c, off, len, static_cast<char*>(c.recv) + off[rank] * 4));
        MTC_RETURN_IF_ERROR(mpi_status(
            MPI_Allgatherv(MPI_IN_PLACE, 0, dt, c.recv, counts.data(), displs.data(), dt, comm), name,
            "MPI_Allgatherv"));
      } else {
        const void* send = c.send == c.recv ? MPI_IN_PLACE : c.send;
        MTC_RETURN_IF_ERROR(
            mpi_status(MPI_Allreduce(send, c.recv, n, dt, mpi_op(c.op), comm), name, "MPI_Allreduce"));
      }
      if (c.op == ReduceOp::kAvg) divide(c.recv, c.count, c.type, world);
      return absl::OkStatus();
    }
    case Kind::kAllGather:
      if (n == 0) return absl::OkStatus();
      return mpi_status(MPI_Allgather(c.send, n, dt, c.recv, n, dt, comm), name, "MPI_Allgather");
    case Kind::kReduceScatter:
      if (n == 0) return absl::OkStatus();
      if (world > 1 && c.count * world * 4 >= kPairwiseBytes) {  // Note [Pairwise reduce-scatter]
        std::vector<size_t> off(world), len(world, c.count);
        for (int r = 0; r < world; ++r) off[r] = r * c.count;
        MTC_RETURN_IF_ERROR(pairwise_reduce(comm, rank, world, c, off, len, c.recv));
      } else {
        MTC_RETURN_IF_ERROR(mpi_status(MPI_Reduce_scatter_block(c.send, c.recv, n, dt, mpi_op(c.op), comm),
                                       name, "MPI_Reduce_scatter_block"));
      }
      if (c.op == ReduceOp::kAvg) divide(c.recv, c.count, c.type, world);
      return absl::OkStatus();
    case Kind::kAllToAll:
      if (n == 0) return absl::OkStatus();
      return mpi_status(MPI_Alltoall(c.send, n, dt, c.recv, n, dt, comm), name, "MPI_Alltoall");
    case Kind::kAllToAllV: {
      // Always called, even when this rank moves nothing: another rank may send to it.
      std::vector<int> scounts(world), sdispls(world), rcounts(world), rdispls(world);
      int soff = 0, roff = 0;
      for (int r = 0; r < world; ++r) {
        scounts[r] = static_cast<int>(c.send_counts[r]);
        rcounts[r] = static_cast<int>(c.recv_counts[r]);
        sdispls[r] = soff;
        rdispls[r] = roff;
        soff += scounts[r];  // validate() kept every displacement, so these sums, in int
        roff += rcounts[r];
      }
      return mpi_status(MPI_Alltoallv(or_empty(c.send), scounts.data(), sdispls.data(), dt, or_empty(c.recv),
                                      rcounts.data(), rdispls.data(), dt, comm),
                        name, "MPI_Alltoallv");
    }
    case Kind::kBroadcast:
      if (n == 0) return absl::OkStatus();
      return mpi_status(MPI_Bcast(c.recv, n, dt, c.root, comm), name, "MPI_Bcast");
    case Kind::kBarrier:
      return mpi_status(MPI_Barrier(comm), name, "MPI_Barrier");
  }
  return absl::InternalError(absl::StrCat("comm: unknown collective ", static_cast<int>(c.kind)));
}

class MpiCommunicator final : public CallCommunicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int world, std::unique_ptr<Exchange> check, bool check_on)
      : comm_(comm), rank_(rank), world_(world), check_on_(check_on) {
    queue_ = std::make_unique<HostQueue>("mtc-comm-mpi", rank, world, Limits{INT_MAX, "MPI counts are int"},
                                         std::move(check), check_on,
                                         [this](const Call& c) { return run_mpi(comm_, rank_, world_, c); });
  }
  ~MpiCommunicator() override {
    queue_.reset();  // runs what is queued, then joins the comm thread, which uses comm_
    free_comm(&comm_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Backend backend() const override { return Backend::kMpi; }
  absl::StatusOr<std::shared_ptr<Communicator>> split(int color, int key) override;

 protected:
  std::shared_ptr<Work> issue(Call c) override { return queue_->issue(std::move(c)); }

 private:
  MPI_Comm comm_;
  int rank_, world_;
  bool check_on_;
  std::unique_ptr<HostQueue> queue_;
};

// split: the colors and keys are all-gathered on this communicator's queue and judged
// alike everywhere (a bad color fails every rank before MPI sees it); MPI_Comm_split then
// runs on the comm thread too, after the collectives queued before it, since MPI wants
// one order of collective calls on a communicator. The new communicator's argument check
// (when on) gets a duplicate of it, as create() does.
absl::StatusOr<std::shared_ptr<Communicator>> MpiCommunicator::split(int color, int key) {
  MTC_ASSIGN_OR_RETURN(SplitPlan plan, agree_split(*this, color, key));
  MPI_Comm sub = MPI_COMM_NULL;
  std::unique_ptr<Exchange> check;
  MTC_RETURN_IF_ERROR(queue_->run([&]() -> absl::Status {
    MTC_ASSIGN_OR_RETURN(sub, split_comm(comm_, color, key, "split"));
    if (check_on_ && plan.world > 1) {
      absl::StatusOr<MPI_Comm> ex = dup(sub, "split: argument check");
      if (!ex.ok()) {
        free_comm(&sub);
        return ex.status();
      }
      check = std::make_unique<MpiExchange>(*ex);
    }
    return absl::OkStatus();
  }));
  int rank = 0, world = 1;
  {
    MpiLock lock;
    MPI_Comm_rank(sub, &rank);
    MPI_Comm_size(sub, &world);
  }
  if (rank != plan.rank || world != plan.world) {
    check.reset();
    free_comm(&sub);
    return absl::InternalError(absl::StrCat("split: MPI_Comm_split made rank ", rank, " of ", world,
                                            ", expected rank ", plan.rank, " of ", plan.world));
  }
  return std::shared_ptr<Communicator>(
      std::make_shared<MpiCommunicator>(sub, rank, world, std::move(check), check_on_));
}

bool plugin_mpi_is_initialized();

absl::Status plugin_mpi_init(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Not started by a launcher: one rank, without MPI (the single-GPU fallback).
    if (!launched_by_mpi()) return absl::OkStatus();
    int provided = MPI_THREAD_SINGLE;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
      return absl::InternalError(absl::StrCat("comm::init: MPI_Init_thread failed with code ", rc));
    g_thread_level = provided;
  } else if (finalized()) {
    return absl::FailedPreconditionError("comm::init: MPI was already finalized; it cannot start again");
  }
  return thread_level_ok("comm::init");
}

void plugin_mpi_finalize() {
  if (plugin_mpi_is_initialized()) MPI_Finalize();
}

bool plugin_mpi_is_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0 && !finalized();
}

void plugin_mpi_abort(int status) {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort should not return; if it does, still stop this rank
}

int plugin_mpi_world_rank() {
  if (!plugin_mpi_is_initialized()) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int plugin_mpi_world_size() {
  if (!plugin_mpi_is_initialized()) return 1;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

absl::StatusOr<bool> plugin_mpi_all_ok(bool ok) {
  if (!plugin_mpi_is_initialized()) return ok;
  MTC_ASSIGN_OR_RETURN(MPI_Comm comm, dup(MPI_COMM_WORLD, "comm: set-up"));
  int mine = ok ? 1 : 0, all = 0;
  absl::Status s;
  {
    MpiLock lock;
    s = mpi_status(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm), "comm: set-up", "MPI_Allreduce");
  }
  free_comm(&comm);
  if (!s.ok()) return s;
  return all != 0;
}

absl::Status plugin_mpi_broadcast(void* data, size_t bytes, int root) {
  if (!plugin_mpi_is_initialized()) return absl::OkStatus();
  if (bytes > static_cast<size_t>(INT_MAX)) return absl::InternalError("comm: set-up broadcast too large");
  MTC_ASSIGN_OR_RETURN(MPI_Comm comm, dup(MPI_COMM_WORLD, "comm: set-up"));
  absl::Status s;
  {
    MpiLock lock;
    s = mpi_status(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm), "comm: set-up",
                   "MPI_Bcast");
  }
  free_comm(&comm);
  return s;
}

absl::StatusOr<std::unique_ptr<Exchange>> plugin_mpi_exchange() {
  MTC_ASSIGN_OR_RETURN(MPI_Comm comm, dup(MPI_COMM_WORLD, "comm: argument check"));
  return std::unique_ptr<Exchange>(std::make_unique<MpiExchange>(comm));
}

absl::StatusOr<std::shared_ptr<Communicator>> plugin_make_mpi(const CommOptions& opts) {
  if (!plugin_mpi_is_initialized()) {
    if (launched_by_mpi()) {
      return absl::FailedPreconditionError(
          "comm: backend mpi: the job was started by an MPI launcher but MPI is not initialised: call "
          "comm::init(&argc, &argv) before create()");
    }
    // A build with MPI run without mpirun: a world of one, which needs no MPI at all.
    return make_local(opts, Backend::kMpi);
  }
  MTC_RETURN_IF_ERROR(thread_level_ok("comm: backend mpi"));
  MTC_ASSIGN_OR_RETURN(MPI_Comm comm, dup(MPI_COMM_WORLD, "comm: backend mpi"));
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  // The check is on for all ranks when it is on for any (MTC_COMM_CHECK may be set on
  // one rank only): a rank checking alone would wait in an exchange nobody else joins.
  int want = check_enabled(opts) ? 1 : 0, check_on = 0;
  absl::Status s;
  {
    MpiLock lock;
    s = mpi_status(MPI_Allreduce(&want, &check_on, 1, MPI_INT, MPI_MAX, comm), "comm: backend mpi",
                   "MPI_Allreduce");
  }
  std::unique_ptr<Exchange> check;
  if (s.ok() && check_on && world > 1) {
    auto ex = dup(comm, "comm: argument check");
    if (ex.ok()) {
      check = std::make_unique<MpiExchange>(*ex);
    } else {
      s = ex.status();
    }
  }
  if (!s.ok()) {
    free_comm(&comm);
    return s;
  }
  return std::shared_ptr<Communicator>(
      std::make_shared<MpiCommunicator>(comm, rank, world, std::move(check), check_on != 0));
}

const MpiPlugin kPlugin = {
    .abi = plugin::kPluginAbi,
    .init = plugin_mpi_init,
    .finalize = plugin_mpi_finalize,
    .is_initialized = plugin_mpi_is_initialized,
    .abort = plugin_mpi_abort,
    .world_rank = plugin_mpi_world_rank,
    .world_size = plugin_mpi_world_size,
    .all_ok = plugin_mpi_all_ok,
    .broadcast = plugin_mpi_broadcast,
    .exchange = plugin_mpi_exchange,
    .make = plugin_make_mpi,
};

}  // namespace
}  // namespace mtc::comm::internal

// The plug-in's entry point (comm/plugin.h).
extern "C" __attribute__((visibility("default"))) const void* mtc_comm_mpi_plugin() {
  return &mtc::comm::internal::kPlugin;
}
