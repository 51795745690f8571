#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace orchid::io {

using nlohmann::json;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

uint64_t read_u64_le(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint8_t(p[i]);
  return v;
}

TensorEntry parse_entry(const std::string& name, const json& v, std::string_view file) {
  if (!v.is_object()) fail("{}: tensor '{}': header entry must be an object", file, name);
  TensorEntry e;
  e.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) fail("{}: tensor '{}': missing or non-string 'dtype'", file, name);
  if (!parse_dtype(dt->get<std::string>(), &e.dtype))
    fail("{}: tensor '{}': unknown dtype '{}'", file, name, dt->get<std::string>());
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) fail("{}: tensor '{}': missing or non-array 'shape'", file, name);
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      fail("{}: tensor '{}': shape entries must be non-negative integers, got {}", file, name, sh->dump());
    uint64_t x = d.get<uint64_t>();
    if (x > (1ull << 40) || (x != 0 && numel > (1ull << 50) / x))
      fail("{}: tensor '{}': shape {} is too large", file, name, sh->dump());
    numel *= x;
    e.shape.push_back(int64_t(x));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    fail("{}: tensor '{}': 'data_offsets' must be two non-negative integers", file, name);
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.end < e.begin)
    fail("{}: tensor '{}': data_offsets [{}, {}] are reversed", file, name, e.begin, e.end);
  const uint64_t expect = numel * dtype_size(e.dtype);
  if (e.end - e.begin != expect)
    fail("{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets span {}", file, name,
         shape_str(e.shape), dtype_name(e.dtype), expect, e.end - e.begin);
  return e;
}

}  // namespace

SafetensorsHeader parse_safetensors(std::string_view bytes, uint64_t file_size, std::string_view file) {
  if (file_size < 8 || bytes.size() < 8)
    fail("{}: not a safetensors file: {} bytes is shorter than the 8-byte header length", file, file_size);
  const uint64_t n = read_u64_le(bytes.data());
  if (n > kMaxSafetensorsHeader)
    fail("{}: header length {} exceeds the {} byte limit", file, n, kMaxSafetensorsHeader);
  if (n > file_size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes)", file, n, file_size);
  if (bytes.size() < 8 + n)
    fail("{}: truncated header ({} of {} bytes available)", file, bytes.size() - 8, n);
  std::string_view text = bytes.substr(8, n);
  if (text.empty() || text.front() != '{') fail("{}: header is not a JSON object", file);
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
  if (!j.is_object()) fail("{}: header is not a JSON object", file);

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_size = file_size - h.data_offset;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail("{}: '__metadata__' must be an object of strings", file);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail("{}: '__metadata__' value of '{}' must be a string", file, m.key());
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(it.key(), *it, file));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& e = h.tensors[i];
    if (e.end > data_size)
      fail("{}: tensor '{}': data [{}, {}) runs past the end of the data section ({} bytes); truncated file?",
           file, e.name, e.begin, e.end, data_size);
    if (i > 0 && e.begin < h.tensors[i - 1].end && e.end > e.begin)
      fail("{}: tensors '{}' and '{}' overlap", file, h.tensors[i - 1].name, e.name);
  }
  return h;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto f = std::make_unique<SafetensorsFile>();
  f->file_ = MappedFile::open(path);
  std::string_view bytes(reinterpret_cast<const char*>(f->file_->data()), f->file_->size());
  f->header_ = parse_safetensors(bytes, f->file_->size(), path);
  return f;
}

TensorView SafetensorsFile::view(const TensorEntry& e) const {
  TensorView v;
  v.name = e.name;
  v.dtype = e.dtype;
  v.shape = e.shape;
  v.data = file_->data() + header_.data_offset + e.begin;
  v.nbytes = e.end - e.begin;
  v.source = file_->path();
  return v;
}

namespace {
void write_impl(const std::string& path, const std::vector<TensorToWrite>& tensors,
                const std::function<void(size_t, uint8_t*)>* produce,
                const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    uint64_t bytes = numel * dtype_size(t.dtype);
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot write '{}'", path);
  char len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = char((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(text.data(), std::streamsize(text.size()));
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const char* bytes = static_cast<const char*>(tensors[i].data);
    if (produce) {
      buffer.resize(sizes[i]);
      (*produce)(i, buffer.data());
      bytes = reinterpret_cast<const char*>(buffer.data());
    }
    if (bytes) {
      out.write(bytes, std::streamsize(sizes[i]));
    } else {
      out.seekp(std::streamoff(sizes[i]), std::ios::cur);  // a hole: reads as zeros, takes no disk
    }
  }
  out.close();
  if (!out) fail("error writing '{}' (disk full?)", path);
  std::filesystem::resize_file(path, 8 + text.size() + offset);  // a trailing hole still counts
}
}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_impl(path, tensors, nullptr, metadata);
}

void write_safetensors_streaming(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                 const std::function<void(size_t, uint8_t*)>& produce,
                                 const std::map<std::string, std::string>& metadata) {
  write_impl(path, tensors, &produce, metadata);
}

}  // namespace orchid::io
