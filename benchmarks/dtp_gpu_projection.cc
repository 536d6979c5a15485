// dtp_gpu_projection: what DTP's cost model (partition/cost.h; docs/dtp.md, "Cost model")
// predicts for the GPT models on 8 H100 GPUs, before mtc has run on a GPU: samples per
// second of data parallel (P1 for every weight op) and of auto (each weight op's mode
// chosen by choose_mode over P1..P4), their ratio, the modes auto chose and each one's
// memory per GPU. A projection from published figures, not a measurement: no GPU is used.
// A plain program (not Google Benchmark); it prints two tables (fp32 and tf32 rates) and
// exits 0.
//
//   dtp_gpu_projection [--batch_per_gpu 8] [--gpus 8] [--lambda 0.1]
//
// The H100 figures (H100 SXM5 80 GB, DGX H100), each with its source:
//   FP32 (CUDA cores, no tensor core): 67 TFLOP/s. NVIDIA H100 Tensor Core GPU datasheet
//     (nvidia.com/en-us/data-center/h100, H100 SXM column).
//   TF32 tensor core: 494.7 TFLOP/s dense. The datasheet's 989 TFLOP/s is marked "with
//     sparsity" (2:4 structured sparsity; dense figures are one half of the sparse ones),
//     so the dense rate is 989.4 / 2 = 494.7; the sparse figure is not used.
//   HBM3: 3.35 TB/s, 80 GB (the same datasheet).
//   NVLink 4 collectives on 8 GPUs, nccl-tests bus bandwidth at large sizes: all_reduce about
//     480 GB/s (NVLink SHARP, NCCL's default for all_reduce on H100: NCCL's maintainer in
//     github.com/NVIDIA/nccl-tests/issues/212, and NVIDIA's GTC talk S62129 as cited in
//     github.com/NVIDIA/nccl/issues/1374); all_gather and reduce_scatter about 370 GB/s
//     (the 450 GB/s line rate less NCCL's protocol overhead of about 20%, the same comment
//     of issue 212). These two override CollectiveModel::nccl_default's 450 GB/s lines;
//     all_to_all keeps nccl_default's 300 GB/s and every collective its 10 us per call.
// Efficiency applied to the peaks: GEMMs (and the attention's batched matmuls) reach 70% of
// the peak FLOP rate; streaming kernels 80% of the HBM bandwidth; every kernel call costs
// 5 us more (a CUDA launch and the interpreter's dispatch; not hidden, since the model adds
// times). The matmul family's Rates are {peak x 0.7, 3.35 TB/s x 0.8, 5 us}; the elementwise
// family's {+infinity (no FLOP term: bytes only), 3.35 TB/s x 0.8, 5 us}.
//
// The models (src/models/gpt.cc: GPT-2 style, pre-LN, tied head), fp32 (4 bytes), AdamW
// (optimizer_states 2): "12-layer" GPT-2 small (12 layers, D 768, 12 heads, vocabulary
// 50257, seq 1024) and "24-layer" (24 layers, D 1024, 16 heads, vocabulary 50257, seq 1024).
// The global batch is --batch_per_gpu x --gpus sequences (64 by default); a second batch per
// model is the smallest one at which data parallel's memory per GPU (below) exceeds the
// 80 GB budget, i.e. where it must evict (DTE) or cannot run.
//
// How an iteration is priced (every time is forward + backward, and times add: the model
// has no overlap of communication with compute):
// - Weight ops: per layer q, k, v, the attention's output projection (Linear(D, D) each),
//   the MLP's Linear(D, 4D) and Linear(4D, D), as WeightOp::linear(N·T, in, out); then the
//   tied head Linear(D, vocab). Each is priced by mode_breakdown and its mode chosen by
//   choose_mode over P1..P4 with --lambda (the runtime's default 0.1, AutoOptions) and the
//   room the runtime gives it (src/dist/dtp_auto.cc): 80 GB less the training state of the
//   other weights (those decided at their mode's state_bytes, the others at their 1/p share,
//   as the runtime holds unsettled parameters). Data parallel takes P1 for every one.
// - Placements on the [N·T, D] activations: S(0) tokens split, S(1) columns split, R whole.
//   The residual stream stays S(0) (data parallel's placement, and Megatron's with sequence
//   parallelism): LayerNorm and the residual adds run on 1/p of the tokens in every mode, so
//   q, k, v, fc1 and the head take X held S(0). An op's output placement is its mode's
//   (P1, P2 S(0); P3 its y_next; P4 S(1)) and the next op's x_have: q's output is the
//   attention's input and the attention's output the projection's X; fc1's output goes
//   through GELU to fc2. The projection's and fc2's outputs are converted back to S(0) at
//   the residual add when their mode leaves them elsewhere (plan_conversion, the collective
//   model, and its adjoint in the backward, as mode_breakdown prices X's conversion).
// - P3's y_next, what the following op needs: for q, k and v the X placement of the output
//   projection's mode (x_placement_for), for fc1 that of fc2's mode; for the projection, fc2
//   and the head, S(0) (the residual stream; cross-entropy by rows). Since these refer to a
//   later op's mode, the choice runs over the model repeatedly, each pass taking y_next from
//   the previous pass's modes (the first from P1 everywhere), until no mode changes.
// - The attention core (two batched matmuls of [N, H, T, d], the scale of q, the causal
//   mask's add and softmax on the [N, H, T, T] scores, the whole T x T computed as the runtime
//   does) and every elementwise op (LayerNorm, GELU, residual and position adds, the
//   embedding lookup, cross-entropy) are priced by Rates::time_us from their FLOPs and bytes,
//   at the shard their input's placement leaves them: S(0) the sequences or tokens split, S(1)
//   the heads (the attention; the largest shard, 2 of 12 heads on 8 GPUs) or the columns,
//   R whole. Batched matmul: the matmul family, x3 in training (the forward and two in the
//   backward); elementwise: bytes only, the forward reading its inputs and writing its
//   output, the backward reading the output's gradient (and, for LayerNorm, GELU and
//   softmax, the tensor it saved) and writing one gradient.
// - The embedding uses the head's tied weight, so its mode is the head's: the choice of the
//   head's mode adds to each option the embedding's cost under it (P1: a lookup on 1/p of the
//   tokens, its gradient summed into the head's, whose one all_reduce mode_breakdown already
//   counts; P2: its own all_gather of the weight and reduce_scatter of its gradient;
//   P3 (weight split on D): every token's ids gathered, a lookup of D/p columns, the output
//   converted S(1) -> S(0); P4 (weight split on the vocabulary): ids gathered, a Partial
//   output reduce-scattered to S(0)).
// - The small parameters (position embedding, LayerNorms, biases) stay replicated in every
//   mode: (2 + 2) x their bytes of state and one all_reduce of their gradients. The AdamW
//   step reads and writes (2 + 2·states) parameter-sized tensors (as signature_breakdown
//   prices it) on each rank's share of the state: it is in the iteration's time but not in
//   choose_mode's options, since mode_breakdown does not count it.
// - Memory per GPU: the sum over the weight ops of mode_breakdown's bytes (state, X and Y as
//   the op holds them, buffers: P2's gathered W and whole dW, P3's converted Y), the small
//   parameters' state, and the tensors the other ops keep for the backward (the softmax
//   output and scaled q per layer, the residual stream after each add, the cross-entropy's
//   probabilities), each at its shard. Nothing is freed early or evicted; q, k and v each
//   count the X they read, as the per-op model sees it. Above 80 GB, DTE would evict.
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "partition/cost.h"
#include "partition/placement.h"

