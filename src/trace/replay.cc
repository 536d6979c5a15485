// Trace loading and replay on a virtual device. See replay.h and docs/trace-format.md.
#include "trace/replay.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "device.h"
#include "executor.h"
#include "nlohmann/json.hpp"
#include "op_def.h"

namespace mtc {
namespace {

using json = nlohmann::json;

// ReplayOp: an op as a trace recorded it. Shape inference answers with the recorded
// outputs; a simulating executor charges the recorded time.
class ReplayOp final : public OpDef {
 public:
  ReplayOp(std::shared_ptr<const std::string> name, std::string attrs, std::vector<TensorDesc> outs,
           double us, uint64_t mutated, std::vector<size_t> scratch)
      : name_(std::move(name)), schema_(name_->c_str(), OpSchema::Unlisted{}), attrs_(std::move(attrs)),
        outs_(std::move(outs)), us_(us), mutated_(mutated), scratch_(std::move(scratch)) {}
  const OpSchema& schema() const override { return schema_; }
  absl::Status infer(std::span<const TensorDesc>, std::vector<TensorDesc>& out) const override {
    out = outs_;
    return absl::OkStatus();
  }
  int num_outputs() const override { return static_cast<int>(outs_.size()); }
  uint64_t mutates_inputs() const override { return mutated_; }
  std::string attrs() const override { return attrs_; }
  double recorded_us() const override { return us_; }
  std::span<const size_t> recorded_scratch() const override { return scratch_; }
  const std::vector<TensorDesc>& outputs() const { return outs_; }
  const std::shared_ptr<const std::string>& shared_name() const { return name_; }

 private:
  std::shared_ptr<const std::string> name_;  // the schema points into it
  OpSchema schema_;
  std::string attrs_;
  std::vector<TensorDesc> outs_;
  double us_;
  uint64_t mutated_;
  std::vector<size_t> scratch_;
};

// VirtualDevice: regions of the recorded sizes at made-up addresses; nothing is copied.
class VirtualDevice final : public Device {
 public:
  VirtualDevice(size_t comm, size_t compute) : Device(DeviceType::kCPU, 0, 1) {
    // Never dereferenced: a simulating executor neither runs kernels nor copies.
    init_regions(reinterpret_cast<std::byte*>(uintptr_t{1} << 40), comm, compute);
  }
  absl::Status copy_to_device(void*, const void*, size_t) override { return absl::OkStatus(); }
  absl::Status copy_to_host(void*, const void*, size_t) override { return absl::OkStatus(); }
  absl::Status copy_on_device(void*, const void*, size_t) override { return absl::OkStatus(); }
  absl::Status synchronize() override { return absl::OkStatus(); }
  std::string describe() const override { return "virtual (trace replay)"; }
};

absl::StatusOr<TensorDesc> desc_of(const json& shape, const json& dtype) {
  if (!shape.is_array()) return absl::InvalidArgumentError("\"shape\" must be an array of sizes");
  TensorDesc d;
  for (const json& v : shape) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return absl::InvalidArgumentError("\"shape\" must hold non-negative integers");
    }
    d.shape.push_back(v.get<int64_t>());
  }
  const std::string t = dtype.is_string() ? dtype.get<std::string>() : "";
  if (t == "f32") {
    d.dtype = DType::kF32;
  } else if (t == "i32") {
    d.dtype = DType::kI32;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("dtype '", t, "': expected f32 or i32"));
  }
  return d;
}

absl::StatusOr<std::vector<uint64_t>> ids_of(const json& j, const char* field) {
  std::vector<uint64_t> out;
  if (!j.contains(field) || !j[field].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" must be an array of tensor ids"));
  }
  for (const json& v : j[field]) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" must hold positive tensor ids"));
    }
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

uint64_t id_field(const json& j, const char* field) {
  return j.contains(field) && j[field].is_number_unsigned() ? j[field].get<uint64_t>() : 0;
}

