// ChromeTrace: the Chrome trace event format written as events arrive, one per line.
#include "trace/chrome_trace.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mtc {
namespace {

// json_string: s quoted for JSON (op names are plain, but escape what must be).
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<std::shared_ptr<ChromeTrace>> ChromeTrace::open(const std::string& path, int pid) {
  const std::string partial = path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("chrome trace ", partial, ": ", std::strerror(errno)));
  }
  std::shared_ptr<ChromeTrace> t(new ChromeTrace(path, f, pid));
  std::fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
  t->event(absl::StrFormat(R"({"name":"process_name","ph":"M","pid":%d,"args":{"name":"mtc rank %d"}})", pid, pid));
  t->event(absl::StrFormat(R"({"name":"thread_name","ph":"M","pid":%d,"tid":1,"args":{"name":"compute"}})", pid));
  t->event(absl::StrFormat(R"({"name":"thread_name","ph":"M","pid":%d,"tid":2,"args":{"name":"copy"}})", pid));
  t->event(absl::StrFormat(R"({"name":"thread_name","ph":"M","pid":%d,"tid":3,"args":{"name":"comm"}})", pid));
  return t;
}

ChromeTrace::~ChromeTrace() {
  if (f_ != nullptr) std::fclose(f_);
}

double ChromeTrace::now_us() const {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0_).count();
}

void ChromeTrace::event(const std::string& json) {
  if (f_ == nullptr || failed_) return;
  if (std::fputs(first_ ? "" : ",\n", f_) < 0 || std::fputs(json.c_str(), f_) < 0) failed_ = true;
  first_ = false;
}

void ChromeTrace::span(const std::string& name, const char* cat, Clock::time_point start, double us, int tid) {
  const double ts = std::chrono::duration<double, std::micro>(start - t0_).count();
  event(absl::StrFormat(R"({"name":%s,"cat":"%s","ph":"X","ts":%.3f,"dur":%.3f,"pid":%d,"tid":%d})",
                        json_string(name), cat, ts, us, pid_, tid));
}

void ChromeTrace::counter(const char* name, const char* series, double value) {
  event(absl::StrFormat(R"({"name":"%s","ph":"C","ts":%.3f,"pid":%d,"args":{"%s":%.17g}})", name, now_us(), pid_,
                        series, value));
}

void ChromeTrace::counters(const char* name, std::initializer_list<std::pair<const char*, double>> series) {
  std::string args;
  for (const auto& [key, value] : series) {
    absl::StrAppendFormat(&args, R"(%s"%s":%.17g)", args.empty() ? "" : ",", key, value);
  }
  event(absl::StrFormat(R"({"name":"%s","ph":"C","ts":%.3f,"pid":%d,"args":{%s}})", name, now_us(), pid_, args));
}

void ChromeTrace::instant(const std::string& name) {
  event(absl::StrFormat(R"({"name":%s,"ph":"i","s":"g","ts":%.3f,"pid":%d,"tid":1})", json_string(name), now_us(),
                        pid_));
}

absl::Status ChromeTrace::close() {
  if (f_ == nullptr) return absl::OkStatus();
  std::fputs("\n]}\n", f_);
  const bool write_failed = failed_ || std::ferror(f_) != 0;
  const bool close_failed = std::fclose(f_) != 0;
  f_ = nullptr;
  const std::string partial = path_ + ".partial";
  if (write_failed || close_failed) {
    return absl::DataLossError(absl::StrCat("chrome trace ", partial, ": a write failed (disk full?)"));
  }
  if (std::rename(partial.c_str(), path_.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat("chrome trace: renaming ", partial, " to ", path_, ": ",
                                            std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace mtc
