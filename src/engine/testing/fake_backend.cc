#include "engine/testing/fake_backend.h"

#include <algorithm>
#include <thread>
#include <unordered_set>

#include "core/error.h"
#include "runtime/sampler.h"

namespace orchid::engine::testing {

using runtime::kNoPage;

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

uint64_t combine(uint64_t a, uint64_t b) {
  return mix(a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2)));
}

constexpr uint64_t kSlidingSalt = 0x5bd1e9955bd1e995ull;

}  // namespace

FakeBackend::FakeBackend(FakeBackendOptions options) : options_(std::move(options)) {
  const auto& kv = options_.kv;
  ORCHID_CHECK(options_.vocab_size > 1 && kv.page_size > 0);
  config_.name = "fake";
  config_.vocab_size = options_.vocab_size;
  config_.eos_token_ids = options_.eos_token_ids;
  config_.max_position_embeddings = options_.max_position;
  config_.sliding_window = kv.sliding_window;
  config_.num_layers = kv.sliding_window > 0 ? 2 : 1;
  config_.layer_types = kv.sliding_window > 0 ? std::vector<model::LayerType>{model::LayerType::kSliding,
                                                                              model::LayerType::kFull}
                                              : std::vector<model::LayerType>{model::LayerType::kFull};
  if (options_.simulate) {
    full_kv_.resize(size_t(kv.num_full_pages) * size_t(kv.page_size));
    if (kv.sliding_window > 0) sliding_kv_.resize(size_t(kv.num_sliding_pages) * size_t(kv.page_size));
  }
}

FakeBackend::Slot& FakeBackend::slot(std::vector<Slot>& pool, const std::vector<int32_t>& table,
                                     int32_t begin, int32_t pos) {
  const int32_t p = options_.kv.page_size;
  const int32_t page = table[size_t(begin + pos / p)];
  ORCHID_CHECK(page != kNoPage, "position {}: no page", pos);
  return pool[size_t(page) * size_t(p) + size_t(pos % p)];
}

uint64_t FakeBackend::read(std::vector<Slot>& pool, const std::vector<int32_t>& table, int32_t begin,
                           int32_t pos) {
  const Slot& s = slot(pool, table, begin, pos);
  ORCHID_CHECK(s.pos == pos, "position {} reads a slot holding position {}", pos, s.pos);
  return s.value;
}