absl::StatusOr<TraceEvent> parse_event(const json& j,
                                       absl::flat_hash_map<std::string, std::shared_ptr<const std::string>>& names) {
  if (!j.is_object() || !j.contains("e") || !j["e"].is_string()) {
    return absl::InvalidArgumentError("expected an object with an \"e\" field naming the event");
  }
  const std::string e = j["e"].get<std::string>();
  TraceEvent ev;
  auto need_id = [&](const char* f) -> absl::StatusOr<uint64_t> {
    const uint64_t v = id_field(j, f);
    if (v == 0) return absl::InvalidArgumentError(absl::StrCat("event ", e, ": \"", f, "\" must be a positive tensor id"));
    return v;
  };
  if (e == "put") {
    ev.kind = TraceEvent::Kind::kPut;
    MTC_ASSIGN_OR_RETURN(ev.id, need_id("id"));
    MTC_ASSIGN_OR_RETURN(ev.desc, desc_of(j.value("shape", json()), j.value("dtype", json("f32"))));
    ev.persistent = j.value("persistent", false);
  } else if (e == "op") {
    ev.kind = TraceEvent::Kind::kOp;
    if (!j.contains("op") || !j["op"].is_string()) return absl::InvalidArgumentError("event op: \"op\" must name the op");
    MTC_ASSIGN_OR_RETURN(ev.in, ids_of(j, "in"));
    MTC_ASSIGN_OR_RETURN(ev.out, ids_of(j, "out"));
    const json shapes = j.value("shapes", json::array());
    const json dtypes = j.value("dtypes", json::array());
    if (!shapes.is_array() || shapes.size() != ev.out.size()) {
      return absl::InvalidArgumentError("event op: \"shapes\" must hold one shape per output");
    }
    std::vector<TensorDesc> outs;
    for (size_t i = 0; i < shapes.size(); ++i) {
      MTC_ASSIGN_OR_RETURN(TensorDesc d, desc_of(shapes[i], dtypes.is_array() && i < dtypes.size() ? dtypes[i] : json("f32")));
      outs.push_back(std::move(d));
    }
    if (!j.contains("us") || !j["us"].is_number() || j["us"].get<double>() < 0) {
      return absl::InvalidArgumentError("event op: \"us\" must be the op's time in microseconds (>= 0)");
    }
    uint64_t mutated = 0;
    for (const json& m : j.value("mutates", json::array())) {
      if (!m.is_number_unsigned() || m.get<uint64_t>() >= ev.in.size() || m.get<uint64_t>() >= 64) {
        return absl::InvalidArgumentError("event op: \"mutates\" must hold indexes of inputs");
      }
      mutated |= uint64_t{1} << m.get<uint64_t>();
    }
    for (const json& a : j.value("aliases", json::array())) {
      if (!a.is_array() || a.size() != 2 || !a[0].is_number_unsigned() || !a[1].is_number_unsigned() ||
          a[0].get<size_t>() >= ev.out.size() || a[1].get<size_t>() >= ev.in.size()) {
        return absl::InvalidArgumentError("event op: \"aliases\" must hold [output index, input index] pairs");
      }
      ev.aliases.emplace_back(a[0].get<int>(), a[1].get<int>());
    }
    std::vector<size_t> scratch;
    for (const json& b : j.value("scratch", json::array())) {
      if (!b.is_number_unsigned()) return absl::InvalidArgumentError("event op: \"scratch\" must hold byte counts");
      scratch.push_back(b.get<size_t>());
    }
    auto& name = names[j["op"].get<std::string>()];
    if (!name) name = std::make_shared<const std::string>(j["op"].get<std::string>());
    auto op = std::make_shared<ReplayOp>(name, j.value("attrs", std::string()), std::move(outs),
                                         j["us"].get<double>(), mutated, std::move(scratch));
    ev.recomputable = j.value("recompute", true);
    ev.op = std::move(op);
  } else if (e == "release") {
    ev.kind = TraceEvent::Kind::kRelease;
    MTC_ASSIGN_OR_RETURN(ev.id, need_id("id"));
  } else if (e == "share") {
    ev.kind = TraceEvent::Kind::kShare;
    MTC_ASSIGN_OR_RETURN(ev.id, need_id("id"));
    MTC_ASSIGN_OR_RETURN(ev.of, need_id("of"));
  } else if (e == "gradient") {
    ev.kind = TraceEvent::Kind::kGradient;
    MTC_ASSIGN_OR_RETURN(ev.id, need_id("id"));
  } else if (e == "read") {
    ev.kind = TraceEvent::Kind::kRead;
    MTC_ASSIGN_OR_RETURN(ev.id, need_id("id"));
  } else if (e == "mark") {
    ev.kind = TraceEvent::Kind::kMark;
    if (!j.contains("mark") || !j["mark"].is_string()) return absl::InvalidArgumentError("event mark: \"mark\" must be a label");
    ev.mark = j["mark"].get<std::string>();
    ev.index = j.value("index", int64_t{0});
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown event '", e, "': expected put, op, release, share, gradient, read or mark"));
  }
  return ev;
}

