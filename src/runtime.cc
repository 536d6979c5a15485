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
#include "trace/chrome_trace.h"
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
  d.memory_share = std::max(1, opts.memory_share);
  if (d.memory_bytes == 0 && d.type == DeviceType::kCPU) d.memory_bytes = default_cpu_memory() / d.memory_share;
  d.comm_bytes = opts.comm_bytes;
  if (d.comm_bytes == 0 && d.memory_bytes != 0) d.comm_bytes = d.memory_bytes / 16;
  std::unique_ptr<Runtime> rt(new Runtime(opts));
  MTC_ASSIGN_OR_RETURN(rt->device_, make_device(d));
  InterpreterOptions io{opts.synchronous, opts.evict, nullptr, opts.tma, nullptr};
  Budget b;
  if (opts.budget_fraction > 0) {
    b = {Budget::Kind::kRegionShare, 0, opts.budget_fraction, absl::StrCat(opts.budget_fraction * 100, "%")};
  } else if (opts.evict.budget_bytes > 0) {
    b = {Budget::Kind::kBytes, opts.evict.budget_bytes, 0, alloc::format_bytes(opts.evict.budget_bytes)};
  }
  MTC_ASSIGN_OR_RETURN(io.evict.budget_bytes, resolve_budget(b, rt->device_->compute_region().capacity()));
  rt->budget_bytes_ = io.evict.budget_bytes;
  if (!opts.trace_path.empty()) {
    MTC_ASSIGN_OR_RETURN(io.trace, TraceWriter::open(opts.trace_path));
  }
  if (!opts.chrome_trace_path.empty()) {
    MTC_ASSIGN_OR_RETURN(io.chrome, ChromeTrace::open(opts.chrome_trace_path, opts.chrome_trace_pid));
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

absl::StatusOr<Budget> parse_budget(const std::string& text) {
  Budget b;
  b.text = text;
  const std::string forms =
      "expected none, bytes with a unit (300MiB, 1B), a percentage of the compute region (30%), or (mtc-replay) "
      "a percentage of the unlimited peak (30%peak)";
  if (text == "none") return b;
  const size_t pct = text.find('%');
  if (pct != std::string::npos) {
    const std::string rest = text.substr(pct + 1);
    double p = 0;
    if ((rest != "" && rest != "peak") || !absl::SimpleAtod(text.substr(0, pct), &p) || !(p > 0 && p <= 100)) {
      return absl::InvalidArgumentError(absl::StrCat("budget '", text, "': a percentage must be in (0, 100]; ", forms));
    }
    b.kind = rest.empty() ? Budget::Kind::kRegionShare : Budget::Kind::kPeakShare;
    b.share = p / 100;
    return b;
  }
  if (!text.empty() && text.find_first_not_of("0123456789.") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("budget '", text, "' has no unit, so it could be bytes or a fraction: ",
                                                   forms));
  }
  absl::StatusOr<size_t> v = parse_bytes(text);
  if (!v.ok() || *v == 0) return absl::InvalidArgumentError(absl::StrCat("budget '", text, "': ", forms));
  b.kind = Budget::Kind::kBytes;
  b.bytes = *v;
  return b;
}

absl::StatusOr<size_t> resolve_budget(const Budget& b, size_t region, size_t peak) {
  size_t bytes = 0;
  switch (b.kind) {
    case Budget::Kind::kNone: return size_t{0};
    case Budget::Kind::kBytes: bytes = b.bytes; break;
    case Budget::Kind::kRegionShare: bytes = static_cast<size_t>(b.share * static_cast<double>(region)); break;
    case Budget::Kind::kPeakShare:
      if (peak == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "budget '", b.text, "': a share of the unlimited peak needs that peak, which only mtc-replay knows (from "
            "its run without a budget): expected bytes (300MiB) or a share of the compute region (30%)"));
      }
      bytes = static_cast<size_t>(b.share * static_cast<double>(peak));
      break;
  }
  if (bytes == 0) return absl::InvalidArgumentError(absl::StrCat("budget '", b.text, "' comes to 0 bytes"));
  if (bytes > region) {
    return absl::InvalidArgumentError(absl::StrCat("budget '", b.text, "' is ", bytes, " bytes (",
                                                   alloc::format_bytes(bytes), "), above the compute region of ", region,
                                                   " bytes (", alloc::format_bytes(region),
                                                   "): expected at most the region, or a larger --memory"));
  }
  return bytes;
}

}  // namespace mtc
