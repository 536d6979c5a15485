// A training run's state in a safetensors file: collect (the model's parameters and
// buffers and the optimizer's state, read to the host) and restore (every name, shape and
// dtype checked first, then the model's tensors overwritten in place with copy_ and the
// optimizer's state set).
#include <cstring>
#include <set>
#include <span>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dist/dtp.h"
#include "mtc/checkpoint.h"
#include "mtc/interpreter.h"
#include "mtc/nn.h"
#include "mtc/ops.h"
#include "mtc/optim.h"
#include "mtc/status.h"

namespace mtc::checkpoint {
namespace {

constexpr char kOptimizerPrefix[] = "optimizer.";
// PyTorch's batch norm counts its batches in a buffer that mtc's (a fixed momentum) has
// no use for; a file saved by PyTorch holds one per batch norm, and restore skips them.
constexpr char kTorchBatchCounter[] = ".num_batches_tracked";

const char* st_dtype(DType t) { return t == DType::kI32 ? "I32" : "F32"; }

absl::Status bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': ", what));
}

// to_host: t's bytes on the host; for a global tensor (DTP), this rank's part of it.
absl::StatusOr<HostTensor> to_host(const std::string& name, const Tensor& global) {
  const Tensor t = dtp::local(global);
  HostTensor h{st_dtype(t.dtype()), t.shape(), {}};
  h.data.resize(t.desc().bytes());
  if (t.dtype() == DType::kI32) {
    MTC_ASSIGN_OR_RETURN(std::vector<int32_t> v, t.to_vector_i32());
    std::memcpy(h.data.data(), v.data(), h.data.size());
  } else {
    MTC_ASSIGN_OR_RETURN(std::vector<float> v, t.to_vector());
    std::memcpy(h.data.data(), v.data(), h.data.size());
  }
  return h;
}

// Tensor from a checked HostTensor (F32 or I32, matching `want`).
Tensor to_device(const HostTensor& h, DType want, bool persistent) {
  const size_t n = h.data.size() / 4;
  if (want == DType::kI32) {
    std::vector<int32_t> v(n);
    std::memcpy(v.data(), h.data.data(), h.data.size());
    return from_vector_i32(h.shape, v);
  }
  std::vector<float> v(n);
  std::memcpy(v.data(), h.data.data(), h.data.size());
  return from_vector(h.shape, v, persistent);
}

// ModelTensors: the model's parameters and buffers by name, each tensor once (a tensor
// shared by two modules, as a tied embedding, under its first name).
std::vector<std::pair<std::string, Tensor>> model_tensors(const nn::Module& net) {
  std::vector<std::pair<std::string, Tensor>> out;
  std::set<uint64_t> seen;
  for (const nn::NamedTensors& list : {net.named_parameters(), net.named_buffers()}) {
    for (const auto& [name, t] : list) {
      if (t.defined() && seen.insert(t.id()).second) out.emplace_back(name, t);
    }
  }
  return out;
}

// param_names: the optimizer's parameter i -> its name among the model's `tensors`.
absl::StatusOr<std::vector<std::string>> param_names(std::span<const std::pair<std::string, Tensor>> tensors,
                                                     const optim::Optimizer& opt) {
  std::unordered_map<uint64_t, std::string> by_id;
  for (const auto& [name, t] : tensors) by_id.emplace(t.id(), name);
  std::vector<std::string> names;
  for (const Tensor& p : opt.params()) {
    auto it = by_id.find(p.id());
    if (it == by_id.end()) {
      return absl::InvalidArgumentError("the optimizer holds a parameter the model does not: expected the model's own");
    }
    names.push_back(it->second);
  }
  return names;
}

std::string state_name(const std::string& param, const char* kind) {
  return absl::StrCat(kOptimizerPrefix, param, ".", kind);
}

}  // namespace

