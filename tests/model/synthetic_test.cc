#include "model/synthetic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/synthetic_writer.h"

namespace orchid::model {
namespace {

namespace fs = std::filesystem;

TEST(Synthetic, DeterministicAndChunkInvariant) {
  const auto m = gpt_oss_manifest(preset_config("tiny"));
  for (const auto& spec : m) {
    if (spec.layer > 0) continue;
    int64_t n = 1;
    for (auto d : spec.shape) n *= d;
    n = std::min<int64_t>(n, 5000);
    const DType dt = spec.dtypes.front();
    const size_t es = dtype_size(dt);
    std::vector<uint8_t> whole(size_t(n) * es), pieces(size_t(n) * es), other(size_t(n) * es);
    fill_synthetic(spec, 7, dt, 0, n, whole.data());
    for (int64_t b = 0; b < n; b += 333)
      fill_synthetic(spec, 7, dt, b, std::min<int64_t>(333, n - b), pieces.data() + size_t(b) * es);
    fill_synthetic(spec, 8, dt, 0, n, other.data());
    EXPECT_EQ(whole, pieces) << spec.name;
    EXPECT_NE(whole, other) << spec.name;
  }
}

TEST(Synthetic, DistributionsAreAsDocumented) {
  TensorSpec spec{"t", {200000}, {DType::kF32}, TensorRole::kQProj};
  std::vector<float> v(200000);
  fill_synthetic(spec, 1, DType::kF32, 0, 200000, v.data());
  double s = 0, ss = 0;
  for (float x : v) s += x, ss += double(x) * x;
  const double mean = s / 2e5, sd = std::sqrt(ss / 2e5 - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, synthetic_distribution(TensorRole::kQProj).std, 0.001);
  // BF16 values are the F32 values rounded.
  std::vector<uint16_t> b(1000);
  fill_synthetic(spec, 1, DType::kBF16, 0, 1000, b.data());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(b[size_t(i)], float_to_bf16(v[size_t(i)]));
  // Scales stay around 2^-7.
  TensorSpec sc{"s", {1000}, {DType::kU8}, TensorRole::kGateUpScales};
  std::vector<uint8_t> u(1000);
  fill_synthetic(sc, 1, DType::kU8, 0, 1000, u.data());
  for (auto x : u) EXPECT_TRUE(x >= 119 && x <= 121);
}

TEST(Synthetic, WrittenCheckpointEqualsInMemory) {
  const auto c = preset_config("tiny");
  const fs::path dir = fs::temp_directory_path() / ("orchid_synth_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  SyntheticWriteOptions o;
  o.seed = 5;
  o.max_shard_bytes = 20'000'000;  // several shards
  write_synthetic_checkpoint(dir.string(), c, o);
  auto disk = io::Checkpoint::open_dir(dir.string());
  auto mem = synthetic_checkpoint(c, 5);
  validate_checkpoint(disk, gpt_oss_manifest(c));
  ASSERT_EQ(disk.tensors().size(), mem.tensors().size());
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".safetensors";
  EXPECT_GT(files, 1u);
  for (const auto& [name, t] : mem.tensors()) {
    const auto& d = disk.get(name);
    ASSERT_EQ(d.nbytes, t.nbytes) << name;
    ASSERT_EQ(std::memcmp(d.data, t.data, t.nbytes), 0) << name;
  }
  EXPECT_EQ(ModelConfig::from_file((dir / "config.json").string()).to_json(ConfigStyle::kTransformers4),
            c.to_json(ConfigStyle::kTransformers4));
  EXPECT_THROW(write_synthetic_checkpoint(dir.string(), c, o), Error);  // not empty
  fs::remove_all(dir);
}

}  // namespace
}  // namespace orchid::model
