#include "server/testing/replay_backend.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.h"

namespace orchid::server::testing {

ReplayOptions load_replay_file(const std::string& path, const tokenizer::Tokenizer& tok) {
  std::ifstream in(path);
  if (!in) fail("--replay {}: cannot open the file", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("--replay {}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object() || !j.contains("rules") || !j["rules"].is_array())
    fail("--replay {}: expected an object with a \"rules\" array", path);
  ReplayOptions o;
  const auto specials = tok.special_literals();
  for (size_t i = 0; i < j["rules"].size(); ++i) {
    const auto& r = j["rules"][i];
    if (!r.is_object() || !r.value("output", nlohmann::json()).is_string())
      fail("--replay {}: rules[{}].output: expected a string", path, i);
    ReplayRule rule;
    rule.match = r.value("match", "");
    rule.output = tok.encode(r["output"].get<std::string>(), specials);
    if (rule.output.empty()) fail("--replay {}: rules[{}].output is empty", path, i);
    o.rules.push_back(std::move(rule));
  }
  if (o.rules.empty()) fail("--replay {}: no rules", path);
  o.step_delay_ms = j.value("step_delay_ms", 0);
  o.load_delay_ms = j.value("load_delay_ms", 0);
  o.prompt_log = j.value("prompt_log", "");
  return o;
}

ReplayBackend::ReplayBackend(ReplayOptions options, std::shared_ptr<const tokenizer::Tokenizer> tok)
    : options_(std::move(options)), tok_(std::move(tok)), config_(model::preset_config("tiny")) {
  config_.vocab_size = tok_->vocab_size();
  pages_.assign(size_t(options_.kv.num_full_pages) * options_.kv.page_size, -1);
  if (!options_.prompt_log.empty()) {
    log_.open(options_.prompt_log, std::ios::app);
    if (!log_) fail("replay prompt_log {}: cannot open for writing", options_.prompt_log);
  }
  if (options_.load_delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.load_delay_ms));
}

const ReplayRule* ReplayBackend::select(const std::vector<int32_t>& prompt) const {
  const std::string text = tok_->decode(prompt);
  const ReplayRule* best = nullptr;
  int64_t best_pos = -2;
  for (const auto& r : options_.rules) {
    int64_t pos = -1;  // an empty match is the fallback
    if (!r.match.empty()) {
      const size_t p = text.rfind(r.match);
      if (p == std::string::npos) continue;
      pos = int64_t(p);
    }
    if (pos > best_pos) {
      best = &r;
      best_pos = pos;
    }
  }
  return best;
}

runtime::StepOutput ReplayBackend::forward(const runtime::StepBatch& batch) {
  if (options_.step_delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_delay_ms));
  return compute(batch);
}

void ReplayBackend::launch(const runtime::StepBatch& batch) {
  ORCHID_CHECK(launched_.size() < 2, "a third step launched before the first was collected");
  Launched l;
  if (batch.from_previous.empty() && batch.history_from_previous.empty()) {
    l.out = compute(batch);
  } else {
    runtime::StepBatch filled = batch;
    runtime::fill_from_previous(filled, last_tokens_);
    l.out = compute(filled);
  }
  last_tokens_.clear();
  for (const auto& st : l.out.samples) last_tokens_.push_back(st.token);
  device_free_ = std::max(device_free_, Clock::now()) + std::chrono::milliseconds(options_.step_delay_ms);
  l.ready = device_free_;
  launched_.push_back(std::move(l));
}

runtime::StepOutput ReplayBackend::collect() {
  ORCHID_CHECK(!launched_.empty(), "collect() without a launched step");
  Launched l = std::move(launched_.front());
  launched_.pop_front();
  const auto t0 = Clock::now();
  std::this_thread::sleep_until(l.ready);
  l.out.device_wait_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return std::move(l.out);
}

runtime::StepOutput ReplayBackend::compute(const runtime::StepBatch& batch) {
  const int32_t P = options_.kv.page_size;
  auto slot = [&](const runtime::StepSequence& s, int32_t pos) -> int32_t& {
    ORCHID_CHECK(pos / P < s.num_full_pages, "position {} beyond the page table", pos);
    const int32_t page = batch.full_page_table[size_t(s.full_table_begin + pos / P)];
    ORCHID_CHECK(page >= 0 && page < options_.kv.num_full_pages, "page {} out of range", page);
    return pages_[size_t(page) * P + pos % P];
  };
  runtime::StepOutput out;
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i)
      slot(s, s.start_pos + i) = batch.tokens[size_t(s.token_begin + i)];
    if (!s.sample) continue;
    auto it = chosen_.find(s.seq_id);
    if (it == chosen_.end() || s.sample_index == 0) {
      std::vector<int32_t> context;
      for (int32_t pos = 0; pos < s.start_pos + s.num_tokens; ++pos) context.push_back(slot(s, pos));
      // The context at the first sample is the prompt; later it also holds outputs, so keep the first choice.
      if (it == chosen_.end()) it = chosen_.emplace(s.seq_id, select(context)).first;
      if (s.sample_index == 0 && log_.is_open()) {
        log_ << nlohmann::json{{"prompt", context}}.dump() << "\n";
        log_.flush();
      }
    }
    const ReplayRule* rule = it->second;
    runtime::SampledToken st;
    if (rule) {
      const size_t k = std::min(size_t(s.sample_index), rule->output.size() - 1);
      st.token = rule->output[k];
    } else {
      st.token = int32_t(config_.eos_token_ids.front());
    }
    const auto& params = batch.params[size_t(s.params_index)];
    if (params.num_logprobs >= 0) {
      st.logprob = 0.0f;  // the script is certain
      for (int32_t k = 0; k < params.num_logprobs; ++k)
        st.top.emplace_back(k == 0 ? st.token : (st.token + k) % config_.vocab_size,
                            k == 0 ? 0.0f : -30.0f - k);
    }
    out.samples.push_back(std::move(st));
  }
  // Sequences that are gone keep their entry until the map grows; it is only a few pointers each.
  if (chosen_.size() > 100000) chosen_.clear();
  return out;
}

}  // namespace orchid::server::testing
