// gpt-oss weights on the GPU, in the layouts the kernels take:
//   embedding, lm_head, fused QKV [q_dim + 2 kv_dim, H], O [H, q_dim], router [E, H]   BF16
//   norms, sinks, QKV bias, router bias, O bias (a second copy for the precise layer) fp32
//   O bias, expert biases                                                             BF16 (GEMM epilogues)
//   experts: `--weights` mxfp4 (the checkpoint's blocks + E8M0 scales, as stored), fp8 (e4m3 with fp32
//   128x128 block scales, converted on the GPU) or bf16 (exact dequantization on the GPU).
// Tensors come from a checkpoint (streamed from the mmap through pinned buffers) or are generated on the GPU
// (`synthetic:*`, bit-identical to the host generator).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kernels/moe/moe_layer.h"
#include "model/loader.h"
#include "model/parallel.h"
#include "runtime/cuda/device_memory.h"

namespace orchid::runtime::cuda {

struct DeviceLayer {
  float* input_norm = nullptr;
  float* post_norm = nullptr;
  float* sinks = nullptr;
  __nv_bfloat16* qkv_w = nullptr;
  float* qkv_b = nullptr;
  __nv_bfloat16* o_w = nullptr;
  __nv_bfloat16* o_b = nullptr;
  float* o_b_f32 = nullptr;  // the same bias in fp32, for the precise layer's fp32 O projection
  kernels::MoeLayerWeights moe;
};

struct DeviceWeights {
  __nv_bfloat16* embedding = nullptr;
  __nv_bfloat16* lm_head = nullptr;
  float* final_norm = nullptr;
  std::vector<DeviceLayer> layers;
  DeviceArena arena;
  kernels::MoeWeights format = kernels::MoeWeights::kMxfp4;
  // MXFP4: the expert blocks were repacked at load as mxfp4_word_order.h says, which the MoE kernels must be
  // told.
  bool mxfp4_tiled_order = false;

  // Whether MXFP4 experts are to be repacked: the default; ORCHID_MXFP4_WORD_ORDER=checkpoint keeps the
  // checkpoint's form (the repack's padding takes 2.2% more expert bytes).
  static bool mxfp4_repack_requested();
  // Bytes the arena needs for a rank's shard in a format (checked before anything is loaded); repack: the
  // MXFP4 experts repacked.
  static size_t bytes_needed(const model::ModelConfig& c, kernels::MoeWeights format,
                             const model::RankShard& shard, bool repack);
  // This rank's shard (model/parallel.h): its heads' QKV rows, sinks and O columns, its experts, its
  // vocabulary rows of lm_head; the rest whole. `ref` is a directory or synthetic model; config validated.
  static DeviceWeights load(const model::ModelRef& ref, const model::ModelConfig& c,
                            kernels::MoeWeights format, cudaStream_t stream, const model::RankShard& shard,
                            bool repack);
};

kernels::MoeWeights parse_weight_format(const std::string& name);  // fp8 | mxfp4 | bf16

}  // namespace orchid::runtime::cuda