namespace {

using mtc::partition::choose_mode;
using mtc::partition::Collective;
using mtc::partition::collective_size_bytes;
using mtc::partition::CollectiveModel;
using mtc::partition::CostContext;
using mtc::partition::Mode;
using mtc::partition::mode_breakdown;
using mtc::partition::ModeBreakdown;
using mtc::partition::ModeCost;
using mtc::partition::ModeOption;
using mtc::partition::Placement;
using mtc::partition::plan_conversion;
using mtc::partition::Rates;
using mtc::partition::shard_range;
using mtc::partition::Step;
using mtc::partition::WeightOp;
using mtc::partition::x_placement_for;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kElem = 4;            // fp32
constexpr double kStates = 2;          // AdamW
constexpr double kBudget = 80e9;       // bytes per GPU: an 80 GB H100
constexpr double kGemmEff = 0.70;      // of the peak FLOP rate
constexpr double kHbmEff = 0.80;       // of the HBM bandwidth
constexpr double kCallUs = 5;          // us per kernel call
constexpr double kHbm = 3.35e6;        // bytes/us (3.35 TB/s)
constexpr double kFp32 = 67e6;         // FLOP/us (67 TFLOP/s)
constexpr double kTf32 = 494.7e6;      // FLOP/us (494.7 TFLOP/s dense)
constexpr std::array<Mode, 4> kModes = {Mode::kP1, Mode::kP2, Mode::kP3, Mode::kP4};

struct Model {
  const char* name;
  int64_t layers, hidden, heads, vocab, seq;
};

struct Hardware {
  const char* name;
  Rates mm;  // matmul family: linear, batched matmul
  Rates ew;  // elementwise: bytes only
  CollectiveModel comm;
};

// Op kinds, for the count of modes: q/k/v, the attention's projection, fc1, fc2, the tied
// head (with the embedding).
enum Kind { kQkv = 0, kProj = 1, kFc1 = 2, kFc2 = 3, kHead = 4, kKinds = 5 };
const char* kKindName[kKinds] = {"qkv", "proj", "fc1", "fc2", "head+wte"};

struct Result {
  bool ok = true;           // every op had a mode that fits its room
  std::string error;        // choose_mode's message when not
  double time_us = 0;       // per iteration
  double bytes = 0;         // per GPU
  int passes = 0;           // passes of the y_next fixed point (auto)
  bool converged = true;
  std::array<std::array<int, 4>, kKinds> modes{};  // count of P1..P4 per kind
  // Where the time goes.
  double weight_compute_us = 0, weight_comm_us = 0, attention_us = 0, elementwise_us = 0, other_comm_us = 0,
         step_us = 0;
};

double largest(int64_t n, int p) { return double(shard_range(n, p, 0).size); }

Collective adjoint(Collective c) {
  switch (c) {
    case Collective::kAllGather: return Collective::kReduceScatter;
    case Collective::kReduceScatter: return Collective::kAllGather;
    default: return c;
  }
}

// collective_us: one call of c on a tensor of global_bytes (nccl-tests' size of it).
double collective_us(const CollectiveModel& comm, Collective c, double global_bytes, int p) {
  return comm.time_us(c, collective_size_bytes(c, global_bytes, p), p);
}

// conversion_us: an activation of global_bytes converted from `from` to `to`, and, when it
// needs a gradient, the conversion's backward (its adjoint collective), as mode_breakdown
// prices X's conversion.
double conversion_us(const CollectiveModel& comm, Placement from, Placement to, double global_bytes, int p,
                     bool grad) {
  Collective c;
  switch (plan_conversion(from, to).step) {
    case Step::kAllGather: c = Collective::kAllGather; break;
    case Step::kReduceScatter: c = Collective::kReduceScatter; break;
    case Step::kAllReduce: c = Collective::kAllReduce; break;
    case Step::kAllToAll: c = Collective::kAllToAll; break;
    case Step::kUnsupported: return kInf;
    default: return 0;  // nothing, or a local slice
  }
  return collective_us(comm, c, global_bytes, p) + (grad ? collective_us(comm, adjoint(c), global_bytes, p) : 0);
}

// The fraction of an [rows, cols] activation a rank holds (the largest shard).
double held(Placement pl, int64_t rows, int64_t cols, int p) {
  if (pl.split()) return pl.dim == 0 ? largest(rows, p) * double(cols) : double(rows) * largest(cols, p);
  return double(rows) * double(cols);
}

class Projection {
 public:
  Projection(const Model& m, const Hardware& hw, int64_t seqs, int p, double lambda)
      : m_(m), hw_(hw), n_(seqs), p_(p), lambda_(lambda), tokens_(seqs * m.seq) {
    ctx_.parts = p;
    ctx_.rates = hw.mm;
    ctx_.comm = hw.comm;
    ctx_.optimizer_states = kStates;
    ctx_.backward = true;
    ctx_.x_needs_grad = true;
  }

