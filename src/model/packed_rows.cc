#include "model/packed_rows.h"

#include <cstring>
#include <memory>

#include "core/error.h"

namespace orchid::model {

void expand_packed_rows(io::Checkpoint& ck, const std::vector<TensorSpec>& manifest) {
  for (const auto& spec : manifest) {
    if (ck.has(spec.name) || !ck.has(spec.name + ".used_ids")) continue;
    const auto& ids = ck.get(spec.name + ".used_ids");
    const auto& rows = ck.get(spec.name + ".used_rows");
    const auto& fill = ck.get(spec.name + ".fill");
    if (spec.shape.size() != 2) fail("{}: '{}' cannot be stored as rows", ids.source, spec.name);
    const int64_t vocab = spec.shape[0], width = spec.shape[1];
    if (ids.dtype != DType::kI32 || ids.shape.size() != 1)
      fail("{}: '{}.used_ids' must be I32 [n], is {} {}", ids.source, spec.name, dtype_name(ids.dtype),
           io::shape_str(ids.shape));
    const int64_t n = ids.shape[0];
    if (rows.shape != std::vector<int64_t>{n, width} || fill.shape != std::vector<int64_t>{width} ||
        rows.dtype != fill.dtype)
      fail("{}: '{}.used_rows' {} and '.fill' {} do not match {} used ids of width {}", rows.source,
           spec.name, io::shape_str(rows.shape), io::shape_str(fill.shape), n, width);
    const size_t row_bytes = size_t(width) * dtype_size(fill.dtype);
    std::shared_ptr<uint8_t[]> buf(new uint8_t[size_t(vocab) * row_bytes]);
    for (int64_t r = 0; r < vocab; ++r) std::memcpy(buf.get() + size_t(r) * row_bytes, fill.data, row_bytes);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = ids.as<int32_t>()[i];
      if (id < 0 || id >= vocab)
        fail("{}: '{}.used_ids' holds {}, outside the vocabulary of {}", ids.source, spec.name, id, vocab);
      std::memcpy(buf.get() + size_t(id) * row_bytes, rows.data + size_t(i) * row_bytes, row_bytes);
    }
    io::TensorView v;
    v.name = spec.name;
    v.dtype = fill.dtype;
    v.shape = spec.shape;
    v.data = buf.get();
    v.nbytes = size_t(vocab) * row_bytes;
    v.source = ids.source;
    ck.add(std::move(v), std::shared_ptr<const void>(buf, buf.get()));
  }
}

}  // namespace orchid::model
