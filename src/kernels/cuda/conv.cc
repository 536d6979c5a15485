// CUDA kernels of conv2d and its two gradient ops, on cuDNN's legacy convolution API with
// plain NCHW / OIHW float tensors. Algorithms are measured: the first time a problem
// (pass, shapes, options) is met, cuDNN's Find runs every algorithm on the op's own
// tensors within a scratch workspace, and the fastest deterministic one is cached for the
// problem (cuDNN's heuristics, the _v7 queries, when Find fails). Workspaces are scratch
// carved from the compute region. The bias add and the bias gradient are our own kernels
// (dnn_conv.cu, dnn_norm.cu); the latter sums in double as the CPU kernel does.
//
// fp32 stays fp32: the convolution descriptor asks for CUDNN_FMA_MATH, and candidates
// the heuristics report under tensor-op math are skipped. cuDNN's default math would let
// Ampere and Hopper run float convolutions in TF32 (10-bit mantissas), far outside the
// CPU comparison's tolerance.
#include <algorithm>
#include <array>
#include <climits>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "device.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/dnn_conv_launch.h"
#include "kernels/cuda/dnn_norm_launch.h"
#include "mtc/status.h"
#include "ops/conv.h"

namespace mtc::cuda {
namespace {

// The largest workspace an algorithm may ask for to be taken first. Beyond it the
// heuristics' next candidates are tried: a 3x3 convolution rarely gains more than a few
// percent from FFT-sized workspaces, and the memory is better left to DTE.
constexpr size_t kWorkspaceLimit = size_t{256} << 20;

enum class Pass : int64_t { kForward, kBackwardData, kBackwardFilter };

// ConvDescriptors: cuDNN's descriptors of one problem (x, w, y and the convolution),
// destroyed with it. Creating them costs microseconds of host time, so they are not cached.
class ConvDescriptors {
 public:
  ConvDescriptors() = default;
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;
  ~ConvDescriptors() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }

