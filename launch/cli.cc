// Command-line helpers shared by mtc's tools: the one flag contract. See cli.h.
#include "cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "world.h"

#ifndef MTC_VERSION
#define MTC_VERSION "unknown"
#endif
#ifndef MTC_BUILD_TYPE
#define MTC_BUILD_TYPE "unknown"
#endif
#ifndef MTC_BACKENDS
#define MTC_BACKENDS "cpu"
#endif

namespace mtc::cli {
namespace {

enum class Help { kNone, kShort, kFull, kVersion };

// g_given: the names of the flags the command line set (bool flags also as --noNAME).
std::vector<std::string> g_given;

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

bool hidden(const absl::CommandLineFlag& f) { return absl::StartsWith(f.Help(), "testing:"); }

// print_help: the usage lines and the tool's flags, sorted by name, each with its default.
void print_help(const char* tool, const char* source, const char* usage, bool full) {
  std::printf("%s: %s\n\nFlags:\n", tool, usage);
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::StrContains(flag->Filename(), source) || (hidden(*flag) && !full)) continue;
    flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
  for (const absl::CommandLineFlag* f : flags) {
    const std::string def = f->DefaultValue();
    std::printf("  --%s%s\n      %s (default: %s)\n", std::string(f->Name()).c_str(), f->IsOfType<bool>() ? "" : " VALUE",
                f->Help().c_str(), def.empty() ? "empty" : def.c_str());
  }
  std::printf("\n  --help, -h: this list%s; --version: mtc's version and build\n",
              full ? ", testing flags included" : "; --helpfull adds the testing flags");
}

// check_flags: every argument is a known flag with a value its type parses; the first that
// is not exits through fail_flags. Returns the help the command line asks for, if any
// (help wins over any error, as it does in every tool that has it).
Help check_flags(const char* tool, const char* source, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "-h" || a == "--help" || a == "-help" || a == "--helpshort") return Help::kShort;
    if (a == "--helpfull") return Help::kFull;
    if (a == "--version") return Help::kVersion;
  }
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      if (i + 1 < argc) {
        fail_flags(tool, absl::StrCat("unexpected argument '", argv[i + 1], "': expected only --flags (see --help)"));
      }
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      fail_flags(tool, absl::StrCat("unexpected argument '", arg, "': expected only --flags (see --help)"));
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const bool has_value = eq != absl::string_view::npos;
    const std::string name(arg.substr(0, eq));
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && !has_value) {
      absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>()) {  // --notma
        g_given.push_back(name.substr(2));
        continue;
      }
    }
    if (flag == nullptr || !absl::StrContains(flag->Filename(), source)) {
      fail_flags(tool, absl::StrCat("unknown flag --", name, ": see --help for the flags ", tool, " takes"));
    }
    g_given.push_back(name);
    if (flag->IsOfType<bool>() && !has_value) continue;
    std::string value;
    if (has_value) {
      value = std::string(arg.substr(eq + 1));
    } else if (i + 1 < argc && !absl::StartsWith(argv[i + 1], "--")) {  // "--batch --lr 1": no value
      value = argv[++i];
    } else {
      fail_flags(tool, absl::StrCat("--", name, " needs a value: ", flag->Help()));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      const char* expected = flag->IsOfType<bool>()     ? "expected true or false"
                             : flag->IsOfType<double>() ? "expected a number"
                             : flag->IsOfType<int>() || flag->IsOfType<int64_t>() || flag->IsOfType<uint64_t>()
                                 ? "expected a whole number"
                                 : nullptr;
      fail_flags(tool, absl::StrCat("--", name, " '", value, "': ", expected != nullptr ? expected : error));
    }
  }
  return Help::kNone;
}

}  // namespace

void fail(const char* tool, int status, const std::string& what) {
  std::fprintf(stderr, "%s: error: %s\n", tool, what.c_str());
  std::fflush(nullptr);
  std::_Exit(status);
}

void fail_flags(const char* tool, const std::string& what) {
  absl::StatusOr<launch::World> w = launch::world_from_environment();
  if (w.ok() && w->rank != 0) {
    std::fflush(nullptr);
    std::this_thread::sleep_for(std::chrono::seconds(kSecondaryWaitSec));
    fail(tool, 2, absl::StrCat("rank ", w->rank, " of ", w->size, ": ", what));
  }
  fail(tool, 2, what);
}

bool secondary_rank() {
  absl::StatusOr<launch::World> w = launch::world_from_environment();
  return w.ok() && w->rank != 0;
}

absl::Status check_output_file(const std::string& flag, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": ", why));
  };
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty: expected a file name"));
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return bad("is a directory: expected a file name (in an existing folder)");
  }
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(folder.c_str(), &st) != 0) {
    return bad(absl::StrCat("folder ", folder, " does not exist: expected an existing folder (mtc creates none)"));
  }
  if (!S_ISDIR(st.st_mode)) return bad(absl::StrCat(folder, " is not a folder"));
  std::string probe = folder + "/.mtc-probe-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    return bad(absl::StrCat("cannot create a file in ", folder, ": ", std::strerror(errno),
                            ": expected a writable folder"));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

bool given(const std::string& name) { return std::find(g_given.begin(), g_given.end(), name) != g_given.end(); }

std::string version_line() {
  return absl::StrCat("mtc ", MTC_VERSION, ", ", MTC_BUILD_TYPE, " build, backends: ", MTC_BACKENDS);
}

void parse_flags(const char* tool, const char* source, const char* usage, int argc, char** argv) {
  normalize_flag_names(argc, argv);
  const Help help = check_flags(tool, source, argc, argv);
  if (help != Help::kNone) {
    if (!secondary_rank()) {
      if (help == Help::kVersion) {
        std::printf("%s (%s)\n", tool, version_line().c_str());
      } else {
        print_help(tool, source, usage, help == Help::kFull);
      }
    }
    std::fflush(nullptr);
    std::exit(0);
  }
  // Every flag was checked above, so absl's parser accepts them all.
  absl::ParseCommandLine(argc, argv);
}

}  // namespace mtc::cli
