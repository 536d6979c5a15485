// Launcher of the CUDA sum reduction (ew_reduce.cu), behind ReduceSumOp (sum, mean,
// sum_to). Deterministic: every output element is summed in double, in an order fixed by
// the shapes alone (never by the launch configuration or timing), then scaled and
// rounded to float once, as the CPU kernel does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

inline constexpr int kMaxReduceDims = 8;

// ReduceGeom: how x is read. Output element o (row-major over the kept dims) starts at
// the offset of its kept-dim index through kstride; its reduced elements r (row-major
// over the reduced dims) lie at the offsets of r through rstride. Dims are stored
// innermost FIRST (index 0 varies fastest), so the kernels index them with constants.
struct ReduceGeom {
  int nk = 0, nr = 0;
  int64_t ksize[kMaxReduceDims] = {}, kstride[kMaxReduceDims] = {};
  int64_t rsize[kMaxReduceDims] = {}, rstride[kMaxReduceDims] = {};
};

// ReducePlan: each output's n_red elements cut into `chunks` runs of `len` (the last may
// be shorter). rows: the innermost reduced dim is contiguous (a warp sums each run, lanes
// reading neighbouring elements); else the innermost kept dim is, and a thread sums each
// run (neighbouring threads reading neighbouring outputs). With more than one chunk,
// partial sums go to `scratch` (chunks * n_out doubles) and a second kernel adds them in
// chunk order.
struct ReducePlan {
  bool rows = false;
  int64_t chunks = 1, len = 1;
};

// reduce_plan: the plan for n_out outputs of n_red elements each (a function of the shape only).
inline ReducePlan reduce_plan(int64_t n_out, int64_t n_red, bool rows) {
  ReducePlan p;
  p.rows = rows;
  if (n_red < 1) n_red = 1;
  if (rows) {
    constexpr int64_t kRowChunk = 8192;  // elements per warp: 256 per lane
    p.chunks = (n_red + kRowChunk - 1) / kRowChunk;
  } else {
    // Enough (output, chunk) work items to fill the GPU when there are few outputs,
    // but runs of at least 16 elements.
    constexpr int64_t kTargetItems = int64_t{1} << 17;
    const int64_t c = n_out >= kTargetItems ? 1 : kTargetItems / n_out;
    const int64_t most = (n_red + 15) / 16;
    p.chunks = c < 1 ? 1 : c > most ? most : c;
  }
  if (p.chunks < 1) p.chunks = 1;
  p.len = (n_red + p.chunks - 1) / p.chunks;
  p.chunks = (n_red + p.len - 1) / p.len;  // no empty chunk
  return p;
}

// reduce_scratch_bytes: the scratch launch_reduce_sum needs under plan p.
inline size_t reduce_scratch_bytes(const ReducePlan& p, int64_t n_out) {
  return p.chunks > 1 ? static_cast<size_t>(p.chunks) * static_cast<size_t>(n_out) * sizeof(double) : 0;
}

// launch_reduce_sum: y[o] = float(scale * sum_r x[...]) for n_out outputs of n_red
// elements each (both >= 1). scratch: reduce_scratch_bytes(p, n_out) bytes of device
// memory, 8-byte aligned (null when that is 0).
void launch_reduce_sum(const float* x, float* y, const ReduceGeom& g, int64_t n_out, int64_t n_red,
                       const ReducePlan& p, double scale, void* scratch, cudaStream_t stream);

}  // namespace mtc::cuda
