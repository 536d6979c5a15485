// The backend-independent part of comm/: names, create() choosing a backend, MPI start-up
// and job abort, and the MPI services of internal.h: each forwards to the MPI plug-in
// (libmtc_comm_mpi.so, comm/plugin.h) once it is loaded, or answers for a world of one.
#include "comm/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "comm/internal.h"
#include "comm/plugin.h"
#include "mtc/status.h"

namespace mtc::comm {

size_t data_type_size(DataType t) {
  switch (t) {
    case DataType::kF32:
    case DataType::kI32:
      return 4;
  }
  return 0;
}

const char* data_type_name(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "f32";
    case DataType::kI32:
      return "i32";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kLocal:
      return "local";
    case Backend::kMpi:
      return "mpi";
    case Backend::kNccl:
      return "nccl";
  }
  return "?";
}

std::string built_backends() {
  std::string s = "local";
#ifdef MTC_COMM_HAVE_MPI
  s += ",mpi";
#endif
#ifdef MTC_COMM_HAVE_NCCL
  s += ",nccl";
#endif
  return s;
}

absl::StatusOr<std::shared_ptr<Communicator>> create(const CommOptions& opts) {
  switch (opts.backend) {
    case Backend::kLocal: {
      const int world = internal::mpi_world_size();
      if (world != 1) {
        return absl::FailedPreconditionError(
            absl::StrCat("comm: backend local serves a world of one, but this job has ", world,
                         " ranks: use backend mpi or nccl"));
      }
      return internal::make_local(opts, Backend::kLocal);
    }
    case Backend::kMpi:
#ifdef MTC_COMM_HAVE_MPI
    {
      auto p = internal::mpi_plugin();
      if (!p.ok()) return absl::Status(p.status().code(), absl::StrCat("comm: backend mpi: ", p.status().message()));
      return (*p)->make(opts);
    }
#else
      break;
#endif
    case Backend::kNccl:
#ifdef MTC_COMM_HAVE_NCCL
    {
      auto p = plugin::load(internal::kNcclPluginLibrary, internal::kNcclPluginEntry);
      if (!p.ok()) return absl::Status(p.status().code(), absl::StrCat("comm: backend nccl: ", p.status().message()));
      return static_cast<const internal::NcclPlugin*>(*p)->make(opts);
    }
#else
      break;
#endif
  }
  if (static_cast<int>(opts.backend) > static_cast<int>(Backend::kNccl)) {
    return absl::InvalidArgumentError(absl::StrCat("comm: unknown backend ", static_cast<int>(opts.backend),
                                                   " (built: ", built_backends(), ")"));
  }
  return absl::UnimplementedError(absl::StrCat("comm: backend ", backend_name(opts.backend),
                                               " is not built in (built: ", built_backends(), ")"));
}

absl::Status init(int* argc, char*** argv) { return internal::mpi_init(argc, argv); }
void finalize() { internal::mpi_finalize(); }
bool mpi_initialized() { return internal::mpi_is_initialized(); }

void abort_job(int status, const std::string& message) {
  // One line, flushed before MPI_Abort: mpirun kills the other ranks at once and a
  // buffered message would be lost with them.
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(nullptr);
  if (internal::mpi_is_initialized()) internal::mpi_abort(status);
  std::_Exit(status);
}

namespace internal {

bool check_enabled(const CommOptions& opts) {
  if (opts.check_arguments) return true;
  const char* env = std::getenv("MTC_COMM_CHECK");
  return env != nullptr && std::string(env) == "1";
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

absl::StatusOr<const MpiPlugin*> mpi_plugin() {
#ifdef MTC_COMM_HAVE_MPI
  MTC_ASSIGN_OR_RETURN(const void* table, plugin::load(kMpiPluginLibrary, kMpiPluginEntry));
  return static_cast<const MpiPlugin*>(table);
#else
  return absl::UnimplementedError("backend mpi is not built in (built: " + built_backends() + ")");
#endif
}

namespace {
// active: the MPI plug-in when it is loaded, or when this job was started by an MPI
// launcher (then it is loaded now: such a job is asked to run on MPI); else null, and the
// services answer for a world of one. A launched job whose plug-in cannot be loaded also
// gets null here; mpi_init reports why.
const MpiPlugin* active() {
  if (!launched_by_mpi() && !plugin::loaded(kMpiPluginLibrary)) return nullptr;
  auto p = mpi_plugin();
  return p.ok() ? *p : nullptr;
}
}  // namespace

absl::Status mpi_init(int* argc, char*** argv) {
  if (!launched_by_mpi()) {
    // One rank without a launcher: no MPI at all (the single-GPU fallback), unless the
    // plug-in was loaded already (a program that started MPI itself).
    if (const MpiPlugin* p = active()) return p->init(argc, argv);
    return absl::OkStatus();
  }
  auto p = mpi_plugin();
  if (!p.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "comm::init: the job was started by an MPI launcher, but MPI is not available: ", p.status().message(),
        p.status().code() == absl::StatusCode::kUnimplemented ? "; rebuild with MPI or run one rank without mpirun"
                                                              : ""));
  }
  return (*p)->init(argc, argv);
}
void mpi_finalize() {
  if (const MpiPlugin* p = active()) p->finalize();
}
bool mpi_is_initialized() {
  const MpiPlugin* p = active();
  return p != nullptr && p->is_initialized();
}
void mpi_abort(int status) {
  if (const MpiPlugin* p = active()) p->abort(status);
  std::_Exit(status);
}
int mpi_world_rank() {
  const MpiPlugin* p = active();
  return p != nullptr ? p->world_rank() : 0;
}
int mpi_world_size() {
  const MpiPlugin* p = active();
  return p != nullptr ? p->world_size() : 1;
}
absl::StatusOr<bool> mpi_all_ok(bool ok) {
  const MpiPlugin* p = active();
  return p != nullptr ? p->all_ok(ok) : ok;
}
absl::Status mpi_broadcast(void* data, size_t bytes, int root) {
  const MpiPlugin* p = active();
  return p != nullptr ? p->broadcast(data, bytes, root) : absl::OkStatus();
}
absl::StatusOr<std::unique_ptr<Exchange>> mpi_exchange() {
  MTC_ASSIGN_OR_RETURN(const MpiPlugin* p, mpi_plugin());
  return p->exchange();
}

}  // namespace internal
}  // namespace mtc::comm
