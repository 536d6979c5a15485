// DTP's run-time choice: the planner (src/dist/dtp_auto.h; docs/dtp.md, "Choosing at run
// time"). Pricing is partition/cost.h's; this file turns an op and its inputs into the
// figures it prices, keeps the decisions, the ledger of stored bytes, the rate samples
// and the report.
#include "dist/dtp_auto.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dist/convert_ops.h"
#include "mtc/interpreter.h"
#include "mtc/ops.h"
#include "mtc/status.h"

namespace mtc::dtp {

using partition::Holding;
using partition::InputTerm;
using partition::OutputTerm;
using partition::Placement;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double elapsed_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double local_bytes(const TensorDesc& global, Placement p, int parts) {
  // The largest shard (index 0): every rank prices the slowest rank's work alike.
  return static_cast<double>(numel(partition::local_shape(global.shape, p, parts, 0))) * dtype_size(global.dtype);
}

const DistInfo* info(const Tensor& t) { return t.global() ? t.ref()->dist.get() : nullptr; }
bool is_stored(const Tensor& t) { return info(t) != nullptr && info(t)->stored; }

// contraction: an op whose FLOPs per output element show a reduction (matmul, conv): its
// backward is two such ops.
bool contraction(double flops, std::span<const TensorDesc> out) {
  double n = 0;
  for (const TensorDesc& d : out) n += static_cast<double>(d.numel());
  return n > 0 && flops >= 8 * n;
}

// places_any: a decision with an action that places a stored tensor (places, dtp_auto.h).
bool places_any(const Decision& d) { return std::any_of(d.action.begin(), d.action.end(), places); }

// collective_us: for a collective op, the time the collectives' lines give it (c: the
// model as given, not calibrated), or 0 for one this model does not price (a broadcast,
// a barrier, a bucket's reduce and wait); nullopt for an op that is not a collective.
std::optional<double> collective_us(const OpDef& op, std::span<const TensorDesc> in, std::span<const TensorDesc> out,
                                    const partition::CollectiveModel& c) {
  const auto* co = dynamic_cast<const dist::CollectiveOp*>(&op);
  if (co == nullptr) return std::nullopt;
  const int p = co->comm ? co->comm->world_size() : 1;
  if (const auto* cv = dynamic_cast<const dist::ConvertOp*>(&op)) {
    return partition::conversion_us(cv->step, static_cast<double>(cv->global.bytes()), p, c);
  }
  auto bytes = [](std::span<const TensorDesc> d) { return d.empty() ? 0.0 : static_cast<double>(d[0].bytes()); };
  if (dynamic_cast<const dist::AllReduceOp*>(&op)) return c.time_us(partition::Collective::kAllReduce, bytes(in), p);
  if (dynamic_cast<const dist::AllGatherOp*>(&op)) return c.time_us(partition::Collective::kAllGather, bytes(out), p);
  if (dynamic_cast<const dist::ReduceScatterOp*>(&op)) {
    return c.time_us(partition::Collective::kReduceScatter, bytes(in), p);
  }
  return 0.0;
}

}  // namespace

Planner::Planner(const ShardContext& g, AutoOptions o)
    : g_(g), opts_(std::move(o)), rates_(opts_.initial_rates), comm_(opts_.comm) {
  if (const char* e = std::getenv("MTC_TESTING_DTP_DISAGREE")) disagree_ = e;
}

partition::OpContext Planner::context(const std::string& family) const {
  partition::OpContext c;
  c.parts = g_.parts;
  c.rates = rates_.get(family);
  c.step_rates = rates_.get(opts_.step_family);
  c.comm = comm_;
  c.optimizer_states = opts_.optimizer_states;
  c.training = grad_mode_enabled();
  c.grad_bucket_bytes = opts_.grad_bucket_bytes;
  return c;
}

std::string Planner::key(const OpDef& op, std::span<const Tensor> inputs, std::span<const TensorDesc> global) const {
  std::string k = absl::StrCat(op.name(), "|", op.attrs(), grad_mode_enabled() ? "|t" : "|e");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DistInfo* d = info(inputs[i]);
    absl::StrAppend(&k, "|", global[i].str(), " ", d ? d->placement.str() : "R");
    if (d && d->stored) absl::StrAppend(&k, d->unsettled ? "u" : (d->gather ? "g" : "s"));
    if (inputs[i].requires_grad()) k.push_back('*');
  }
  return k;
}

void Planner::register_stored(const Tensor& t) {
  const DistInfo* d = info(t);
  if (d == nullptr) return;
  const double factor = t.requires_grad() ? 2 + opts_.optimizer_states : 1;
  const double local = local_bytes(t.desc(), d->placement, g_.parts);
  const Held h{local * factor, local * (factor - (t.requires_grad() ? 1 : 0))};
  auto [it, fresh] = ledger_.try_emplace(t.ref().get());
  ledger_total_ += h.bytes - it->second.bytes;
  ledger_compute_ += h.compute - it->second.compute;
  it->second = h;
}

struct Planner::Built {
  ReportRow::Option row;
  Decision d;
  double move_us = 0;
  // An option that needs a shared stored tensor moved (to S(0)): priced as if it were
  // there, never taken this iteration; move_us is the move's time.
  bool deferred = false;
  size_t defer_input = 0;
  bool defer_gather = false;
};