  absl::Status init(const Conv2dOptions& o, const Shape& xs, const Shape& ws) {
    const Shape ys{xs[0], ws[0], conv_out_size(xs[2], ws[2], o.stride_h, o.pad_h, o.dilation_h),
                   conv_out_size(xs[3], ws[3], o.stride_w, o.pad_w, o.dilation_w)};
    // The legacy descriptors take int sizes and compute int strides.
    for (const Shape* s : {&xs, &ws, &ys}) {
      if (numel(*s) > INT_MAX) {
        return absl::UnimplementedError(absl::StrCat("conv2d on CUDA: tensor ", shape_str(*s),
                                                     " has 2^31 or more ",
                                                     "values, beyond cuDNN's legacy convolution API"));
      }
    }
    auto i = [](int64_t v) { return static_cast<int>(v); };
    MTC_CUDA(cudnnCreateTensorDescriptor(&x));
    MTC_CUDA(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(xs[0]), i(xs[1]), i(xs[2]),
                                        i(xs[3])));
    MTC_CUDA(cudnnCreateTensorDescriptor(&y));
    MTC_CUDA(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(ys[0]), i(ys[1]), i(ys[2]),
                                        i(ys[3])));
    MTC_CUDA(cudnnCreateFilterDescriptor(&w));
    MTC_CUDA(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(ws[0]), i(ws[1]), i(ws[2]),
                                        i(ws[3])));
    MTC_CUDA(cudnnCreateConvolutionDescriptor(&conv));
    MTC_CUDA(cudnnSetConvolution2dDescriptor(conv, o.pad_h, o.pad_w, o.stride_h, o.stride_w, o.dilation_h,
                                             o.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    MTC_CUDA(cudnnSetConvolutionGroupCount(conv, o.groups));
    MTC_CUDA(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
    return absl::OkStatus();
  }

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

// Choice: the algorithm (a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t value) and its
// workspace, plus the candidate with the smallest workspace for when scratch runs short.
struct Choice {
  int algo = 0;
  size_t bytes = 0;
  int fallback_algo = 0;
  size_t fallback_bytes = 0;
};

bool fp32_exact(cudnnMathType_t m) {
  return m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// choose: over the heuristics' candidates (best first) that succeed under fp32 math: the
// first deterministic one whose workspace is within kWorkspaceLimit, else the first one
// within it, else the one with the smallest workspace. Deterministic algorithms come
// first because DTE recomputes an op expecting the same bits (the non-deterministic
// ones, in the backward passes, add with atomics). bytes_of(algo, &bytes) asks cuDNN
// for the exact workspace of an algorithm and says whether it could.
template <typename Perf, typename BytesOf>
absl::StatusOr<Choice> choose(const std::vector<Perf>& perfs, BytesOf bytes_of, const char* pass) {
  struct Candidate {
    int algo;
    size_t bytes;
    bool deterministic;
  };
  std::vector<Candidate> cands;
  for (const Perf& p : perfs) {
    if (p.status != CUDNN_STATUS_SUCCESS || !fp32_exact(p.mathType)) continue;
    size_t bytes = 0;
    if (!bytes_of(p.algo, &bytes)) continue;
    cands.push_back({static_cast<int>(p.algo), bytes, p.determinism == CUDNN_DETERMINISTIC});
  }
  if (cands.empty()) {
    return absl::UnimplementedError(absl::StrCat("conv2d on CUDA: cuDNN's heuristics offer no fp32 ", pass,
                                                 " algorithm for this problem"));
  }
  const Candidate* pick = nullptr;
  for (const Candidate& c : cands) {
    if (c.deterministic && c.bytes <= kWorkspaceLimit) {
      pick = &c;
      break;
    }
  }
  for (const Candidate& c : cands) {
    if (pick == nullptr && c.bytes <= kWorkspaceLimit) pick = &c;
  }
  const Candidate* small = &cands[0];
  for (const Candidate& c : cands) {
    if (c.bytes < small->bytes || (c.bytes == small->bytes && c.deterministic && !small->deterministic))
      small = &c;
  }
  if (pick == nullptr) pick = small;
  return Choice{pick->algo, pick->bytes, small->algo, small->bytes};
}

// heuristic_choice: asks cuDNN's heuristics for `pass` on the problem d describes.
absl::StatusOr<Choice> heuristic_choice(Pass pass, cudnnHandle_t h, const ConvDescriptors& d) {
  int max = 0, got = 0;
  switch (pass) {
    case Pass::kForward: {
      MTC_CUDA(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(static_cast<size_t>(max));
      MTC_CUDA(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, max, &got, perfs.data()));
      perfs.resize(static_cast<size_t>(got));
      auto bytes_of = [&](cudnnConvolutionFwdAlgo_t algo, size_t* b) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, algo, b) ==
               CUDNN_STATUS_SUCCESS;
      };
      return choose(perfs, bytes_of, "forward");
    }
    case Pass::kBackwardData: {
      MTC_CUDA(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(static_cast<size_t>(max));
      MTC_CUDA(
          cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, max, &got, perfs.data()));
      perfs.resize(static_cast<size_t>(got));
      auto bytes_of = [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* b) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, algo, b) ==
               CUDNN_STATUS_SUCCESS;
      };
      return choose(perfs, bytes_of, "backward-data");
    }
    case Pass::kBackwardFilter: {
      MTC_CUDA(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(static_cast<size_t>(max));
      MTC_CUDA(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, max, &got, perfs.data()));
      perfs.resize(static_cast<size_t>(got));
      auto bytes_of = [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* b) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, algo, b) ==
               CUDNN_STATUS_SUCCESS;
      };
      return choose(perfs, bytes_of, "backward-filter");
    }
  }
  return absl::InternalError("conv2d on CUDA: unknown pass");
}

