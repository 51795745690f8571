#include "io/npy.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace orchid::io {
namespace {

TEST(Npy, RoundTrip) {
  const auto path = (std::filesystem::temp_directory_path() / "orchid_npy_test.npy").string();
  for (auto shape : {std::vector<int64_t>{5}, std::vector<int64_t>{3, 7}, std::vector<int64_t>{2, 3, 4}}) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i) * 0.5f - 3.0f;
    write_npy_f32(path, v.data(), shape);
    auto a = read_npy(path);
    EXPECT_EQ(a.descr, "<f4");
    EXPECT_EQ(a.shape, shape);
    EXPECT_EQ(a.as_f32(), v);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace orchid::io