absl::StatusOr<const Decision*> Planner::decide(const OpDef& op, std::span<const Tensor> inputs,
                                                std::span<const TensorDesc> global, int parts) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string k = key(op, inputs, global);
  if (auto it = cache_.find(k); it != cache_.end()) {
    ++fig_.hits;
    count_warm(*it->second);
    const double us = elapsed_us(t0);
    fig_.hit_us += us;
    if (opts_.report && iteration_ >= 1) {
      std::lock_guard<std::mutex> l(mu_);
      ++rows_[it->second->report_row].dispatches;
    }
    fig_.decide_us += us;
    return it->second.get();
  }
  partition::SignatureList sigs;
  op.signatures(global, parts, sigs);
  std::vector<TensorDesc> out_global;
  MTC_RETURN_IF_ERROR(op.infer(global, out_global));
  const std::string family = op.name();
  const partition::OpContext ctx = context(family);
  // The budget left for this op: what the other stored tensors do not hold; and of it, what
  // they leave outside the comm region, for all of the op's bytes but its gradients (a
  // gradient the comm region cannot take stays in the compute region, which the first
  // figure counts).
  Held own;
  for (const Tensor& t : inputs) {
    if (auto it = ledger_.find(t.ref().get()); it != ledger_.end()) {
      own.bytes += it->second.bytes, own.compute += it->second.compute;
    }
  }
  const bool limited = opts_.budget_bytes > 0;
  const double room = limited ? opts_.budget_bytes - (ledger_total_ - own.bytes) : kInf;
  const double compute_room =
      limited ? opts_.budget_bytes - opts_.grad_region_bytes - (ledger_compute_ - own.compute) : kInf;
  // And of that, under a state cap, what the stored state may still take. The cap is a
  // policy, not the memory: it binds only an option that places a stored tensor (settles
  // or moves it) and keeps more state than the op's inputs hold now; one that uses them as
  // they are (every op with no stored input, an optimizer's step) always passes it.
  const double state_room =
      limited && opts_.state_bytes > 0 ? opts_.state_bytes - (ledger_compute_ - own.compute) : kInf;
  auto fits = [&](const partition::ModeBreakdown& b, const Decision& d) {
    const partition::ModeCost mc = b.total();
    const double state = b.state_bytes - b.grad_bytes;
    return mc.bytes <= room && mc.bytes - b.grad_bytes <= compute_room &&
           (!places_any(d) || state <= state_room || state <= own.compute + 1);
  };

  // A stored tensor moves only while one op reads it and it holds no gradient: the uses of
  // a shared one (a tied embedding) and a gradient already accumulated all have its shape.
  // The optimizer's step, which writes it in place, is no reader: its state follows the
  // tensor when it moves, and its next decision sees the new placement. (Counted as a use
  // until 2026-11-27, the step kept every parameter where the warm-up's first decision at
  // the default rates had put it: ResNet-20's stage-3 weights stayed gathered per use.)
  std::string identity = absl::StrCat(op.name(), "|", op.attrs());
  for (const TensorDesc& d : global) absl::StrAppend(&identity, "|", d.str());
  // The op's global FLOPs: the largest user of a shared stored tensor decides where it goes.
  const double global_flops = op.cost(global, out_global).flops;
  absl::InlinedVector<bool, 4> movable, deferrable;
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool m = false, defer = false;
    if (is_stored(inputs[i])) {
      const TensorRef* ref = inputs[i].ref().get();
      // Shared: read by two ops or more (the optimizer's step, which writes it, is not a reader).
      auto& readers = readers_[ref];
      if (!((op.mutates_inputs() >> i) & 1)) readers.insert(absl::StrCat(identity, "#", i));
      m = readers.size() <= 1 && !inputs[i].grad().defined();
      double& top = top_user_flops_[ref];
      top = std::max(top, global_flops);
      defer = !m && inputs[i].requires_grad() && readers.size() > 1 && fitted_ && global_flops >= top &&
              !info(inputs[i])->unsettled &&
              std::none_of(shared_moves_.begin(), shared_moves_.end(),
                           [&](const SharedMove& s) { return s.t.ref().get() == ref; });
    }
    movable.push_back(m);
    deferrable.push_back(defer);
  }
  // defer: option b needs input i (stored, shared) moved to S(0) first.
  auto defer = [](Built& b, size_t i, const InputTerm& in, const partition::OpContext& c, bool gather) {
    b.deferred = true;
    b.defer_input = i;
    b.defer_gather = gather;
    InputTerm mv = in;
    mv.want = Placement::S(0);
    b.move_us += partition::move_us(mv, c);
  };
  std::vector<Built> built;
  for (const partition::Signature& sig : sigs) {
    for (int variant = 0; variant < 2; ++variant) {
      const bool gathered_variant = variant == 1;
      Built b;
      b.d.sig = sig;
      b.d.mode = sig.mode;
      bool valid = true, any_gather = false;
      std::vector<TensorDesc> local_in, local_out;
      for (size_t i = 0; i < inputs.size() && valid; ++i) {
        const Tensor& t = inputs[i];
        const DistInfo* d = info(t);
        const Placement want = sig.in[i];
        InputTerm in;
        in.global_bytes = static_cast<double>(global[i].bytes());
        in.needs_grad = t.requires_grad();
        in.want = want;
        in.have = d ? d->placement : Placement::R();
        Action a = Action::kConvert;
        Placement place = want;
        bool gather_after = false;
        const bool written = (op.mutates_inputs() >> i) & 1;
        // A tensor the op writes in place is used where it is (an unsettled one settles first).
        if (written && !(in.have == want) && !(d != nullptr && d->unsettled)) {
          valid = false;  // a tensor the op writes in place is used where it is
          break;
        }
        if (is_stored(t)) {
          in.holding = t.requires_grad() ? Holding::kParameter : Holding::kBuffer;
          // A parameter whose op wants it whole may be stored S(0) and gathered (P2).
          const bool can_gather = in.holding == Holding::kParameter && want.replicated() && parts > 1 &&
                                  partition::splittable(global[i].shape, 0, parts);
          const bool gather = gathered_variant && can_gather && !written;
          any_gather |= gather;
          if (d->unsettled) {
            in.unsettled = true;
            a = Action::kSettle;
            place = gather ? Placement::S(0) : want;
            gather_after = gather;
          } else if (gather) {
            if (!(d->placement == Placement::S(0))) {
              if (!movable[i] && deferrable[i]) {
                defer(b, i, in, ctx, /*gather=*/true);
                a = Action::kGather;  // priced as if held S(0): the move comes after the iteration
              } else if (!movable[i]) {
                valid = false;
                break;
              } else {
                a = Action::kMove;
                place = Placement::S(0);
                InputTerm mv = in;
                mv.want = place;
                b.move_us += partition::move_us(mv, ctx);
              }
            } else {
              a = Action::kGather;
            }
            gather_after = true;
          } else if (d->placement == want) {
            a = Action::kDirect;
          } else if (!movable[i] && deferrable[i] && want == Placement::S(0)) {
            defer(b, i, in, ctx, /*gather=*/false);
            a = Action::kDirect;  // priced as if held there: the move comes after the iteration
          } else {
            if (!movable[i]) {
              valid = false;
              break;
            }
            a = Action::kMove;
            b.move_us += partition::move_us(in, ctx);
          }
          in.gather = gather;
          in.have = gather ? Placement::S(0) : want;  // its per-iteration use: no conversion
          in.local_bytes = local_bytes(global[i], gather ? Placement::S(0) : want, parts);
        } else {
          in.local_bytes = local_bytes(global[i], want, parts);
          if (partition::plan_conversion(in.have, want).step == partition::Step::kUnsupported) valid = false;
        }
        b.d.action.push_back(a);
        b.d.place.push_back(place);
        b.d.gather_after.push_back(gather_after);
        b.row.in.push_back(in);
        local_in.push_back(TensorDesc{partition::local_shape(global[i].shape, want, parts, 0), global[i].dtype});
      }
      if (!valid || (gathered_variant && !any_gather)) continue;
      for (size_t j = 0; j < out_global.size(); ++j) {
        const Placement p = j < sig.out.size() ? sig.out[j] : Placement::R();
        local_out.push_back(TensorDesc{partition::local_shape(out_global[j].shape, p, parts, 0), out_global[j].dtype});
        b.row.out.push_back(OutputTerm{p, static_cast<double>(out_global[j].bytes()),
                                       static_cast<double>(local_out.back().bytes())});
      }
      const OpCost c = op.cost(local_in, local_out);
      b.row.flops = c.flops;
      b.row.bytes = c.bytes_read + c.bytes_written;
      b.row.contraction = contraction(c.flops, local_out);
      partition::SignatureTerms terms{b.row.in, b.row.out, b.row.flops, b.row.bytes, b.row.contraction};
      absl::StatusOr<partition::ModeBreakdown> br = partition::signature_breakdown(terms, ctx);
      if (!br.ok()) continue;
      b.row.b = *br;
      b.row.forward_us = partition::forward_us(terms, ctx).value_or(kInf);
      b.row.move = b.move_us > 0 || std::any_of(b.d.action.begin(), b.d.action.end(),
                                                [](Action a) { return a == Action::kMove; });
      b.row.sig = sig.str() + (any_gather ? " +gather" : "") + (b.deferred ? " (after a move)" : "");
      if (any_gather && b.d.mode == partition::Mode::kP1) b.d.mode = partition::Mode::kP2;
      built.push_back(std::move(b));
    }
  }
  if (built.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("DTP: op ", op.name(), " has no signature its inputs can take"));
  }
  // Candidates: every option that keeps the stored tensors where they are, and the moves
  // that pay for themselves within the horizon (or are the only way to fit).
  std::vector<size_t> cand;
  double best_stay_us = kInf;
  for (Built& b : built) b.row.fits = fits(b.row.b, b.d);
  // The iteration's activations (AutoOptions::count_activations; docs/dtp.md, "The room"):
  // after the fit, an op the warm-up's last iteration dispatched n times, holding W bytes
  // over them (activations and conversion buffers, by its decisions then), may add
  // max(0, n · held − W) (and the stored state a placement adds) only while the warm-up's
  // measured peak leaves that much of the compute region. Each identity is charged once, its
  // largest addition (all n calls decided alike), whichever of its keys decides it. When no
  // option fits that room, the ones that add the least do: the room is a measurement, not a
  // proof, and the run's own out-of-memory error stays the last word.
  uint32_t id_index = Decision::kNoIdentity;
  if (opts_.count_activations && grad_mode_enabled()) {
    auto [it, fresh] = identity_index_.try_emplace(identity, static_cast<uint32_t>(identities_.size()));
    if (fresh) identities_.emplace_back();
    id_index = it->second;
  }
  const bool counted = fitted_ && id_index != Decision::kNoIdentity && identities_[id_index].dispatches > 0;
  const double activation_left = counted ? activation_room_ - activation_used() : kInf;
  auto held = [](const partition::ModeBreakdown& b) { return b.activation_bytes + b.buffer_bytes; };
  auto charge = [&](const Built& b) {
    const Identity& f = identities_[id_index];
    return std::max(0.0, held(b.row.b) * static_cast<double>(f.dispatches) - f.warm_held);
  };
  auto adds = [&](const Built& b) {
    double a = std::max(0.0, charge(b) - identities_[id_index].charged);
    if (places_any(b.d)) a += std::max(0.0, b.row.b.state_bytes - b.row.b.grad_bytes - own.compute);
    return a;
  };
  if (counted) {
    double least = kInf;
    for (const Built& b : built) {
      if (b.row.fits && !b.deferred) least = std::min(least, adds(b));
    }
    const double allowed = std::max(activation_left, least);
    for (Built& b : built) {
      if (b.row.fits && adds(b) > allowed) b.row.fits = false;
    }
  }
  for (size_t i = 0; i < built.size(); ++i) {
    const partition::ModeCost mc = built[i].row.b.total();
    if (!built[i].row.move && built[i].row.fits) best_stay_us = std::min(best_stay_us, mc.time_us);
  }
  for (size_t i = 0; i < built.size(); ++i) {
    if (built[i].deferred) continue;  // not this iteration: priced for the shared move below
    if (!built[i].row.move) {
      cand.push_back(i);
    } else if (built[i].row.fits &&
               (best_stay_us == kInf ||
                (best_stay_us - built[i].row.b.total().time_us) * opts_.horizon_iterations > built[i].move_us)) {
      cand.push_back(i);
    }
  }
  std::string inputs_str;
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StrAppend(&inputs_str, i ? ", " : "", partition::describe(global[i], info(inputs[i]) ? info(inputs[i])->placement : Placement::R()));
    if (is_stored(inputs[i])) absl::StrAppend(&inputs_str, info(inputs[i])->unsettled ? " (unsettled)" : " (stored)");
  }
  // choose_index weighs the candidates that fit both rooms (it checks the first again).
  const std::vector<size_t> all = cand;
  std::erase_if(cand, [&](size_t i) { return !built[i].row.fits; });
  if (cand.empty()) {
    auto smallest = std::min_element(all.begin(), all.end(), [&](size_t a, size_t b) {
      return built[a].row.b.total().bytes < built[b].row.b.total().bytes;
    });
    std::string need = "no option";
    if (smallest != all.end()) {
      const partition::ModeBreakdown& b = built[*smallest].row.b;
      need = absl::StrFormat("the smallest, %s, needs %.1f MiB, %.1f MiB of it outside the comm region, %.2f MiB "
                             "of that stored state",
                             built[*smallest].row.sig, b.total().bytes / (1 << 20),
                             (b.total().bytes - b.grad_bytes) / (1 << 20), (b.state_bytes - b.grad_bytes) / (1 << 20));
    }
    const std::string state =
        std::isfinite(state_room) ? absl::StrFormat(", %.2f MiB of that for stored state", state_room / (1 << 20)) : "";
    return absl::ResourceExhaustedError(absl::StrFormat(
        "DTP --dtp=auto: op %s on %s: no mode fits the room of %.1f MiB per rank (%.1f MiB of it outside the comm "
        "region%s); %s: expected a larger --budget/--memory, or more ranks",
        op.name(), inputs_str, room / (1 << 20), compute_room / (1 << 20), state, need));
  }
  std::vector<partition::ModeCost> costs;
  std::vector<std::string> names;
  int reference = -1;
  for (size_t i : cand) {
    if (reference < 0 && built[i].d.sig.mode == partition::Mode::kP1 && built[i].row.sig.find("gather") == std::string::npos) {
      reference = static_cast<int>(costs.size());
    }
    costs.push_back(built[i].row.b.total());
    names.push_back(built[i].row.sig);
  }
  absl::StatusOr<size_t> pick = partition::choose_index(costs, names, room, opts_.lambda,
                                                        absl::StrCat(op.name(), " on ", inputs_str), reference);
  if (!pick.ok()) {
    return absl::Status(pick.status().code(), absl::StrCat("DTP --dtp=auto: ", pick.status().message(),
                                                           ": expected a larger --budget/--memory, or more ranks"));
  }
  size_t chosen = cand[*pick];
  // Testing only: MTC_TESTING_DTP_DISAGREE=<op> makes the odd ranks take another option
  // for that op, so that --comm_check's comparison of decisions can be seen to catch it.
  if (!disagree_.empty() && disagree_ == op.name() && g_.index % 2 == 1 && cand.size() > 1) {
    chosen = cand[(*pick + 1) % cand.size()];
  }
  // A shared stored tensor's largest user: the move to S(0) that pays within the horizon
  // (at the fitted rates) is made after the iteration.
  {
    const double now_us = built[chosen].row.b.total().time_us;
    int best = -1;
    for (size_t i = 0; i < built.size(); ++i) {
      if (!built[i].deferred || !built[i].row.fits) continue;
      const double saved = now_us - built[i].row.b.total().time_us;
      if (saved * opts_.horizon_iterations > built[i].move_us &&
          (best < 0 || built[i].row.b.total().time_us < built[static_cast<size_t>(best)].row.b.total().time_us)) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) {
      const Built& b = built[static_cast<size_t>(best)];
      shared_moves_.push_back(SharedMove{inputs[b.defer_input], Placement::S(0), b.defer_gather});
    }
  }
  ReportRow row;
  row.op = op.name();
  row.inputs = inputs_str;
  row.family = family;
  row.room_bytes = room;
  row.compute_room_bytes = compute_room;
  row.state_room_bytes = state_room;
  row.activation_room_bytes = activation_left;
  if (counted) {
    const double c = charge(built[chosen]);
    Identity& f = identities_[id_index];
    if (c > f.charged) {
      activation_charged_ += c - f.charged;
      f.charged = c;
    }
  }
  const double chosen_held = held(built[chosen].row.b);
  for (Built& b : built) row.options.push_back(std::move(b.row));
  row.chosen = chosen;
  auto d = std::make_unique<Decision>(std::move(built[chosen].d));
  d->identity = id_index;
  d->held_bytes = chosen_held;
  count_warm(*d);
  {
    std::lock_guard<std::mutex> l(mu_);  // the observer reads the rows
    d->report_row = rows_.size();
    rows_.push_back(std::move(row));
  }
  ++fig_.decisions;
  if (opts_.report && g_.index == 0) {
    std::FILE* out = opts_.report_to ? opts_.report_to : stdout;
    std::fputs(print_row(rows_.back(), /*final_rates=*/false).c_str(), out);
    std::fflush(out);
  }
  const Decision* result = d.get();
  // A decision that places a stored tensor (settles or moves it) is not kept under the
  // key its inputs had: another tensor held alike (the next layer's weight of the same
  // shape) must be decided against the ledger as it is then, or each hit would place one
  // more tensor past the room. apply() keeps it under the key the inputs have afterwards.
  if (places_any(*result)) {
    placing_.push_back(std::move(d));
  } else {
    cache_.emplace(std::move(k), std::move(d));
  }
  if (opts_.report && iteration_ >= 1) {
    std::lock_guard<std::mutex> l(mu_);
    ++rows_[result->report_row].dispatches;
  }
  fig_.decide_us += elapsed_us(t0);
  return result;
}

