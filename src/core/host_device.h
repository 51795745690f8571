// ORCHID_HOST_DEVICE: marks a function compiled for both the host and the GPU when nvcc compiles the file,
// and for the host alone otherwise (code shared by kernels, their CPU references and host tests).
#pragma once

#if defined(__CUDACC__)
#define ORCHID_HOST_DEVICE __host__ __device__
#else
#define ORCHID_HOST_DEVICE
#endif
