// CPU kernels of conv2d and its two gradient ops, on oneDNN. Tensors stay plain NCHW /
// OIHW; each primitive is created with layouts left to oneDNN (format "any", which picks
// its blocked nChw16c-style kernels) and the kernel reorders in and out through scratch.
// See Note [Conv layouts] for why, and the measured alternatives.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ops/conv.h"

namespace mtc::cpu {
namespace {

// Note [Conv layouts]
// Measured on the ResNet-56 shapes (batch 64, 2 threads, fwd + bwd data + bwd weights,
// best of runs on a shared 2-core Zen 4), oneDNN 2.6; for 3x3 16->16 @32x32:
//  - format "any" + reorders of activations, weights and gradients (what PyTorch's ideep
//    does): "jit:avx512_core" / "jit_1x1:avx512_core" kernels, 5.5 ms, of which ~1 ms
//    is reorders. Chosen; benchmarks/conv_bench.cc puts it level with PyTorch.
//  - plain nchw/oihw descriptors (any one of x, w, y plain is enough): oneDNN falls back
//    to "x64:gemm:jit" (im2col + its own sgemm), 25 ms;
//  - im2col + OpenBLAS cblas_sgemm per image (threads over images): 49 ms; GEMMs with
//    M = 16 output channels are a poor fit for OpenBLAS.
// Primitives are cached by shape (creating one costs milliseconds), with the scratchpad
// owned by the caller (scratchpad_mode::user), so a cached primitive holds no buffers and
// its execution draws all temporary memory from the compute region. oneDNN's CPU kernels
// with a fixed thread count are deterministic run to run (tests/conv_test.cc checks).

using dnnl::memory;
using Tag = memory::format_tag;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

enum class Pass : int64_t { kForward, kBackwardData, kBackwardWeights };

// ConvPlan: one pass's primitive and, for each of its tensor arguments, the plain layout of
// the mtc tensor, the layout the primitive chose, and the reorder between them.
struct ConvPlan {
  struct Arg {
    int dnnl_arg;        // DNNL_ARG_SRC, ...
    int tensor;          // index into KernelArgs::in (input) or ::out (output)
    bool is_output;
    memory::desc plain, chosen;
    dnnl::reorder reorder;  // plain -> chosen for inputs, chosen -> plain for outputs
    bool needs_reorder() const { return plain != chosen; }
  };
  dnnl::primitive prim;
  std::vector<Arg> args;
  size_t scratchpad_bytes = 0;
};

// ConvGeometry: the conv problem in oneDNN's terms.
struct ConvGeometry {
  memory::dims x, w, b, y, strides, dilates, pad;
  Tag w_tag;
  ConvGeometry(const Conv2dOptions& o, const Shape& xs, const Shape& ws) {
    const int64_t g = o.groups;
    const int64_t oh = conv_out_size(xs[2], ws[2], o.stride_h, o.pad_h, o.dilation_h);
    const int64_t ow = conv_out_size(xs[3], ws[3], o.stride_w, o.pad_w, o.dilation_w);
    x = {xs[0], xs[1], xs[2], xs[3]};
    y = {xs[0], ws[0], oh, ow};
    b = {ws[0]};
    if (g > 1) {
      w = {g, ws[0] / g, ws[1], ws[2], ws[3]};
      w_tag = Tag::goihw;
    } else {
      w = {ws[0], ws[1], ws[2], ws[3]};
      w_tag = Tag::oihw;
    }
    strides = {o.stride_h, o.stride_w};
    dilates = {o.dilation_h - 1, o.dilation_w - 1};  // oneDNN counts the gaps
    pad = {o.pad_h, o.pad_w};  // the same on both sides: oneDNN floors as PyTorch does
  }
  memory::desc plain_x() const { return {x, memory::data_type::f32, Tag::nchw}; }
  memory::desc plain_w() const { return {w, memory::data_type::f32, w_tag}; }
  memory::desc plain_b() const { return {b, memory::data_type::f32, Tag::x}; }
  memory::desc plain_y() const { return {y, memory::data_type::f32, Tag::nchw}; }
  static memory::desc any(const memory::dims& d) { return {d, memory::data_type::f32, Tag::any}; }
};

// make_arg: one argument of a plan; its reorder (if any) also takes a user scratchpad.
ConvPlan::Arg make_arg(int dnnl_arg, int tensor, bool is_output, const memory::desc& plain,
                       const memory::desc& chosen, size_t& scratchpad_bytes) {
  ConvPlan::Arg a{dnnl_arg, tensor, is_output, plain, chosen, {}};
  if (a.needs_reorder()) {
    dnnl::engine& e = cpu_engine();
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::reorder::primitive_desc pd = is_output ? dnnl::reorder::primitive_desc(e, chosen, e, plain, attr)
                                                       : dnnl::reorder::primitive_desc(e, plain, e, chosen, attr);
    a.reorder = dnnl::reorder(pd);
    scratchpad_bytes = std::max(scratchpad_bytes, pd.scratchpad_desc().get_size());
  }
  return a;
}

// make_plan: creates the primitive of `pass` (throws dnnl::error when oneDNN cannot).
std::unique_ptr<ConvPlan> make_plan(Pass pass, const Conv2dOptions& o, const Shape& xs, const Shape& ws, bool bias) {
  using namespace dnnl;
  const ConvGeometry g(o, xs, ws);
  engine& e = cpu_engine();
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  const memory::desc xa = ConvGeometry::any(g.x), wa = ConvGeometry::any(g.w), ya = ConvGeometry::any(g.y);
  const memory::desc ba = bias ? g.plain_b() : memory::desc();
  // The forward descriptor: the primitive itself, or the hint the backward ones need.
  const convolution_forward::desc fd(prop_kind::forward_training, algorithm::convolution_direct, xa, wa, ba, ya,
                                     g.strides, g.dilates, g.pad, g.pad);
  const convolution_forward::primitive_desc fpd(fd, attr, e);
  auto plan = std::make_unique<ConvPlan>();
  size_t sp = 0;  // scratchpad bytes: the primitive's, or the largest reorder's
  switch (pass) {
    case Pass::kForward: {
      plan->prim = convolution_forward(fpd);
      sp = fpd.scratchpad_desc().get_size();
      plan->args.push_back(make_arg(DNNL_ARG_SRC, 0, false, g.plain_x(), fpd.src_desc(), sp));
      plan->args.push_back(make_arg(DNNL_ARG_WEIGHTS, 1, false, g.plain_w(), fpd.weights_desc(), sp));
      if (bias) plan->args.push_back(make_arg(DNNL_ARG_BIAS, 2, false, g.plain_b(), fpd.bias_desc(), sp));
      plan->args.push_back(make_arg(DNNL_ARG_DST, 0, true, g.plain_y(), fpd.dst_desc(), sp));
      break;
    }
    case Pass::kBackwardData: {
      const convolution_backward_data::desc d(algorithm::convolution_direct, xa, wa, ya, g.strides, g.dilates, g.pad,
                                              g.pad);
      const convolution_backward_data::primitive_desc pd(d, attr, e, fpd);
      plan->prim = convolution_backward_data(pd);
      sp = pd.scratchpad_desc().get_size();
      plan->args.push_back(make_arg(DNNL_ARG_DIFF_DST, 0, false, g.plain_y(), pd.diff_dst_desc(), sp));
      plan->args.push_back(make_arg(DNNL_ARG_WEIGHTS, 1, false, g.plain_w(), pd.weights_desc(), sp));
      plan->args.push_back(make_arg(DNNL_ARG_DIFF_SRC, 0, true, g.plain_x(), pd.diff_src_desc(), sp));
      break;
    }
    case Pass::kBackwardWeights: {
      const convolution_backward_weights::desc d(algorithm::convolution_direct, xa, wa, ba, ya, g.strides, g.dilates,
                                                 g.pad, g.pad);
      const convolution_backward_weights::primitive_desc pd(d, attr, e, fpd);
      plan->prim = convolution_backward_weights(pd);
      sp = pd.scratchpad_desc().get_size();
      plan->args.push_back(make_arg(DNNL_ARG_SRC, 0, false, g.plain_x(), pd.src_desc(), sp));
      plan->args.push_back(make_arg(DNNL_ARG_DIFF_DST, 1, false, g.plain_y(), pd.diff_dst_desc(), sp));
      plan->args.push_back(make_arg(DNNL_ARG_DIFF_WEIGHTS, 0, true, g.plain_w(), pd.diff_weights_desc(), sp));
      if (bias) plan->args.push_back(make_arg(DNNL_ARG_DIFF_BIAS, 1, true, g.plain_b(), pd.diff_bias_desc(), sp));
      break;
    }
  }
  plan->scratchpad_bytes = sp;
  return plan;
}

// PlanCache: plans by (pass, options, shapes). Plans are never evicted: a model has a
// handful of conv shapes. The mutex guards the map only; a plan is immutable once made.
class PlanCache {
 public:
  using Key = std::array<int64_t, 18>;
  absl::StatusOr<const ConvPlan*> get(Pass pass, const Conv2dOptions& o, const Shape& xs, const Shape& ws, bool bias) {
    // oneDNN sizes a primitive's work split (and its scratchpad) for the calling thread's
    // OpenMP thread count, so that count is part of the key.
    const Key k{static_cast<int64_t>(pass), o.stride_h, o.stride_w, o.pad_h, o.pad_w, o.dilation_h, o.dilation_w,
                o.groups, bias, xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], ws[3], omp_get_max_threads()};
    std::lock_guard<std::mutex> l(mu_);
    auto it = plans_.find(k);
    if (it != plans_.end()) return it->second.get();
    try {
      auto [pos, inserted] = plans_.emplace(k, make_plan(pass, o, xs, ws, bias));
      return pos->second.get();
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("oneDNN cannot create the convolution: ", e.what()));
    }
  }

