// plugin: loads one of mtc's optional backends, each a shared library of its own, on first
// use: libmtc_comm_mpi.so (the MPI backend), libmtc_comm_nccl.so (the NCCL backend) and
// libmtc_cuda.so (the CUDA device and kernels, loaded by src/device.cc). libmtc and
// libmtc_comm never link MPI, NCCL or the CUDA libraries themselves, so a program built on
// them starts, and runs on the CPU, where those libraries are missing.
//
// A plug-in is looked for, in order: in $MTC_PLUGIN_DIR when set, beside libmtc_comm.so
// (where cmake --install and the build tree put every plug-in), then by its bare name on
// the loader's path. It is opened with RTLD_NOW | RTLD_GLOBAL (Open MPI's components need
// libmpi's symbols global) and never closed. Its entry point is a C function returning a
// pointer to a table whose first field is kPluginAbi, so a plug-in from another build of
// mtc is refused by name instead of crashing.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mtc::plugin {

// kPluginAbi: bumped whenever a plug-in table or the classes they pass change.
inline constexpr uint32_t kPluginAbi = 1;

// load: the entry point `symbol` of the plug-in `library` (e.g. "libmtc_comm_mpi.so"),
// called once and cached with the outcome: every later call returns the same table or
// the same error. Unavailable names the library, every place tried and the loader's
// message (a missing libmpi.so.40, say); FailedPrecondition a plug-in whose table's
// kPluginAbi differs from this build's.
absl::StatusOr<const void*> load(const std::string& library, const std::string& symbol);

// loaded: whether `library` has been loaded (by load(), successfully). Never loads it.
bool loaded(const std::string& library);

}  // namespace mtc::plugin
