// Command-line helpers shared by mtc's tools (mtc-train, mtc-replay, mtc-plan,
// mtc-bench-comm): one contract for every tool's flags.
//   - a bad flag (unknown, missing or malformed value, a positional argument) prints one
//     line "TOOL: error: ..." on stderr and exits with status 2; under a launcher (mpirun,
//     torchrun) only rank 0 prints it, every rank exits 2;
//   - --help and -h list the tool's flags and exit 0; flags whose help starts with
//     "testing:" are left out there and listed by --helpfull;
//   - --version prints mtc's version, build type and the backends built in, and exits 0;
//   - --record-trace is --record_trace (absl's names take no hyphens).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace mtc::cli {

// fail: "TOOL: error: WHAT" on stderr, then exit with `status` without running
// destructors (an interpreter's worker may still hold commands; nothing needs saving).
[[noreturn]] void fail(const char* tool, int status, const std::string& what);
// fail_flags: a bad flag or flag value, found while every rank of a job checks the same
// command line: exit status 2, and the line is printed by rank 0 alone (one line per job,
// not one per rank). Another rank waits kSecondaryWaitSec for rank 0 to print and end the
// job first, and prints its own line (naming its rank) only if the job is still running
// then: a rank that ended first could have the launcher stop rank 0 before it printed
// (mpirun under load: 3 jobs in 20 ended with status 2 and no line).
inline constexpr int kSecondaryWaitSec = 10;
[[noreturn]] void fail_flags(const char* tool, const std::string& what);
// secondary_rank: whether the launcher's environment makes this process a rank other than
// 0 (such a rank prints no flag errors and no help).
bool secondary_rank();
// check_output_file: whether a file can be written at `path` (atomically: a temporary in
// the same folder, then renamed), checked before a tool's work starts: not a directory, in
// a folder that exists and takes a new file. The probe file is removed; nothing is left.
// The error names `flag` and what was expected.
absl::Status check_output_file(const std::string& flag, const std::string& path);
// given: whether the command line passed parse_flags set flag `name` (its default aside).
bool given(const std::string& name);
// version_line: "mtc 0.1.0, Release build, backends: cpu cuda(sm_90) cudnn nccl mpi".
std::string version_line();
// parse_flags: the whole command line of TOOL, whose flags are defined in a file whose
// name contains `source` (--help lists those; absl would match the program name, and
// "mtc-train" is not "mtc_train"). `usage` is --help's first lines. Returns only when
// every flag parsed; see the contract above.
void parse_flags(const char* tool, const char* source, const char* usage, int argc, char** argv);

}  // namespace mtc::cli
