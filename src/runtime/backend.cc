#include "runtime/backend.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::runtime {

std::vector<float> Backend::run_layer(int64_t, const std::vector<float>&, int64_t, std::vector<int32_t>*) {
  fail("the {} backend cannot run a single layer", name());
}

KvPages kv_pages_for(std::string layout, size_t num_full_pages, size_t num_sliding_pages,
                     int32_t first_sliding_page, int32_t num_tokens) {
  KvPages kv;
  kv.layout = std::move(layout);
  kv.num_tokens = num_tokens;
  kv.first_sliding_page = first_sliding_page;
  kv.num_full_pages = int32_t(num_full_pages);
  kv.num_sliding_pages = int32_t(num_sliding_pages);
  return kv;
}

void check_kv_pages_fit(const KvPages& kv, const std::string& layout, size_t num_full_pages,
                        size_t num_sliding_pages) {
  if (kv.layout != layout)
    fail("K/V handed over in another layout ({}); this backend's is {}", kv.layout, layout);
  if (int32_t(num_full_pages) != kv.num_full_pages || int32_t(num_sliding_pages) != kv.num_sliding_pages)
    fail("K/V of {} + {} pages for {} + {} pages", kv.num_full_pages, kv.num_sliding_pages, num_full_pages,
         num_sliding_pages);
}

KvPages Backend::read_kv(std::span<const int32_t>, std::span<const int32_t>, int32_t, int32_t) {
  fail("the {} backend cannot hand K/V over", name());
}

void Backend::write_kv(const KvPages&, std::span<const int32_t>, std::span<const int32_t>) {
  fail("the {} backend cannot take K/V handed over", name());
}

std::optional<KvPages> Backend::share_kv(std::span<const int32_t>, std::span<const int32_t>, int32_t, int32_t,
                                         int32_t) {
  return std::nullopt;
}

bool Backend::release_kv_share(uint64_t) {
  return false;
}

void Backend::open_kv_share(const KvShare& share) {
  fail("the {} backend cannot take K/V shared over {}", name(), share.transport);
}

void validate_step(const StepBatch& b, const model::ModelConfig& c, const KvCacheSpec& spec,
                   int64_t max_positions) {
  for (int32_t id : b.tokens)
    if (id < 0 || id >= c.vocab_size) fail("token id {} is outside the vocabulary [0, {})", id, c.vocab_size);
  int64_t covered = 0;
  for (const auto& s : b.seqs) {
    ORCHID_CHECK(s.num_tokens >= 0 && s.start_pos >= 0);
    ORCHID_CHECK(s.token_begin == covered, "sequence tokens must be back to back");
    covered += s.num_tokens;
    const int64_t end = int64_t(s.start_pos) + s.num_tokens;
    if (end > max_positions)
      fail("sequence of {} tokens exceeds the {} positions planned for (the model's, or --max-model-len)",
           end, max_positions);
    const int64_t need = (end + spec.page_size - 1) / spec.page_size;
    ORCHID_CHECK(s.num_full_pages >= need || c.num_full_layers() == 0, "full page table too short");
    ORCHID_CHECK(s.num_sliding_pages >= need || c.num_sliding_layers() == 0, "sliding page table too short");
    ORCHID_CHECK(size_t(s.full_table_begin) + size_t(s.num_full_pages) <= b.full_page_table.size());
    ORCHID_CHECK(size_t(s.sliding_table_begin) + size_t(s.num_sliding_pages) <= b.sliding_page_table.size());
    ORCHID_CHECK(!s.sample || (s.params_index >= 0 && size_t(s.params_index) < b.params.size()));
    ORCHID_CHECK(s.num_draft >= 0 && (s.num_draft == 0 || (s.sample && s.num_draft < s.num_tokens)),
                 "{} drafts in a sequence of {} new tokens", s.num_draft, s.num_tokens);
    ORCHID_CHECK(s.num_propose >= 0 && (s.num_propose == 0 || s.sample),
                 "{} proposals asked of a sequence that samples nothing", s.num_propose);
  }
  ORCHID_CHECK(covered == int64_t(b.tokens.size()), "tokens not covered by sequences");
  for (const auto& f : b.from_previous)
    ORCHID_CHECK(f.token >= 0 && f.token < covered && f.sample >= 0,
                 "token {} from sample {} of the step before", f.token, f.sample);
  for (const auto& f : b.history_from_previous)
    ORCHID_CHECK(f.token >= 0 && size_t(f.token) < b.history_tokens.size() && f.sample >= 0,
                 "history entry {} from sample {} of the step before", f.token, f.sample);
  for (int32_t p : b.full_page_table)
    ORCHID_CHECK(p == kNoPage || (p >= 0 && p < spec.num_full_pages), "page {}", p);
  for (int32_t p : b.sliding_page_table)
    ORCHID_CHECK(p == kNoPage || (p >= 0 && p < spec.num_sliding_pages), "page {}", p);
}