  WeightOp op_of(int i) const {
    const int64_t d = m_.hidden;
    if (i == head_index()) return WeightOp::linear(tokens_, d, m_.vocab, int64_t(kElem));
    switch (i % 6) {
      case 4: return WeightOp::linear(tokens_, d, 4 * d, int64_t(kElem));
      case 5: return WeightOp::linear(tokens_, 4 * d, d, int64_t(kElem));
      default: return WeightOp::linear(tokens_, d, d, int64_t(kElem));
    }
  }
  Kind kind_of(int i) const {
    if (i == head_index()) return kHead;
    switch (i % 6) {
      case 3: return kProj;
      case 4: return kFc1;
      case 5: return kFc2;
      default: return kQkv;
    }
  }
  int head_index() const { return int(6 * m_.layers); }
  int weight_ops() const { return head_index() + 1; }

  // run: data parallel (auto false) or auto, to a fixed point of P3's y_next.
  Result run(bool automatic) const {
    std::vector<Mode> modes(weight_ops(), Mode::kP1);
    Result r;
    for (int pass = 1; pass <= 8; ++pass) {
      std::vector<Mode> next;
      r = chain(automatic, modes, next);
      r.passes = pass;
      if (!automatic || !r.ok || next == modes) return r;
      modes = next;
    }
    r.converged = false;
    return r;
  }

