// TraceWriter: writes the op stream an interpreter executes as JSON lines, the format of
// docs/trace-format.md, for mtc-replay and for study. The executor calls it for each
// command it runs (not for DTE's own recomputes and swaps: a trace is the program, not
// one schedule of it).
//
// The file is written to PATH.partial and renamed to PATH by close(), so a run that dies
// leaves no file that looks complete.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mtc/tensor.h"

namespace mtc {

class OpDef;

struct TraceHeader {
  std::string device;           // "cpu", "cuda"
  size_t compute_bytes = 0;     // the compute region m2
  size_t comm_bytes = 0;        // the comm/gradient region m1
  size_t budget_bytes = 0;      // m* of the recorded run (0: none)
  double bytes_per_us = 0;      // gamma measured at start-up (0: not measured)
};

class TraceWriter {
 public:
  // open: creates PATH.partial; fails naming the path and the system's reason.
  static absl::StatusOr<std::shared_ptr<TraceWriter>> open(const std::string& path);
  // in_memory: a writer that keeps its lines in a string (take_text) instead of a file:
  // the runtime's record of its first iteration for tuning DTE's score.
  static std::shared_ptr<TraceWriter> in_memory();
  ~TraceWriter();  // an unclosed trace stays PATH.partial

  void header(const TraceHeader& h);
  void put(uint64_t id, const TensorDesc& d, bool persistent);
  // op: inputs, outputs with their descriptions, measured microseconds, the mask of
  // inputs mutated in place, and whether DTE may recompute the outputs.
  void op(const OpDef& op, std::span<const uint64_t> in, std::span<const uint64_t> out,
          std::span<const TensorDesc> out_descs, double us, uint64_t mutated, bool recomputable,
          std::span<const size_t> scratch);
  void release(uint64_t id);
  void gradient(uint64_t id);
  void read(uint64_t id);
  void mark(const std::string& label, int64_t index);
  // close: flushes and renames PATH.partial to PATH. Idempotent.
  absl::Status close();
  const std::string& path() const { return path_; }
  // take_text: an in-memory writer's lines so far, which it then forgets.
  std::string take_text() { return std::move(text_); }

 private:
  TraceWriter(std::string path, std::FILE* f) : path_(std::move(path)), f_(f) {}
  void line(const std::string& s);
  std::string path_;
  std::FILE* f_;
  bool in_memory_ = false;
  std::string text_;  // in_memory_: the lines written
  bool failed_ = false;
};

}  // namespace mtc
