// The backend-independent part of comm/: names, create() choosing a backend, MPI start-up
// and job abort (forwarded to mpi.cc when MPI is built in), and the fallbacks of the MPI
// services for a build without MPI.
#include "comm/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "comm/internal.h"

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
      return internal::make_mpi(opts);
#else
      break;
#endif
    case Backend::kNccl:
#ifdef MTC_COMM_HAVE_NCCL
      return internal::make_nccl(opts);
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

#ifndef MTC_COMM_HAVE_MPI
// Without MPI the job is one rank and init/finalize have nothing to do.
absl::Status mpi_init(int*, char***) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr) {
    return absl::FailedPreconditionError(
        "comm::init: the job was started by an MPI launcher, but this build has no MPI (built: " +
        built_backends() + "); rebuild with MPI or run one rank without mpirun");
  }
  return absl::OkStatus();
}
void mpi_finalize() {}
bool mpi_is_initialized() { return false; }
void mpi_abort(int status) { std::_Exit(status); }
int mpi_world_rank() { return 0; }
int mpi_world_size() { return 1; }
absl::StatusOr<bool> mpi_all_ok(bool ok) { return ok; }
absl::Status mpi_broadcast(void*, size_t, int) { return absl::OkStatus(); }
absl::StatusOr<std::unique_ptr<Exchange>> mpi_exchange() {
  return absl::UnimplementedError("comm: the argument check across ranks needs MPI, which is not built in");
}
#endif

}  // namespace internal
}  // namespace mtc::comm