  // One op's breakdown, as the report's hand check prints it.
  ModeBreakdown breakdown(int i, Mode mode) const {
    return *mode_breakdown(op_of(i), mode, Placement::S(0), Placement::S(0), ctx_);
  }
  const Hardware& hw() const { return hw_; }

 private:
  double ew(double bytes) const { return hw_.ew.time_us(0, bytes); }

  // The attention core on q, k, v held as `pl` ([N·T, D]); returns its time, adds the
  // tensors it keeps for the backward to `saved`.
  double attention(Placement pl, double& saved) const {
    double n = double(n_), h = double(m_.heads);
    if (pl.split() && pl.dim == 0) n = largest(n_, p_);
    if (pl.split() && pl.dim == 1) h = largest(m_.heads, p_);
    const double t = double(m_.seq), d = double(m_.hidden / m_.heads);
    const double flops = 2 * n * h * t * t * d;  // each of q·k^T and P·v
    const double qb = n * h * t * d * kElem;     // one of q, k, v, out (per-head layout)
    const double sb = n * h * t * t * kElem;     // the scores
    double us = 3 * hw_.mm.time_us(flops, 2 * qb + sb) + 3 * hw_.mm.time_us(flops, sb + 2 * qb);
    us += ew(2 * qb) + ew(2 * qb);  // scale of q, forward and backward
    us += ew(2 * sb) + ew(2 * sb);  // the mask's add
    us += ew(2 * sb) + ew(3 * sb);  // softmax
    saved += sb + qb;               // the softmax output, the scaled q
    return us;
  }

  // An elementwise op on an [rows, cols] activation held as pl: the forward reads `reads`
  // tensors and writes one, the backward reads `back_reads` and writes one.
  double elementwise(Placement pl, int64_t cols, int reads, int back_reads) const {
    const double b = held(pl, tokens_, cols, p_) * kElem;
    return ew((reads + 1) * b) + ew((back_reads + 1) * b);
  }

  // The embedding's cost under the tied weight's mode, its time (`comm_us` the part in
  // collectives) and its bytes (ids and output as it holds them; its buffers).
  ModeCost embedding(Mode mode, double& comm_us) const {
    const double q = double(tokens_) * double(m_.hidden) * kElem;  // [N·T, D] whole
    const double ids = double(tokens_) * 4;                         // int32 token ids, whole
    const double w = double(m_.vocab) * double(m_.hidden) * kElem;
    const CollectiveModel& c = hw_.comm;
    const double ql = largest(tokens_, p_) * double(m_.hidden) * kElem;  // S(0) output
    ModeCost out;
    comm_us = 0;
    switch (mode) {
      case Mode::kP1:
        out.time_us = ew(2 * ql) + ew(3 * ql);
        out.bytes = ids / p_ + ql;
        break;
      case Mode::kP2:
        comm_us = collective_us(c, Collective::kAllGather, w, p_) + collective_us(c, Collective::kReduceScatter, w, p_);
        out.time_us = ew(2 * ql) + ew(3 * ql) + comm_us;
        out.bytes = ids / p_ + ql + 2 * w;  // the gathered W and the whole dW
        break;
      case Mode::kP3: {
        const double qc = held(Placement::S(1), tokens_, m_.hidden, p_) * kElem;
        comm_us = conversion_us(c, Placement::S(0), Placement::R(), ids, p_, false) +
                  conversion_us(c, Placement::S(1), Placement::S(0), q, p_, true);
        out.time_us = ew(2 * qc) + ew(3 * qc) + comm_us;
        out.bytes = ids + qc;
        break;
      }
      case Mode::kP4: {
        const double rows = largest(m_.vocab, p_) / double(m_.vocab) * q;  // the rank's vocabulary rows, on average
        comm_us = conversion_us(c, Placement::S(0), Placement::R(), ids, p_, false) +
                  conversion_us(c, Placement::P(), Placement::S(0), q, p_, true);
        out.time_us = ew(rows + q) + ew(q + 2 * rows) + comm_us;
        out.bytes = ids + q;  // the Partial output, whole
        break;
      }
      default: break;
    }
    return out;
  }

