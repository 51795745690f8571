#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"

namespace orchid::io {
namespace {

namespace fs = std::filesystem;

std::string with_prefix(const std::string& header, const std::string& data = "") {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s + header + data;
}

SafetensorsHeader parse(const std::string& bytes) {
  return parse_safetensors(bytes, bytes.size(), "f.safetensors");
}

void expect_error(const std::string& bytes, const std::string& words, uint64_t file_size = 0) {
  try {
    parse_safetensors(bytes, file_size ? file_size : bytes.size(), "f.safetensors");
    ADD_FAILURE() << "accepted: " << words;
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("f.safetensors"), std::string::npos) << w;
    EXPECT_NE(w.find(words), std::string::npos) << w;
  }
}

TEST(Safetensors, ParsesValidHeader) {
  auto h = parse(with_prefix(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[8,20]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      std::string(20, 'x')));
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a");  // sorted by offset
  EXPECT_EQ(h.tensors[1].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.metadata.at("format"), "pt");
}

TEST(Safetensors, ClearErrors) {
  const std::string ok_tensor = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_error("abc", "shorter than the 8-byte");
  expect_error(with_prefix("{" + ok_tensor + "}", std::string(4, 'x')),
               "runs past the end of the data section");
  expect_error(with_prefix("{}").substr(0, 8) + "{", "runs past the end of the file");
  expect_error(with_prefix("{" + ok_tensor + "}").substr(0, 20), "truncated header", 100);
  expect_error(with_prefix(R"({"t":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", "x"),
               "unknown dtype 'F4'");
  expect_error(with_prefix(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')),
               "needs 12 bytes");
  expect_error(with_prefix(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", std::string(8, 'x')),
               "non-negative");
  expect_error(with_prefix(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, 'x')),
               "reversed");
  expect_error(with_prefix(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           std::string(12, 'x')),
               "overlap");
  expect_error(with_prefix("[1,2]"), "not a JSON object");
  expect_error(with_prefix("{\"t\": "), "not valid JSON");
  expect_error(with_prefix(R"({"__metadata__":{"a":1}})"), "must be a string");
  expect_error(with_prefix(R"({"t":{"dtype":"F32","shape":[2]}})"), "data_offsets");
  expect_error(with_prefix(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x')), "dtype");
  expect_error(
      with_prefix(R"({"t":{"dtype":"U8","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})"),
      "too large");
  std::string huge(8, '\xff');
  expect_error(huge, "exceeds");
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  // Every prefix and many random byte flips of a valid file: parse either succeeds or throws orchid::Error.
  const std::string good = with_prefix(
      R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})",
      std::string(11, 'z'));
  for (size_t n = 0; n <= good.size(); ++n) {
    try {
      parse(good.substr(0, n));
    } catch (const Error&) {
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s = good;
    for (int k = 0; k < 3; ++k) s[rng() % s.size()] = char(rng());
    try {
      parse(s);
    } catch (const Error&) {
    }
  }
}

TEST(Safetensors, WriteThenOpen) {
  const fs::path dir = fs::temp_directory_path() / "orchid_st_test";
  fs::create_directories(dir);
  const std::string path = (dir / "x.safetensors").string();
  std::vector<float> a = {1.5f, -2.0f, 3.25f};
  std::vector<uint8_t> b = {7, 8, 9, 10};
  write_safetensors(path, {{"a", DType::kF32, {3}, a.data()}, {"b", DType::kU8, {2, 2}, b.data()}},
                    {{"k", "v"}});
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->header().tensors.size(), 2u);
  EXPECT_EQ(f->header().metadata.at("k"), "v");
  auto va = f->view(f->header().tensors[0]);
  EXPECT_EQ(va.name, "a");
  EXPECT_EQ(std::memcmp(va.data, a.data(), 12), 0);
  EXPECT_EQ(f->header().data_offset % 8, 0u);
  // Truncating the file by one byte makes it invalid with a clear message naming the last tensor.
  fs::resize_file(path, fs::file_size(path) - 1);
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SafetensorsFile::open((dir / "missing.safetensors").string()), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace orchid::io
