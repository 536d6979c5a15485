// Command-line helpers shared by mtc-train and mtc-replay. See cli.h.
#include "cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mtc::cli {

void fail(const char* tool, int status, const std::string& what) {
  std::fprintf(stderr, "%s: error: %s\n", tool, what.c_str());
  std::fflush(nullptr);
  std::_Exit(status);
}

// normalize_flag_names: --record-trace is --record_trace (absl's names take no hyphens).
void normalize_flag_names(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (std::strcmp(a, "--") == 0) break;
    if (a[0] != '-') continue;
    for (char* p = a + (a[1] == '-' ? 2 : 1); *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

// check_flag_names: an unknown --flag is bad input like any other (absl's parser would
// exit with status 1). Help flags and absl's own flags pass through to absl.
void check_flag_names(const char* tool, int argc, char** argv) {
  static const char* kAbslFlags[] = {"help", "helpfull", "helpshort", "helppackage", "helpon",
                                     "helpmatch", "version", "only_check_args", "flagfile",
                                     "fromenv", "tryfromenv", "undefok"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const bool has_value = arg.find('=') != absl::string_view::npos;
    absl::string_view name = arg.substr(0, arg.find('='));
    if (std::find(std::begin(kAbslFlags), std::end(kAbslFlags), name) != std::end(kAbslFlags)) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      const absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>()) continue;
    }
    if (flag == nullptr) {
      fail(tool, 2, absl::StrCat("unknown flag --", std::string(name), ": see --help for the flags ", tool, " takes"));
    }
    if (!has_value && !flag->IsOfType<bool>()) ++i;  // "--batch 64": skip the value
  }
}

void parse_flags(const char* tool, const char* source, const char* usage, int argc, char** argv) {
  absl::FlagsUsageConfig config;
  const std::string file_tag = source;
  config.contains_help_flags = [file_tag](absl::string_view file) { return absl::StrContains(file, file_tag); };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  normalize_flag_names(argc, argv);
  check_flag_names(tool, argc, argv);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    fail(tool, 2, absl::StrCat("unexpected argument '", rest[1], "': expected only --flags (see --help)"));
  }
}

}  // namespace mtc::cli
