// Command-line helpers shared by mtc-train and mtc-replay: the one-line error and exit,
// hyphenated flag names, unknown flags as bad input (status 2), and the parse of them all.
#pragma once

#include <string>

namespace mtc::cli {

// fail: "TOOL: error: WHAT" on stderr, then exit with `status` without running
// destructors (an interpreter's worker may still hold commands; nothing needs saving).
[[noreturn]] void fail(const char* tool, int status, const std::string& what);
// normalize_flag_names: --record-trace is --record_trace (absl's names take no hyphens).
void normalize_flag_names(int argc, char** argv);
// check_flag_names: an unknown --flag exits with status 2 naming it (absl's parser would
// exit with status 1). Help flags and absl's own flags pass through to absl.
void check_flag_names(const char* tool, int argc, char** argv);
// parse_flags: the whole command line of TOOL, whose flags are defined in a file whose
// name contains `source` (--help lists those; absl would match the program name, and
// "mtc-train" is not "mtc_train"). Normalizes and checks flag names, parses them, and
// exits with status 2 on a positional argument. `usage` is --help's first lines.
void parse_flags(const char* tool, const char* source, const char* usage, int argc, char** argv);

}  // namespace mtc::cli
