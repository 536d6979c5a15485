// A training run's state in a safetensors file: collect (the model's parameters and
// buffers and the optimizer's state, read to the host) and restore (every name, shape and
// dtype checked first, then the model's tensors overwritten in place with copy_ and the
// optimizer's state set).
#include <cstring>
#include <set>
#include <span>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

absl::StatusOr<HostTensor> to_host(const std::string& name, const Tensor& t) {
  if (t.global()) {
    return absl::UnimplementedError(absl::StrCat("tensor '", name,
                                                 "' is placed across ranks (DTP): checkpoints hold whole tensors only"));
  }
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

absl::StatusOr<SafetensorsFile> collect(const nn::Module& net, optim::Optimizer* opt,
                                        std::map<std::string, std::string> metadata) {
  SafetensorsFile f;
  f.metadata = std::move(metadata);
  f.metadata["format"] = kFormat;
  const auto tensors = model_tensors(net);
  for (const auto& [name, t] : tensors) {
    MTC_ASSIGN_OR_RETURN(f.tensors[name], to_host(name, t));
  }
  if (opt != nullptr) {
    f.metadata["optimizer"] = opt->name();
    MTC_ASSIGN_OR_RETURN(std::vector<std::string> names, param_names(tensors, *opt));
    for (size_t i = 0; i < names.size(); ++i) {
      const optim::Optimizer::StateSlots s = opt->state_slots(i);
      bool any = false;
      for (const auto& [kind, t] : s.tensors) {
        if (!t->defined()) continue;  // not stepped yet (or off every path so far)
        any = true;
        const std::string key = state_name(names[i], kind);
        MTC_ASSIGN_OR_RETURN(f.tensors[key], to_host(key, *t));
      }
      if (s.step != nullptr && any) {
        HostTensor h{"I64", Shape{}, std::string(sizeof(int64_t), '\0')};
        std::memcpy(h.data.data(), s.step, sizeof(int64_t));
        f.tensors[state_name(names[i], "step")] = std::move(h);
      }
    }
  }
  return f;
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
    if (opt == nullptr && absl::StartsWith(name, kOptimizerPrefix)) continue;  // weights only
    return bad(path, absl::StrCat("tensor '", name, "' (", h.dtype, " ", shape_str(h.shape),
                                  ") is not in the model", has_state ? " or its optimizer" : "",
                                  ": expected a checkpoint of this model"));
  }
  // Checked: now write.
  for (const auto& [name, t] : tensors) copy_(t, to_device(file.tensors.at(name), t.dtype(), false));
  if (!names.empty()) {
    for (size_t i = 0; i < names.size(); ++i) {
      const optim::Optimizer::StateSlots s = opt->state_slots(i);
      for (const auto& [kind, t] : s.tensors) {
        auto it = file.tensors.find(state_name(names[i], kind));
        *t = it == file.tensors.end() ? Tensor() : to_device(it->second, DType::kF32, /*persistent=*/true);
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
