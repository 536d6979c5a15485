// DTP's cost model, the core (docs/dtp.md, "Cost model"): the time and the per-rank memory
// of an op with a weight (linear / matmul Y = X·W, conv2d) in each of the four modes, and
// the choice of a mode under a memory budget. Pure logic, like placement.h: the rates and
// the collective figures come in as numbers (the runtime fits the rates to measured op
// times and reads mtc-bench-comm's JSON; neither is wired yet, and --dtp=auto is not built).
//
// Units: every time is in microseconds (_us), every size in bytes (_bytes), every rate in
// FLOP/us or bytes/us. 1 FLOP/us = 1 MFLOP/s; 1 byte/us = 1 MB/s.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "partition/placement.h"

namespace mtc::partition {

// ---------------------------------------------------------------------------------------
// Compute rates.

// Rates: one device's rates for one op family ("matmul", "conv2d", ...):
//   time_us(flops, bytes) = flops / flops_per_us + bytes / bytes_per_us + overhead_us.
// A rate of +infinity drops its term (the fit found no cost in it); bytes are an op's
// OpCost bytes_read + bytes_written.
struct Rates {
  double flops_per_us = 0;  // FLOP/us
  double bytes_per_us = 0;  // bytes/us
  double overhead_us = 0;   // us per call (launch, dispatch)

  double time_us(double flops, double bytes) const;
  // cpu_default: a rough figure for one CPU rank before any op was measured: 20 GFLOP/s
  // (2e4 FLOP/us: a few AVX2 cores on an fp32 GEMM), 10 GB/s (1e4 bytes/us: a share of one
  // socket's memory bandwidth) and 5 us per call. An order of magnitude, not a
  // measurement: the fit to the first iterations' op times replaces it.
  static Rates cpu_default();
};

// RateSample: one measured op: its OpCost figures and its time.
struct RateSample {
  double flops = 0;  // FLOP
  double bytes = 0;  // bytes read + written
  double us = 0;     // measured time, us (> 0)
};

// fit_rates: us = a·flops + b·bytes + c with a, b, c >= 0, by least squares on the
// relative error (each sample weighted by 1/us², as mtc-bench-comm fits its alpha-beta
// lines, so that small ops count as much as large ones). Samples of one shape (equal
// flops and bytes) are first averaged into one, so the fit predicts a call's mean time
// however the calls' times spread; calls more than 4 times the shape's median and 1 ms
// above it (a time slice lost to another process: Note [Preempted calls] in cost.cc) are
// left out. The non-negative solution is
// exact: every subset of {a, b, c} is solved by the normal equations with the others held
// at 0, and the feasible solution (all >= 0) with the smallest weighted residual wins.
// Returns flops_per_us = 1/a and bytes_per_us = 1/b (+infinity where the coefficient is
// 0) and overhead_us = c. Errors: no sample, a sample with us <= 0 or a negative or
// non-finite figure.
absl::StatusOr<Rates> fit_rates(std::span<const RateSample> samples);

// RateTable: rates per op family, with a fallback for families not fitted.
class RateTable {
 public:
  explicit RateTable(Rates fallback = Rates::cpu_default()) : fallback_(fallback) {}
  void set(absl::string_view family, Rates r) { rates_[std::string(family)] = r; }
  // fit: fits `family` from its samples (fit_rates) and keeps the result.
  absl::Status fit(absl::string_view family, std::span<const RateSample> samples);
  const Rates& get(absl::string_view family) const;
  bool has(absl::string_view family) const { return rates_.find(family) != rates_.end(); }