// uses, makes: how an error names what an event does with a tensor id.
std::string uses(const TraceEvent& e) {
  switch (e.kind) {
    case TraceEvent::Kind::kOp:
      return absl::StrCat("op '", e.op->name(), "' reads");
    case TraceEvent::Kind::kRelease:
      return "release of";
    case TraceEvent::Kind::kShare:
      return "share of";
    case TraceEvent::Kind::kGradient:
      return "gradient of";
    case TraceEvent::Kind::kRead:
      return "read of";
    default:
      return "event uses";
  }
}
std::string makes(const TraceEvent& e) {
  switch (e.kind) {
    case TraceEvent::Kind::kOp:
      return absl::StrCat("op '", e.op->name(), "' makes");
    case TraceEvent::Kind::kShare:
      return "share makes";
    default:
      return "put makes";
  }
}

// HandleCheck: which tensor ids are live after each line, the same rules as replay()'s
// handles, so that load_trace names the line of an id no earlier line made.
class HandleCheck {
 public:
  absl::Status apply(const TraceEvent& e) {
    switch (e.kind) {
      case TraceEvent::Kind::kPut:
        return make(e, e.id);
      case TraceEvent::Kind::kOp:
        for (uint64_t id : e.in) MTC_RETURN_IF_ERROR(use(e, id));
        for (uint64_t id : e.out) MTC_RETURN_IF_ERROR(make(e, id));
        return absl::OkStatus();
      case TraceEvent::Kind::kShare:
        MTC_RETURN_IF_ERROR(use(e, e.of));
        return make(e, e.id);
      case TraceEvent::Kind::kRelease:
        MTC_RETURN_IF_ERROR(use(e, e.id));
        live_.erase(e.id);
        released_[e.id] = e.line;
        return absl::OkStatus();
      case TraceEvent::Kind::kGradient:
      case TraceEvent::Kind::kRead:
        return use(e, e.id);
      case TraceEvent::Kind::kMark:
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

 private:
  absl::Status use(const TraceEvent& e, uint64_t id) const {
    if (live_.contains(id)) return absl::OkStatus();
    auto r = released_.find(id);
    return absl::InvalidArgumentError(absl::StrCat(
        uses(e), " tensor ", id, ", which ",
        r == released_.end() ? "no earlier line made" : absl::StrCat("line ", r->second, " released"),
        ": expected the id of a tensor made (put, op output, share) and not yet released"));
  }
  absl::Status make(const TraceEvent& e, uint64_t id) {
    auto [it, fresh] = live_.try_emplace(id, e.line);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat(makes(e), " tensor ", id, ", which line ", it->second,
                                                     " made and no line has released: expected a new id"));
    }
    released_.erase(id);
    return absl::OkStatus();
  }
  absl::flat_hash_map<uint64_t, int64_t> live_;      // id -> the line that made it
  absl::flat_hash_map<uint64_t, int64_t> released_;  // id -> the line that released it last
};

// cut_short_reason: why the trace's last iteration (the events from the last of
// `iteration_marks` on) counts as incomplete, or "" (docs/trace-format.md, "A trace cut
// short"). `last_line` is the file's last line; `ends_in_newline`, whether it has one.
std::string cut_short_reason(const std::string& path, const std::vector<TraceEvent>& events,
                             const std::vector<size_t>& iteration_marks, bool ends_in_newline,
                             int64_t last_line) {
  if (!ends_in_newline) {
    return absl::StrCat("the file ends inside line ", last_line, ", before its newline");
  }
  if (absl::EndsWith(path, ".partial")) {
    return "a .partial file is a trace its run never closed";
  }
  // The marks other than "iteration" that every earlier iteration has, and the last lacks.
  auto labels = [&](size_t k) {
    std::set<std::string> out;
    const size_t end = k + 1 < iteration_marks.size() ? iteration_marks[k + 1] : events.size();
    for (size_t i = iteration_marks[k] + 1; i < end; ++i) {
      if (events[i].kind == TraceEvent::Kind::kMark) out.insert(events[i].mark);
    }
    return out;
  };
  const size_t last = iteration_marks.size() - 1;
  if (last == 0) return "";
  std::set<std::string> required = labels(0);
  for (size_t k = 1; k < last && !required.empty(); ++k) {
    std::set<std::string> both;
    const std::set<std::string> here = labels(k);
    std::set_intersection(required.begin(), required.end(), here.begin(), here.end(),
                          std::inserter(both, both.begin()));
    required = std::move(both);
  }
  std::vector<std::string> missing;
  const std::set<std::string> have = labels(last);
  for (const std::string& l : required) {
    if (!have.contains(l)) missing.push_back(absl::StrCat("'", l, "'"));
  }
  if (missing.empty()) return "";
  return absl::StrCat("it has no ", absl::StrJoin(missing, ", "), " mark, which every earlier iteration has");
}

}  // namespace