void Planner::count_warm(const Decision& d) {
  if (fitted_ || iteration_ != opts_.warmup_iterations - 1 || d.identity == Decision::kNoIdentity ||
      !grad_mode_enabled()) {
    return;
  }
  Identity& f = identities_[d.identity];
  ++f.dispatches;
  f.warm_held += d.held_bytes;
}

absl::Status Planner::apply(const OpDef& op, const Decision& d, std::span<const Tensor> inputs,
                            std::span<const TensorDesc> global) {
  bool placed = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!places(d.action[i])) continue;
    Tensor t = inputs[i];
    const DistInfo* di = info(t);
    if (di == nullptr || !di->stored) continue;
    if (d.action[i] == Action::kSettle && !di->unsettled) continue;  // settled by an earlier input
    if (!(di->placement == d.place[i]) || di->gather != d.gather_after[i] || di->unsettled) {
      MTC_RETURN_IF_ERROR(restore(t, d.place[i], d.gather_after[i], /*unsettled=*/false, t.ref()->dist->group));
    }
    ++(d.action[i] == Action::kSettle ? fig_.settled : fig_.moves);
    register_stored(t);
    placed = true;
  }
  // The same op on the inputs as they are now held (the next iteration's key) takes the
  // same signature, using them where they are: no second decision, which the changed
  // ledger could otherwise make differently.
  if (placed) {
    std::string k = key(op, inputs, global);
    if (!cache_.contains(k)) {
      auto again = std::make_unique<Decision>(d);
      for (size_t i = 0; i < again->action.size(); ++i) {
        if (places(again->action[i])) {
          again->action[i] = again->gather_after[i] ? Action::kGather : Action::kDirect;
        }
      }
      cache_.emplace(std::move(k), std::move(again));
    }
  }
  return absl::OkStatus();
}