namespace {

// Where a tensor of a checkpoint goes: every rank holds it alike, this rank holds its
// shard of it (placement split), or it is this rank's own.
enum class Part { kShared, kSplit, kOwn };

// gather_state: every tensor of `net` and `opt` with its part, into `put`.
absl::Status gather_state(const nn::Module& net, optim::Optimizer* opt, std::map<std::string, std::string>& metadata,
                          const std::function<bool(const Tensor&)>& own,
                          const std::function<void(const std::string&, HostTensor, Part, const Tensor&)>& put) {
  metadata["format"] = kFormat;
  auto part_of = [&](const Tensor& t) {
    // Split over a group of one rank, the local part is the whole tensor.
    if (dtp::placement(t).split() && t.ref()->dist->group->parts > 1) return Part::kSplit;
    return own && own(t) ? Part::kOwn : Part::kShared;
  };
  const auto tensors = model_tensors(net);
  for (const auto& [name, t] : tensors) {
    MTC_ASSIGN_OR_RETURN(HostTensor h, to_host(name, t));
    put(name, std::move(h), part_of(t), t);
  }
  if (opt == nullptr) return absl::OkStatus();
  metadata["optimizer"] = opt->name();
  MTC_ASSIGN_OR_RETURN(std::vector<std::string> names, param_names(tensors, *opt));
  for (size_t i = 0; i < names.size(); ++i) {
    const optim::Optimizer::StateSlots s = opt->state_slots(i);
    const Tensor& p = opt->params()[i];
    const Part part = part_of(p);
    bool any = false;
    for (const auto& [kind, t] : s.tensors) {
      if (!t->defined()) continue;  // not stepped yet (or off every path so far)
      any = true;
      const std::string key = state_name(names[i], kind);
      MTC_ASSIGN_OR_RETURN(HostTensor h, to_host(key, *t));
      put(key, std::move(h), part, *t);
    }
    if (s.step != nullptr && any) {
      HostTensor h{"I64", Shape{}, std::string(sizeof(int64_t), '\0')};
      std::memcpy(h.data.data(), s.step, sizeof(int64_t));
      // The count is the same on every rank; it goes with its parameter's other state.
      put(state_name(names[i], "step"), std::move(h), part == Part::kOwn ? Part::kOwn : Part::kShared, Tensor());
    }
  }
  return absl::OkStatus();
}

std::string shape_text(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ","), "]"); }

absl::StatusOr<Shape> parse_shape(const std::string& text) {
  absl::string_view v = text;
  if (!absl::ConsumePrefix(&v, "[") || !absl::ConsumeSuffix(&v, "]")) return absl::InvalidArgumentError(text);
  std::vector<int64_t> dims;
  if (!v.empty()) {
    for (absl::string_view d : absl::StrSplit(v, ',')) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(d, &n) || n < 0) return absl::InvalidArgumentError(text);
      dims.push_back(n);
    }
  }
  return Shape(dims.begin(), dims.end());
}

// split_dim: d of "S(d)"; -1 for anything else.
int split_dim(const std::string& placement) {
  absl::string_view v = placement;
  int d = -1;
  if (!absl::ConsumePrefix(&v, "S(") || !absl::ConsumeSuffix(&v, ")") || !absl::SimpleAtoi(v, &d) || d < 0) return -1;
  return d;
}

constexpr char kPlacementKey[] = "placement.";
constexpr char kGlobalShapeKey[] = "global_shape.";

// Rows: a row-major tensor seen along dimension d as `outer` blocks, each of shape[d]
// rows of `row_bytes` bytes; a shard along d takes a run of rows from every block.
struct Rows {
  int64_t outer = 1, row_bytes = 0;
};
Rows rows_along(const Shape& shape, int d, const std::string& dtype) {
  Rows r{1, dtype_bytes(dtype)};
  for (int k = 0; k < d; ++k) r.outer *= shape[k];
  for (size_t k = d + 1; k < shape.size(); ++k) r.row_bytes *= shape[k];
  return r;
}

