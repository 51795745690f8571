#include "tokenizer/incremental_detokenizer.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace orchid::tokenizer {

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  std::string out;
  std::string joined;
  if (!pending_.empty()) {
    joined = pending_;
    joined.append(bytes);
    bytes = joined;
    pending_.clear();
  }
  auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  const size_t n = bytes.size();
  out.reserve(n);
  while (i < n) {
    if (s[i] < 0x80) {
      out.push_back(static_cast<char>(s[i++]));
      continue;
    }
    const Utf8Step st = read_utf8(s + i, n - i);
    if (st.status == Utf8Step::kTruncated) {
      pending_.assign(bytes.substr(i));
      break;
    }
    if (st.status == Utf8Step::kValid) {
      out.append(bytes.substr(i, st.len));
    } else {
      out.append(kReplacementChar);
    }
    i += st.len;
  }
  return out;
}

std::string Utf8StreamDecoder::flush() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacementChar);
  pending_.clear();
  return out;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  bytes_.clear();
  if (!tokenizer_.decode_append(id, &bytes_)) {
    fail("cannot decode token id {}: not in the vocabulary (0..{})", id, tokenizer_.vocab_size() - 1);
  }
  return utf8_.push(bytes_);
}

std::string IncrementalDetokenizer::push_lossy(int32_t id) {
  bytes_.clear();
  if (!tokenizer_.decode_append(id, &bytes_)) {
    std::string out = utf8_.flush();
    out.append(kReplacementChar);
    return out;
  }
  return utf8_.push(bytes_);
}

}  // namespace orchid::tokenizer