// memory_of: the workspace Find reported for algo (false when it has no result for it).
template <typename Perf, typename Algo>
bool memory_of(const std::vector<Perf>& perfs, Algo algo, size_t* bytes) {
  for (const Perf& p : perfs) {
    if (p.algo == algo && p.status == CUDNN_STATUS_SUCCESS) {
      *bytes = p.memory;
      return true;
    }
  }
  return false;
}

// Buffers: the op's own tensors, which Find runs the algorithms on (it writes the output,
// which the chosen algorithm then writes again).
struct Buffers {
  const void* x;
  const void* w;
  const void* y;  // for each pass, the one it writes is written through a const_cast
};

// found_choice: choose() over Find's first `got` results (fastest first), each with the
// workspace Find reported for it.
template <typename Perf>
absl::StatusOr<Choice> found_choice(std::vector<Perf>& perfs, int got, const char* pass) {
  perfs.resize(static_cast<size_t>(got));
  return choose(perfs, [&](auto algo, size_t* n) { return memory_of(perfs, algo, n); }, pass);
}

// measured_choice: cuDNN's Find for `pass` on the op's tensors, within the larger of the
// heuristics' choice's and fallback's workspaces (less if the compute region cannot give
// it); choose() takes the fastest deterministic result.
absl::StatusOr<Choice> measured_choice(Pass pass, KernelContext& ctx, const ConvDescriptors& d, Buffers b,
                                       const Choice& heuristic) {
  cudnnHandle_t h = cudnn(ctx);
  size_t want = std::max(heuristic.bytes, heuristic.fallback_bytes);
  void* ws = nullptr;
  while (want > 0) {
    absl::StatusOr<void*> s = ctx.scratch(want);
    if (s.ok()) {
      ws = *s;
      break;
    }
    if (!absl::IsResourceExhausted(s.status())) return s.status();
    want /= 2;
  }
  int max = 0, got = 0;
  auto* out_x = const_cast<void*>(b.x);
  auto* out_w = const_cast<void*>(b.w);
  auto* out_y = const_cast<void*>(b.y);
  switch (pass) {
    case Pass::kForward: {
      MTC_CUDA(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(static_cast<size_t>(max));
      MTC_CUDA(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, b.x, d.w, b.w, d.conv, d.y, out_y, max, &got,
                                                      perfs.data(), ws, want));
      return found_choice(perfs, got, "forward");
    }
    case Pass::kBackwardData: {
      MTC_CUDA(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(static_cast<size_t>(max));
      MTC_CUDA(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, b.w, d.y, b.y, d.conv, d.x, out_x, max, &got,
                                                           perfs.data(), ws, want));
      return found_choice(perfs, got, "backward-data");
    }
    case Pass::kBackwardFilter: {
      MTC_CUDA(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(static_cast<size_t>(max));
      MTC_CUDA(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, b.x, d.y, b.y, d.conv, d.w, out_w, max, &got,
                                                             perfs.data(), ws, want));
      return found_choice(perfs, got, "backward-filter");
    }
  }
  return absl::InternalError("conv2d on CUDA: unknown pass");
}

// ChoiceCache: choices by (pass, GPU, options, shapes). Never evicted: a model has a
// handful of conv shapes. Find (or the heuristics) runs under the lock, once per problem.
class ChoiceCache {
 public:
  using Key = std::array<int64_t, 17>;
  absl::StatusOr<Choice> get(Pass pass, KernelContext& ctx, const Conv2dOptions& o, const Shape& xs,
                             const Shape& ws, const ConvDescriptors& d, Buffers b) {
    const Key k{static_cast<int64_t>(pass),
                ctx.device().ordinal(),
                o.stride_h,
                o.stride_w,
                o.pad_h,
                o.pad_w,
                o.dilation_h,
                o.dilation_w,
                o.groups,
                xs[0],
                xs[1],
                xs[2],
                xs[3],
                ws[0],
                ws[1],
                ws[2],
                ws[3]};
    std::lock_guard<std::mutex> l(mu_);
    auto it = choices_.find(k);
    if (it != choices_.end()) return it->second;
    MTC_ASSIGN_OR_RETURN(Choice c, heuristic_choice(pass, cudnn(ctx), d));
    if (absl::StatusOr<Choice> m = measured_choice(pass, ctx, d, b, c); m.ok()) {
      c = *m;
    } else {
      cudaGetLastError();  // Find's failure is no later kernel's error: the heuristics' choice stands
    }
    choices_.emplace(k, c);
    return c;
  }