absl::StatusOr<Trace> load_trace(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace ", path, ": is a directory, expected a trace file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("trace ", path, ": cannot open it"));
  return parse_trace(in, path);
}

absl::StatusOr<Trace> parse_trace(std::istream& in, const std::string& path) {
  Trace t;
  absl::flat_hash_map<std::string, std::shared_ptr<const std::string>> names;
  HandleCheck handles;
  std::vector<size_t> iteration_marks;  // indexes into t.events
  std::string line;
  int64_t n = 0;
  bool have_header = false;
  bool ends_in_newline = true;  // of the last line read
  while (std::getline(in, line)) {
    ++n;
    ends_in_newline = !in.eof();  // getline stops at the end of the file only without one
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("trace ", path, " line ", n, ": ", why));
    };
    if (j.is_discarded()) {
      if (!ends_in_newline) {
        return bad(
            "the trace is cut short: the file ends inside this line, which is not valid JSON (as a run "
            "killed while writing leaves it); expected whole lines, each ending in a newline");
      }
      return bad("not valid JSON");
    }
    if (!have_header) {
      have_header = true;
      if (!j.is_object() || !j.contains("mtc_trace")) {
        return bad("expected the header {\"mtc_trace\":1, ...} (is this an mtc trace?)");
      }
      if (!j["mtc_trace"].is_number_integer()) return bad("\"mtc_trace\" must be the format version, 1");
      if (j["mtc_trace"].get<int64_t>() != 1) {
        return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": format version ",
                                                       j["mtc_trace"].get<int64_t>(),
                                                       ", this mtc reads version 1"));
      }
      t.header.device = j.value("device", std::string("?"));
      t.header.compute_bytes = j.value("compute_bytes", size_t{0});
      t.header.comm_bytes = j.value("comm_bytes", size_t{0});
      t.header.budget_bytes = j.value("budget_bytes", size_t{0});
      t.header.bytes_per_us = j.value("bytes_per_us", 0.0);
      if (t.header.compute_bytes == 0) return bad("the header's \"compute_bytes\" must be the compute region's size");
      continue;
    }
    absl::StatusOr<TraceEvent> ev = parse_event(j, names);
    if (!ev.ok()) return bad(std::string(ev.status().message()));
    ev->line = n;
    if (absl::Status s = handles.apply(*ev); !s.ok()) return bad(std::string(s.message()));
    if (ev->kind == TraceEvent::Kind::kMark && ev->mark == "iteration")
      iteration_marks.push_back(t.events.size());
    t.events.push_back(std::move(*ev));
  }
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": the file is empty"));
  t.iterations = static_cast<int>(iteration_marks.size());
  if (!iteration_marks.empty()) {
    t.cut_short = cut_short_reason(path, t.events, iteration_marks, ends_in_newline, n);
    if (!t.cut_short.empty()) {
      t.last_iteration_complete = false;
      t.cut_iteration = t.iterations;
      --t.iterations;
    }
  }
  return t;
}