  // chain: one pass over the model. `prev` gives the modes P3's y_next refers to; `chosen`
  // receives this pass's modes.
  Result chain(bool automatic, const std::vector<Mode>& prev, std::vector<Mode>& chosen) const {
    Result r;
    const int ops = weight_ops();
    chosen.assign(ops, Mode::kP1);
    const int64_t d = m_.hidden, v = m_.vocab, t = m_.seq, layers = m_.layers;
    const Placement s0 = Placement::S(0);

    // The small parameters: position embedding, LayerNorms (2 per block + the final one),
    // biases (q, k, v, proj: D each; fc1 4D; fc2 D).
    const double small = double(t * d + 2 * d * (2 * layers + 1) + 9 * d * layers) * kElem;
    // The ledger of training state per weight op, for each op's room.
    std::vector<double> ledger(ops);
    for (int i = 0; i < ops; ++i) {
      const double w = op_of(i).w_bytes();
      ledger[i] = (2 + kStates) * (automatic ? w / p_ : w);
    }
    double ledger_total = small * (2 + kStates);
    for (double b : ledger) ledger_total += b;

    double params_local = small;  // parameter bytes on the rank, for the optimizer step
    double saved = 0;             // bytes other ops keep
    auto add_mode = [&](int i, Mode m) { r.modes[kind_of(i)][int(m) - 1] += 1; };

    // decide: op i with X held as x_have and P3's y_next; returns its output placement.
    auto decide = [&](int i, Placement x_have, Placement y_next, bool with_embedding) -> Placement {
      const WeightOp op = op_of(i);
      const double room = kBudget - (ledger_total - ledger[i]);
      std::vector<ModeOption> options;
      std::vector<ModeBreakdown> parts;
      std::vector<ModeCost> emb;
      std::vector<double> emb_comm;
      for (Mode m : kModes) {
        if (!automatic && m != Mode::kP1) continue;
        auto b = mode_breakdown(op, m, x_have, y_next, ctx_);
        if (!b.ok()) continue;  // an X that cannot be converted: not an option
        ModeCost c = b->total();
        double ec = 0;
        ModeCost e;
        if (with_embedding) {
          e = embedding(m, ec);
          c.time_us += e.time_us;
          c.bytes += e.bytes;
        }
        options.push_back({m, c});
        parts.push_back(*b);
        emb.push_back(e);
        emb_comm.push_back(ec);
      }
      size_t k = 0;
      if (automatic) {
        auto pick = choose_mode(options, room, lambda_, kKindName[kind_of(i)]);
        if (!pick.ok()) {
          if (r.ok) r.error = std::string(pick.status().message());
          r.ok = false;
          // Go on with the smallest, so that the memory is still reported.
          for (size_t j = 1; j < options.size(); ++j)
            if (options[j].cost.bytes < options[k].cost.bytes) k = j;
        } else {
          while (options[k].mode != *pick) ++k;
        }
      } else if (options[0].cost.bytes > room) {
        if (r.ok) {
          r.error = "p1 for " + std::string(kKindName[kind_of(i)]) + " needs more than its room";
        }
        r.ok = false;
      }
      const ModeBreakdown& b = parts[k];
      chosen[i] = options[k].mode;
      add_mode(i, options[k].mode);
      r.time_us += options[k].cost.time_us;
      r.bytes += options[k].cost.bytes;
      r.weight_compute_us += b.compute_us;
      r.weight_comm_us += b.collective_us + b.conversion_us;
      if (with_embedding) {
        r.elementwise_us += emb[k].time_us - emb_comm[k];
        r.weight_comm_us += emb_comm[k];
      }
      ledger_total += b.state_bytes - ledger[i];
      ledger[i] = b.state_bytes;
      params_local += b.state_bytes / (2 + kStates);
      switch (options[k].mode) {
        case Mode::kP3: return y_next;
        case Mode::kP4: return Placement::S(1);
        default: return s0;
      }
    };
    auto elementwise_op = [&](Placement pl, int64_t cols, int reads, int back_reads) {
      const double us = elementwise(pl, cols, reads, back_reads);
      r.time_us += us;
      r.elementwise_us += us;
    };
    auto keep = [&](Placement pl, int64_t cols) { saved += held(pl, tokens_, cols, p_) * kElem; };
    // to_stream: a branch output held as pl converted to the residual stream's S(0).
    auto to_stream = [&](Placement pl) {
      const double us = conversion_us(hw_.comm, pl, s0, double(tokens_) * double(d) * kElem, p_, true);
      r.time_us += us;
      r.other_comm_us += us;
    };

    // The tied head is decided after the blocks (its X is theirs); the embedding's cost is
    // folded into its options. The position embedding's add starts the residual stream.
    elementwise_op(s0, d, 2, 1);
    keep(s0, d);
    for (int64_t l = 0; l < layers; ++l) {
      const int base = int(6 * l);
      elementwise_op(s0, d, 1, 2);  // ln1
      const Placement qkv_next = x_placement_for(op_of(base + 3), prev[base + 3]);
      Placement ph = s0;
      for (int j = 0; j < 3; ++j) ph = decide(base + j, s0, qkv_next, false);
      double at_saved = 0;
      const double at = attention(ph, at_saved);
      r.time_us += at;
      r.attention_us += at;
      saved += at_saved;
      const Placement po = decide(base + 3, ph, s0, false);
      to_stream(po);
      elementwise_op(s0, d, 2, 1);  // the residual add
      keep(s0, d);
      elementwise_op(s0, d, 1, 2);  // ln2
      const Placement fc2_x = x_placement_for(op_of(base + 5), prev[base + 5]);
      const Placement pf = decide(base + 4, s0, fc2_x, false);
      elementwise_op(pf, 4 * d, 1, 2);  // GELU
      const Placement p2 = decide(base + 5, pf, s0, false);
      to_stream(p2);
      elementwise_op(s0, d, 2, 1);  // the residual add
      keep(s0, d);
    }
    elementwise_op(s0, d, 1, 2);  // ln_f
    const Placement logits = decide(head_index(), s0, s0, true);
    // Cross-entropy on the logits as the head leaves them: rows (S(0)) or vocabulary (S(1)).
    const double lb = held(logits, tokens_, v, p_) * kElem;
    const double ce = ew(2 * lb) + ew(3 * lb);
    r.time_us += ce;
    r.elementwise_us += ce;
    saved += lb;

    // The small parameters' gradients, one all_reduce; AdamW's step on the rank's state.
    const double ar = collective_us(hw_.comm, Collective::kAllReduce, small, p_);
    r.time_us += ar;
    r.other_comm_us += ar;
    const double tensors = double(16 * layers + 4);  // parameter tensors: one step call each
    r.step_us = hw_.ew.time_us(0, (2 + 2 * kStates) * params_local) + (tensors - 1) * hw_.ew.overhead_us;
    r.time_us += r.step_us;
    r.bytes += small * (2 + kStates) + saved;
    return r;
  }