 private:
  std::mutex mu_;
  absl::flat_hash_map<Key, Choice> choices_;
};

ChoiceCache& choice_cache() {
  static ChoiceCache* c = new ChoiceCache();  // never destroyed: kernels may run during exit
  return *c;
}

// run_with_workspace: takes the choice's workspace from scratch and calls
// run(algo, workspace, bytes); when the compute region cannot give that much, retries
// with the smallest-workspace candidate.
template <typename Run>
absl::Status run_with_workspace(KernelContext& ctx, const Choice& c, Run&& run) {
  int algo = c.algo;
  size_t bytes = c.bytes;
  void* ws = nullptr;
  if (bytes > 0) {
    absl::StatusOr<void*> s = ctx.scratch(bytes);
    if (!s.ok() && absl::IsResourceExhausted(s.status()) && c.fallback_bytes < bytes) {
      algo = c.fallback_algo;
      bytes = c.fallback_bytes;
      s = bytes > 0 ? ctx.scratch(bytes) : absl::StatusOr<void*>(static_cast<void*>(nullptr));
    }
    if (!s.ok()) return s.status();
    ws = *s;
  }
  return run(algo, ws, bytes);
}

// Empty problems (a zero-sized dim) are beyond cuDNN; their results are plain, as on the
// CPU: y = bias (or 0), dx = 0, dw = 0, db = the sum of dy.
bool is_empty_problem(const KernelArgs& a) {
  for (const TensorView& t : a.in) {
    if (t.numel() == 0) return true;
  }
  return false;
}

absl::Status fill_zero(const TensorView& t, cudaStream_t s) {
  if (t.bytes() > 0) MTC_CUDA(cudaMemsetAsync(t.data, 0, t.bytes(), s));
  return absl::OkStatus();
}

// add_bias: y (N, OC, OH, OW) += bias.
absl::Status add_bias(const TensorView& y, const TensorView& bias, cudaStream_t s) {
  launch_add_channel_bias(y.f32(), bias.f32(), y.dim(0), y.dim(1), y.dim(2) * y.dim(3), s);
  return last_launch("add_channel_bias");
}

// bias_grad: db (OC) = the sum of dy (N, OC, OH, OW) over N, OH and OW, in double.
absl::Status bias_grad(KernelContext& ctx, const TensorView& dy, const TensorView& db) {
  const int64_t n = dy.dim(0), c = dy.dim(1), s = dy.dim(2) * dy.dim(3);
  const int64_t parts = channel_parts(n * s, c);
  double* partial = nullptr;
  if (parts > 0) {
    MTC_ASSIGN_OR_RETURN(
        void* p, ctx.scratch(static_cast<size_t>(channel_partials_doubles(c, parts)) * sizeof(double)));
    partial = static_cast<double*>(p);
  }
  launch_channel_sum(dy.f32(), n, c, s, parts, partial, db.f32(), stream(ctx));
  return last_launch("channel_sum");
}

