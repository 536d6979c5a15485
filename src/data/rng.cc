// Rng: splitmix64 over a counter, with uniform, normal and bounded-integer draws. The
// same seed gives the same stream everywhere (no std:: distributions, whose output is
// implementation-defined).
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mtc/data.h"
#include "mtc/status.h"

namespace mtc::data {
namespace {
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

Rng::Rng(uint64_t seed, uint64_t stream) : state_(mix(mix(seed + kGolden) + stream)) {}

uint64_t Rng::next_u64() {
  state_ += kGolden;
  return mix(state_);
}

float Rng::uniform(float lo, float hi) {
  const float u = static_cast<float>(next_u64() >> 40) * 0x1.0p-24f;  // [0, 1)
  const float v = lo + (hi - lo) * u;
  return v < hi ? v : lo;  // rounding can reach hi when the range is wide
}

float Rng::normal(float mean, float std) {
  double z;
  if (have_spare_) {
    z = spare_;
    have_spare_ = false;
  } else {
    // u1 in (0, 1] so log(u1) is finite; u2 in [0, 1).
    const double u1 = static_cast<double>((next_u64() >> 11) + 1) * 0x1.0p-53;
    const double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    z = r * std::cos(2 * M_PI * u2);
    spare_ = r * std::sin(2 * M_PI * u2);
    have_spare_ = true;
  }
  return static_cast<float>(mean + std * z);
}

uint32_t Rng::below(uint32_t n) {
  MTC_CHECK(n >= 1, "Rng::below(0)");
  return static_cast<uint32_t>(((next_u64() >> 32) * n) >> 32);
}

std::string Rng::state() const {
  uint64_t spare;
  std::memcpy(&spare, &spare_, sizeof(spare));
  return absl::StrFormat("%016x %d %016x", state_, have_spare_ ? 1 : 0, spare);
}

absl::Status Rng::set_state(const std::string& text) {
  uint64_t state = 0, spare = 0;
  int have = 0, used = 0;
  if (std::sscanf(text.c_str(), "%16" SCNx64 " %d %16" SCNx64 "%n", &state, &have, &spare, &used) != 3 ||
      used != static_cast<int>(text.size()) || (have != 0 && have != 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("random generator state '", text, "': expected three fields, as Rng::state() writes"));
  }
  state_ = state;
  have_spare_ = have == 1;
  std::memcpy(&spare_, &spare, sizeof(spare));
  return absl::OkStatus();
}

}  // namespace mtc::data
