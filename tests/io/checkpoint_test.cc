#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace orchid::io {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("orchid_ck_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::vector<TensorToWrite>& t) {
    write_safetensors((dir_ / name).string(), t);
  }
  void index(const std::string& json) { std::ofstream(dir_ / "model.safetensors.index.json") << json; }
  std::string error_of() {
    try {
      Checkpoint::open_dir(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
  float v_[4] = {1, 2, 3, 4};
};

TEST_F(CheckpointTest, ShardedWithIndex) {
  write("s1.safetensors", {{"a", DType::kF32, {2}, v_}, {"b", DType::kF32, {2}, v_ + 2}});
  write("s2.safetensors", {{"c", DType::kF32, {4}, v_}});
  index(R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}})");
  auto ck = Checkpoint::open_dir(dir_.string());
  EXPECT_EQ(ck.tensors().size(), 3u);
  EXPECT_EQ(ck.get("b").as<float>()[1], 4.0f);
  EXPECT_NE(ck.get("c").source.find("s2.safetensors"), std::string::npos);
  try {
    ck.get("zzz");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'zzz'"), std::string::npos);
  }
}

TEST_F(CheckpointTest, WithoutIndexReadsEveryShard) {
  write("a.safetensors", {{"a", DType::kF32, {2}, v_}});
  write("b.safetensors", {{"b", DType::kF32, {2}, v_}});
  EXPECT_EQ(Checkpoint::open_dir(dir_.string()).tensors().size(), 2u);
  write("c.safetensors", {{"a", DType::kF32, {2}, v_}});
  EXPECT_NE(error_of().find("appears in both"), std::string::npos);
}

TEST_F(CheckpointTest, IndexErrors) {
  write("s1.safetensors", {{"a", DType::kF32, {2}, v_}});
  index(R"({"weight_map":{"a":"s1.safetensors","x":"s1.safetensors"}})");
  EXPECT_NE(error_of().find("'x'"), std::string::npos);
  index(R"({"weight_map":{"a":"nope.safetensors"}})");
  EXPECT_NE(error_of().find("nope.safetensors"), std::string::npos);
  index(R"({"weight_map":{"a":"../s1.safetensors"}})");
  EXPECT_NE(error_of().find("plain file name"), std::string::npos);
  index(R"({"weight_map": 3})");
  EXPECT_NE(error_of().find("weight_map"), std::string::npos);
  index("{not json");
  EXPECT_NE(error_of().find("invalid JSON"), std::string::npos);
}

TEST_F(CheckpointTest, EmptyOrMissingDirectory) {
  EXPECT_NE(error_of().find("no .safetensors"), std::string::npos);
  EXPECT_THROW(Checkpoint::open_dir((dir_ / "nope").string()), Error);
}

}  // namespace
}  // namespace orchid::io