void Planner::note_forced(const OpDef& op, std::span<const Tensor> inputs, std::span<const TensorDesc> global,
                          const partition::Signature& sig, int parts, std::span<const uint64_t> ids) {
  std::string k = key(op, inputs, global) + "|" + sig.str();
  size_t row_index;
  if (auto it = cache_.find(k); it != cache_.end()) {
    row_index = it->second->report_row;
  } else {
    std::vector<TensorDesc> out_global;
    if (!op.infer(global, out_global).ok()) return;
    const partition::OpContext ctx = context(op.name());
    ReportRow::Option o;
    std::vector<TensorDesc> local_in, local_out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const DistInfo* d = info(inputs[i]);
      InputTerm in;
      in.global_bytes = static_cast<double>(global[i].bytes());
      in.needs_grad = inputs[i].requires_grad();
      in.want = sig.in[i];
      in.have = d ? d->placement : Placement::R();
      in.local_bytes = local_bytes(global[i], sig.in[i], parts);
      if (is_stored(inputs[i])) {
        in.holding = inputs[i].requires_grad() ? Holding::kParameter : Holding::kBuffer;
        in.gather = d->gather && sig.in[i].replicated() && d->placement.split();
        if (in.gather) in.local_bytes = local_bytes(global[i], d->placement, parts);
        in.have = in.gather ? d->placement : sig.in[i];
      }
      o.in.push_back(in);
      local_in.push_back(TensorDesc{partition::local_shape(global[i].shape, sig.in[i], parts, 0), global[i].dtype});
    }
    for (size_t j = 0; j < out_global.size(); ++j) {
      const Placement p = j < sig.out.size() ? sig.out[j] : Placement::R();
      local_out.push_back(TensorDesc{partition::local_shape(out_global[j].shape, p, parts, 0), out_global[j].dtype});
      o.out.push_back(OutputTerm{p, static_cast<double>(out_global[j].bytes()), static_cast<double>(local_out.back().bytes())});
    }
    const OpCost c = op.cost(local_in, local_out);
    o.flops = c.flops;
    o.bytes = c.bytes_read + c.bytes_written;
    o.contraction = contraction(c.flops, local_out);
    partition::SignatureTerms terms{o.in, o.out, o.flops, o.bytes, o.contraction};
    auto br = partition::signature_breakdown(terms, ctx);
    if (!br.ok()) return;
    o.b = *br;
    o.forward_us = partition::forward_us(terms, ctx).value_or(kInf);
    o.sig = sig.str();
    ReportRow row;
    row.op = op.name();
    row.family = op.name();
    for (size_t i = 0; i < inputs.size(); ++i) {
      absl::StrAppend(&row.inputs, i ? ", " : "", partition::describe(global[i], info(inputs[i]) ? info(inputs[i])->placement : Placement::R()));
    }
    row.options.push_back(std::move(o));
    {
      std::lock_guard<std::mutex> l(mu_);
      row_index = rows_.size();
      rows_.push_back(std::move(row));
    }
    auto d = std::make_unique<Decision>();
    d->report_row = row_index;
    cache_.emplace(std::move(k), std::move(d));
    ++fig_.decisions;
    if (opts_.report && g_.index == 0) {
      std::FILE* out = opts_.report_to ? opts_.report_to : stdout;
      std::fputs(print_row(rows_.back(), false).c_str(), out);
      std::fflush(out);
    }
  }
  if (iteration_ >= 1) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++rows_[row_index].dispatches;
    }
    measure(row_index, ids);
  }
}