namespace {

// replay_events: replay() without the tuning, over iterations 1..last (0: all of them).
absl::StatusOr<ReplayResult> replay_events(const Trace& trace, const EvictOptions& evict, int skip,
                                           size_t region_bytes, int last) {
  VirtualDevice device(trace.header.comm_bytes, region_bytes > 0 ? region_bytes : trace.header.compute_bytes);
  ExecutorOptions xo;
  xo.evict = evict;
  xo.simulate = true;
  xo.bytes_per_us = trace.header.bytes_per_us > 0 ? trace.header.bytes_per_us : 1e4;
  Executor ex(device, xo);
  ReplayResult res;
  res.budget_bytes = evict.budget_bytes;
  res.region_bytes = device.compute_region().capacity();

  // Handles: a trace id names a tensor of the executor; "share" and aliasing outputs add
  // handles to an existing one, which is released when its last handle is.
  absl::flat_hash_map<uint64_t, uint64_t> tensor_of;  // trace id -> executor id
  absl::flat_hash_map<uint64_t, int> handles;         // executor id -> live handles
  // Errors name the event's line (load_trace finds these first in a file it read).
  auto at = [](const TraceEvent& e) {
    return e.line > 0 ? absl::StrCat("line ", e.line, ": ") : std::string();
  };
  auto lookup = [&](const TraceEvent& e, uint64_t id) -> absl::StatusOr<uint64_t> {
    auto it = tensor_of.find(id);
    if (it == tensor_of.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at(e), uses(e), " tensor ", id, ", which no earlier event made or an event released"));
    }
    return it->second;
  };
  auto add_handle = [&](const TraceEvent& e, uint64_t id, uint64_t tensor) -> absl::Status {
    if (!tensor_of.emplace(id, tensor).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(at(e), makes(e), " tensor ", id, ", which is live already"));
    }
    ++handles[tensor];
    return absl::OkStatus();
  };
  EvictStats start;
  bool counting = skip == 0;
  int iteration = 0;
  auto stop = [&](const absl::Status& s) {
    res.out_of_memory = s.code() == absl::StatusCode::kResourceExhausted;
    res.capped = s.code() == absl::StatusCode::kAborted;
    res.error = std::string(s.message());
  };
  // A last iteration the trace ends inside is not run: stop at its mark.
  auto is_iteration = [](const TraceEvent& e) {
    return e.kind == TraceEvent::Kind::kMark && e.mark == "iteration";
  };
  size_t stop_at = trace.events.size();
  if (!trace.last_iteration_complete) {
    while (stop_at > 0 && !is_iteration(trace.events[stop_at - 1])) --stop_at;
    if (stop_at > 0) --stop_at;
  }
  if (last > 0) {  // stop at iteration last + 1's mark
    int marks = 0;
    for (size_t k = 0; k < stop_at; ++k) {
      if (is_iteration(trace.events[k]) && ++marks == last + 1) {
        stop_at = k;
        break;
      }
    }
  }
  for (size_t k = 0; k < stop_at; ++k) {
    const TraceEvent& e = trace.events[k];
    absl::Status s;
    switch (e.kind) {
      case TraceEvent::Kind::kPut: {
        MTC_RETURN_IF_ERROR(add_handle(e, e.id, e.id));
        Put p{e.id, e.desc, {}, e.persistent};
        s = ex.execute(p);
        break;
      }
      case TraceEvent::Kind::kOp: {
        ApplyOp c;
        c.op = e.op;
        c.recomputable = e.recomputable;
        for (uint64_t in : e.in) {
          MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e, in));
          c.inputs.push_back(t);
        }
        const auto& outs = static_cast<const ReplayOp&>(*e.op).outputs();
        for (size_t i = 0; i < e.out.size(); ++i) {
          auto alias = std::find_if(e.aliases.begin(), e.aliases.end(), [&](auto& a) { return a.first == static_cast<int>(i); });
          if (alias != e.aliases.end()) {  // a view: another handle to the input's storage
            MTC_RETURN_IF_ERROR(add_handle(e, e.out[i], c.inputs[alias->second]));
            continue;
          }
          MTC_RETURN_IF_ERROR(add_handle(e, e.out[i], e.out[i]));
          c.outputs.push_back(e.out[i]);
          c.output_descs.push_back(outs[i]);
        }
        if (c.outputs.size() != e.out.size()) {
          // With aliased outputs the op's outputs are a subset; give it a matching op.
          std::vector<TensorDesc> kept(c.output_descs.begin(), c.output_descs.end());
          auto* op = static_cast<const ReplayOp*>(e.op.get());
          c.op = std::make_shared<ReplayOp>(std::make_shared<const std::string>(op->name()), op->attrs(),
                                            std::move(kept), op->recorded_us(), op->mutates_inputs(),
                                            std::vector<size_t>(op->recorded_scratch().begin(), op->recorded_scratch().end()));
        }
        s = ex.execute(c);
        break;
      }
      case TraceEvent::Kind::kShare: {
        MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e, e.of));
        MTC_RETURN_IF_ERROR(add_handle(e, e.id, t));
        break;
      }
      case TraceEvent::Kind::kRelease: {
        MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e, e.id));
        tensor_of.erase(e.id);
        if (--handles[t] == 0) {
          handles.erase(t);
          Del d{t};
          s = ex.execute(d);
        }
        break;
      }
      case TraceEvent::Kind::kGradient: {
        MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e, e.id));
        MakeGradient g{t};
        s = ex.execute(g);
        break;
      }
      case TraceEvent::Kind::kRead: {
        MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e, e.id));
        auto r = ex.records().find(t);
        GetValue g{t, nullptr, r == ex.records().end() ? 0 : r->second.desc.bytes(), nullptr};
        s = ex.execute(g);
        break;
      }
      case TraceEvent::Kind::kMark:
        if (e.mark == "iteration") {
          ++iteration;
          if (iteration == skip + 1) {
            counting = true;
            start = ex.evict_stats();
          }
          if (counting) ++res.counted_iterations;
        }
        break;
    }
    if (!s.ok()) {
      stop(s);
      break;
    }
  }
  const EvictStats end = ex.evict_stats();
  if (!counting) start = end;  // too few iterations: nothing counted
  res.compute_us = end.compute_us - start.compute_us;
  res.recompute_us = end.recompute_us - start.recompute_us;
  res.swap_us = end.swap_us - start.swap_us;
  res.search_us = end.search_us - start.search_us;
  res.move_us = end.move_us - start.move_us;
  // Every figure of the counted iterations alone.
  res.stats = end;
  res.stats.ops -= start.ops;
  res.stats.compute_us -= start.compute_us;
  res.stats.evict_drop -= start.evict_drop;
  res.stats.evict_swap -= start.evict_swap;
  res.stats.evict_fragmented -= start.evict_fragmented;
  res.stats.recomputes -= start.recomputes;
  res.stats.recompute_us -= start.recompute_us;
  res.stats.swapped_out_bytes -= start.swapped_out_bytes;
  res.stats.swapped_in_bytes -= start.swapped_in_bytes;
  res.stats.swap_us -= start.swap_us;
  res.stats.searches -= start.searches;
  res.stats.search_us -= start.search_us;
  res.stats.compactions -= start.compactions;
  res.stats.moved_bytes -= start.moved_bytes;
  res.stats.move_us -= start.move_us;
  res.peak_bytes = device.compute_region().stats().peak_allocated;
  res.peak_pinned_bytes = ex.pinned_bytes().peak;
  res.total_compute_us = end.compute_us;
  return res;
}

}  // namespace

