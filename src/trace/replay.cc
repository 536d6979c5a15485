// Trace loading and replay on a virtual device. See replay.h and docs/trace-format.md.
#include "trace/replay.h"

#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
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

}  // namespace

absl::StatusOr<Trace> load_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("trace ", path, ": cannot open it"));
  Trace t;
  absl::flat_hash_map<std::string, std::shared_ptr<const std::string>> names;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("trace ", path, " line ", n, ": ", why));
    };
    if (j.is_discarded()) return bad("not valid JSON");
    if (n == 1) {
      if (!j.is_object() || j.value("mtc_trace", 0) != 1) {
        return bad("expected the header {\"mtc_trace\":1, ...} (is this an mtc trace?)");
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
    if (ev->kind == TraceEvent::Kind::kMark && ev->mark == "iteration") ++t.iterations;
    t.events.push_back(std::move(*ev));
  }
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat("trace ", path, ": the file is empty"));
  return t;
}

absl::StatusOr<ReplayResult> replay(const Trace& trace, const EvictOptions& evict, int skip) {
  VirtualDevice device(trace.header.comm_bytes, trace.header.compute_bytes);
  ExecutorOptions xo;
  xo.evict = evict;
  xo.simulate = true;
  xo.bytes_per_us = trace.header.bytes_per_us > 0 ? trace.header.bytes_per_us : 1e4;
  Executor ex(device, xo);
  ReplayResult res;
  res.budget_bytes = evict.budget_bytes;

  // Handles: a trace id names a tensor of the executor; "share" and aliasing outputs add
  // handles to an existing one, which is released when its last handle is.
  absl::flat_hash_map<uint64_t, uint64_t> tensor_of;  // trace id -> executor id
  absl::flat_hash_map<uint64_t, int> handles;         // executor id -> live handles
  auto lookup = [&](uint64_t id) -> absl::StatusOr<uint64_t> {
    auto it = tensor_of.find(id);
    if (it == tensor_of.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the trace uses tensor ", id, " before making it or after releasing it"));
    }
    return it->second;
  };
  auto add_handle = [&](uint64_t id, uint64_t tensor) -> absl::Status {
    if (!tensor_of.emplace(id, tensor).second) {
      return absl::InvalidArgumentError(absl::StrCat("the trace makes tensor ", id, " twice"));
    }
    ++handles[tensor];
    return absl::OkStatus();
  };
  EvictStats start;
  bool counting = skip == 0;
  int iteration = 0;
  auto stop = [&](const absl::Status& s) {
    res.out_of_memory = s.code() == absl::StatusCode::kResourceExhausted;
    res.error = std::string(s.message());
  };
  for (const TraceEvent& e : trace.events) {
    absl::Status s;
    switch (e.kind) {
      case TraceEvent::Kind::kPut: {
        MTC_RETURN_IF_ERROR(add_handle(e.id, e.id));
        Put p{e.id, e.desc, {}, e.persistent};
        s = ex.execute(p);
        break;
      }
      case TraceEvent::Kind::kOp: {
        ApplyOp c;
        c.op = e.op;
        c.recomputable = e.recomputable;
        for (uint64_t in : e.in) {
          MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(in));
          c.inputs.push_back(t);
        }
        const auto& outs = static_cast<const ReplayOp&>(*e.op).outputs();
        for (size_t i = 0; i < e.out.size(); ++i) {
          auto alias = std::find_if(e.aliases.begin(), e.aliases.end(), [&](auto& a) { return a.first == static_cast<int>(i); });
          if (alias != e.aliases.end()) {  // a view: another handle to the input's storage
            MTC_RETURN_IF_ERROR(add_handle(e.out[i], c.inputs[alias->second]));
            continue;
          }
          MTC_RETURN_IF_ERROR(add_handle(e.out[i], e.out[i]));
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
        MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e.of));
        MTC_RETURN_IF_ERROR(add_handle(e.id, t));
        break;
      }
      case TraceEvent::Kind::kRelease: {
        MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e.id));
        tensor_of.erase(e.id);
        if (--handles[t] == 0) {
          handles.erase(t);
          Del d{t};
          s = ex.execute(d);
        }
        break;
      }
      case TraceEvent::Kind::kGradient: {
        MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e.id));
        MakeGradient g{t};
        s = ex.execute(g);
        break;
      }
      case TraceEvent::Kind::kRead: {
        MTC_ASSIGN_OR_RETURN(uint64_t t, lookup(e.id));
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
  res.stats = end;
  res.stats.evict_drop -= start.evict_drop;
  res.stats.evict_swap -= start.evict_swap;
  res.stats.recomputes -= start.recomputes;
  res.stats.swapped_out_bytes -= start.swapped_out_bytes;
  res.peak_bytes = device.compute_region().stats().peak_allocated;
  return res;
}

}  // namespace mtc