void Planner::measure(size_t row, std::span<const uint64_t> ids) {
  if (iteration_ < 1) return;
  std::lock_guard<std::mutex> l(mu_);
  for (uint64_t id : ids) {
    if (id != 0) measuring_[id] = row;
  }
}

void Planner::observe(const OpDef& op, std::span<const TensorDesc> in, std::span<const TensorDesc> out,
                      std::span<const uint64_t> out_ids, double us) {
  std::lock_guard<std::mutex> l(mu_);
  if (sampling_ && us > 0) {
    // Collectives calibrate the collectives' model; every other op its family's rates.
    if (const std::optional<double> pred = collective_us(op, in, out, opts_.comm)) {
      if (*pred > 0 && std::isfinite(*pred)) comm_samples_.push_back({*pred, us});
    } else {
      const OpCost c = op.cost(in, out);
      samples_[op.name()].push_back({c.flops, c.bytes_read + c.bytes_written, us});
    }
  }
  bool counted = false;  // one op, one time, however many of its outputs are measured
  for (uint64_t id : out_ids) {
    auto it = measuring_.find(id);
    if (it == measuring_.end()) continue;
    if (!counted && it->second < rows_.size()) {
      rows_[it->second].measured_us += us;
      ++rows_[it->second].measured_ops;
      counted = true;
    }
    measuring_.erase(it);
  }
}