void FakeBackend::validate(const runtime::StepBatch& b) {
  const auto& kv = options_.kv;
  const int32_t p = kv.page_size, w = kv.sliding_window;
  ORCHID_CHECK(!b.seqs.empty(), "empty batch");
  int32_t next_token = 0;
  std::unordered_set<int64_t> ids;
  // Pages written in this step, per pool: page -> index of the writing sequence.
  std::unordered_map<int32_t, size_t> full_writers, sliding_writers;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const auto& s = b.seqs[i];
    ORCHID_CHECK(ids.insert(s.seq_id).second, "sequence {} twice in a batch", s.seq_id);
    ORCHID_CHECK(s.num_tokens >= 1 && s.token_begin == next_token, "sequence {}: tokens not back to back",
                 s.seq_id);
    next_token += s.num_tokens;
    ORCHID_CHECK(s.start_pos >= 0 && s.start_pos + s.num_tokens <= options_.max_position);
    const int32_t end = s.start_pos + s.num_tokens;
    const int32_t pages = (end + p - 1) / p;
    ORCHID_CHECK(s.full_table_begin >= 0 && s.num_full_pages >= pages &&
                     size_t(s.full_table_begin + s.num_full_pages) <= b.full_page_table.size(),
                 "sequence {}: full table does not cover positions [0, {})", s.seq_id, end);
    std::unordered_set<int32_t> seen;
    for (int32_t k = 0; k < pages; ++k) {
      const int32_t page = b.full_page_table[size_t(s.full_table_begin + k)];
      ORCHID_CHECK(page >= 0 && page < kv.num_full_pages, "sequence {}: full page {} invalid", s.seq_id,
                   page);
      ORCHID_CHECK(seen.insert(page).second, "sequence {}: full page {} twice", s.seq_id, page);
      if (k >= s.start_pos / p) {
        ORCHID_CHECK(full_writers.emplace(page, i).second, "full page {} written by two sequences", page);
      }
    }
    if (w > 0) {
      ORCHID_CHECK(s.sliding_table_begin >= 0 && s.num_sliding_pages >= pages &&
                       size_t(s.sliding_table_begin + s.num_sliding_pages) <= b.sliding_page_table.size(),
                   "sequence {}: sliding table does not cover positions [0, {})", s.seq_id, end);
      const int32_t first = s.start_pos - w + 1 > 0 ? (s.start_pos - w + 1) / p : 0;
      seen.clear();
      for (int32_t k = 0; k < pages; ++k) {
        const int32_t page = b.sliding_page_table[size_t(s.sliding_table_begin + k)];
        if (page == kNoPage && k < first) continue;
        ORCHID_CHECK(page >= 0 && page < kv.num_sliding_pages, "sequence {}: sliding page {} invalid at {}",
                     s.seq_id, page, k);
        ORCHID_CHECK(seen.insert(page).second, "sequence {}: sliding page {} twice", s.seq_id, page);
        if (k >= s.start_pos / p) {
          ORCHID_CHECK(sliding_writers.emplace(page, i).second, "sliding page {} written by two sequences",
                       page);
        }
      }
    } else {
      ORCHID_CHECK(s.num_sliding_pages == 0);
    }
    ORCHID_CHECK(s.params_index >= 0 && size_t(s.params_index) < b.params.size());
    if (s.sample && options_.check_sample_index) {
      auto [it, fresh] = next_sample_index_.emplace(s.seq_id, 0);
      ORCHID_CHECK(s.sample_index == it->second, "sequence {}: sample index {}, expected {}", s.seq_id,
                   s.sample_index, it->second);
      ++it->second;
    }
  }
  ORCHID_CHECK(size_t(next_token) == b.tokens.size(), "tokens not covered by the sequences");
  for (int32_t t : b.tokens) ORCHID_CHECK(t >= 0 && t < options_.vocab_size, "token {} out of range", t);
  // A page being written must not be readable by another sequence of the batch.
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const auto& s = b.seqs[i];
    const int32_t pages = (s.start_pos + s.num_tokens + p - 1) / p;
    for (int32_t k = 0; k < pages; ++k) {
      auto it = full_writers.find(b.full_page_table[size_t(s.full_table_begin + k)]);
      ORCHID_CHECK(it == full_writers.end() || it->second == i,
                   "full page {} written while another sequence reads it", it->first);
      if (w > 0) {
        const int32_t page = b.sliding_page_table[size_t(s.sliding_table_begin + k)];
        auto jt = sliding_writers.find(page);
        ORCHID_CHECK(page == kNoPage || jt == sliding_writers.end() || jt->second == i,
                     "sliding page {} written while another sequence reads it", page);
      }
    }
  }
}

void FakeBackend::logits_row(const runtime::StepBatch& b, const runtime::StepSequence& s, int32_t pos,
                             float* out) {
  // Everything the position can attend to: every full-layer slot and the sliding window.
  uint64_t d = mix(options_.salt + 1);
  for (int32_t q = 0; q <= pos; ++q) d = combine(d, read(full_kv_, b.full_page_table, s.full_table_begin, q));
  const int32_t w = options_.kv.sliding_window;
  if (w > 0) {
    for (int32_t q = std::max(0, pos - w + 1); q <= pos; ++q)
      d = combine(d, read(sliding_kv_, b.sliding_page_table, s.sliding_table_begin, q));
  }
  for (int32_t i = 0; i < options_.vocab_size; ++i) {
    const uint64_t r = mix(d ^ (uint64_t(i) * 0x2545F4914F6CDD1Dull));
    out[i] = float(double(r >> 40) * 0x1.0p-24 * options_.logit_scale);
  }
  for (int64_t id : options_.eos_token_ids) out[id] += options_.eos_bonus;
}

namespace {

// The first token at or after `from` (cyclically) that the sequence's mask allows.
int32_t first_allowed_from(const runtime::StepBatch& b, const runtime::StepSequence& s, int32_t from) {
  const std::span<const uint32_t> mask(b.token_masks.data() + size_t(s.mask_row) * size_t(b.mask_words),
                                       size_t(b.mask_words));
  // Word by word from `from`'s word, wrapping once: the cost of a mask scan, not of a bit loop.
  const size_t words = mask.size(), first = size_t(from) / 32;
  const uint32_t head = mask[first] & (~0u << (uint32_t(from) % 32));
  if (head) return int32_t(first * 32 + size_t(__builtin_ctz(head)));
  for (size_t k = 1; k <= words; ++k) {
    const size_t w = (first + k) % words;
    if (mask[w]) return int32_t(w * 32 + size_t(__builtin_ctz(mask[w])));
  }
  fail("fake backend: every token is masked out");
}

}  // namespace

