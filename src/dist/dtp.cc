// DTP's dispatch, global handles, module sharding and the gradient reducer. See
// src/dist/dtp.h and include/mtc/dtp.h; docs/dtp.md explains the design.
#include "dist/dtp.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd.h"
#include "comm/communicator.h"
#include "dist/convert_ops.h"
#include "dist/dtp_auto.h"
#include "mtc/interpreter.h"
#include "mtc/ops.h"
#include "mtc/status.h"
#include "ops/sbp.h"

namespace mtc::dtp {

using partition::Kind;

Group make_group(dist::CommPtr c, bool check, BatchNormStats bn) {
  auto g = std::make_shared<ShardContext>();
  g->parts = c ? c->world_size() : 1;
  g->index = c ? c->rank() : 0;
  g->comm = std::move(c);
  g->check = check;
  g->shard_bn_stats = bn == BatchNormStats::kShard;
  return g;
}

int group_size(const Group& g) { return g ? g->parts : 1; }
int group_rank(const Group& g) { return g ? g->index : 0; }

absl::StatusOr<Mode> parse_mode(const std::string& s) {
  if (s == "off") return Mode::kNone;
  if (s == "p1") return Mode::kP1;
  if (s == "p2") return Mode::kP2;
  if (s == "p3") return Mode::kP3;
  if (s == "p4") return Mode::kP4;
  return absl::InvalidArgumentError(absl::StrCat("'", s, "': expected off, p1, p2, p3 or p4"));
}

Tensor local(const Tensor& t) {
  if (!t.global()) return t;
  return Tensor(t.ref()->dist->local, t.meta());
}

Placement placement(const Tensor& t) { return t.global() ? t.ref()->dist->placement : Placement::R(); }

Tensor wrap(const Tensor& l, const TensorDesc& global, Placement p, const Group& g) {
  auto info = std::make_shared<DistInfo>();
  info->placement = p;
  info->local = l.ref();
  info->group = g;
  auto ref = std::make_shared<TensorRef>(l.ref()->id, global, l.ref()->interp);
  ref->dist = std::move(info);
  return Tensor(std::move(ref), l.meta());
}

Tensor distribute(const Tensor& l, const Shape& global, Placement p, const Group& g) {
  return wrap(local(l), TensorDesc{global, l.dtype()}, p, g);
}

bool any_global(std::span<const Tensor> inputs) {
  for (const Tensor& t : inputs) {
    if (t.global()) return true;
  }
  return false;
}

namespace {

// fail: the error kept for the next synchronising call, and poisoned outputs.
TensorList fail(Interpreter& interp, const OpDef& op, absl::Status s) {
  interp.record_error(std::move(s));
  TensorList out;
  for (int i = 0; i < std::max(op.num_outputs(), 0); ++i) {
    out.emplace_back(std::make_shared<TensorRef>(0, TensorDesc{}, interp.shared_from_this()));
  }
  return out;
}

// check_agreement: under --comm_check the ranks compare what they dispatch (the op, the
// global shapes, the placements they hold and the signature chosen); a rank that holds
// another placement would otherwise run a different collective, or none.
// The hashes travel as an all_gather op of the interpreter, in issue order with the
// other collectives.
absl::Status check_agreement(Interpreter& interp, const ShardContext& g, const std::string& what) {
  const uint64_t h = std::hash<std::string>{}(what);
  int32_t mine[2];
  std::memcpy(mine, &h, sizeof h);
  NoGradGuard no_grad;
  Tensor t = interp.put(TensorDesc{Shape{2}, DType::kI32}, mine);
  MTC_ASSIGN_OR_RETURN(std::vector<int32_t> all, dist::all_gather(t, g.comm).to_vector_i32());
  for (int r = 0; r < g.parts; ++r) {
    if (all[2 * r] != mine[0] || all[2 * r + 1] != mine[1]) {
      return absl::FailedPreconditionError(absl::StrCat("DTP: rank ", g.index, " and rank ", r,
                                                        " disagree on the placements of ", what,
                                                        " (this rank's shown): expected the same on every rank"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

TensorList dispatch(std::shared_ptr<const OpDef> op, std::span<const Tensor> inputs) {
  Group group;
  Interpreter* interp = nullptr;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    if (interp == nullptr) interp = t.interpreter();
    if (!t.global()) continue;
    if (group == nullptr) group = t.ref()->dist->group;
    if (t.ref()->dist->group != group) {
      return fail(*interp, *op, absl::InvalidArgumentError(absl::StrCat(
                                    "op ", op->name(), ": its inputs are held by different partition groups")));
    }
  }
  const ShardContext& g = *group;
  absl::InlinedVector<TensorDesc, 4> global;
  absl::InlinedVector<Placement, 4> have;
  absl::InlinedVector<partition::Fixed, 4> fixed;
  absl::InlinedVector<Placement, 4> stored;  // as held, before a P2 gather
  absl::InlinedVector<bool, 4> gather;
  TensorList locals;
  bool gathered = false;
  const uint64_t mutated = op->mutates_inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) {
      return fail(*interp, *op, absl::InvalidArgumentError(absl::StrCat("op ", op->name(), ": an input is undefined")));
    }
    if (t.poisoned() || (t.global() && t.ref()->dist->local->id == 0)) {
      return fail(*interp, *op, absl::FailedPreconditionError(absl::StrCat("op ", op->name(), ": an input's op failed")));
    }
    global.push_back(t.desc());
    Tensor l = local(t);
    Placement p = placement(t);
    const DistInfo* d = t.global() ? t.ref()->dist.get() : nullptr;
    // A tensor the op writes in place is never converted: the write must reach it.
    const bool written = (mutated >> i) & 1;
    stored.push_back(p);
    // P2: the shard, gathered for this use (below, after the placements are checked).
    // In a group of one rank the shard is the whole tensor: Replicated, with nothing to gather.
    const bool p2_use = d != nullptr && d->gather && p.split() && !written;
    gather.push_back(p2_use && g.parts > 1);
    if (p2_use) {
      p = Placement::R();
      gathered = true;
    }
    have.push_back(p);
    fixed.push_back((d != nullptr && (d->stored || d->gather)) || written ? partition::Fixed::kNever
                                                                           : partition::Fixed::kAny);
    locals.push_back(std::move(l));
  }
  Planner* planner = g.planner.get();
  const Decision* decision = nullptr;
  partition::SignatureList sigs;
  partition::Choice choice;
  if (planner != nullptr && planner->choosing()) {
    absl::StatusOr<const Decision*> d = planner->decide(*op, inputs, global, g.parts);
    if (!d.ok()) return fail(*interp, *op, d.status());
    decision = *d;
  } else {
    op->signatures(global, g.parts, sigs);
    absl::StatusOr<partition::Choice> c =
        partition::choose(op->name(), sigs, have, global, fixed, g.parts, forced_mode(), /*strict=*/false);
    if (!c.ok()) return fail(*interp, *op, c.status());
    choice = std::move(*c);
  }
  const partition::Signature& sig = decision ? decision->sig : sigs[choice.index];
  std::vector<TensorDesc> out_global;
  if (absl::Status s = op->infer(global, out_global); !s.ok()) {
    std::vector<std::string> in;
    for (size_t i = 0; i < global.size(); ++i) in.push_back(partition::describe(global[i], have[i]));
    return fail(*interp, *op, absl::Status(s.code(), absl::StrCat(op->name(), " on ", absl::StrJoin(in, ", "), ": ",
                                                                  s.message())));
  }
  // Before any collective of this op: a rank that holds other placements would run others.
  if (g.check) {
    std::vector<std::string> in;
    for (size_t i = 0; i < global.size(); ++i) in.push_back(partition::describe(global[i], stored[i]));
    std::string what = absl::StrCat("op ", op->name(), "(", op->attrs(), ") on ", absl::StrJoin(in, ", "),
                                    " as ", sig.str());
    if (decision != nullptr) {
      absl::StrAppend(&what, " actions ");
      for (size_t i = 0; i < decision->action.size(); ++i) {
        absl::StrAppend(&what, static_cast<int>(decision->action[i]), decision->place[i].str(),
                        decision->gather_after[i] ? "g " : " ");
      }
    }
    if (absl::Status s = check_agreement(*interp, g, what); !s.ok()) return fail(*interp, *op, s);
  }
  absl::InlinedVector<uint64_t, 4> measured;  // the conversions' outputs, for the report
  if (decision != nullptr) {
    // Settles and moves first (they replace the stored tensors' shards), then each input as
    // the decision says.
    if (absl::Status s = planner->apply(*op, *decision, inputs, global); !s.ok()) return fail(*interp, *op, s);
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor l = local(inputs[i]);
      const Placement held = placement(inputs[i]);
      const Action a = decision->action[i];
      const bool gather_now =
          a == Action::kGather || ((a == Action::kSettle || a == Action::kMove) && decision->gather_after[i]);
      if (g.parts > 1 && gather_now && held.split()) {
        l = dist::convert(l, global[i], held, Placement::R(), g.comm);
        measured.push_back(l.id());
      } else if (g.parts > 1 && a == Action::kConvert && !(held == sig.in[i])) {
        l = dist::convert(l, global[i], held, sig.in[i], g.comm);
        measured.push_back(l.id());
      }
      locals[i] = std::move(l);
    }
    note_mode(decision->mode);
  } else {
    for (size_t i = 0; i < locals.size(); ++i) {
      if (gather[i]) {
        locals[i] = dist::convert(locals[i], global[i], stored[i], Placement::R(), g.comm);
        measured.push_back(locals[i].id());
      }
    }
    for (size_t i = 0; i < locals.size(); ++i) {
      // On a group of one every placement is the whole tensor: nothing to convert.
      if (choice.convert[i].step == partition::Step::kNone || g.parts == 1) continue;
      locals[i] = dist::convert(locals[i], global[i], have[i], sig.in[i], g.comm);
      measured.push_back(locals[i].id());
    }
    note_mode(gathered && sig.mode == Mode::kP1 ? Mode::kP2 : sig.mode);
  }
  TensorList outs;
  if (std::optional<TensorList> r = op->shard_run(sig, global, locals, g)) {
    outs = std::move(*r);
  } else {
    std::shared_ptr<const OpDef> run = op->shard_op(sig, global, g);
    outs = call(run ? std::move(run) : op, locals);
  }
  if (outs.size() != out_global.size()) {
    return fail(*interp, *op, absl::InternalError(absl::StrCat("DTP: op ", op->name(), " under ", sig.str(), " made ",
                                                               outs.size(), " outputs, expected ", out_global.size())));
  }
  TensorList result;
  for (size_t j = 0; j < outs.size(); ++j) {
    const Placement p = j < sig.out.size() ? sig.out[j] : Placement::R();
    // Never a wrong result: a local output must be this rank's part of the global one.
    const Shape want = partition::local_shape(out_global[j].shape, p, g.parts, g.index);
    if (!outs[j].poisoned() && outs[j].shape() != want) {
      return fail(*interp, *op, absl::InternalError(absl::StrCat(
                                    "DTP: op ", op->name(), " under ", sig.str(), " made ", outs[j].desc().str(),
                                    " on rank ", g.index, ", expected ", shape_str(want), " of ",
                                    partition::describe(out_global[j], p))));
    }
    result.push_back(wrap(outs[j], out_global[j], p, group));
  }
  if (planner != nullptr && planner->options().report) {
    for (const Tensor& o : outs) measured.push_back(o.id());
    if (decision != nullptr) {
      planner->measure(decision->report_row, measured);
    } else {
      planner->note_forced(*op, inputs, global, sig, g.parts, measured);
    }
  }
  return result;
}

Tensor gather(const Tensor& t) {
  if (!t.global()) return t;
  const DistInfo& d = *t.ref()->dist;
  if (d.placement.replicated() || d.group->parts == 1) return local(t);
  NoGradGuard no_grad;
  return dist::convert(local(t), t.desc(), d.placement, Placement::R(), d.group->comm);
}

// ---- the mode the ops take ----

namespace {
Mode g_forced = Mode::kNone;
std::atomic<uint64_t> g_mode_counts[5];
}  // namespace

void set_forced_mode(Mode m) { g_forced = m; }
Mode forced_mode() { return g_forced; }
void note_mode(Mode m) { g_mode_counts[static_cast<int>(m)].fetch_add(1, std::memory_order_relaxed); }
uint64_t mode_count(Mode m) { return g_mode_counts[static_cast<int>(m)].load(std::memory_order_relaxed); }

// ---- placing a module ----

namespace {

absl::flat_hash_map<const nn::Module*, Mode>& pins() {
  static absl::flat_hash_map<const nn::Module*, Mode> p;
  return p;
}

struct Rule {
  std::string type;  // the module's type_name
  std::vector<Mode> modes;
};

// modes_of: the modes module m's op has (P1 and P2 every parameterised module has).
std::vector<Mode> modes_of(const nn::Module& m) {
  const std::string t = m.type_name();
  if (t == "Conv2d") {
    const auto& c = static_cast<const nn::Conv2d&>(m).config;
    if (c.groups == 1) return {Mode::kP1, Mode::kP2, Mode::kP3, Mode::kP4};
    if (c.groups == c.in_channels && c.groups == c.out_channels) return {Mode::kP1, Mode::kP2, Mode::kP4};
    return {Mode::kP1, Mode::kP2};
  }
  return {Mode::kP1, Mode::kP2, Mode::kP3, Mode::kP4};
}

// placement_for: where parameter or buffer `name` (of shape s) of module m goes in mode.
Placement placement_for(const nn::Module& m, const std::string& name, const Shape& s, Mode mode) {
  const std::string t = m.type_name();
  switch (mode) {
    case Mode::kNone:
    case Mode::kP1: return Placement::R();
    case Mode::kP2: return Placement::S(0);
    case Mode::kP3:
    case Mode::kP4: break;
  }
  const bool p4 = mode == Mode::kP4;
  if (t == "Linear" || t == "Conv2d") {
    if (name == "weight") return Placement::S(p4 ? 0 : 1);
    return p4 ? Placement::S(0) : Placement::R();  // the bias: with the outputs, or added once
  }
  if (t == "BatchNorm2d") return Placement::S(0);  // per channel: exact under a channel split
  if (t == "LayerNorm") return Placement::R();
  if (s.size() == 2) return Placement::S(p4 ? 1 : 0);  // an embedding table: its dim, or its vocabulary
  return Placement::R();
}

}  // namespace

absl::Status restore(Tensor& t, Placement p, bool gather, bool unsettled, const Group& group) {
  // A copy: callers pass t's own DistInfo's group, which this replaces below.
  const Group g = group;
  if (t.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("dtp: ", t.desc().str(), ": expected f32 parameters and buffers"));
  }
  Interpreter& interp = *t.interpreter();
  const TensorDesc global = t.desc();
  const Shape ls = partition::local_shape(global.shape, p, g->parts, g->index);
  std::vector<float> part;
  if (t.global() && (g->parts == 1 || placement(t) == p)) {
    // The same data (on a group of one every placement is the whole tensor).
    MTC_ASSIGN_OR_RETURN(part, local(t).to_vector());
  } else if (t.global()) {
    // A move: the conversion's result, read back and put again as persistent storage.
    NoGradGuard no_grad;
    Tensor moved = dist::convert(local(t), global, placement(t), p, g->comm);
    MTC_ASSIGN_OR_RETURN(part, moved.to_vector());
  } else {
    // The global values are read once (every rank drew them alike); this rank keeps its part.
    std::vector<float> all;
    MTC_ASSIGN_OR_RETURN(all, t.to_vector());
    if (p.split()) {
      const partition::Range r = partition::shard_range(global.shape[p.dim], g->parts, g->index);
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < p.dim; ++i) outer *= global.shape[i];
      for (size_t i = p.dim + 1; i < global.shape.size(); ++i) inner *= global.shape[i];
      const int64_t n = global.shape[p.dim];
      part.reserve(static_cast<size_t>(outer * r.size * inner));
      for (int64_t o = 0; o < outer; ++o) {
        const float* src = all.data() + (o * n + r.offset) * inner;
        part.insert(part.end(), src, src + r.size * inner);
      }
    } else {
      part = std::move(all);
    }
  }
  Tensor shard_t = interp.put(TensorDesc{ls, global.dtype}, part.data(), /*persistent=*/true);
  TensorRef& ref = *t.ref();
  const bool was_global = t.global();
  const uint64_t old = ref.id;
  auto info = std::make_shared<DistInfo>();
  info->placement = p;
  info->local = shard_t.ref();
  info->group = g;
  info->stored = true;
  info->gather = gather;
  info->unsettled = unsettled;
  if (was_global) info->followers = ref.dist->followers;
  ref.id = shard_t.id();
  ref.dist = std::move(info);  // a global handle's old shard goes with its DistInfo
  if (!was_global) interp.del(old);
  // The optimizer state made for it moves alike.
  for (const std::weak_ptr<TensorRef>& w : ref.dist->followers) {
    std::shared_ptr<TensorRef> f = w.lock();
    if (f == nullptr || !f->dist || f->dist->placement == p) continue;
    Tensor ft(f, nullptr);
    MTC_RETURN_IF_ERROR(restore(ft, p, false, false, g));
  }
  return absl::OkStatus();
}

absl::Status pin(nn::Module& m, Mode mode) {
  const std::vector<Mode> has = modes_of(m);
  if (mode != Mode::kNone && std::find(has.begin(), has.end(), mode) == has.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtp::pin: ", m.type_name(), " cannot take mode ", partition::mode_name(mode), ": it has ",
        absl::StrJoin(has, ", ", [](std::string* o, Mode x) { o->append(partition::mode_name(x)); })));
  }
  pins()[&m] = mode;
  return absl::OkStatus();
}