absl::Status Planner::move_shared() {
  for (SharedMove& m : shared_moves_) {
    const DistInfo* d = info(m.t);
    if (d == nullptr || !d->stored || (d->placement == m.place && d->gather == m.gather)) continue;
    m.t.set_grad(Tensor());  // this iteration's, at the old placement: the next zero_grad drops it anyway
    MTC_RETURN_IF_ERROR(restore(m.t, m.place, m.gather, /*unsettled=*/false, m.t.ref()->dist->group));
    register_stored(m.t);
    ++fig_.moves;
    ++fig_.shared_moves;
  }
  shared_moves_.clear();
  return absl::OkStatus();
}

absl::Status Planner::end_iteration(Interpreter& interp) {
  ++iteration_;
  if (!shared_moves_.empty()) {
    MTC_RETURN_IF_ERROR(interp.sync());
    MTC_RETURN_IF_ERROR(move_shared());
  }
  if (iteration_ == 1 && opts_.warmup_iterations > 1) {
    MTC_RETURN_IF_ERROR(interp.sync());
    std::lock_guard<std::mutex> l(mu_);
    sampling_ = true;
  }
  if (iteration_ != opts_.warmup_iterations) return absl::OkStatus();
  MTC_RETURN_IF_ERROR(interp.sync());  // every op of the warm-up observed
  std::string text;
  {
    std::lock_guard<std::mutex> l(mu_);
    sampling_ = false;
    if (opts_.world ? opts_.world->rank() == 0 : g_.index == 0) {
      std::vector<partition::RateSample> all;
      std::vector<std::string> names;
      for (const auto& [name, s] : samples_) names.push_back(name);
      std::sort(names.begin(), names.end());
      for (const std::string& name : names) {
        const auto& s = samples_[name];
        all.insert(all.end(), s.begin(), s.end());
        // Every family with a sample gets its own fit: an op that runs once per iteration
        // (the loss, the LM head) has two, and its one recurring shape is then priced
        // exactly, where the pooled rates (dominated by GEMMs) missed cross-entropy's
        // exp and log by 65x on GPT-2 small.
        absl::StatusOr<partition::Rates> r = partition::fit_rates(s);
        if (r.ok()) absl::StrAppendFormat(&text, "%s %a %a %a\n", name, r->flops_per_us, r->bytes_per_us, r->overhead_us);
      }
      if (!all.empty()) {
        absl::StatusOr<partition::Rates> r = partition::fit_rates(all);
        if (r.ok()) absl::StrAppendFormat(&text, "* %a %a %a\n", r->flops_per_us, r->bytes_per_us, r->overhead_us);
      }
      if (!comm_samples_.empty()) {
        partition::CollectiveModel m = opts_.comm;
        if (m.calibrate(comm_samples_).ok()) {
          absl::StrAppendFormat(&text, "@collectives %a %d 0\n", m.per_call_us, static_cast<int>(comm_samples_.size()));
        }
      }
    }
    samples_.clear();
    comm_samples_.clear();
  }
  // The iteration's activations: the compute region's peak in the warm-up, in KiB (rounded
  // up), the largest over the ranks below.
  int32_t peak_kib = 0;
  double capacity = 0;
  if (opts_.count_activations) {
    MTC_ASSIGN_OR_RETURN(MemoryStats m, interp.memory_stats());
    peak_kib = static_cast<int32_t>(std::min<size_t>((m.compute.peak_allocated + 1023) / 1024, std::numeric_limits<int32_t>::max()));
    capacity = opts_.activation_capacity_bytes > 0 ? opts_.activation_capacity_bytes
                                                   : static_cast<double>(m.compute.capacity);
  }
  // Rank 0's rates to every rank: the same inputs give the same decisions.
  const dist::CommPtr& over = opts_.world ? opts_.world : g_.comm;
  const bool is_root = over ? over->rank() == 0 : true;
  if (over != nullptr && over->world_size() > 1) {
    NoGradGuard no_grad;
    int32_t len_peak[2] = {is_root ? static_cast<int32_t>(text.size()) : 0, peak_kib};
    Tensor lt = interp.put(TensorDesc{Shape{2}, DType::kI32}, len_peak);
    MTC_ASSIGN_OR_RETURN(std::vector<int32_t> lens, dist::all_gather(lt, over).to_vector_i32());
    const int32_t n = lens[0];
    for (size_t r = 1; r < lens.size(); r += 2) peak_kib = std::max(peak_kib, lens[r]);
    std::vector<int32_t> buf(static_cast<size_t>((n + 3) / 4 + 1), 0);
    if (is_root) std::memcpy(buf.data(), text.data(), text.size());
    Tensor bt = interp.put(TensorDesc{Shape{static_cast<int64_t>(buf.size())}, DType::kI32}, buf.data());
    MTC_ASSIGN_OR_RETURN(std::vector<int32_t> got, dist::all_gather(bt, over).to_vector_i32());
    text.assign(reinterpret_cast<const char*>(got.data()), static_cast<size_t>(n));
  }
  // Lines: "family F B C" (rates), "* F B C" (the other families), "@collectives P N 0"
  // (the collectives' per-call time, from N calls).
  partition::RateTable table(opts_.initial_rates);
  int families = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() != 4) continue;
    if (f[0] == "@collectives") {
      comm_.per_call_us = std::strtod(f[1].c_str(), nullptr);
      continue;
    }
    partition::Rates r{std::strtod(f[1].c_str(), nullptr), std::strtod(f[2].c_str(), nullptr),
                       std::strtod(f[3].c_str(), nullptr)};
    if (f[0] == "*") {
      table = partition::RateTable(r);
    } else {
      ++families;
    }
  }
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() != 4 || f[0] == "*" || f[0] == "@collectives") continue;
    table.set(f[0], partition::Rates{std::strtod(f[1].c_str(), nullptr), std::strtod(f[2].c_str(), nullptr),
                                     std::strtod(f[3].c_str(), nullptr)});
  }
  if (opts_.report && (opts_.world ? opts_.world->rank() == 0 : g_.index == 0)) {
    std::FILE* out = opts_.report_to ? opts_.report_to : stdout;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() != 4) continue;
      if (f[0] == "@collectives") {
        std::fprintf(out, "dtp: collectives measured in the warm-up (%s calls): the alpha-beta lines + %.1f us per call\n",
                     f[2].c_str(), std::strtod(f[1].c_str(), nullptr));
        continue;
      }
      std::fprintf(out, "dtp: rates %-18s %12.4g FLOP/us %12.4g bytes/us %8.2f us per call\n",
                   f[0] == "*" ? "(other families)" : f[0].c_str(), std::strtod(f[1].c_str(), nullptr),
                   std::strtod(f[2].c_str(), nullptr), std::strtod(f[3].c_str(), nullptr));
    }
    std::fflush(out);
  }
  rates_ = std::move(table);
  if (opts_.count_activations) {
    activation_room_ = std::max(0.0, capacity - 1024.0 * peak_kib);
    activation_charged_ = 0;
    ledger_compute_at_fit_ = ledger_compute_;
  }
  fitted_ = true;
  fig_.fitted = true;
  fig_.families = families;
  // Each decision is made again at the fitted rates; settled parameters move only when it pays.
  cache_.clear();
  placing_.clear();
  std::lock_guard<std::mutex> l(mu_);
  rows_.clear();
  measuring_.clear();
  return absl::OkStatus();
}