 private:
  Rates fallback_;
  std::map<std::string, Rates, std::less<>> rates_;
};

// ---------------------------------------------------------------------------------------
// Collectives.

enum class Collective : uint8_t { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2, kAllToAll = 3 };
const char* collective_name(Collective c);  // "all_reduce", ...

// busbw_factor: nccl-tests' bus-bandwidth factor at p ranks (docs/comm.md):
// 2(p-1)/p for all_reduce, (p-1)/p for the other three; 0 for p <= 1.
double busbw_factor(Collective c, int p);

// collective_size_bytes: nccl-tests' "size" S of the call that converts a tensor of
// global_bytes on p ranks (docs/comm.md): all_reduce the per-rank buffer (the whole
// tensor); all_gather and reduce_scatter the whole gathered / to-be-scattered buffer (the
// whole tensor); all_to_all the buffer a rank exchanges, n blocks (its shard, global/p).
double collective_size_bytes(Collective c, double global_bytes, int p);

// CollectiveModel: t(S, p) = alpha_us + bus_us_per_byte · S · busbw_factor(c, p) for one
// call on S bytes (nccl-tests' convention) among p ranks, 0 when p <= 1. The cost per byte
// is kept per byte of bus traffic (S · factor, what a ring-optimal algorithm sends on each
// link) so that one fit made at one world size prices another (docs/comm.md: the bus
// bandwidth stays roughly constant); alpha is kept as measured.
//
// Where the file has the measured points as well (mtc-bench-comm's `points`), a call is
// priced from them instead: linearly between the two measured sizes around it, past the
// largest along the last two points' slope, below the smallest at the smallest's time
// (Note [Measured collective points] in cost.cc: on 4 ranks sharing 2 cores Open MPI's
// reduce_scatter took 0.6 ms at 2 MiB, 8.6 ms at 8 MiB and 1.48 s at 128 MiB, which no
// one line follows). A size at another world size is read at the size that moves the same
// bus bytes at the points' world size.
struct CollectiveModel {
  struct Line {
    double alpha_us = 0;         // us per call
    double bus_us_per_byte = 0;  // us per byte of bus traffic (1 / bus bandwidth in bytes/us)
  };
  std::array<Line, 4> lines{};  // indexed by Collective
  // One collective's measured calls: [S bytes, us] at world_size ranks, sizes increasing;
  // set_points makes the times non-decreasing (a time above a larger size's is noise).
  // Empty: the line prices the calls.
  struct Points {
    int world_size = 0;
    std::vector<std::pair<double, double>> at;
  };
  std::array<Points, 4> points{};  // indexed by Collective
  // Measured in place (calibrate): what every call takes beyond its line's time. Where
  // ranks share cores it is mostly the wait for the last rank to arrive.
  double per_call_us = 0;

  // time_us: alpha + bus_us_per_byte · S · busbw_factor(c, p) + per_call_us, or by the
  // points; 0 on one rank (shared_call_us with the whole call).
  double time_us(Collective c, double size_bytes, int p) const;
  // shared_call_us: S's part of one call that carries other tensors too (a data-parallel
  // gradient bucket): its bytes' time + call_share · (the call's fixed time + per_call_us),
  // call_share in [0, 1]; 0 on one rank. The fixed time is alpha, or the smallest point's
  // time, and the bytes' time what the call takes beyond it.
  double shared_call_us(Collective c, double size_bytes, int p, double call_share) const;
  // calibrate: per_call_us from collectives measured in training: the median over the
  // calls of (measured − predicted), at least 0. The median, not the mean: on 4 ranks
  // sharing 2 cores most calls wait 1-4 ms, but the loss's scalar all-reduce waits for
  // the slowest rank's whole forward (30 ms), and one large reduce-scatter ran 25x its
  // line. Errors (the model unchanged): fewer than kCalibrationCalls samples (too few for
  // a median to stand for the calls to come), a sample whose figures are not both finite
  // and > 0.
  static constexpr size_t kCalibrationCalls = 10;
  struct Sample {
    double predicted_us = 0;  // the lines' time for the call (per_call_us 0)
    double us = 0;            // measured
  };
  absl::Status calibrate(std::span<const Sample> samples);
  // set_fit: one line of mtc-bench-comm's JSON: alpha_us and beta_us_per_byte (per byte
  // of S) measured at world_size ranks; beta is turned into the per-bus-byte figure by
  // dividing by busbw_factor(c, world_size). Errors: world_size < 2, negative figures.
  absl::Status set_fit(Collective c, double alpha_us, double beta_us_per_byte, int world_size);
  // set_points: the measured [S bytes, us] pairs of mtc-bench-comm's JSON, at world_size
  // ranks (Points). Errors (the model unchanged): world_size < 2, no pair, a size or time
  // not finite and > 0, sizes not increasing.
  absl::Status set_points(Collective c, std::span<const std::pair<double, double>> at, int world_size);

