#include "model/synthetic.h"

// Header-only use: the binary needs no libxxhash at run time.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/thread_pool.h"

namespace orchid::model {

uint64_t synthetic_tensor_key(std::string_view name, uint64_t seed) {
  return XXH64(name.data(), name.size(), seed);
}

SyntheticDistribution synthetic_distribution(TensorRole role) {
  using K = SyntheticDistribution;
  switch (role) {
    case TensorRole::kGateUpBlocks:
    case TensorRole::kDownBlocks:
      return {K::kBytes};
    case TensorRole::kGateUpScales:
    case TensorRole::kDownScales:
      return {K::kScales};
    case TensorRole::kInputNorm:
    case TensorRole::kPostNorm:
    case TensorRole::kFinalNorm:
      return {K::kNormal, 1.0f, 0.05f};
    case TensorRole::kSinks:
      return {K::kNormal, 0.0f, 1.0f};
    default:
      return {K::kNormal, 0.0f, 0.02f};
  }
}

namespace {

// Four 16-bit uniforms in (0, 1), each (k + 0.5) / 65536 (exact in fp32), summed exactly; the sum has mean 2
// and variance 1/3. Two roundings follow (times sqrt(3)*std, plus mean) — unfused on every device.
inline float normal_from_hash(uint64_t h, float scale, float mean) {
  float s = 0.0f;
  for (int k = 0; k < 4; ++k) s += (float((h >> (16 * k)) & 0xffff) + 0.5f) * (1.0f / 65536.0f);
  volatile float z = (s - 2.0f) * scale;  // volatile: keep the multiply and add as two roundings
  return z + mean;
}

}  // namespace

void fill_synthetic(const TensorSpec& spec, uint64_t seed, DType dtype, int64_t begin, int64_t count,
                    void* out) {
  const uint64_t key = synthetic_tensor_key(spec.name, seed);
  const SyntheticDistribution d = synthetic_distribution(spec.role);
  const float scale = d.std * 1.7320508075688772f;
  auto hash = [key](int64_t i) { return splitmix64(key + uint64_t(i) * 0x9e3779b97f4a7c15ull); };
  switch (d.kind) {
    case SyntheticDistribution::kBytes: {
      ORCHID_CHECK(dtype == DType::kU8);
      auto* o = static_cast<uint8_t*>(out);
      for (int64_t i = 0; i < count; ++i) o[i] = uint8_t(hash(begin + i) >> 56);
      return;
    }
    case SyntheticDistribution::kScales: {
      ORCHID_CHECK(dtype == DType::kU8);
      auto* o = static_cast<uint8_t*>(out);
      for (int64_t i = 0; i < count; ++i) o[i] = uint8_t(119 + (hash(begin + i) >> 32) % 3);  // 2^-8 .. 2^-6
      return;
    }
    case SyntheticDistribution::kNormal: {
      if (dtype == DType::kBF16) {
        auto* o = static_cast<uint16_t*>(out);
        for (int64_t i = 0; i < count; ++i)
          o[i] = float_to_bf16(normal_from_hash(hash(begin + i), scale, d.mean));
      } else if (dtype == DType::kF32) {
        auto* o = static_cast<float*>(out);
        for (int64_t i = 0; i < count; ++i) o[i] = normal_from_hash(hash(begin + i), scale, d.mean);
      } else {
        ORCHID_CHECK(false, "synthetic float tensors are BF16 or F32, not {}", dtype_name(dtype));
      }
      return;
    }
  }
}

io::Checkpoint synthetic_checkpoint(const ModelConfig& c, uint64_t seed) {
  io::Checkpoint ck;
  ck.set_where(fmt::format("{}@{}", c.name, seed));
  const std::vector<TensorSpec> manifest = gpt_oss_manifest(c);
  uint64_t total = 0;
  for (const auto& spec : manifest) {
    uint64_t numel = 1;
    for (int64_t d : spec.shape) numel *= uint64_t(d);
    total += numel * dtype_size(spec.dtypes.front());
  }
  require_host_memory(total, fmt::format("{}'s weights (generated in host memory)", c.name),
                      "the CUDA backend generates them on the GPU instead; on the CPU backend take a smaller "
                      "preset (synthetic:tiny)");
  for (const auto& spec : manifest) {
    const DType dtype = spec.dtypes.front();
    int64_t numel = 1;
    for (int64_t d : spec.shape) numel *= d;
    const size_t bytes = size_t(numel) * dtype_size(dtype);
    std::shared_ptr<uint8_t[]> buf(new uint8_t[bytes]);
    const size_t esize = dtype_size(dtype);
    ThreadPool::global().parallel_for(size_t(numel), 1 << 16, [&](size_t b, size_t e) {
      fill_synthetic(spec, seed, dtype, int64_t(b), int64_t(e - b), buf.get() + b * esize);
    });
    io::TensorView v;
    v.name = spec.name;
    v.dtype = dtype;
    v.shape = spec.shape;
    v.data = buf.get();
    v.nbytes = bytes;
    v.source = ck.where();
    ck.add(std::move(v), std::shared_ptr<const void>(buf, buf.get()));
  }
  return ck;
}

}  // namespace orchid::model
