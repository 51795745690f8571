// The gpt-oss weights as the CPU backend uses them: large matrices stay views into the checkpoint
// (dequantized block by block in the matmul); vectors are converted to fp32 once.
#pragma once

#include <memory>
#include <vector>

#include "model/loader.h"
#include "runtime/cpu/cpu_linear.h"

namespace orchid::runtime::cpu {

struct LayerWeights {
  std::vector<float> input_norm, post_norm, sinks;
  MatrixRef q, k, v, o;
  std::vector<float> q_bias, k_bias, v_bias, o_bias;
  MatrixRef router;
  std::vector<float> router_bias;
  std::vector<MatrixRef> gate_up, down;  // per expert: [2I, H] (rows interleaved gate/up) and [H, I]
  std::vector<float> gate_up_bias;       // [E, 2I]
  std::vector<float> down_bias;          // [E, H]
};

struct CpuWeights {
  MatrixRef embedding, lm_head;
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  std::vector<std::unique_ptr<std::vector<float>>> owned;  // transposed dense experts

  static CpuWeights resolve(const model::LoadedModel& m);
};

}  // namespace orchid::runtime::cpu
