// The plug-in loader of plugin.h: dlopen in the documented order, the entry point by
// dlsym, the ABI check, and one cached outcome per library.
#include "comm/plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mtc::plugin {
namespace {

struct Outcome {
  const void* table = nullptr;
  absl::Status status;
};

std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::map<std::string, Outcome>& cache() {
  static std::map<std::string, Outcome> c;
  return c;
}

// this_library_dir: the folder of the shared library this function is in (libmtc_comm.so).
std::string this_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&this_library_dir), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

Outcome open(const std::string& library, const std::string& symbol) {
  std::vector<std::string> candidates;
  if (const char* dir = std::getenv("MTC_PLUGIN_DIR"); dir != nullptr && *dir != '\0') {
    candidates.push_back(absl::StrCat(dir, "/", library));
  }
  if (const std::string dir = this_library_dir(); !dir.empty()) candidates.push_back(absl::StrCat(dir, "/", library));
  candidates.push_back(library);
  std::vector<std::string> tried;
  void* handle = nullptr;
  for (const std::string& path : candidates) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle != nullptr) break;
    const char* err = dlerror();
    tried.push_back(absl::StrCat(path, " (", err != nullptr ? err : "not found", ")"));
  }
  if (handle == nullptr) {
    return {nullptr, absl::UnavailableError(absl::StrCat(library, " could not be loaded; tried ",
                                                         absl::StrJoin(tried, "; ")))};
  }
  dlerror();
  void* entry = dlsym(handle, symbol.c_str());
  if (entry == nullptr) {
    return {nullptr, absl::FailedPreconditionError(absl::StrCat(library, " has no entry point ", symbol,
                                                                ": it is not one of mtc's plug-ins"))};
  }
  using Entry = const void* (*)();
  const void* table = reinterpret_cast<Entry>(entry)();
  const uint32_t abi = table != nullptr ? *static_cast<const uint32_t*>(table) : 0;
  if (abi != kPluginAbi) {
    return {nullptr, absl::FailedPreconditionError(absl::StrCat(
                         library, " is from another build of mtc (plug-in ABI ", abi, ", this libmtc_comm expects ",
                         kPluginAbi, "): install libmtc and its plug-ins together"))};
  }
  return {table, absl::OkStatus()};
}

}  // namespace

absl::StatusOr<const void*> load(const std::string& library, const std::string& symbol) {
  std::lock_guard<std::mutex> lock(mu());
  auto it = cache().find(library);
  if (it == cache().end()) it = cache().emplace(library, open(library, symbol)).first;
  if (!it->second.status.ok()) return it->second.status;
  return it->second.table;
}

bool loaded(const std::string& library) {
  std::lock_guard<std::mutex> lock(mu());
  auto it = cache().find(library);
  return it != cache().end() && it->second.status.ok();
}

}  // namespace mtc::plugin
