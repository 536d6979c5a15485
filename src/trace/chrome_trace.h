// ChromeTrace: a run's timeline in the Chrome trace event format (JSON: {"traceEvents":
// [...]}), which Perfetto (ui.perfetto.dev) and chrome://tracing open: a span ("ph":"X")
// per op run on the compute thread, recomputations apart by category, DTE's copies (swaps,
// moves) on a copy thread, the collectives on a comm thread, counter tracks
// ("ph":"C") of each region's allocated bytes at every allocation and free, the budget
// m*, DTE's eviction totals and the compute region's tensors by kind ("tensors":
// persistent, transient, swapped, dropped; what mtc-memplot draws), and an instant event
// at each iteration mark. Written to
// PATH.partial, renamed to PATH by close(). The executor feeds it (mtc-train
// --chrome_trace; docs/metrics.md).
#pragma once

#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <utility>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mtc {

class ChromeTrace {
 public:
  using Clock = std::chrono::steady_clock;
  // open: creates PATH.partial; `pid` is the process id the events carry (the rank).
  static absl::StatusOr<std::shared_ptr<ChromeTrace>> open(const std::string& path, int pid);
  ~ChromeTrace();  // an unclosed trace stays PATH.partial

  // span: `name` ran from `start` for `us` microseconds on thread `tid`: 1 compute (cat
  // "op" or "recompute"), 2 copy (DTE's swaps and moves, cat "copy"), 3 comm (the
  // collectives, cat "comm", as they ran on the communicator's queue).
  void span(const std::string& name, const char* cat, Clock::time_point start, double us, int tid = 1);
  // counter: track `name`'s series `series` is `value` from now on.
  void counter(const char* name, const char* series, double value);
  // counters: several series of track `name` at once (one event).
  void counters(const char* name, std::initializer_list<std::pair<const char*, double>> series);
  // instant: a mark across the whole timeline (an iteration's start).
  void instant(const std::string& name);
  // close: ends the JSON and renames PATH.partial to PATH; later events are dropped.
  // Idempotent.
  absl::Status close();
  const std::string& path() const { return path_; }

 private:
  ChromeTrace(std::string path, std::FILE* f, int pid) : path_(std::move(path)), f_(f), pid_(pid) {}
  double now_us() const;
  void event(const std::string& json);
  std::string path_;
  std::FILE* f_;
  int pid_;
  Clock::time_point t0_ = Clock::now();
  bool first_ = true;
  bool failed_ = false;
};

}  // namespace mtc
