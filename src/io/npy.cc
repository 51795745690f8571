#include "io/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

#include "core/error.h"

namespace orchid::io {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    if (i + 1 < shape.size()) dims += " ";
    n *= shape[i];
  }
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces and a newline to a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot write '{}'", path);
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = uint16_t(header.size());
  char l[2] = {char(len & 0xff), char(len >> 8)};
  out.write(l, 2);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(data), std::streamsize(n * 4));
  if (!out) fail("error writing '{}'", path);
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}'", path);
  char magic[10];
  in.read(magic, 10);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) fail("'{}' is not a .npy file", path);
  size_t hlen;
  if (magic[6] == 1) {
    hlen = uint8_t(magic[8]) | (size_t(uint8_t(magic[9])) << 8);
  } else {
    char more[2];
    in.read(more, 2);
    hlen = uint8_t(magic[8]) | (size_t(uint8_t(magic[9])) << 8) | (size_t(uint8_t(more[0])) << 16) |
           (size_t(uint8_t(more[1])) << 24);
  }
  std::string header(hlen, '\0');
  in.read(header.data(), std::streamsize(hlen));
  std::smatch m;
  NpyArray a;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']+)'")))
    fail("{}: no descr in header", path);
  a.descr = m[1];
  if (header.find("'fortran_order': True") != std::string::npos)
    fail("{}: Fortran order is not supported", path);
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    fail("{}: no shape in header", path);
  std::string dims = m[1];
  int64_t n = 1;
  static const std::regex kNumber("\\d+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), kNumber), end; it != end; ++it) {
    a.shape.push_back(std::stoll(it->str()));
    n *= a.shape.back();
  }
  size_t elem = a.descr == "<f4" || a.descr == "<i4" ? 4 : a.descr == "<i8" || a.descr == "<f8" ? 8 : 0;
  if (!elem) fail("{}: dtype '{}' is not supported", path, a.descr);
  a.bytes.resize(size_t(n) * elem);
  in.read(reinterpret_cast<char*>(a.bytes.data()), std::streamsize(a.bytes.size()));
  if (!in) fail("{}: truncated data", path);
  return a;
}

std::vector<float> NpyArray::as_f32() const {
  if (descr != "<f4") fail("npy: expected float32 data, got '{}'", descr);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

std::vector<int64_t> NpyArray::as_i64() const {
  std::vector<int64_t> v;
  if (descr == "<i8") {
    v.resize(bytes.size() / 8);
    std::memcpy(v.data(), bytes.data(), bytes.size());
  } else if (descr == "<i4") {
    for (size_t i = 0; i < bytes.size(); i += 4) {
      int32_t x;
      std::memcpy(&x, bytes.data() + i, 4);
      v.push_back(x);
    }
  } else {
    fail("npy: expected integer data, got '{}'", descr);
  }
  return v;
}

}  // namespace orchid::io
