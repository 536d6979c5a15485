// Kernels beside cuBLAS for matmul and linear: the bias broadcast (linear's GEMM then runs
// with beta = 1, as the CPU kernel does) and the column sums of the bias gradient. The
// column sums run in double over fixed row chunks combined in chunk order, so results
// do not depend on timing, only on the shape.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn_blas_launch.h"

namespace mtc::cuda {
namespace {

__global__ void fill_rows_kernel(const float* __restrict__ bias, float* __restrict__ y, int64_t rows,
                                 int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = bias[i % cols];
  }
}

// column_partial: block (kColTile, kRowLanes) at (column tile, chunk): part[chunk, c] =
// the sum of x[r, c] over the chunk's rows; lane ty takes rows start + ty, + kRowLanes, ...
// and the lanes' sums are added in lane order.
__global__ void column_partial_kernel(const float* __restrict__ x, int64_t rows, int64_t cols,
                                      int64_t chunk_rows, double* __restrict__ part) {
  __shared__ double sh[kRowLanes][kColTile];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double acc = 0;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += x[r * cols + c];
  }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double s = 0;
    for (int l = 0; l < kRowLanes; ++l) s += sh[l][threadIdx.x];
    part[static_cast<int64_t>(blockIdx.y) * cols + c] = s;
  }
}

// column_finish: out[c] = the chunks' sums for column c, added in chunk order.
__global__ void column_finish_kernel(const double* __restrict__ part, int64_t chunks, int64_t cols,
                                     float* __restrict__ out) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += part[k * cols + c];
    out[c] = static_cast<float>(s);
  }
}

}  // namespace

void launch_fill_rows(const float* bias, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  fill_rows_kernel<<<blocks(rows * cols), 256, 0, stream>>>(bias, y, rows, cols);
}

size_t column_sum_scratch_bytes(int64_t rows, int64_t cols) {
  const ColumnChunks ch = column_chunks(rows, cols);
  return sizeof(double) * static_cast<size_t>(ch.count) * static_cast<size_t>(cols < 1 ? 1 : cols);
}

void launch_column_sum(const float* x, int64_t rows, int64_t cols, float* out, void* scratch,
                       cudaStream_t stream) {
  if (cols <= 0) return;
  const ColumnChunks ch = column_chunks(rows, cols);
  auto* part = static_cast<double*>(scratch);
  const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(ch.count));
  column_partial_kernel<<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(x, rows, cols, ch.rows_each, part);
  column_finish_kernel<<<blocks(cols), 256, 0, stream>>>(part, ch.count, cols, out);
}

}  // namespace mtc::cuda
