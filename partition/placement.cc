// Placements, shards, conversion plans and the choice of a signature. See placement.h.
#include "partition/placement.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mtc::partition {

std::string Placement::str() const {
  switch (kind) {
    case Kind::kReplicated: return "R";
    case Kind::kSplit: return absl::StrCat("S(", dim, ")");
    case Kind::kPartial: return "P";
  }
  return "?";
}

std::string describe(const TensorDesc& global, Placement p) { return absl::StrCat(global.str(), " ", p.str()); }

Range shard_range(int64_t n, int parts, int index) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t size = base + (index < extra ? 1 : 0);
  const int64_t offset = index * base + std::min<int64_t>(index, extra);
  return Range{offset, size};
}

Shape local_shape(const Shape& global, Placement p, int parts, int index) {
  Shape s = global;
  if (p.split() && p.dim < static_cast<int>(s.size())) s[p.dim] = shard_range(s[p.dim], parts, index).size;
  return s;
}

bool splittable(const Shape& global, int dim, int parts) {
  return dim >= 0 && dim < static_cast<int>(global.size()) && global[dim] >= parts;
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kNone: return "none";
    case Mode::kP1: return "p1";
    case Mode::kP2: return "p2";
    case Mode::kP3: return "p3";
    case Mode::kP4: return "p4";
  }
  return "?";
}

std::string Signature::str() const {
  auto fmt = [](std::string* o, const Placement& p) { o->append(p.str()); };
  return absl::StrCat("(", absl::StrJoin(in, ", ", fmt), ") -> ", absl::StrJoin(out, ", ", fmt),
                      mode == Mode::kNone ? "" : absl::StrCat(" [", mode_name(mode), "]"));
}

const char* step_name(Step s) {
  switch (s) {
    case Step::kNone: return "none";
    case Step::kAllGather: return "all_gather";
    case Step::kAllToAll: return "all_to_all";
    case Step::kAllReduce: return "all_reduce";
    case Step::kReduceScatter: return "reduce_scatter";
    case Step::kSlice: return "slice";
    case Step::kUnsupported: return "unsupported";
  }
  return "?";
}

Conversion plan_conversion(Placement from, Placement to) {
  if (from == to) return {Step::kNone};
  switch (from.kind) {
    case Kind::kSplit:
      if (to.replicated()) return {Step::kAllGather, from.dim, from.dim};
      if (to.split()) return {Step::kAllToAll, from.dim, to.dim};
      return {Step::kUnsupported};
    case Kind::kReplicated:
      if (to.split()) return {Step::kSlice, to.dim, to.dim};
      return {Step::kUnsupported};
    case Kind::kPartial:
      if (to.replicated()) return {Step::kAllReduce};
      if (to.split()) return {Step::kReduceScatter, to.dim, to.dim};
      return {Step::kUnsupported};
  }
  return {Step::kUnsupported};
}

double conversion_bytes(Conversion c, double global_bytes, int parts) {
  const double share = parts > 1 ? static_cast<double>(parts - 1) / parts : 0.0;
  switch (c.step) {
    case Step::kNone:
    case Step::kSlice: return 0;
    case Step::kAllGather:
    case Step::kReduceScatter: return share * global_bytes;
    case Step::kAllReduce: return 2 * share * global_bytes;
    case Step::kAllToAll: return share * global_bytes / std::max(parts, 1);
    case Step::kUnsupported: return std::numeric_limits<double>::infinity();
  }
  return std::numeric_limits<double>::infinity();
}

