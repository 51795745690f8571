// The fp32 CPU backend: the whole gpt-oss forward pass written plainly, with a paged KV cache of the same
// shape the engine drives on the GPU. It is the oracle for the CUDA kernels and the backend of every CI test.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/loader.h"
#include "model/rope.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu_weights.h"

namespace orchid::runtime::cpu {

struct CpuBackendOptions {
  int32_t page_size = 16;
  int32_t num_full_pages = 0;     // 0: enough for `max_tokens` tokens
  int32_t num_sliding_pages = 0;  // 0: enough for `max_tokens` tokens
  int64_t max_tokens = 8192;      // only used to size the default pools
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(model::LoadedModel model, const CpuBackendOptions& opts);
  static std::unique_ptr<CpuBackend> create(const std::string& model_arg, const CpuBackendOptions& opts = {});

  std::string name() const override { return "cpu"; }
  const model::ModelConfig& model_config() const override { return model_.config; }
  KvCacheSpec kv_spec() const override { return spec_; }
  StepOutput forward(const StepBatch& batch) override;
  std::vector<float> run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                               std::vector<int32_t>* topk) override;

 private:
  void validate(const StepBatch& b) const;
  float* kv_row(bool key, int64_t layer, int32_t page, int64_t slot);
  void layer_forward(int64_t l, const StepBatch& b, const std::vector<int32_t>& positions,
                     std::vector<float>& x, std::vector<int32_t>* topk = nullptr);

  model::LoadedModel model_;
  CpuWeights w_;
  model::RopeTables rope_;
  KvCacheSpec spec_;
  std::vector<int64_t> layer_slot_;  // index of a layer among the layers of its kind
  std::vector<float> full_k_, full_v_, sliding_k_, sliding_v_;
};

}  // namespace orchid::runtime::cpu
