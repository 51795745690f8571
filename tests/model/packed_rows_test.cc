// Vocabulary tensors stored as used rows + one fill row (model/packed_rows.h): the rebuilt tensor, and the
// errors for ids, shapes and dtypes that do not fit the manifest.
#include "model/packed_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"

namespace orchid::model {
namespace {

// Adds `values` (copied) to the checkpoint as tensor `name`.
template <typename T>
void add(io::Checkpoint& ck, const std::string& name, DType dtype, std::vector<int64_t> shape,
         const std::vector<T>& values) {
  auto buf = std::make_shared<std::vector<T>>(values);
  io::TensorView v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.data = reinterpret_cast<const uint8_t*>(buf->data());
  v.nbytes = buf->size() * sizeof(T);
  v.source = "test.safetensors";
  ck.add(std::move(v), buf);
}

std::vector<TensorSpec> manifest() {
  TensorSpec s;
  s.name = "lm_head.weight";
  s.shape = {6, 3};
  s.dtypes = {DType::kF32};
  return {s};
}

io::Checkpoint packed(std::vector<int32_t> ids, std::vector<int64_t> rows_shape = {2, 3}) {
  io::Checkpoint ck;
  add(ck, "lm_head.weight.used_ids", DType::kI32, {int64_t(ids.size())}, ids);
  add(ck, "lm_head.weight.used_rows", DType::kF32, std::move(rows_shape),
      std::vector<float>{1, 2, 3, 4, 5, 6});
  add(ck, "lm_head.weight.fill", DType::kF32, {3}, std::vector<float>{-1, -2, -3});
  return ck;
}

TEST(PackedRows, UsedRowsAtTheirIdsAndTheFillEverywhereElse) {
  io::Checkpoint ck = packed({4, 1});
  expand_packed_rows(ck, manifest());
  const auto& t = ck.get("lm_head.weight");
  ASSERT_EQ(t.shape, (std::vector<int64_t>{6, 3}));
  ASSERT_EQ(t.dtype, DType::kF32);
  const std::vector<float> want = {-1, -2, -3, 4, 5, 6, -1, -2, -3, -1, -2, -3, 1, 2, 3, -1, -2, -3};
  ASSERT_EQ(std::vector<float>(t.as<float>(), t.as<float>() + 18), want);
  validate_checkpoint(ck, manifest());
}

TEST(PackedRows, AStoredTensorIsLeftAsItIs) {
  io::Checkpoint ck = packed({4, 1});
  add(ck, "lm_head.weight", DType::kF32, {6, 3}, std::vector<float>(18, 7.0f));
  expand_packed_rows(ck, manifest());
  EXPECT_EQ(ck.get("lm_head.weight").as<float>()[0], 7.0f);
}

TEST(PackedRows, BadPacksAreRefusedByName) {
  auto message = [](io::Checkpoint ck) {
    try {
      expand_packed_rows(ck, manifest());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(packed({4, 6})).find("outside the vocabulary of 6"), std::string::npos);
  EXPECT_NE(message(packed({4, -1})).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(message(packed({4, 1, 2}, {2, 3})).find("do not match 3 used ids"), std::string::npos);
  EXPECT_NE(message(packed({4, 1}, {3, 2})).find("lm_head.weight.used_rows"), std::string::npos);
}

}  // namespace
}  // namespace orchid::model