double Planner::activation_used() const {
  return activation_charged_ + std::max(0.0, ledger_compute_ - ledger_compute_at_fit_);
}

AutoFigures Planner::figures() const {
  AutoFigures f = fig_;
  if (fitted_ && opts_.count_activations) {
    f.activation_room_bytes = activation_room_;
    f.activation_added_bytes = activation_used();
  }
  return f;
}

std::string Planner::print_row(const ReportRow& r, bool final_rates) const {
  std::string s = absl::StrFormat(
      "dtp: decision %s on %s (room %.1f MiB, %.1f outside the comm region%s%s)\n", r.op, r.inputs,
      std::isfinite(r.room_bytes) ? r.room_bytes / (1 << 20) : -1.0,
      std::isfinite(r.compute_room_bytes) ? r.compute_room_bytes / (1 << 20) : -1.0,
      std::isfinite(r.state_room_bytes) ? absl::StrFormat(", %.1f of it for stored state", r.state_room_bytes / (1 << 20))
                                        : "",
      std::isfinite(r.activation_room_bytes)
          ? absl::StrFormat("; %.1f left by the warm-up's peak for what it adds", r.activation_room_bytes / (1 << 20))
          : "");
  absl::StrAppendFormat(&s, "dtp:   %-44s %12s %12s %10s %10s\n", "signature", "pred_us", "pred_fwd_us", "MiB", "note");
  for (size_t i = 0; i < r.options.size(); ++i) {
    const ReportRow::Option& o = r.options[i];
    double t = o.b.total().time_us, f = o.forward_us;
    if (final_rates) {
      const partition::OpContext ctx = context(r.family);
      partition::SignatureTerms terms{o.in, o.out, o.flops, o.bytes, o.contraction};
      if (auto b = partition::signature_breakdown(terms, ctx); b.ok()) t = b->total().time_us;
      f = partition::forward_us(terms, ctx).value_or(kInf);
    }
    absl::StrAppendFormat(&s, "dtp: %s %-44s %12.1f %12.1f %10.2f %10s\n", i == r.chosen ? "*" : " ", o.sig, t, f,
                          o.b.total().bytes / (1 << 20), !o.fits ? "over" : (o.move ? "move" : ""));
  }
  return s;
}