absl::Status conv2d(const Conv2dOp& op, const KernelArgs& a) {
  const TensorView &x = a.in[0], &w = a.in[1], &y = a.out[0];
  cudaStream_t st = stream(a.ctx);
  if (is_empty_problem(a)) {
    MTC_RETURN_IF_ERROR(fill_zero(y, st));
    return op.adds_bias() ? add_bias(y, a.in[2], st) : absl::OkStatus();
  }
  ConvDescriptors d;
  MTC_RETURN_IF_ERROR(d.init(op.o, x.shape(), w.shape()));
  MTC_ASSIGN_OR_RETURN(const Choice c,
                       choice_cache().get(Pass::kForward, a.ctx, op.o, x.shape(), w.shape(), d, {x.data, w.data, y.data}));
  cudnnHandle_t h = cudnn(a.ctx);
  MTC_RETURN_IF_ERROR(run_with_workspace(a.ctx, c, [&](int algo, void* ws, size_t bytes) -> absl::Status {
    const float one = 1.f, zero = 0.f;
    MTC_CUDA(cudnnConvolutionForward(h, &one, d.x, x.data, d.w, w.data, d.conv,
                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, &zero, d.y,
                                     y.data));
    return absl::OkStatus();
  }));
  return op.adds_bias() ? add_bias(y, a.in[2], st) : absl::OkStatus();
}

absl::Status conv2d_backward_input(const Conv2dBackwardInputOp& op, const KernelArgs& a) {
  const TensorView &dy = a.in[0], &w = a.in[1], &dx = a.out[0];
  if (is_empty_problem(a) || dx.numel() == 0) return fill_zero(dx, stream(a.ctx));
  ConvDescriptors d;
  MTC_RETURN_IF_ERROR(d.init(op.o, op.x_shape, w.shape()));
  MTC_ASSIGN_OR_RETURN(const Choice c,
                       choice_cache().get(Pass::kBackwardData, a.ctx, op.o, op.x_shape, w.shape(), d,
                                                         {dx.data, w.data, dy.data}));
  cudnnHandle_t h = cudnn(a.ctx);
  return run_with_workspace(a.ctx, c, [&](int algo, void* ws, size_t bytes) -> absl::Status {
    const float one = 1.f, zero = 0.f;
    MTC_CUDA(cudnnConvolutionBackwardData(h, &one, d.w, w.data, d.y, dy.data, d.conv,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, &zero,
                                          d.x, dx.data));
    return absl::OkStatus();
  });
}

absl::Status conv2d_backward_weight(const Conv2dBackwardWeightOp& op, const KernelArgs& a) {
  const TensorView &x = a.in[0], &dy = a.in[1], &dw = a.out[0];
  if (is_empty_problem(a) || dw.numel() == 0) {
    MTC_RETURN_IF_ERROR(fill_zero(dw, stream(a.ctx)));
  } else {
    ConvDescriptors d;
    MTC_RETURN_IF_ERROR(d.init(op.o, x.shape(), op.w_shape));
    MTC_ASSIGN_OR_RETURN(const Choice c,
                         choice_cache().get(Pass::kBackwardFilter, a.ctx, op.o, x.shape(), op.w_shape, d,
                                                           {x.data, dw.data, dy.data}));
    cudnnHandle_t h = cudnn(a.ctx);
    MTC_RETURN_IF_ERROR(run_with_workspace(a.ctx, c, [&](int algo, void* ws, size_t bytes) -> absl::Status {
      const float one = 1.f, zero = 0.f;
      MTC_CUDA(cudnnConvolutionBackwardFilter(h, &one, d.x, x.data, d.y, dy.data, d.conv,
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes,
                                              &zero, d.w, dw.data));
      return absl::OkStatus();
    }));
  }
  return op.with_bias ? bias_grad(a.ctx, dy, a.out[1]) : absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(Conv2dOp, DeviceType::kCUDA, conv2d);
MTC_REGISTER_KERNEL(Conv2dBackwardInputOp, DeviceType::kCUDA, conv2d_backward_input);
MTC_REGISTER_KERNEL(Conv2dBackwardWeightOp, DeviceType::kCUDA, conv2d_backward_weight);

}  // namespace mtc::cuda
