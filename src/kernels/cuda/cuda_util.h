// What the CUDA kernels share: the device's compute stream and library handles as a
// kernel sees them, CUDA / cuDNN / cuBLAS status turned into absl::Status, and launch
// sizes. Included only by host code (.cc, compiled by the C++ compiler); the __global__
// kernels live in .cu files behind plain launcher functions (launch.h), so nvcc never
// compiles abseil.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "op_def.h"

namespace mtc::cuda {

// The CUDA device's resources for the kernel being run (ctx.device() is a CUDA device).
cudaStream_t stream(KernelContext& ctx);
cudnnHandle_t cudnn(KernelContext& ctx);    // bound to stream(ctx)
cublasHandle_t cublas(KernelContext& ctx);  // bound to stream(ctx)
cublasLtHandle_t cublaslt(KernelContext& ctx);

absl::Status status(cudaError_t e, const char* what);
absl::Status status(cudnnStatus_t s, const char* what);
absl::Status status(cublasStatus_t s, const char* what);

// last_launch: the error of the last kernel launch on this thread, if any.
inline absl::Status last_launch(const char* kernel) { return status(cudaGetLastError(), kernel); }

}  // namespace mtc::cuda

// MTC_CUDA(expr): returns a Status naming expr when a CUDA, cuDNN or cuBLAS call fails.
#define MTC_CUDA(expr) MTC_RETURN_IF_ERROR(::mtc::cuda::status((expr), #expr))