absl::StatusOr<ShardFigures> shard(nn::Module& net, Mode mode, const Group& g) {
  ShardFigures f;
  if (g == nullptr) return absl::InvalidArgumentError("dtp::shard: no partition group");
  // Walk the module tree; each module places its own tensors (names without a dot).
  std::vector<std::pair<std::string, nn::Module*>> work{{"", &net}};
  while (!work.empty()) {
    auto [path, m] = work.back();
    work.pop_back();
    for (const auto& [name, child] : m->children()) work.emplace_back(path.empty() ? name : path + "." + name, child.get());
    Mode want = mode;
    if (auto it = pins().find(m); it != pins().end()) {
      want = it->second;
      pins().erase(it);  // used: a module placed once is not pinned again by a stale address
    }
    nn::NamedTensors own;
    for (auto& [n, t] : m->named_parameters()) {
      if (n.find('.') == std::string::npos) own.emplace_back(n, t);
    }
    const size_t n_params = own.size();
    for (auto& [n, t] : m->named_buffers()) {
      if (n.find('.') == std::string::npos) own.emplace_back(n, t);
    }
    if (own.empty()) continue;
    const std::vector<Mode> has = modes_of(*m);
    std::string why;
    if (std::find(has.begin(), has.end(), want) == has.end()) {
      why = absl::StrCat(m->type_name(), " has no mode ", partition::mode_name(want));
    }
    // Every split dimension must have at least one element per rank.
    std::vector<Placement> where;
    for (size_t i = 0; i < own.size() && why.empty(); ++i) {
      const Tensor& t = own[i].second;
      // P2 shards parameters only; buffers (running statistics) stay replicated.
      Placement p = want == Mode::kP2 && i >= n_params ? Placement::R() : placement_for(*m, own[i].first, t.shape(), want);
      if (p.split() && !partition::splittable(t.shape(), p.dim, g->parts)) {
        if (want == Mode::kP2) {
          p = Placement::R();  // a small parameter stays whole
        } else {
          why = absl::StrCat(own[i].first, " ", t.desc().str(), " has fewer than ", g->parts, " rows on dim ", p.dim);
        }
      }
      where.push_back(p);
    }
    if (!why.empty()) {
      ++f.kept_replicated;
      f.notes.push_back(absl::StrCat(path.empty() ? "(model)" : path, " (", m->type_name(), ") stays p1: ", why));
      where.assign(own.size(), Placement::R());
    } else {
      ++f.modules;
    }
    for (size_t i = 0; i < own.size(); ++i) {
      Tensor& t = own[i].second;
      f.global_parameter_bytes += i < n_params ? t.desc().bytes() : 0;
      const bool gather = want == Mode::kP2 && where[i].split();
      if (t.global()) {
        return absl::FailedPreconditionError(absl::StrCat("dtp::shard: ", partition::describe(t.desc(), placement(t)),
                                                          " is placed already (a model is sharded once)"));
      }
      MTC_RETURN_IF_ERROR(restore(t, where[i], gather, /*unsettled=*/false, g));
      if (i < n_params) f.local_parameter_bytes += local(t).desc().bytes();
    }
  }
  return f;
}

Tensor zeros_like(const Tensor& t, bool persistent) {
  Tensor l = local(t);
  Tensor z = from_vector(l.shape(), std::vector<float>(static_cast<size_t>(l.numel()), 0.f), persistent);
  if (!t.global()) return z;
  Tensor w = wrap(z, t.desc(), placement(t), t.ref()->dist->group);
  w.ref()->dist->stored = true;
  t.ref()->dist->followers.push_back(w.ref());
  return w;
}

}  // namespace mtc::dtp
