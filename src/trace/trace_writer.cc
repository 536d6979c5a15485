// Writes JSON-lines traces. See trace_writer.h and docs/trace-format.md.
#include "trace/trace_writer.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "op_def.h"

namespace mtc {
namespace {

// json_string: s quoted and escaped for JSON.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string shape_json(const TensorDesc& d) { return absl::StrCat("[", absl::StrJoin(d.shape, ","), "]"); }

}  // namespace

absl::StatusOr<std::shared_ptr<TraceWriter>> TraceWriter::open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("trace: empty file name");
  const std::string partial = path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("trace: cannot create ", partial, ": ", std::strerror(errno)));
  }
  return std::shared_ptr<TraceWriter>(new TraceWriter(path, f));
}

std::shared_ptr<TraceWriter> TraceWriter::in_memory() {
  std::shared_ptr<TraceWriter> w(new TraceWriter("", nullptr));
  w->in_memory_ = true;
  return w;
}

TraceWriter::~TraceWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void TraceWriter::line(const std::string& s) {
  if (in_memory_) {
    absl::StrAppend(&text_, s, "\n");
    return;
  }
  if (f_ == nullptr) return;
  if (std::fputs(s.c_str(), f_) < 0 || std::fputc('\n', f_) == EOF) failed_ = true;
}

void TraceWriter::header(const TraceHeader& h) {
  line(absl::StrFormat(
      R"({"mtc_trace":1,"device":%s,"compute_bytes":%u,"comm_bytes":%u,"budget_bytes":%u,"bytes_per_us":%.6g})",
      json_string(h.device), h.compute_bytes, h.comm_bytes, h.budget_bytes, h.bytes_per_us));
}

void TraceWriter::put(uint64_t id, const TensorDesc& d, bool persistent) {
  line(absl::StrCat(R"({"e":"put","id":)", id, R"(,"shape":)", shape_json(d), R"(,"dtype":")",
                    dtype_name(d.dtype), "\"", persistent ? R"(,"persistent":true)" : "", "}"));
}

void TraceWriter::op(const OpDef& op, std::span<const uint64_t> in, std::span<const uint64_t> out,
                     std::span<const TensorDesc> out_descs, double us, uint64_t mutated,
                     bool recomputable, std::span<const size_t> scratch) {
  std::string s = absl::StrCat(R"({"e":"op","op":)", json_string(op.name()));
  if (std::string a = op.attrs(); !a.empty()) absl::StrAppend(&s, R"(,"attrs":)", json_string(a));
  absl::StrAppend(&s, R"(,"in":[)", absl::StrJoin(in, ","), R"(],"out":[)", absl::StrJoin(out, ","),
                  R"(],"shapes":[)");
  for (size_t i = 0; i < out_descs.size(); ++i) {
    absl::StrAppend(&s, i ? "," : "", shape_json(out_descs[i]));
  }
  absl::StrAppend(&s, R"(],"dtypes":[)");
  for (size_t i = 0; i < out_descs.size(); ++i) {
    absl::StrAppend(&s, i ? "," : "", "\"", dtype_name(out_descs[i].dtype), "\"");
  }
  absl::StrAppend(&s, "],", absl::StrFormat(R"("us":%.3f)", us));
  if (mutated != 0) {
    absl::StrAppend(&s, R"(,"mutates":[)");
    bool first = true;
    for (size_t i = 0; i < in.size(); ++i) {
      if ((mutated >> i) & 1) {
        absl::StrAppend(&s, first ? "" : ",", i);
        first = false;
      }
    }
    absl::StrAppend(&s, "]");
  }
  if (!recomputable) absl::StrAppend(&s, R"(,"recompute":false)");
  if (!scratch.empty()) absl::StrAppend(&s, R"(,"scratch":[)", absl::StrJoin(scratch, ","), "]");
  line(s + "}");
}

void TraceWriter::release(uint64_t id) { line(absl::StrCat(R"({"e":"release","id":)", id, "}")); }
void TraceWriter::gradient(uint64_t id) { line(absl::StrCat(R"({"e":"gradient","id":)", id, "}")); }
void TraceWriter::read(uint64_t id) { line(absl::StrCat(R"({"e":"read","id":)", id, "}")); }
void TraceWriter::mark(const std::string& label, int64_t index) {
  line(absl::StrCat(R"({"e":"mark","mark":)", json_string(label), R"(,"index":)", index, "}"));
}

absl::Status TraceWriter::close() {
  if (f_ == nullptr) return absl::OkStatus();
  const bool flushed = std::fflush(f_) == 0;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  const std::string partial = path_ + ".partial";
  if (failed_ || !flushed || !closed) {
    return absl::DataLossError(absl::StrCat("trace: writing ", partial, " failed (disk full?); it is left as it is"));
  }
  if (std::rename(partial.c_str(), path_.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat("trace: cannot rename ", partial, " to ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace mtc