  // mpi_cpu_default: MPI on host memory, one node. Source: docs/comm.md's sample of
  // mtc-bench-comm's JSON (mpi, 4 ranks, all_reduce: alpha 35.1 us, beta 0.00237 us/B at
  // busbw factor 1.5, i.e. 0.00158 us per bus byte, ~0.63 GB/s bus bandwidth); the other
  // three collectives take the same alpha and bus bandwidth (no sample of theirs is
  // recorded).
  static CollectiveModel mpi_cpu_default();
  // nccl_default: NCCL over NVLink on an 8-GPU H100 node. Source: NVIDIA's published
  // nccl-tests results for DGX H100 (all_reduce, all_gather and reduce_scatter bus
  // bandwidth about 450 GB/s at large sizes: 1/450e3 us per bus byte; all_to_all taken
  // at about 2/3 of that, 300 GB/s) and a small-message latency of about 10 us per call
  // (NCCL's ring latency at 8 GPUs is of that order). Approximate figures, to be replaced
  // by mtc-bench-comm's fit on the machine at hand.
  static CollectiveModel nccl_default();
  // from_bench_json: mtc-bench-comm's alpha-beta JSON (docs/comm.md): world_size and, for
  // each collective it has, alpha_us and beta_us_per_byte (set_fit) and, when present, its
  // points (set_points); the collectives it lacks keep `base`'s lines and points. Errors:
  // no world_size, no collective, a figure or points that do not parse or that set_fit /
  // set_points refuses; each names what was expected.
  static absl::StatusOr<CollectiveModel> from_bench_json(absl::string_view text, const CollectiveModel& base);
};

// conversion_us: the forward collective of one conversion (none for a local slice or no
// step: 0), a tensor of global_bytes on p ranks, priced by m. +infinity when unsupported.
double conversion_us(Conversion c, double global_bytes, int parts, const CollectiveModel& m);

// ---------------------------------------------------------------------------------------
// The op, its cost in a mode, and the choice.

// WeightOp: an op with a weight, in the terms of docs/design.md: Y = X·W with X [B, c],
// W [c, n], Y [B, n], each element of the pair (c, n) possibly carrying more:
//   linear / matmul: B the product of X's leading dimensions, the three extents 1;
//   conv2d x (N, C, H, W), w (OC, C, KH, KW), y (N, OC, OH, OW): B = N, c = C, n = OC,
//     x_per_elem = H·W, y_per_elem = OH·OW, w_per_elem = KH·KW.
// Forward FLOPs = 2·B·c·n·w_per_elem·y_per_elem.
struct WeightOp {
  int64_t batch = 0;           // B
  int64_t in = 0;              // c
  int64_t out = 0;             // n
  int64_t x_per_elem = 1;      // X elements per (batch, c) pair
  int64_t y_per_elem = 1;      // Y elements per (batch, n) pair
  int64_t w_per_elem = 1;      // W elements per (c, n) pair
  int64_t elem_bytes = 4;      // bytes per element (f32)
  int channel_dim = 1;         // X's dimension holding c (1 for [B, c] and NCHW; last for [N, T, c])