 private:
  std::mutex mu_;
  absl::flat_hash_map<Key, std::unique_ptr<ConvPlan>> plans_;
};

PlanCache& plan_cache() {
  static PlanCache* c = new PlanCache();  // never destroyed: primitives may outlive main's statics
  return *c;
}

// run_plan: wraps the tensors, reorders the inputs that need it into scratch, runs the
// primitive, reorders the outputs back. One scratchpad serves every step in turn.
absl::Status run_plan(const ConvPlan& plan, const KernelArgs& a) {
  dnnl::engine& e = cpu_engine();
  thread_local dnnl::stream stream(cpu_engine());
  memory scratchpad;
  if (plan.scratchpad_bytes > 0) {
    MTC_ASSIGN_OR_RETURN(void* buf, a.ctx.scratch(plan.scratchpad_bytes));
    scratchpad = memory(memory::desc({static_cast<memory::dim>(plan.scratchpad_bytes)}, memory::data_type::u8, Tag::x),
                        e, buf);
  }
  auto reorder = [&](const ConvPlan::Arg& arg, const memory& from, const memory& to) {
    std::unordered_map<int, memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    if (scratchpad) args.emplace(DNNL_ARG_SCRATCHPAD, scratchpad);
    arg.reorder.execute(stream, args);
  };
  try {
    std::vector<std::pair<memory, memory>> outputs_back;  // (chosen, plain), in plan order
    std::unordered_map<int, memory> exec_args;
    if (scratchpad) exec_args.emplace(DNNL_ARG_SCRATCHPAD, scratchpad);
    for (const ConvPlan::Arg& arg : plan.args) {
      const TensorView& t = arg.is_output ? a.out[arg.tensor] : a.in[arg.tensor];
      memory plain(arg.plain, e, t.data);
      if (!arg.needs_reorder()) {
        exec_args.emplace(arg.dnnl_arg, plain);
        continue;
      }
      MTC_ASSIGN_OR_RETURN(void* buf, a.ctx.scratch(arg.chosen.get_size()));
      memory chosen(arg.chosen, e, buf);
      if (arg.is_output) {
        outputs_back.emplace_back(chosen, plain);
      } else {
        reorder(arg, plain, chosen);
      }
      exec_args.emplace(arg.dnnl_arg, chosen);
    }
    plan.prim.execute(stream, exec_args);
    size_t k = 0;
    for (const ConvPlan::Arg& arg : plan.args) {
      if (!arg.is_output || !arg.needs_reorder()) continue;
      reorder(arg, outputs_back[k].first, outputs_back[k].second);
      ++k;
    }
    stream.wait();
  } catch (const dnnl::error& err) {
    return absl::InternalError(absl::StrCat("oneDNN convolution failed: ", err.what()));
  }
  return absl::OkStatus();
}