absl::StatusOr<Choice> choose(absl::string_view op_name, std::span<const Signature> sigs,
                              std::span<const Placement> have, std::span<const TensorDesc> global,
                              std::span<const Fixed> fixed, int parts, Mode forced, bool strict) {
  auto inputs_str = [&] {
    std::vector<std::string> v;
    for (size_t i = 0; i < have.size(); ++i) v.push_back(describe(global[i], have[i]));
    return absl::StrJoin(v, ", ");
  };
  std::vector<Mode> modes;
  for (const Signature& s : sigs) {
    if (s.mode != Mode::kNone && std::find(modes.begin(), modes.end(), s.mode) == modes.end()) modes.push_back(s.mode);
  }
  std::sort(modes.begin(), modes.end());
  const bool has_forced = forced != Mode::kNone && std::find(modes.begin(), modes.end(), forced) != modes.end();
  if (strict && forced != Mode::kNone && !modes.empty() && !has_forced) {
    return absl::InvalidArgumentError(absl::StrCat("op ", op_name, " on ", inputs_str(), " cannot take mode ",
                                                   mode_name(forced), ": it has ",
                                                   absl::StrJoin(modes, ", ", [](std::string* o, Mode m) { o->append(mode_name(m)); })));
  }
  auto replicated_outputs = [](const Signature& s) {
    return std::count_if(s.out.begin(), s.out.end(), [](const Placement& p) { return p.replicated(); });
  };
  std::optional<Choice> best, best_forced;
  for (size_t k = 0; k < sigs.size(); ++k) {
    const Signature& s = sigs[k];
    if (s.in.size() != have.size()) continue;
    Choice c;
    c.index = k;
    bool ok = true;
    for (size_t i = 0; i < have.size() && ok; ++i) {
      const Conversion conv = plan_conversion(have[i], s.in[i]);
      if (conv.step == Step::kUnsupported || (conv.step != Step::kNone && fixed[i] == Fixed::kNever)) ok = false;
      c.convert.push_back(conv);
      c.bytes += conversion_bytes(conv, static_cast<double>(global[i].bytes()), parts);
    }
    if (!ok) continue;
    auto better = [&](const std::optional<Choice>& b) {
      return !b || c.bytes < b->bytes ||
             (c.bytes == b->bytes && replicated_outputs(s) < replicated_outputs(sigs[b->index]));
    };
    if (has_forced && s.mode == forced && better(best_forced)) best_forced = c;
    if (better(best)) best = std::move(c);
  }
  if (best_forced) return *best_forced;
  if (best && !(strict && has_forced)) return *best;
  const bool restrict = strict && has_forced;
  const std::string have_modes = modes.empty() ? "none" : absl::StrJoin(modes, ", ", [](std::string* o, Mode m) { o->append(mode_name(m)); });
  if (restrict) {
    return absl::InvalidArgumentError(absl::StrCat("op ", op_name, " on ", inputs_str(), ": mode ", mode_name(forced),
                                                   " needs placements these inputs cannot be converted to (a stored "
                                                   "parameter is never converted); the op has modes ", have_modes));
  }
  return absl::InvalidArgumentError(absl::StrCat("op ", op_name, " on ", inputs_str(),
                                                 ": no placement signature fits these inputs; the op has modes ", have_modes));
}

void elementwise_signatures(std::span<const TensorDesc> in, const Shape& out_shape, int parts, SignatureList& out,
                            int linear_in, bool all_partial) {
  const size_t n = in.size();
  const int od = static_cast<int>(out_shape.size());
  Signature all_r;
  all_r.in.assign(n, Placement::R());
  all_r.out.push_back(Placement::R());
  out.push_back(all_r);
  for (int d = 0; d < od; ++d) {
    if (out_shape[d] < parts) continue;
    Signature s;
    for (size_t i = 0; i < n; ++i) {
      const int id = static_cast<int>(in[i].shape.size()) - (od - d);  // right-aligned
      const bool has = id >= 0 && in[i].shape[id] == out_shape[d];
      s.in.push_back(has ? Placement::S(id) : Placement::R());
    }
    s.out.push_back(Placement::S(d));
    out.push_back(std::move(s));
  }
  if (linear_in >= 0 && static_cast<size_t>(linear_in) < n) {
    Signature s;
    s.in.assign(n, Placement::R());
    s.in[linear_in] = Placement::P();
    s.out.push_back(Placement::P());
    out.push_back(std::move(s));
  }
  if (all_partial) {
    Signature s;
    s.in.assign(n, Placement::P());
    s.out.push_back(Placement::P());
    out.push_back(std::move(s));
  }
}

}  // namespace mtc::partition
