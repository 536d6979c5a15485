// DTP's run-time choice (--dtp=auto, docs/dtp.md "Choosing at run time"): the planner a
// partition group carries. For each op the dispatch issues it prices every signature of
// the op with partition/cost.h (its shards' cost through the fitted rates, conversions
// and collectives through the alpha-beta model, the rank's bytes against the budget),
// chooses one by lambda, caches the choice by (op, attributes, global input shapes, input
// placements), settles the parameters it touches for the first time, and keeps the
// figures the report prints. The dispatch (dtp.cc) calls decide(); the rest is here.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "dist/dtp.h"
#include "partition/cost.h"

namespace mtc::dtp {

// Action: what a decision does to one input before the op runs.
enum class Action : uint8_t {
  kConvert = 0,  // an activation: converted have -> the signature's placement (or nothing)
  kDirect = 1,   // stored, used as held
  kGather = 2,   // stored S(0), all_gathered for this use (P2)
  kSettle = 3,   // stored and unsettled: placed for good at `place` (then used, or gathered)
  kMove = 4,     // stored and settled elsewhere: moved to `place` (with its optimizer state)
};

// places: an action that places a stored tensor (settles or moves it).
inline bool places(Action a) { return a == Action::kSettle || a == Action::kMove; }

// Decision: the cached outcome for one (op, attributes, shapes, placements).
struct Decision {
  partition::Signature sig;
  absl::InlinedVector<Action, 4> action;
  absl::InlinedVector<partition::Placement, 4> place;  // kSettle / kMove: the new storage
  absl::InlinedVector<bool, 4> gather_after;           // kSettle: stored S(0) and gathered per use
  partition::Mode mode = partition::Mode::kNone;       // as counted: a gathered p1 counts p2
  size_t report_row = 0;                               // index into the planner's rows
  // The iteration's activations (AutoOptions::count_activations): the op's identity (name,
  // attributes, global shapes; an index into the planner's table, kNoIdentity when not
  // counted) and the bytes the chosen option holds through the iteration (activations and
  // conversion buffers).
  static constexpr uint32_t kNoIdentity = ~uint32_t{0};
  uint32_t identity = kNoIdentity;
  double held_bytes = 0;
};

// Row: one decision as the report prints it.
struct ReportRow {
  std::string op;      // "matmul"
  std::string inputs;  // "f32[8,64,768] S(0), f32[768,2304] R"
  struct Option {
    std::string sig;           // "(S(0), R) -> S(0) [p1]", "+gather" when gathered
    partition::ModeBreakdown b;
    double forward_us = 0;
    bool fits = true;
    bool move = false;
    std::vector<partition::InputTerm> in;   // kept so the summary prices them at the final rates
    std::vector<partition::OutputTerm> out;
    double flops = 0, bytes = 0;
    bool contraction = false;
  };
  std::vector<Option> options;
  size_t chosen = 0;
  std::string family;            // the rates' family (the op's name)
  double measured_us = 0;        // the op and its conversions, summed over dispatches measured
  uint64_t measured_ops = 0;     // ops observed for it
  uint64_t dispatches = 0;       // dispatches counted while measuring
  double room_bytes = 0;         // the budget left for it when decided
  double compute_room_bytes = 0; // of it, what is not the comm region (for all but gradients)
  double state_room_bytes = 0;   // of that, what the stored state may take (infinite: no cap)
  double activation_room_bytes = std::numeric_limits<double>::infinity();  // after the fit, what the
      // warm-up's peak leaves for the bytes the new decisions add (infinite: not counted; a
      // forced mode's row)
};

class Planner {
 public:
  Planner(const ShardContext& g, AutoOptions o);
  // decide: the decision for op on these inputs (cached), or an error naming the op.
  // `stored` and `have` as the dispatch sees them.
  absl::StatusOr<const Decision*> decide(const OpDef& op, std::span<const Tensor> inputs,
                                         std::span<const TensorDesc> global, int parts);
  // price: a row for a signature chosen elsewhere (a forced mode), for the report only.
  void note_forced(const OpDef& op, std::span<const Tensor> inputs, std::span<const TensorDesc> global,
                   const partition::Signature& sig, int parts, std::span<const uint64_t> ids_to_measure);
  // measure: the local ops issued for a decision's row (their output ids), timed by the
  // observer.
  void measure(size_t row, std::span<const uint64_t> ids);
  // observe: the interpreter's OpObserver.
  void observe(const OpDef& op, std::span<const TensorDesc> in, std::span<const TensorDesc> out,
               std::span<const uint64_t> out_ids, double us);
  // end_iteration: counts iterations; at the end of the warm-up fits the rates on rank 0,
  // broadcasts them, and clears the decisions (each is made again at the fitted rates).
  absl::Status end_iteration(Interpreter& interp);
  // move_shared: the moves the shared tensors' largest users asked for (collective).
  absl::Status move_shared();
  // settle_stored / ledger.
  void register_stored(const Tensor& t);
  AutoFigures figures() const;
  std::string summary() const;
  const AutoOptions& options() const { return opts_; }
  bool choosing() const { return opts_.choose; }
  // apply: a decision's settles and moves (collective), before the op's conversions.
  // It also caches the decision for the inputs as they are held afterwards.
  absl::Status apply(const OpDef& op, const Decision& d, std::span<const Tensor> inputs,
                     std::span<const TensorDesc> global);
  void set_interpreter(Interpreter* i) { interp_ = i; }
  Interpreter* interpreter() const { return interp_; }