// Note [Tuning the score]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// mtc's score differs from DTR's by two terms, beta^ret (a tensor recomputed ret times
// scores beta^ret higher) and the free bytes around a candidate when a request is
// fragmented. Replayed over nine models at 50-10% of their peaks (docs/dte.md, "At the low
// end"), each term helps some models and hurts others by as much, with no pattern a fixed
// setting follows: in drop mode beta 1.25 took ResNet-56 at 15% from 2.18x to 2.06x but
// GoogLeNet at 30% from 1.33x to 1.36x, and ran ViT-tiny at 20% out of memory where DTR's
// score trains (2.37x); without the factor those cells were DTR's figures exactly and
// ResNet-56 lost its gain. A training iteration repeats, and the runtime can replay one in
// a fraction of a second on the engine it runs. So it does: it records its first
// kScoreTuneIterations iterations in memory, replays them under each candidate score at
// its own budget and region, counting the last (the first is unlike the rest: the
// optimizer's state appears at its end), and keeps the one that replayed least overhead,
// by a margin. The candidates are the given score, the same without beta^ret, DTR's
// weighting (neither term), which in drop mode scores exactly as the dtr policy does, and
// with swaps allowed the dtr policy itself (it drops what it can where mtc's score takes
// the cheaper of a drop and a swap: DenseNet-121 at 50%, mode both, replayed 1.096x under
// every mtc candidate and under dtr 1.089x).
//
// One replay foretold too little. Eviction is chaotic: a few percent more or less on one
// op's time changes which tensor goes, and the run after it. Replayed on copies of the
// trace with every op time scaled by up to ±10% (jittered), the same score took a ResNet-32
// at 30% in drop mode to 1.245x in four copies and to 1.325x in the fifth, against DTR's
// 1.27-1.30x in all five; the recorded times showed the 1.245x, and the third and fourth
// iterations then ran at 1.33x against DTR's 1.27x. So each candidate replays the tuning
// iterations on the recorded times and on kTuneVariants jittered copies. A candidate
// displaces the one kept when its mean overhead is more than kTuneMargin below and it has
// less overhead in every copy but at most one, the copies paired (keep_candidate): a gain
// that most copies do not show counts for nothing. A candidate that ran out of memory or
// passed the cap in more copies than another is never kept. The ResNet-32 above is still
// kept (it loses in one copy, and its mean is 2.2% below DTR's). Measured against the
// single replay, against a win required in all five copies and against a 5% margin on the
// mean, on three recordings of the nine models and three jittered copies of the first
// (docs/dte.md, "At the low end"): this rule was at least as good as each of them on every
// verdict of the three recordings. Where fragmentation binds (the region as the limit,
// drop mode) the copies spread wider than the candidates differ (ViT-tiny at 30%:
// 1.41-1.90x under DTR's weighting), and the later iterations can fall either way.
// With swaps allowed, DTR's weighting comes before the same without beta^ret that counts
// free neighbours, so the latter is kept unless DTR's weighting beats it: the two differ
// only where a request finds no block large enough, that is with the region as the
// limit, and there the free neighbours helped in the later iterations more often than
// the tuning iterations showed. Replayed on two recordings of the nine models, mode both,
// region limit (docs/dte.md, "At the low end"): ResNet-32 at 15% 1.443x and 1.430x
// against 1.523x and 1.468x (the budget's 1.424x and 1.412x), 25 cells lower and 6 higher
// (by at most 0.013), and no verdict lost. In drop mode the same order put ten region
// cells above the dtr policy (four and six: by 0.2-1.4%, and the Tree-LSTM at 50% by
// 7.8%), so there DTR's weighting stays last.
// mtc-replay does the same over its warm-up iterations (--skip), and counts the
// iterations after them.

