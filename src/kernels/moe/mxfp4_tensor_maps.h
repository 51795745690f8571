// The TMA tensor maps the tiled MXFP4 GEMMs (mxfp4_tiled_gemm.cu, mxfp4_w4a8_gemm.cu) copy their stages
// through: byte matrices (token rows, the checkpoint's expert blocks) and the repacked expert blocks.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace orchid::kernels {

// A row-major byte matrix [rows][row_bytes] as a 2-D tensor map with boxes of box_bytes x box_rows
// (box_bytes = the swizzle's span: 64 with CU_TENSOR_MAP_SWIZZLE_64B, 128 with _128B). `what` names it in
// the error of a refused description.
CUtensorMap mxfp4_byte_tensor_map(const void* base, uint64_t rows, uint64_t row_bytes, int box_bytes,
                                  int box_rows, CUtensorMapSwizzle swizzle, const char* what);

// The repacked expert blocks (mxfp4_word_order.h: [chunks][E * n / 16 groups][16 rows][64 bytes]) as a 4-D
// map whose box is one chunk of cta_rows / 16 groups: a stage's 4 MX blocks of a CTA's rows in one copy,
// 64-byte swizzled (the 16-byte column c of 64-byte row r lands at c ^ ((r >> 1) & 3)).
CUtensorMap mxfp4_repacked_weight_map(const void* blocks, int num_experts, int n, int k, int cta_rows);

}  // namespace orchid::kernels
