// A small MoE block with random BF16 experts on the device, for the layer-level tests that compare two ways
// of running moe_forward (the split router, the block's own input norm): 32 experts, hidden 256,
// intermediate 128, a router GEMM and a workspace sized for `max_tokens`. The host copies of the router are
// kept for references.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/moe/moe_layer.h"

namespace orchid::kernels {

struct Bf16MoeLayer {
  MoeConfig cfg;
  std::vector<uint16_t> router_w;  // bf16 [E, H]
  std::vector<float> router_b;     // [E], on the bf16 grid
  orchid::testing::DeviceBuffer<uint16_t> d_wr, d_w1, d_w2, d_b1, d_b2;
  orchid::testing::DeviceBuffer<float> d_br;
  orchid::testing::DeviceBuffer<uint8_t> gemm_ws{DenseGemm::kRecommendedWorkspace}, ws;
  std::unique_ptr<DenseGemm> router;

  Bf16MoeLayer(int max_tokens, std::mt19937_64& rng) {
    cfg.experts = 32;
    cfg.hidden = 256;
    cfg.inter = 128;
    cfg.weights = MoeWeights::kBf16;
    cfg.max_tokens = max_tokens;
    const size_t E = size_t(cfg.experts), H = size_t(cfg.hidden), I = size_t(cfg.inter);
    router_w = orchid::testing::random_bf16(rng, E * H, 0.2f);
    router_b = orchid::testing::bf16_to_floats(orchid::testing::random_bf16(rng, E, 0.5f));
    d_wr.upload(router_w);
    d_br.upload(router_b);
    d_w1.upload(orchid::testing::random_bf16(rng, E * 2 * I * H, 0.05f));
    d_w2.upload(orchid::testing::random_bf16(rng, E * H * I, 0.05f));
    d_b1.upload(orchid::testing::random_bf16(rng, E * 2 * I, 0.5f));
    d_b2.upload(orchid::testing::random_bf16(rng, E * H, 0.1f));
    router = std::make_unique<DenseGemm>(gemm_ws.get(), gemm_ws.size());
    ws.resize(moe_workspace_bytes(cfg));
    orchid::testing::poison(ws);
    moe_workspace_init(cfg, ws.get(), nullptr);
  }

  MoeLayerWeights weights() const {
    MoeLayerWeights lw;
    lw.router_w = d_wr.get();
    lw.router_b = d_br.get();
    lw.w1 = d_w1.get();
    lw.w2 = d_w2.get();
    lw.b1 = d_b1.get();
    lw.b2 = d_b2.get();
    return lw;
  }
  MoeBuffers buffers() const { return moe_buffers(cfg, ws.get()); }
};

}  // namespace orchid::kernels