  Model m_;
  Hardware hw_;
  int64_t n_;
  int p_;
  double lambda_;
  int64_t tokens_;
  CostContext ctx_;
};

Hardware make_hardware(const char* name, double peak) {
  Hardware h;
  h.name = name;
  h.mm = {peak * kGemmEff, kHbm * kHbmEff, kCallUs};
  h.ew = {kInf, kHbm * kHbmEff, kCallUs};
  h.comm = CollectiveModel::nccl_default();  // all_to_all 300 GB/s, 10 us per call
  h.comm.lines[int(Collective::kAllReduce)] = {10.0, 1.0 / 480e3};      // NVLS all_reduce, 480 GB/s bus
  h.comm.lines[int(Collective::kAllGather)] = {10.0, 1.0 / 370e3};      // 370 GB/s bus
  h.comm.lines[int(Collective::kReduceScatter)] = {10.0, 1.0 / 370e3};  // 370 GB/s bus
  return h;
}

std::string modes_str(const Result& r) {
  std::string s;
  for (int k = 0; k < kKinds; ++k) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %d/%d/%d/%d", k ? "  " : "", kKindName[k], r.modes[k][0], r.modes[k][1],
                  r.modes[k][2], r.modes[k][3]);
    s += buf;
  }
  return s;
}