// part_for: what this rank holds of the whole tensor `h` as `t` (a global tensor split
// along d: its shard's rows; anything else: all of it).
HostTensor part_for(const HostTensor& h, const Tensor& t) {
  const partition::Placement p = dtp::placement(t);
  if (!p.split()) return h;
  const ShardContext& g = *t.ref()->dist->group;
  const int d = p.dim;
  const partition::Range range = partition::shard_range(h.shape[d], g.parts, g.index);
  const Rows rows = rows_along(h.shape, d, h.dtype);
  HostTensor out{h.dtype, h.shape, {}};
  out.shape[d] = range.size;
  for (int64_t o = 0; o < rows.outer; ++o) {
    out.data.append(h.data, static_cast<size_t>((o * h.shape[d] + range.offset) * rows.row_bytes),
                    static_cast<size_t>(range.size * rows.row_bytes));
  }
  return out;
}

}  // namespace

absl::StatusOr<SafetensorsFile> collect(const nn::Module& net, optim::Optimizer* opt,
                                        std::map<std::string, std::string> metadata) {
  SafetensorsFile f;
  absl::Status split;
  MTC_RETURN_IF_ERROR(gather_state(net, opt, metadata, nullptr,
                                   [&](const std::string& name, HostTensor h, Part part, const Tensor&) {
                                     if (part == Part::kSplit && split.ok()) {
                                       split = absl::FailedPreconditionError(absl::StrCat(
                                           "tensor '", name,
                                           "' is split across ranks (DTP): save with collect_ranked"));
                                     }
                                     f.tensors[name] = std::move(h);
                                   }));
  MTC_RETURN_IF_ERROR(split);
  f.metadata = std::move(metadata);
  return f;
}

absl::StatusOr<RankedState> collect_ranked(const nn::Module& net, optim::Optimizer* opt,
                                           std::map<std::string, std::string> metadata,
                                           const std::function<bool(const Tensor&)>& own) {
  RankedState r;
  MTC_RETURN_IF_ERROR(gather_state(net, opt, metadata, own,
                                   [&](const std::string& name, HostTensor h, Part part, const Tensor& t) {
                                     if (part == Part::kShared) {
                                       r.shared.tensors[name] = std::move(h);
                                       return;
                                     }
                                     r.own.metadata[kPlacementKey + name] =
                                         part == Part::kOwn ? "own" : dtp::placement(t).str();
                                     if (part == Part::kSplit) r.own.metadata[kGlobalShapeKey + name] = shape_text(t.shape());
                                     r.own.tensors[name] = std::move(h);
                                   }));
  r.own.metadata["format"] = kFormat;
  r.shared.metadata = std::move(metadata);
  return r;
}

std::string rank_file(const std::string& path, const std::string& tag, int rank) {
  return absl::StrCat(path, ".", tag, ".rank", rank);
}

