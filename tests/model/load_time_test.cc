// Opening a 20b-shaped checkpoint reads only headers: < 1 s. The shards are written sparse (valid headers,
// data as file holes), so the test costs no disk and proves that no tensor data is read at open.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "model/loader.h"
#include "model/synthetic_writer.h"

namespace orchid::model {
namespace {

namespace fs = std::filesystem;

TEST(LoadTime, Synthetic20bHeadersAndManifestUnderOneSecond) {
  const fs::path dir = fs::temp_directory_path() / ("orchid_20b_sparse_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  SyntheticWriteOptions o;
  o.sparse = true;
  o.max_shard_bytes = 5'000'000'000ull;
  const uint64_t total = write_synthetic_checkpoint(dir.string(), preset_config("20b"), o);
  EXPECT_GT(total, 13'000'000'000ull);
  const auto t0 = std::chrono::steady_clock::now();
  auto m = load_model(dir.string());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(m.checkpoint.tensors().size(), 459u);
  EXPECT_LT(s, 1.0);
  std::printf("opened 20b-shaped checkpoint (%zu tensors, %.2f GB) in %.4f s\n",
              m.checkpoint.tensors().size(), double(total) / 1e9, s);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace orchid::model