std::string mem_str(const Result& r) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f%s", r.bytes / 1e9, r.bytes > kBudget ? "*" : "");
  return buf;
}

// The smallest batch per GPU at which data parallel's memory per GPU exceeds the budget.
int64_t memory_bound_batch(const Model& m, const Hardware& hw, int p, double lambda) {
  for (int64_t b = 1; b <= 4096; ++b) {
    if (Projection(m, hw, b * p, p, lambda).run(false).bytes > kBudget) return b;
  }
  return 0;
}

void usage(std::FILE* f) {
  std::fprintf(f,
               "usage: dtp_gpu_projection [--batch_per_gpu N] [--gpus P] [--lambda L]\n"
               "  --batch_per_gpu N  sequences per GPU in the first batch (default 8; global N x P)\n"
               "  --gpus P           GPUs in the group (default 8)\n"
               "  --lambda L         choose_mode's weight of memory against time, in [0, 1] (default 0.1)\n"
               "DTP's cost model fed with H100 figures: samples/s of data parallel and auto for two GPT models.\n");
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "dtp_gpu_projection: error: %s\n", what.c_str());
  std::exit(2);
}

bool parse_int(const std::string& s, int64_t& out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0) return false;
  out = v;
  return true;
}

bool parse_double(const std::string& s, double& out) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(v)) return false;
  out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch_per_gpu = 8, gpus = 8;
  double lambda = 0.1;  // AutoOptions::lambda
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], val;
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    }
    const size_t eq = a.find('=');
    bool has_val = false;
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      val = a.substr(eq + 1), a = a.substr(0, eq), has_val = true;
    }
    if (a != "--batch_per_gpu" && a != "--gpus" && a != "--lambda") {
      fail("unknown argument '" + std::string(argv[i]) + "': expected --batch_per_gpu N, --gpus P, --lambda L or --help");
    }
    if (!has_val) {
      if (i + 1 >= argc) fail(a + " needs a value");
      val = argv[++i];
    }
    if (a == "--batch_per_gpu") {
      if (!parse_int(val, batch_per_gpu) || batch_per_gpu < 1 || batch_per_gpu > 4096) {
        fail("--batch_per_gpu '" + val + "': expected an integer in [1, 4096]");
      }
    } else if (a == "--gpus") {
      if (!parse_int(val, gpus) || gpus < 1 || gpus > 4096) fail("--gpus '" + val + "': expected an integer in [1, 4096]");
    } else if (!parse_double(val, lambda) || lambda < 0 || lambda > 1) {
      fail("--lambda '" + val + "': expected a number in [0, 1]");
    }
  }
  const int p = int(gpus);
  const Model models[] = {{"12-layer (GPT-2 small, D 768, 12 heads)", 12, 768, 12, 50257, 1024},
                          {"24-layer (D 1024, 16 heads)", 24, 1024, 16, 50257, 1024}};
  const Hardware hws[] = {make_hardware("fp32", kFp32), make_hardware("tf32", kTf32)};

  std::printf("dtp_gpu_projection: DTP's cost model (partition/cost.h) for %d x H100 SXM 80 GB, GPT, fp32 "
              "tensors, AdamW, lambda %g, budget %.0f GB per GPU\n",
              p, lambda, kBudget / 1e9);
  std::printf("rates: matmul peak x %.2f (fp32 67 TFLOP/s, tf32 494.7 TFLOP/s dense), HBM 3.35 TB/s x %.2f, %.0f us "
              "per call; NCCL bus bandwidth all_reduce 480 GB/s, all_gather/reduce_scatter 370 GB/s, "
              "all_to_all 300 GB/s, 10 us per call\n",
              kGemmEff, kHbmEff, kCallUs);
  std::printf("samples/s = global batch / iteration time; auto/dp = auto's samples/s over dp's; memory in GB per "
              "GPU (* above the budget: DTE must evict); modes: count of p1/p2/p3/p4 per op kind\n");

  // The memory-bound batch per model: where data parallel stops fitting (it does not depend
  // on the FLOP rate).
  std::vector<int64_t> bound;
  for (const Model& m : models) bound.push_back(memory_bound_batch(m, hws[0], p, lambda));

  for (const Hardware& hw : hws) {
    std::printf("\n== %s: matmul %.1f TFLOP/s effective ==\n", hw.name, hw.mm.flops_per_us / 1e6);
    std::printf("%-40s %7s %6s | %10s %9s %7s | %10s %9s %7s | %7s\n", "model", "seq/GPU", "global", "dp us/it",
                "dp smp/s", "dp GB", "auto us/it", "auto smp/s", "auto GB", "auto/dp");
    std::vector<std::string> notes;
    for (size_t mi = 0; mi < 2; ++mi) {
      const Model& m = models[mi];
      std::vector<int64_t> batches = {batch_per_gpu};
      if (bound[mi] > 0 && bound[mi] != batch_per_gpu) batches.push_back(bound[mi]);
      for (int64_t b : batches) {
        const int64_t seqs = b * p;
        const Projection proj(m, hw, seqs, p, lambda);
        const Result dp = proj.run(false);
        const Result au = proj.run(true);
        const double dps = double(seqs) / (dp.time_us * 1e-6), aus = double(seqs) / (au.time_us * 1e-6);
        std::printf("%-40s %7lld %6lld | %10.0f %9.1f %7s | %10.0f %9.1f %7s | %7.4f\n", m.name, (long long)b,
                    (long long)seqs, dp.time_us, dps, mem_str(dp).c_str(), au.time_us, aus, mem_str(au).c_str(),
                    aus / dps);
        char buf[512];
        std::snprintf(buf, sizeof buf, "  %s, %lld seq/GPU: auto's modes %s", m.name, (long long)b,
                      modes_str(au).c_str());
        notes.push_back(buf);
        for (const Result* r : {&dp, &au}) {
          std::snprintf(buf, sizeof buf,
                        "    %-4s us: weight-op compute %.0f, weight-op collectives %.0f, attention %.0f, "
                        "elementwise %.0f, stream conversions + small all_reduce %.0f, AdamW step %.0f%s%s",
                        r == &dp ? "dp" : "auto", r->weight_compute_us, r->weight_comm_us, r->attention_us,
                        r->elementwise_us, r->other_comm_us, r->step_us, r->ok ? "" : "; does not fit: ",
                        r->ok ? "" : r->error.c_str());
          notes.push_back(buf);
        }
        if (!au.converged) notes.push_back("    auto: P3's y_next did not settle in 8 passes");
      }
    }
    for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  }

  // A hand check: fc1 of the 12-layer model at the first batch, fp32, P1.
  {
    const Projection proj(models[0], hws[0], batch_per_gpu * p, p, lambda);
    const ModeBreakdown b = proj.breakdown(4, Mode::kP1);
    const double bl = largest(batch_per_gpu * p * models[0].seq, p);
    const double flops = 2 * bl * 768 * 3072;
    std::printf("\ncheck: 12-layer fc1 in p1, fp32, %lld seq/GPU: %.4g FLOP per matmul on %.0f tokens / %.4g "
                "FLOP/us = %.0f us, x3 with bytes and calls = %.0f us compute (mode_breakdown); dW all_reduce "
                "%.1f MB = %.0f us\n",
                (long long)batch_per_gpu, flops, bl, proj.hw().mm.flops_per_us, flops / proj.hw().mm.flops_per_us,
                b.compute_us, 768.0 * 3072 * kElem / 1e6, b.collective_us);
  }
  return 0;
}
