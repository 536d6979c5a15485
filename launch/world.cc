// Reads the job's layout from the launcher's environment (world.h).
#include "world.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace mtc::launch {
namespace {

// read: the variable as a whole number in [lo, hi]; `fallback` when it is unset.
absl::StatusOr<int> read(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  int n;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", v, "': expected a whole number in [", lo, ", ", hi, "]"));
  }
  return n;
}

absl::StatusOr<World> read_world(const char* rank, const char* size, const char* local_rank, const char* local_size,
                                 const char* launcher) {
  World w;
  w.launcher = launcher;
  constexpr int kMax = 1 << 20;
  auto s = read(size, 1, 1, kMax);
  if (!s.ok()) return s.status();
  w.size = *s;
  auto r = read(rank, 0, 0, w.size - 1);
  if (!r.ok()) return r.status();
  w.rank = *r;
  auto ls = read(local_size, w.size, 1, w.size);
  if (!ls.ok()) return ls.status();
  w.local_size = *ls;
  auto lr = read(local_rank, w.rank % w.local_size, 0, w.local_size - 1);
  if (!lr.ok()) return lr.status();
  w.local_rank = *lr;
  return w;
}

}  // namespace

absl::StatusOr<World> world_from_environment() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    return read_world("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                      "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun");
  }
  if (std::getenv("WORLD_SIZE") != nullptr || std::getenv("RANK") != nullptr) {
    return read_world("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun");
  }
  return World{};
}

int device_for(const World& w, int visible_devices) {
  return visible_devices > 0 ? w.local_rank % visible_devices : 0;
}

std::string per_rank_path(const std::string& path, const World& w) {
  if (path.find("%r") != std::string::npos) return absl::StrReplaceAll(path, {{"%r", absl::StrCat(w.rank)}});
  return w.size > 1 ? absl::StrCat(path, ".rank", w.rank) : path;
}

std::string describe(const World& w) {
  return absl::StrCat("rank ", w.rank, " of ", w.size, " (local ", w.local_rank, " of ", w.local_size, ", ",
                      w.launcher, ")");
}

}  // namespace mtc::launch