  static WeightOp linear(int64_t batch, int64_t in, int64_t out, int64_t elem_bytes = 4);
  static WeightOp conv2d(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                         int64_t oh, int64_t ow, int64_t elem_bytes = 4);
  double w_bytes() const;  // c·n·w_per_elem·e, global
  double x_bytes() const;  // B·c·x_per_elem·e, global
  double y_bytes() const;  // B·n·y_per_elem·e, global
  double flops() const;    // forward FLOPs, global
};

// CostContext: what the cost of a mode depends on besides the op.
struct CostContext {
  int parts = 1;                      // p, ranks in the partition group
  Rates rates;                        // the op family's rates
  CollectiveModel comm;               // the group's collectives
  double optimizer_states = 0;        // optimizer state per parameter element, in parameters:
                                      // 0 SGD without momentum, 1 momentum, 2 AdamW
  bool backward = true;               // training: the backward's matmuls and collectives count
  bool x_needs_grad = true;           // dX is computed (false for a first layer)
};

// ModeCost: an op's figures in one mode, per rank: time (forward and backward) and memory.
struct ModeCost {
  double time_us = 0;  // us per iteration
  double bytes = 0;    // bytes held on the rank
};

// ModeBreakdown: ModeCost's terms (docs/dtp.md, "Cost model"):
//   time_us = compute_us + collective_us + conversion_us
//   bytes   = state_bytes + activation_bytes + buffer_bytes
struct ModeBreakdown {
  Mode mode = Mode::kNone;
  double compute_us = 0;        // the forward matmul and, training, dW's and dX's, on the rank's shards
  double collective_us = 0;     // the mode's own collectives, forward and backward
  double conversion_us = 0;     // X's conversion to the placement the mode needs, and its backward
  double sent_bytes = 0;        // bytes one rank sends over all of them (bus bytes: S · busbw_factor)
  double state_bytes = 0;       // parameter + gradient + optimizer state kept on the rank
  double grad_bytes = 0;        // of state_bytes, the gradients (they go to the comm region)
  double activation_bytes = 0;  // X as the op reads it and Y as it leaves it (kept for the backward)
  double buffer_bytes = 0;      // conversion buffers: P2's gathered W and whole dW; P3's converted Y
  ModeCost total() const {
    return {compute_us + collective_us + conversion_us, state_bytes + activation_bytes + buffer_bytes};
  }
};

// x_placement_for: the placement X must have in mode m: P1, P2 S(0); P3 S(channel_dim);
// P4 R.
Placement x_placement_for(const WeightOp& op, Mode m);

// mode_breakdown: op in mode m (kP1..kP4) on ctx.parts ranks, X held as x_have, and, for
// P3, the placement y_next the next op needs its Partial Y in (R: all_reduce, S(d):
// reduce_scatter, P: none); see docs/dtp.md for every term. Errors: a mode outside
// P1..P4, parts < 1, an X placement that cannot be converted (plan_conversion's
// kUnsupported), a non-positive extent.
absl::StatusOr<ModeBreakdown> mode_breakdown(const WeightOp& op, Mode m, Placement x_have, Placement y_next,
                                             const CostContext& ctx);
absl::StatusOr<ModeCost> mode_cost(const WeightOp& op, Mode m, Placement x_have, Placement y_next,
                                   const CostContext& ctx);

// ModeOption: one mode an op can take, with its cost.
struct ModeOption {
  Mode mode = Mode::kNone;
  ModeCost cost;
};

// choose_mode: k* = argmin over the options with cost.bytes <= budget_bytes (and a finite
// time) of lambda·m/m_ref + (1 − lambda)·t/t_ref. m_ref and t_ref are P1's figures when P1
// is among the options and fits; otherwise the smallest bytes and the smallest time among
// the options that fit. A reference of 0 is replaced by the largest such figure, and a
// term whose figures are all 0 counts 0. Ties: the smaller bytes, then the earlier
// option. lambda outside [0, 1] is an error; so is an empty list, and no option fitting
// (the message names op_name, the budget and the smallest requirement with its mode).
absl::StatusOr<Mode> choose_mode(std::span<const ModeOption> options, double budget_bytes, double lambda,
                                 absl::string_view op_name = "op");


// ---------------------------------------------------------------------------------------
// Any op, by its signatures: what --dtp=auto prices (docs/dtp.md, "Cost model"). The
// runtime (src/dist/dtp_auto.cc) fills these figures from the op's signature table and its
// cost() on the shards; this is where they become a time and a memory.

// Holding: what an op's input is across iterations.
enum class Holding : uint8_t {
  kActivation = 0,  // made this iteration; converted by the dispatch as the signature asks
  kParameter = 1,   // stored, with a gradient and optimizer state of its placement
  kBuffer = 2,      // stored without a gradient (batch norm's running statistics)
};

// InputTerm: one input of an op under one signature.
struct InputTerm {
  Placement have;             // as held now (a gathered parameter: its stored S(0))
  Placement want;             // what the signature asks (a gathered parameter: R)
  double global_bytes = 0;    // bytes of the whole tensor
  double local_bytes = 0;     // bytes of the largest shard under `want`, or S(0) when gathered
  Holding holding = Holding::kActivation;
  bool unsettled = false;     // stored and not yet placed: taking `want` is a one-off, free here
  bool gather = false;        // a parameter stored S(0) and gathered to R for each use (P2)
  bool needs_grad = false;    // the backward computes its gradient
};

// OutputTerm: one output under the signature.
struct OutputTerm {
  Placement place;
  double global_bytes = 0;
  double local_bytes = 0;  // the largest shard's
};

// SignatureTerms: one signature of one op, as the cost needs it.
struct SignatureTerms {
  std::span<const InputTerm> inputs;
  std::span<const OutputTerm> outputs;
  double flops = 0;     // FLOP of the op on the largest shards (OpDef::cost)
  double bytes = 0;     // bytes it reads and writes there
  bool weighted = false;  // it multiplies by a parameter (matmul, conv): its backward is two
                          // such ops (dX and dW), others' one
};

// OpContext: besides the op, what its cost depends on.
struct OpContext {
  int parts = 1;            // p
  Rates rates;              // the op family's
  Rates step_rates;         // the optimizer step's, per parameter (bytes: param, grad, states)
  CollectiveModel comm;     // the group's collectives
  double optimizer_states = 0;  // per parameter element, in parameters (0, 1 SGD momentum, 2 AdamW)
  bool training = true;     // the backward and the optimizer step count
  // grad_bucket_bytes: data parallel's gradient bucket (--bucket_size), bytes. A Replicated
  // parameter's gradient is all-reduced in a bucket with others: its share of a call's
  // fixed time is min(1, its bytes / the bucket's). 0: a call of its own.
  double grad_bucket_bytes = 0;
};

// signature_breakdown: the op under one signature, per rank and iteration:
//   compute_us    the op on its shards (rates), x(1 + 1, or 2 when weighted) in training,
//                 plus the optimizer's step over the parameters' shards;
//   conversion_us each activation's conversion have -> want (the collective model) and, when
//                 it needs a gradient, the backward's adjoint collective (all_gather <->
//                 reduce_scatter, all_to_all <-> all_to_all, all_reduce <-> all_reduce: the
//                 gradient of a Replicated tensor is each rank's share until summed);
//   collective_us a Replicated parameter's gradient all-reduce (data parallel, its share of
//                 a bucket's call: OpContext::grad_bucket_bytes), a gathered
//                 one's all_gather and its gradient's reduce_scatter, and a Partial
//                 output's all_reduce (the next op most likely needs it whole or split);
//   state_bytes   parameters x (2 + optimizer_states) and buffers x 1, at their shards;
//   activation_bytes the activations as the op reads them (kept for the backward) and
//                 its outputs; buffer_bytes a gathered parameter's whole tensor (and its
//                 whole gradient in training).
// A stored input that is settled and has another placement than `want` counts nothing
// here: moving it is priced by move_us. Errors: parts < 1, an activation conversion that
// is unsupported (R or S -> P).
absl::StatusOr<ModeBreakdown> signature_breakdown(const SignatureTerms& s, const OpContext& ctx);

// forward_us: the part of the breakdown's time the forward spends: the op on its shards
// once and the forward collectives of the activations' conversions and the gathers (what
// the report compares with the measured time of the op and its conversions).
absl::StatusOr<double> forward_us(const SignatureTerms& s, const OpContext& ctx);

// move_us: moving a settled stored tensor from `have` to `want`: the tensor and its
// optimizer states (gradients are cleared between iterations) converted once each.
double move_us(const InputTerm& in, const OpContext& ctx);

// choose_index: choose_mode's rule over plain costs; returns the index of the option
// chosen. names[i] (optional) names option i in the error.
absl::StatusOr<size_t> choose_index(std::span<const ModeCost> costs, std::span<const std::string> names,
                                    double budget_bytes, double lambda, absl::string_view op_name,
                                    int reference = -1);

}  // namespace mtc::partition