std::string Planner::summary() const {
  std::lock_guard<std::mutex> l(mu_);
  // Decisions alike (the same op on the same global inputs and placements, taking the same
  // signature) share a line: each weight of a layer stack is placed by a decision of its
  // own, and 48 lines of one q/k/v projection, each measured over its one first call,
  // said less than one line over all their calls.
  std::vector<size_t> first;  // per line: its first row
  std::vector<double> meas_us;
  std::vector<uint64_t> calls;
  absl::flat_hash_map<std::string, size_t> line_of;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const ReportRow& r = rows_[i];
    auto [it, fresh] = line_of.try_emplace(absl::StrCat(r.op, "|", r.options[r.chosen].sig, "|", r.inputs), first.size());
    if (fresh) {
      first.push_back(i);
      meas_us.push_back(0);
      calls.push_back(0);
    }
    meas_us[it->second] += r.measured_us;
    calls[it->second] += r.dispatches;
  }
  std::string s = absl::StrFormat(
      "dtp summary: %zu decisions (%zu lines), %" PRIu64 " cache hits, %" PRIu64 " settled, %" PRIu64
      " moved, rates %s (%d families)\n",
      rows_.size(), first.size(), fig_.hits, fig_.settled, fig_.moves, fitted_ ? "fitted" : "default", fig_.families);
  absl::StrAppendFormat(&s, "dtp summary: %-5s %-14s %-44s %12s %12s %8s  %s\n", "row", "op", "signature",
                        "pred_fwd_us", "meas_fwd_us", "calls", "inputs");
  for (size_t j = 0; j < first.size(); ++j) {
    const ReportRow& r = rows_[first[j]];
    const ReportRow::Option& o = r.options[r.chosen];
    const partition::OpContext ctx = context(r.family);
    partition::SignatureTerms terms{o.in, o.out, o.flops, o.bytes, o.contraction};
    const double f = partition::forward_us(terms, ctx).value_or(kInf);
    const double meas = calls[j] > 0 ? meas_us[j] / static_cast<double>(calls[j]) : 0;
    absl::StrAppendFormat(&s, "dtp summary: %-5zu %-14s %-44s %12.1f %12.1f %8" PRIu64 "  %s\n", first[j], r.op, o.sig,
                          f, meas, calls[j], r.inputs);
  }
  return s;
}

// ---- the public API ----

absl::Status enable_auto(nn::Module& net, const Group& g, AutoOptions o) {
  if (g == nullptr) return absl::InvalidArgumentError("dtp::enable_auto: no partition group");
  if (!(o.lambda >= 0 && o.lambda <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("--dtp_lambda %g: expected a number in [0, 1]", o.lambda));
  }
  if (o.warmup_iterations < 1) {
    return absl::InvalidArgumentError(absl::StrCat("dtp warm-up of ", o.warmup_iterations, " iterations: expected >= 1"));
  }
  auto planner = std::make_shared<Planner>(*g, o);
  if (o.choose) {
    for (Tensor& t : net.parameters()) {
      if (t.global()) {
        return absl::FailedPreconditionError(absl::StrCat("dtp::enable_auto: ", partition::describe(t.desc(), placement(t)),
                                                          " is placed already (auto places the model itself)"));
      }
    }
    auto place_all = [&](nn::NamedTensors ts) -> absl::Status {
      for (auto& [name, t] : ts) {
        if (t.global()) continue;
        const Placement p = partition::splittable(t.shape(), 0, g->parts) && !t.shape().empty() ? Placement::S(0)
                                                                                                 : Placement::R();
        MTC_RETURN_IF_ERROR(restore(t, p, /*gather=*/false, /*unsettled=*/true, g));
        planner->register_stored(t);
      }
      return absl::OkStatus();
    };
    MTC_RETURN_IF_ERROR(place_all(net.named_parameters()));
    MTC_RETURN_IF_ERROR(place_all(net.named_buffers()));
  } else {
    for (Tensor& t : net.parameters()) planner->register_stored(t);
  }
  Interpreter* interp = nullptr;
  for (Tensor& t : net.parameters()) {
    interp = t.interpreter();
    break;
  }
  planner->set_interpreter(interp);
  if (interp != nullptr) {
    std::weak_ptr<Planner> w = planner;
    MTC_RETURN_IF_ERROR(interp->set_op_observer([w](const OpDef& op, std::span<const TensorDesc> in,
                                                    std::span<const TensorDesc> out, std::span<const uint64_t> ids,
                                                    double us) {
      if (auto p = w.lock()) p->observe(op, in, out, ids, us);
    }));
  }
  g->planner = std::move(planner);
  return absl::OkStatus();
}

absl::Status end_iteration(const Group& g) {
  if (g == nullptr || g->planner == nullptr) return absl::OkStatus();
  Interpreter* interp = g->planner->interpreter();
  if (interp == nullptr) return absl::OkStatus();  // a model without parameters: nothing measured
  return g->planner->end_iteration(*interp);
}

AutoFigures auto_figures(const Group& g) {
  return g && g->planner ? g->planner->figures() : AutoFigures{};
}

std::string auto_summary(const Group& g) { return g && g->planner ? g->planner->summary() : std::string(); }

}  // namespace mtc::dtp