// kTuneMargin: how much less mean overhead a candidate must replay than the one kept
// after it. The same score's overhead moves by a few percent from one iteration
// to the next (GPT, 20% of its peak, drop mode: 1.429 in the second iteration and 1.437 in
// the third and fourth against DTR's 1.431 and 1.433), so a smaller gain on the tuning
// iteration foretells nothing.
constexpr double kTuneMargin = 0.02;

int TunedCandidate::failed() const {
  return static_cast<int>(std::count_if(replays.begin(), replays.end(), [](const ReplayResult& r) { return r.failed(); }));
}

double TunedCandidate::mean_overhead() const {
  double sum = 0;
  int n = 0;
  for (const ReplayResult& r : replays) {
    if (r.failed()) continue;
    sum += r.overhead();
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

size_t keep_candidate(std::span<const TunedCandidate> tried) {
  if (tried.empty()) return 0;
  int fewest = INT_MAX;
  for (const TunedCandidate& c : tried) fewest = std::min(fewest, c.failed());
  auto competes = [&](const TunedCandidate& c) {
    return c.failed() == fewest && static_cast<size_t>(fewest) < c.replays.size();
  };
  // a beats b: a mean overhead more than the margin below b's, and less overhead than b in
  // every copy but at most one, paired by copy (a copy where only b failed counts as a
  // win, one where both did for neither, and one where only a failed disqualifies it).
  auto beats = [](const TunedCandidate& a, const TunedCandidate& b) {
    int losses = 0;
    for (size_t v = 0; v < a.replays.size() && v < b.replays.size(); ++v) {
      const ReplayResult &x = a.replays[v], &y = b.replays[v];
      if (x.failed() && !y.failed()) return false;
      if (!x.failed() && !y.failed() && !(x.overhead() < y.overhead())) ++losses;
    }
    return losses <= 1 && a.mean_overhead() * (1 + kTuneMargin) < b.mean_overhead();
  };
  // From the last candidate to the first: each replaces the one kept so far only by
  // beating it.
  size_t kept = tried.size();
  for (size_t i = tried.size(); i-- > 0;) {
    if (!competes(tried[i])) continue;
    if (kept == tried.size() || beats(tried[i], tried[kept])) kept = i;
  }
  return kept;
}

namespace {
// The factor per recompute a score applies: 1 without beta^ret.
double beta_of(const EvictOptions& o) { return o.beta_max_power == 0 ? 1.0 : o.beta; }
}  // namespace

std::vector<EvictOptions> score_candidates(const EvictOptions& given) {
  std::vector<EvictOptions> c{given};
  auto add = [&](double beta, bool room) {
    EvictOptions o = given;
    o.beta = beta;
    o.free_room = room;
    auto same = [&](const EvictOptions& x) { return x.free_room == room && beta_of(x) == beta_of(o); };
    if (std::none_of(c.begin(), c.end(), same)) c.push_back(o);
  };
  // The later of the two is kept unless the earlier beats it (keep_candidate): with swaps
  // allowed, the one that counts free neighbours (Note [Tuning the score]).
  if (given.mode == EvictMode::kDrop) {
    add(1.0, given.free_room);
    add(1.0, false);
  } else {
    add(1.0, false);
    add(1.0, given.free_room);
  }
  if (given.mode != EvictMode::kDrop) {
    // In drop mode DTR's weighting is the dtr policy; with swaps allowed the dtr policy
    // still drops whatever it can, where mtc's score takes the cheaper of the two.
    EvictOptions o = given;
    o.policy = EvictPolicy::kDtr;
    c.push_back(o);
  }
  for (EvictOptions& o : c) o.tune = false;
  return c;
}

Trace jittered(const Trace& trace, double amp, uint64_t seed) {
  Trace t = trace;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (TraceEvent& e : t.events) {
    if (e.kind != TraceEvent::Kind::kOp) continue;
    const auto& op = static_cast<const ReplayOp&>(*e.op);
    e.op = std::make_shared<ReplayOp>(op.shared_name(), op.attrs(), op.outputs(),
                                      op.recorded_us() * (1 + amp * u(rng)), op.mutates_inputs(),
                                      std::vector<size_t>(op.recorded_scratch().begin(), op.recorded_scratch().end()));
  }
  return t;
}

absl::StatusOr<ScoreTuning> tune_score(const Trace& trace, const EvictOptions& given, int iterations,
                                       size_t region_bytes) {
  ScoreTuning t;
  t.chosen = given;
  t.chosen.tune = false;
  std::vector<Trace> copies;
  for (int v = 1; v <= kTuneVariants; ++v) copies.push_back(jittered(trace, kTuneJitter, static_cast<uint64_t>(v)));
  for (const EvictOptions& o : score_candidates(given)) {
    TunedCandidate c{o, {}};
    for (int v = 0; v <= kTuneVariants; ++v) {
      MTC_ASSIGN_OR_RETURN(ReplayResult r, replay_events(v == 0 ? trace : copies[v - 1], o,
                                                         /*skip=*/iterations - 1, region_bytes, iterations));
      c.replays.push_back(std::move(r));
    }
    t.tried.push_back(std::move(c));
  }
  if (const size_t k = keep_candidate(t.tried); k < t.tried.size()) t.chosen = t.tried[k].score;
  return t;
}

std::string describe_score(const EvictOptions& o) {
  if (o.policy != EvictPolicy::kMtc) return evict_policy_name(o.policy);
  const bool factor = beta_of(o) != 1.0;
  if (!factor && !o.free_room) return "DTR's weighting (no beta^ret, own bytes only)";
  return absl::StrCat(factor ? absl::StrCat("beta ", o.beta, "^min(ret, ", o.beta_max_power, ")") : "no beta^ret",
                      o.free_room ? ", free neighbours counted" : ", own bytes only");
}

std::string describe_tuning(const ScoreTuning& t, double sec) {
  std::vector<std::string> tried;
  for (const TunedCandidate& c : t.tried) {
    const int failed = c.failed(), n = static_cast<int>(c.replays.size());
    std::string what = failed == n ? "oom/cap" : absl::StrFormat("%.3fx", c.mean_overhead());
    if (failed > 0 && failed < n) absl::StrAppend(&what, " (", failed, " of ", n, " oom/cap)");
    tried.push_back(absl::StrCat(describe_score(c.score), ": ", what));
  }
  return absl::StrFormat("kept %s in %.3f s (replayed, mean of %d: %s)", describe_score(t.chosen), sec,
                         1 + kTuneVariants, absl::StrJoin(tried, "; "));
}

absl::StatusOr<ReplayResult> replay(const Trace& trace, const EvictOptions& evict, int skip, size_t region_bytes) {
  if (!tunes_score(evict) || skip < 1) {
    return replay_events(trace, evict, skip, region_bytes, 0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  MTC_ASSIGN_OR_RETURN(ScoreTuning t, tune_score(trace, evict, skip, region_bytes));
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MTC_ASSIGN_OR_RETURN(ReplayResult r, replay_events(trace, t.chosen, skip, region_bytes, 0));
  r.score = t.chosen;
  r.tuned = true;
  r.tuning = describe_tuning(t, sec);
  return r;
}

}  // namespace mtc