// empty_problem: oneDNN rejects zero-sized problems; their results are plain. An empty
// x or w gives y = bias (or 0), dx = 0, dw = 0 and db = the sum of dy.
bool empty_problem(const KernelArgs& a) {
  if (std::none_of(a.in.begin(), a.in.end(), [](const TensorView& t) { return t.numel() == 0; })) return false;
  for (const TensorView& o : a.out) std::memset(o.data, 0, o.bytes());
  return true;
}

// fill_bias: y (N, OC, OH, OW) = bias per channel; sum_bias: db (OC) = sum of dy (N, OC, OH, OW).
void fill_bias(const TensorView& y, const float* bias) {
  const int64_t n = y.dim(0), oc = y.dim(1), hw = y.dim(2) * y.dim(3);
  for (int64_t i = 0; i < n * oc; ++i) std::fill_n(y.f32() + i * hw, hw, bias[i % oc]);
}
void sum_bias(const TensorView& dy, float* db) {
  const int64_t n = dy.dim(0), oc = dy.dim(1), hw = dy.dim(2) * dy.dim(3);
  for (int64_t c = 0; c < oc; ++c) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < hw; ++j) acc += dy.f32()[(i * oc + c) * hw + j];
    db[c] = static_cast<float>(acc);
  }
}

absl::Status conv2d(const Conv2dOp& op, const KernelArgs& a) {
  const bool bias = op.adds_bias();
  if (empty_problem(a)) {
    if (bias) fill_bias(a.out[0], a.in[2].f32());
    return absl::OkStatus();
  }
  MTC_ASSIGN_OR_RETURN(const ConvPlan* plan,
                       plan_cache().get(Pass::kForward, op.o, a.in[0].shape(), a.in[1].shape(), bias));
  return run_plan(*plan, a);
}

absl::Status conv2d_backward_input(const Conv2dBackwardInputOp& op, const KernelArgs& a) {
  if (empty_problem(a)) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(const ConvPlan* plan,
                       plan_cache().get(Pass::kBackwardData, op.o, op.x_shape, a.in[1].shape(), false));
  return run_plan(*plan, a);
}

absl::Status conv2d_backward_weight(const Conv2dBackwardWeightOp& op, const KernelArgs& a) {
  if (empty_problem(a)) {
    if (op.with_bias) sum_bias(a.in[1], a.out[1].f32());
    return absl::OkStatus();
  }
  MTC_ASSIGN_OR_RETURN(const ConvPlan* plan,
                       plan_cache().get(Pass::kBackwardWeights, op.o, a.in[0].shape(), op.w_shape, op.with_bias));
  return run_plan(*plan, a);
}

}  // namespace

MTC_REGISTER_KERNEL(Conv2dOp, DeviceType::kCPU, conv2d);
MTC_REGISTER_KERNEL(Conv2dBackwardInputOp, DeviceType::kCPU, conv2d_backward_input);
MTC_REGISTER_KERNEL(Conv2dBackwardWeightOp, DeviceType::kCPU, conv2d_backward_weight);

}  // namespace mtc::cpu