absl::StatusOr<SafetensorsFile> read_checkpoint(const std::string& path) {
  MTC_ASSIGN_OR_RETURN(SafetensorsFile main, read_safetensors(path));
  auto n_it = main.metadata.find("rank_files");
  if (n_it == main.metadata.end()) return main;
  int n = 0;
  if (!absl::SimpleAtoi(n_it->second, &n) || n < 1 || n > 65536) {
    return bad(path, absl::StrCat("rank_files '", n_it->second, "': expected a number of ranks"));
  }
  const std::string tag = main.metadata["rank_files_tag"];
  // Split tensors' pieces by name, in rank order.
  std::map<std::string, std::vector<HostTensor>> pieces;
  std::map<std::string, std::pair<int, Shape>> split;  // name -> (dim, global shape)
  for (int r = 0; r < n; ++r) {
    const std::string file = rank_file(path, tag, r);
    absl::StatusOr<SafetensorsFile> f = read_safetensors(file);
    if (!f.ok()) {
      return bad(path, absl::StrCat("rank ", r, " of ", n, "'s file: ", f.status().message()));
    }
    if (f->metadata["rank"] != absl::StrCat(r) || f->metadata["rank_files_tag"] != tag) {
      return bad(file, absl::StrCat("it is rank ", f->metadata["rank"], "'s file of save '",
                                    f->metadata["rank_files_tag"], "': expected rank ", r, "'s of save '", tag, "'"));
    }
    for (auto& [name, h] : f->tensors) {
      const std::string placement = f->metadata[kPlacementKey + name];
      if (placement == "own") {
        if (main.tensors.count(name) != 0) return bad(file, absl::StrCat("tensor '", name, "' is in two files"));
        main.metadata[kPlacementKey + name] = "own";
        main.tensors[name] = std::move(h);
        continue;
      }
      const int d = split_dim(placement);
      absl::StatusOr<Shape> global = parse_shape(f->metadata[kGlobalShapeKey + name]);
      if (d < 0 || !global.ok() || d >= static_cast<int>(global->size()) || main.tensors.count(name) != 0) {
        return bad(file, absl::StrCat("tensor '", name, "': placement '", placement, "' and global shape '",
                                      f->metadata[kGlobalShapeKey + name],
                                      "': expected S(d) and a shape with dimension d, for a tensor in no other file"));
      }
      Shape want = *global;
      const partition::Range range = partition::shard_range((*global)[d], n, r);
      want[d] = range.size;
      if (h.shape != want || (r > 0 && (split[name] != std::pair{d, *global} || pieces[name].size() != size_t(r)))) {
        return bad(file, absl::StrCat("tensor '", name, "' is ", shape_str(h.shape), ": expected rank ", r, " of ",
                                      n, "'s shard ", shape_str(want), " of ", shape_str(*global)));
      }
      split[name] = {d, *global};
      pieces[name].push_back(std::move(h));
    }
  }
  // Put each split tensor back together: along dimension d, the ranks' rows in turn.
  for (auto& [name, parts] : pieces) {
    const auto& [d, global] = split[name];
    if (parts.size() != size_t(n)) {
      return bad(path, absl::StrCat("tensor '", name, "' has ", parts.size(), " of ", n, " shards"));
    }
    const Rows rows = rows_along(global, d, parts[0].dtype);
    HostTensor whole{parts[0].dtype, global, {}};
    whole.data.reserve(static_cast<size_t>(rows.outer * global[d] * rows.row_bytes));
    for (int64_t o = 0; o < rows.outer; ++o) {
      for (const HostTensor& piece : parts) {
        const int64_t run = piece.shape[d] * rows.row_bytes;  // this piece's rows of block o
        whole.data.append(piece.data, static_cast<size_t>(o * run), static_cast<size_t>(run));
      }
    }
    main.tensors[name] = std::move(whole);
  }
  return main;
}

