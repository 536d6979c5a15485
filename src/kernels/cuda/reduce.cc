// CUDA kernel of ReduceSumOp (sum over dims, mean = the sum scaled, sum_to). As on the CPU,
// dims are first collapsed into alternating kept / reduced runs (size-1 dims dropped);
// the runs become the kept and reduced index spaces of ew_reduce.cu, which sums each
// output in double in an order fixed by the shape (deterministic), then multiplies by the
// op's scale in double and rounds to float once, like src/kernels/cpu/reduce.cc.
#include "ops/reduce.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ew_reduce_launch.h"

namespace mtc::cuda {
namespace {

absl::Status reduce_sum(const ReduceSumOp& op, const KernelArgs& a) {
  const TensorView& x = a.in[0];
  const TensorView& y = a.out[0];
  const int64_t n_out = y.numel();
  if (n_out == 0) return absl::OkStatus();
  cudaStream_t s = stream(a.ctx);
  if (x.numel() == 0) {  // an empty sum is 0
    MTC_CUDA(cudaMemsetAsync(y.data, 0, y.bytes(), s));
    return absl::OkStatus();
  }
  auto [sizes, red] = op.runs(x.shape());
  // Row-major strides of the collapsed dims, then the kept and reduced runs, innermost first.
  ReduceGeom g;
  int64_t stride = 1, n_red = 1;
  for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
    int& n = red[i] ? g.nr : g.nk;
    if (n == kMaxReduceDims) {
      return absl::UnimplementedError(
          absl::StrCat("sum: input ", shape_str(x.shape()), " alternates kept and reduced dims ",
                       "more often than the CUDA kernel's limit of ", kMaxReduceDims));
    }
    (red[i] ? g.rsize : g.ksize)[n] = sizes[i];
    (red[i] ? g.rstride : g.kstride)[n] = stride;
    ++n;
    if (red[i]) n_red *= sizes[i];
    stride *= sizes[i];
  }
  // rows: the innermost run is reduced, so a warp reads it contiguously.
  const ReducePlan plan = reduce_plan(n_out, n_red, !red.empty() && red.back());
  void* scratch = nullptr;
  if (const size_t bytes = reduce_scratch_bytes(plan, n_out); bytes > 0) {
    MTC_ASSIGN_OR_RETURN(scratch, a.ctx.scratch(bytes));
  }
  launch_reduce_sum(x.f32(), y.f32(), g, n_out, n_red, plan, static_cast<double>(op.scale), scratch, s);
  return last_launch("sum");
}

}  // namespace

MTC_REGISTER_KERNEL(ReduceSumOp, DeviceType::kCUDA, reduce_sum);

}  // namespace mtc::cuda
