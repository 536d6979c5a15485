// Launchers of the helper kernels around cuBLAS for matmul and linear (nn_blas.cu): the
// bias broadcast that linear's GEMM accumulates onto, and the deterministic column sums
// of linear_backward_weight's bias gradient. Plain C++: included by host code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mtc::cuda {

// launch_fill_rows: y (rows, cols) = bias (cols) in every row.
void launch_fill_rows(const float* bias, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

// column_sum_scratch_bytes: the scratch launch_column_sum needs for x (rows, cols).
size_t column_sum_scratch_bytes(int64_t rows, int64_t cols);
// launch_column_sum: out[c] = sum over r of x[r, c], in double, as float. Rows are cut into
// chunks whose number depends only on (rows, cols); each chunk sums its rows in a fixed
// order and the chunks are added in order, so the result is bit-identical run to run.
// `scratch` holds column_sum_scratch_bytes(rows, cols) bytes (8-byte aligned).
void launch_column_sum(const float* x, int64_t rows, int64_t cols, float* out, void* scratch,
                       cudaStream_t stream);

}  // namespace mtc::cuda