void fill_from_previous(StepBatch& b, std::span<const int32_t> previous) {
  auto fill = [&](std::vector<int32_t>& into, const std::vector<TokenFromPrevious>& from, const char* what) {
    for (const auto& f : from) {
      ORCHID_CHECK(f.token >= 0 && size_t(f.token) < into.size() && f.sample >= 0 &&
                       size_t(f.sample) < previous.size(),
                   "{} {} from sample {} of a step that drew {}", what, f.token, f.sample, previous.size());
      into[size_t(f.token)] = previous[size_t(f.sample)];
    }
  };
  fill(b.tokens, b.from_previous, "token");
  fill(b.history_tokens, b.history_from_previous, "history entry");
  b.from_previous.clear();
  b.history_from_previous.clear();
}

void Backend::launch(const StepBatch& b) {
  ORCHID_CHECK(!awaiting_masks_, "a step launched before the one before got its masks");
  ORCHID_CHECK(launched_.size() < 2, "a third step launched before the first was collected");
  if (b.masks_later) {
    awaiting_masks_ = std::make_unique<StepBatch>(b);
    return;
  }
  run_launched(b);
}

void Backend::supply_masks(const StepBatch& b) {
  ORCHID_CHECK(awaiting_masks_, "masks for a step that does not wait for them");
  std::unique_ptr<StepBatch> step = std::move(awaiting_masks_);
  step->token_masks = b.token_masks;
  step->mask_words = b.mask_words;
  step->token_masks_ready = nullptr;
  step->masks_later = false;
  ORCHID_CHECK(step->seqs.size() == b.seqs.size(), "masks of another batch");
  for (size_t i = 0; i < b.seqs.size(); ++i) step->seqs[i].mask_row = b.seqs[i].mask_row;
  run_launched(*step);
}

void Backend::run_launched(const StepBatch& b) {
  StepOutput out;
  if (b.from_previous.empty() && b.history_from_previous.empty()) {
    out = forward(b);
  } else {
    b.wait_token_masks();  // the copy takes the masks: they must be written
    StepBatch filled = b;
    filled.token_masks_ready = nullptr;
    fill_from_previous(filled, last_launched_tokens_);
    out = forward(filled);
  }
  last_launched_tokens_.clear();
  for (const SampledToken& st : out.samples) last_launched_tokens_.push_back(st.token);
  launched_.push_back(std::move(out));
}

StepOutput Backend::collect() {
  ORCHID_CHECK(!launched_.empty(), "collect() without a launched step{}",
               awaiting_masks_ ? " (one still waits for its masks)" : "");
  StepOutput out = std::move(launched_.front());
  launched_.pop_front();
  return out;
}

StepBatch single_sequence_batch(const KvCacheSpec& spec, int32_t n) {
  StepBatch b;
  b.tokens.assign(static_cast<size_t>(n), 0);
  StepSequence s;
  s.num_tokens = n;
  const int32_t pages = (n + spec.page_size - 1) / spec.page_size;
  if (pages > spec.num_full_pages || (spec.sliding_window > 0 && pages > spec.num_sliding_pages))
    fail("{} tokens need {} KV pages; the cache has {} (full) / {} (sliding)", n, pages, spec.num_full_pages,
         spec.num_sliding_pages);
  for (int32_t p = 0; p < pages; ++p) {
    b.full_page_table.push_back(p);
    b.sliding_page_table.push_back(spec.sliding_window > 0 ? p : kNoPage);
  }
  s.num_full_pages = s.num_sliding_pages = pages;
  b.seqs.push_back(s);
  b.params.emplace_back();
  return b;
}

}  // namespace orchid::runtime