 private:
  struct Built;  // one option's figures while deciding
  std::string key(const OpDef& op, std::span<const Tensor> inputs, std::span<const TensorDesc> global) const;
  partition::OpContext context(const std::string& family) const;
  std::string print_row(const ReportRow& r, bool final_rates) const;
  // count_warm: in the warm-up's last iteration, one training dispatch of d (its identity's
  // dispatches and held bytes).
  void count_warm(const Decision& d);

  const ShardContext& g_;
  Interpreter* interp_ = nullptr;
  AutoOptions opts_;
  partition::RateTable rates_;
  partition::CollectiveModel comm_;  // opts_.comm, calibrated at the fit to the warm-up's collectives
  absl::flat_hash_map<std::string, std::unique_ptr<Decision>> cache_;
  std::vector<std::unique_ptr<Decision>> placing_;  // decisions that settle or move: not cached (decide)
  std::vector<ReportRow> rows_;
  // The ledger: each stored tensor's state bytes on this rank at its placement, and of
  // them the bytes that are not its gradient (they cannot go to the comm region).
  struct Held {
    double bytes = 0, compute = 0;
  };
  absl::flat_hash_map<const TensorRef*, Held> ledger_;
  double ledger_total_ = 0, ledger_compute_ = 0;
  // A shared parameter (read by two ops: a tied embedding and LM head) cannot move within an iteration:
  // its other uses hold its old shape in their gradients. Its largest user (the most
  // FLOPs, over every op that used it) may ask for a move to S(0), which end_iteration
  // makes, in the order asked (the same on every rank).
  // The ops (name, attributes, shapes, input position) that read each stored tensor (not
  // those that only write it in place: the optimizer's step).
  absl::flat_hash_map<const TensorRef*, absl::flat_hash_set<std::string>> readers_;
  absl::flat_hash_map<const TensorRef*, double> top_user_flops_;
  struct SharedMove {
    Tensor t;
    partition::Placement place;
    bool gather = false;
  };
  std::vector<SharedMove> shared_moves_;
  // The iteration's activations (AutoOptions::count_activations). In the warm-up's last
  // iteration each op identity's dispatches and the bytes its decisions held are counted;
  // at the fit the compute region less the warm-up's peak (the largest over the ranks)
  // becomes the room for what the decisions made again add over them.
  struct Identity {
    uint64_t dispatches = 0;  // in the warm-up's last iteration
    double warm_held = 0;     // the bytes its decisions held there, summed over those dispatches
    double charged = 0;       // after the fit: the most any decision of it added (at `dispatches` calls)
  };
  absl::flat_hash_map<std::string, uint32_t> identity_index_;
  std::vector<Identity> identities_;
  double activation_room_ = 0;        // set at the fit
  double activation_charged_ = 0;     // of it, what the decisions since have added (their activations)
  double ledger_compute_at_fit_ = 0;  // the stored state outside the comm region at the fit
  // activation_used: what the decisions since the fit have taken of the room: their
  // activations and any growth of the stored state.
  double activation_used() const;
  int iteration_ = 0;
  bool fitted_ = false;
  AutoFigures fig_;
  // Written by the observer (worker thread).
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::vector<partition::RateSample>> samples_;
  std::vector<partition::CollectiveModel::Sample> comm_samples_;  // collectives: the lines' time, measured
  absl::flat_hash_map<uint64_t, size_t> measuring_;  // output id -> row
  bool sampling_ = false;
  std::string disagree_;  // MTC_TESTING_DTP_DISAGREE: testing only
};

}  // namespace mtc::dtp