void FakeBackend::launch(const runtime::StepBatch& b) {
  num_continued_ += !b.from_previous.empty();
  if (!options_.deferred) return Backend::launch(b);
  ORCHID_CHECK(deferred_.size() < 2, "a third step launched before the first was collected");
  ORCHID_CHECK(deferred_.empty() || !deferred_.back().masks_later, "launched before the last got its masks");
  if (!b.masks_later) b.wait_token_masks();
  deferred_.push_back(b);
  deferred_.back().token_masks_ready = nullptr;
}

void FakeBackend::supply_masks(const runtime::StepBatch& b) {
  if (!options_.deferred) return Backend::supply_masks(b);
  ORCHID_CHECK(!deferred_.empty() && deferred_.back().masks_later, "masks for a step that does not wait");
  runtime::StepBatch& step = deferred_.back();
  ORCHID_CHECK(step.seqs.size() == b.seqs.size(), "masks of another batch");
  step.token_masks = b.token_masks;
  step.mask_words = b.mask_words;
  for (size_t i = 0; i < b.seqs.size(); ++i) step.seqs[i].mask_row = b.seqs[i].mask_row;
  step.masks_later = false;
}

runtime::StepOutput FakeBackend::collect() {
  if (!options_.deferred) return Backend::collect();
  ORCHID_CHECK(!deferred_.empty(), "collect() without a launched step");
  ORCHID_CHECK(!deferred_.front().masks_later, "collect() of a step whose masks never came");
  runtime::StepBatch b = std::move(deferred_.front());
  deferred_.pop_front();
  runtime::fill_from_previous(b, last_tokens_);
  runtime::StepOutput out = forward(b);
  last_tokens_.clear();
  for (const auto& st : out.samples) last_tokens_.push_back(st.token);
  return out;
}

runtime::StepOutput FakeBackend::forward(const runtime::StepBatch& b) {
  ++num_steps_;
  max_batch_tokens_ = std::max(max_batch_tokens_, b.num_tokens());
  max_batch_seqs_ = std::max(max_batch_seqs_, int32_t(b.seqs.size()));
  if (options_.reject_token) {
    for (int32_t t : b.tokens)
      if (t == *options_.reject_token) fail("fake backend: token {} is not accepted", t);
  }
  runtime::StepOutput out;
  if (!options_.simulate) {
    if (options_.step_time.count() > 0) std::this_thread::sleep_for(options_.step_time);
    b.wait_token_masks();
    for (const auto& s : b.seqs) {
      if (!s.sample) continue;
      runtime::SampledToken t;
      t.token = 1 + int32_t(uint64_t(s.seq_id * 7919 + s.sample_index) % uint64_t(options_.vocab_size - 1));
      if (s.mask_row >= 0) t.token = first_allowed_from(b, s, t.token);
      out.samples.push_back(t);
    }
    return out;
  }
  validate(b);
  b.wait_token_masks();
  const int32_t w = options_.kv.sliding_window;
  const size_t v = size_t(options_.vocab_size);
  std::vector<float> row(v), sampled_rows;
  const bool drafted = std::any_of(b.seqs.begin(), b.seqs.end(),
                                   [](const runtime::StepSequence& s) { return s.num_draft > 0; });
  for (const auto& s : b.seqs) {
    sampled_rows.clear();
    for (int32_t j = 0; j < s.num_tokens; ++j) {
      const int32_t pos = s.start_pos + j;
      const uint64_t prev =
          pos == 0 ? mix(options_.salt) : read(full_kv_, b.full_page_table, s.full_table_begin, pos - 1);
      const uint64_t value =
          combine(prev, uint64_t(b.tokens[size_t(s.token_begin + j)]) << 20 | uint64_t(pos));
      slot(full_kv_, b.full_page_table, s.full_table_begin, pos) = {value, pos};
      if (w > 0)
        slot(sliding_kv_, b.sliding_page_table, s.sliding_table_begin, pos) = {value ^ kSlidingSalt, pos};
      const bool sampled = s.sample && j >= s.num_tokens - 1 - s.num_draft;
      if (b.logits == runtime::LogitsMode::kAll || sampled) {
        logits_row(b, s, pos, row.data());
        if (b.logits == runtime::LogitsMode::kAll || b.logits == runtime::LogitsMode::kSampled) {
          out.logits.insert(out.logits.end(), row.begin(), row.end());
          ++out.logits_rows;
        }
        if (sampled) sampled_rows.insert(sampled_rows.end(), row.begin(), row.end());
      }
    }
    if (!s.sample) continue;
    const int32_t accepted = runtime::sample_sequence(b, s, sampled_rows, out.samples);
    next_sample_index_[s.seq_id] += accepted;
    if (drafted) out.num_accepted.push_back(accepted);
  }
  return out;
}

}  // namespace orchid::engine::testing