absl::Status restore(const std::string& path, const SafetensorsFile& file, nn::Module& net, optim::Optimizer* opt) {
  if (auto it = file.metadata.find("format"); it != file.metadata.end() && it->second != kFormat) {
    return bad(path, absl::StrCat("format '", it->second, "': expected '", kFormat, "'"));
  }
  std::set<std::string> used;
  // The model: every parameter and buffer, by name, shape and dtype.
  const auto tensors = model_tensors(net);
  for (const auto& [name, t] : tensors) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      return bad(path, absl::StrCat("the model's tensor '", name, "' (", t.desc().str(), ") is missing"));
    }
    if (it->second.dtype != st_dtype(t.dtype()) || it->second.shape != t.shape()) {
      return bad(path, absl::StrCat("tensor '", name, "' is ", it->second.dtype, " ", shape_str(it->second.shape),
                                    ": the model expects ", st_dtype(t.dtype()), " ", shape_str(t.shape())));
    }
    used.insert(name);
  }
  // The optimizer: state for the optimizer it was saved with, shaped as the parameters.
  std::vector<std::string> names;
  bool has_state = false;
  for (const auto& [name, h] : file.tensors) has_state |= absl::StartsWith(name, kOptimizerPrefix);
  auto saved = file.metadata.find("optimizer");
  if (opt != nullptr && (has_state || saved != file.metadata.end())) {
    const std::string was = saved == file.metadata.end() ? "(not recorded)" : saved->second;
    if (was != opt->name()) {
      return bad(path, absl::StrCat("optimizer state of ", was, ": this run's optimizer is ", opt->name(),
                                    "; expected the optimizer the checkpoint was saved with"));
    }
    MTC_ASSIGN_OR_RETURN(names, param_names(tensors, *opt));
    for (size_t i = 0; i < names.size(); ++i) {
      const optim::Optimizer::StateSlots s = opt->state_slots(i);
      const Tensor& p = opt->params()[i];
      int present = 0;
      for (const auto& [kind, t] : s.tensors) {
        const std::string key = state_name(names[i], kind);
        auto it = file.tensors.find(key);
        if (it == file.tensors.end()) continue;
        ++present;
        if (it->second.dtype != "F32" || it->second.shape != p.shape()) {
          return bad(path, absl::StrCat("tensor '", key, "' is ", it->second.dtype, " ", shape_str(it->second.shape),
                                        ": expected F32 ", shape_str(p.shape()), " as its parameter"));
        }
        used.insert(key);
      }
      if (present != 0 && present != static_cast<int>(s.tensors.size())) {
        return bad(path, absl::StrCat("optimizer state of '", names[i], "' is incomplete: ", present, " of ",
                                      s.tensors.size(), " tensors"));
      }
      if (s.step != nullptr && present != 0) {
        const std::string key = state_name(names[i], "step");
        auto it = file.tensors.find(key);
        if (it == file.tensors.end() || it->second.dtype != "I64" || !it->second.shape.empty()) {
          return bad(path, absl::StrCat("tensor '", key, "' (I64 []) is missing or malformed"));
        }
        used.insert(key);
      }
    }
  }
  for (const auto& [name, h] : file.tensors) {
    if (used.count(name) != 0 || absl::EndsWith(name, kTorchBatchCounter)) continue;
    if (auto p = file.metadata.find(kPlacementKey + name); p != file.metadata.end() && p->second == "own") {
      continue;  // another rank's own tensor (an expert this rank does not hold)
    }
    if (opt == nullptr && absl::StartsWith(name, kOptimizerPrefix)) continue;  // weights only
    return bad(path, absl::StrCat("tensor '", name, "' (", h.dtype, " ", shape_str(h.shape),
                                  ") is not in the model", has_state ? " or its optimizer" : "",
                                  ": expected a checkpoint of this model"));
  }
  // Checked: now write (a split tensor's shard from the whole one's rows).
  for (const auto& [name, t] : tensors) {
    copy_(dtp::local(t), to_device(part_for(file.tensors.at(name), t), t.dtype(), false));
  }
  if (!names.empty()) {
    for (size_t i = 0; i < names.size(); ++i) {
      const optim::Optimizer::StateSlots s = opt->state_slots(i);
      const Tensor& p = opt->params()[i];
      for (const auto& [kind, t] : s.tensors) {
        auto it = file.tensors.find(state_name(names[i], kind));
        if (it == file.tensors.end()) {
          *t = Tensor();
        } else if (p.global()) {  // held as its parameter is (DTP): zeros_like, then this rank's part
          *t = dtp::zeros_like(p, /*persistent=*/true);
          copy_(dtp::local(*t), to_device(part_for(it->second, p), DType::kF32, false));
        } else {
          *t = to_device(it->second, DType::kF32, /*persistent=*/true);
        }
      }
      if (s.step != nullptr) {
        auto it = file.tensors.find(state_name(names[i], "step"));
        int64_t step = 0;
        if (it != file.tensors.end()) std::memcpy(&step, it->second.data.data(), sizeof(step));
        *s.step = step;
      }
    }
  }
  if (!tensors.empty()) {
    if (absl::Status s = tensors.front().second.interpreter()->sync(); !s.ok()) {
      return bad(path, absl::StrCat("restoring: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace mtc::checkpoint
