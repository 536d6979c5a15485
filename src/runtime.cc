// Runtime creation: default memory sizes, the device, the interpreter; the current-runtime
// pointer; byte-size parsing for flags.
#include "mtc/runtime.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "device.h"
#include "mtc/status.h"
#include "trace/trace_writer.h"

namespace mtc {
namespace {
std::atomic<Runtime*> g_current{nullptr};

size_t default_cpu_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * page : (size_t{8} << 30);
  return std::min(phys / 4, size_t{16} << 30);
}

// splitmix64: the counter-based generator behind next_seed.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::create(const RuntimeOptions& opts) {
  DeviceOptions d;
  if (opts.device == "cpu") {
    d.type = DeviceType::kCPU;
  } else if (opts.device == "cuda") {
    d.type = DeviceType::kCUDA;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown device '", opts.device, "': expected cpu or cuda"));
  }
  d.ordinal = opts.device_ordinal;
  d.num_threads = opts.num_threads;
  d.memory_bytes = opts.memory_bytes;
  if (d.memory_bytes == 0 && d.type == DeviceType::kCPU) d.memory_bytes = default_cpu_memory();
  d.comm_bytes = opts.comm_bytes;
  if (d.comm_bytes == 0 && d.memory_bytes != 0) d.comm_bytes = d.memory_bytes / 16;
  std::unique_ptr<Runtime> rt(new Runtime(opts));
  MTC_ASSIGN_OR_RETURN(rt->device_, make_device(d));
  InterpreterOptions io{opts.synchronous, opts.evict, nullptr, opts.tma};
  if (opts.budget_fraction > 0) {
    if (opts.budget_fraction > 1) {
      return absl::InvalidArgumentError(absl::StrCat("budget fraction ", opts.budget_fraction, " is above 1: expected a fraction of the compute region in (0, 1]"));
    }
    io.evict.budget_bytes = static_cast<size_t>(opts.budget_fraction * rt->device_->compute_region().capacity());
  }
  if (!opts.trace_path.empty()) {
    MTC_ASSIGN_OR_RETURN(io.trace, TraceWriter::open(opts.trace_path));
  }
  rt->interp_ = Interpreter::create(rt->device_, io);
  rt->make_current();
  return rt;
}

Runtime::~Runtime() {
  if (interp_) interp_->sync().IgnoreError();
  Runtime* self = this;
  g_current.compare_exchange_strong(self, nullptr);
}

Device& Runtime::device() { return *device_; }

Runtime& Runtime::current() {
  Runtime* r = g_current.load();
  MTC_CHECK(r != nullptr, "no mtc::Runtime exists: create one before making tensors");
  return *r;
}

void Runtime::make_current() { g_current.store(this); }

uint64_t Runtime::next_seed() {
  return splitmix64(opts_.seed * 0x2545F4914F6CDD1DULL + seed_counter_.fetch_add(1));
}

absl::StatusOr<size_t> parse_bytes(const std::string& text) {
  std::string s(absl::StripAsciiWhitespace(text));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  double value;
  if (i == 0 || !absl::SimpleAtod(s.substr(0, i), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a byte size: expected a number with an optional unit (B, KiB, MiB, GiB, K, M, G)"));
  }
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(i)));
  double mult;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else return absl::InvalidArgumentError(absl::StrCat("'", text, "': unknown unit '", unit, "': expected B, KiB, MiB, GiB or TiB"));
  const double bytes = value * mult;
  if (!(bytes >= 0) || bytes > 1e18) return absl::InvalidArgumentError(absl::StrCat("'", text, "' is out of range"));
  return static_cast<size_t>(std::llround(bytes));
}

}  // namespace mtc
