// GPU synthetic weights equal the host's bit for bit (the host generator is the reference).
#include "kernels/synthetic/synthetic_fill.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "model/synthetic.h"

namespace orchid::kernels {
namespace {

SyntheticFill fill_for(const model::TensorSpec& spec, uint64_t seed, DType dtype) {
  const auto d = model::synthetic_distribution(spec.role);
  SyntheticFill f;
  f.key = model::synthetic_tensor_key(spec.name, seed);
  f.scale = d.std * 1.7320508075688772f;
  f.mean = d.mean;
  if (d.kind == model::SyntheticDistribution::kBytes)
    f.kind = SyntheticFillKind::kBytes;
  else if (d.kind == model::SyntheticDistribution::kScales)
    f.kind = SyntheticFillKind::kScales;
  else
    f.kind = dtype == DType::kF32 ? SyntheticFillKind::kNormalF32 : SyntheticFillKind::kNormalBf16;
  return f;
}

TEST(SyntheticFillGpu, BitIdenticalToHost) {
  const auto manifest = model::gpt_oss_manifest(model::preset_config("20b"));
  for (const auto& spec : manifest) {
    if (spec.layer > 0) continue;
    for (DType dt : {spec.dtypes.front(), DType::kF32}) {
      if (spec.dtypes.front() == DType::kU8 && dt == DType::kF32) continue;
      const int64_t begin = 12345, count = 300001;  // odd offset and length
      const size_t es = dtype_size(dt);
      std::vector<uint8_t> host(size_t(count) * es), dev(size_t(count) * es, 0xcd);
      model::fill_synthetic(spec, 42, dt, begin, count, host.data());
      void* d = nullptr;
      ORCHID_CUDA_CHECK(cudaMalloc(&d, host.size()));
      ORCHID_CUDA_CHECK(cudaMemset(d, 0xcd, host.size()));
      synthetic_fill(fill_for(spec, 42, dt), begin, count, d, nullptr);
      ORCHID_CUDA_CHECK(cudaMemcpy(dev.data(), d, dev.size(), cudaMemcpyDeviceToHost));
      ORCHID_CUDA_CHECK(cudaFree(d));
      EXPECT_EQ(std::memcmp(host.data(), dev.data(), host.size()), 0) << spec.name << " " << dtype_name(dt);
    }
  }
}

}  // namespace
}  // namespace orchid::kernels
