// Error checking for CUDA runtime calls and kernel launches. A failed call is a programming or device error,
// reported as orchid::InternalError with file:line (see core/error.h).
#pragma once

#include <cuda_runtime.h>

#include "core/check_failed.h"

#define ORCHID_CUDA_CHECK(expr)                                                           \
  do {                                                                                    \
    cudaError_t orchid_err_ = (expr);                                                     \
    if (orchid_err_ != cudaSuccess) [[unlikely]]                                          \
      ::orchid::check_failed(__FILE__, __LINE__, #expr, cudaGetErrorString(orchid_err_)); \
  } while (0)

// After a <<<...>>> launch: catches bad configurations at once (not asynchronous faults).
#define ORCHID_CUDA_CHECK_LAUNCH() ORCHID_CUDA_CHECK(cudaGetLastError())

// A launcher's precondition on its arguments (sizes, alignment); fmt-free for nvcc.
#define ORCHID_KERNEL_REQUIRE(cond, msg)                        \
  do {                                                          \
    if (!(cond)) [[unlikely]]                                   \
      ::orchid::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
