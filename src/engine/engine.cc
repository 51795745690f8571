#include "engine/engine.h"

#include "engine/backend_proposer.h"

#include <algorithm>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/logging.h"

namespace orchid::engine {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

const runtime::KvCacheSpec& checked_spec(const runtime::KvCacheSpec& spec) {
  if (spec.page_size <= 0) fail("KV cache: page size {} (--block-size must be >= 1)", spec.page_size);
  if (spec.num_full_pages <= 0) fail("KV cache: no full-attention pages (--kv-pages)");
  if (spec.sliding_window > 0) {
    const int32_t need = (spec.sliding_window + spec.page_size - 1) / spec.page_size + 1;
    if (spec.num_sliding_pages < need)
      fail("KV cache: {} sliding-window pages, but one sequence needs {} (window {}, page {})",
           spec.num_sliding_pages, need, spec.sliding_window, spec.page_size);
  }
  return spec;
}

std::shared_ptr<Proposer> checked_proposer(const EngineConfig& c, const runtime::Backend& backend) {
  if (c.proposer ? c.speculative.num_speculative_tokens <= 0 : !c.speculative.enabled()) return nullptr;
  std::shared_ptr<Proposer> proposer = c.proposer;
  if (!proposer && c.speculative.method == "eagle3") {
    // The head is the backend's: it must have one that proposes enough.
    if (backend.max_proposals() < c.speculative.num_speculative_tokens)
      fail("speculative decoding: eagle3: the {} backend {} ({} drafts asked)", backend.name(),
           backend.max_proposals() == 0 ? std::string("has no EAGLE-3 head loaded")
                                        : fmt::format("proposes at most {}", backend.max_proposals()),
           c.speculative.num_speculative_tokens);
    proposer = std::make_shared<BackendProposer>(c.speculative.num_speculative_tokens);
  }
  if (!proposer) proposer = make_proposer(c.speculative);
  if (c.speculative.num_speculative_tokens > backend.max_draft_tokens())
    fail("speculative decoding: the {} backend verifies at most {} drafts per sequence ({} asked)",
         backend.name(), backend.max_draft_tokens(), c.speculative.num_speculative_tokens);
  return proposer;
}

int32_t resolved_max_model_len(const EngineConfig& c, const model::ModelConfig& model,
                               const runtime::KvCacheSpec& spec) {
  const int64_t pool_len = int64_t(spec.num_full_pages) * spec.page_size;
  const int64_t limit =
      std::min<int64_t>({model.max_position_embeddings, pool_len, std::numeric_limits<int32_t>::max()});
  if (c.max_model_len > limit)
    fail("--max-model-len: {} is more than the model ({}) and the KV pool ({} tokens) allow", c.max_model_len,
         model.max_position_embeddings, pool_len);
  if (c.max_model_len < 0) fail("--max-model-len: {} (must be >= 1)", c.max_model_len);
  const int32_t len = int32_t(c.max_model_len > 0 ? c.max_model_len : limit);
  if (len < 2) fail("KV cache: {} tokens of context is too small", len);
  return len;
}

SchedulerConfig scheduler_config(const EngineConfig& c, const runtime::KvCacheSpec& spec,
                                 int32_t max_model_len, Proposer* proposer, bool late_masks) {
  if (c.max_num_seqs < 1) fail("--max-num-seqs: {} (must be >= 1)", c.max_num_seqs);
  if (c.max_num_batched_tokens < c.max_num_seqs)
    fail("--max-num-batched-tokens: {} (must be >= --max-num-seqs, {})", c.max_num_batched_tokens,
         c.max_num_seqs);
  SchedulerConfig s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.logits = c.logits;
  s.proposer = proposer;
  s.max_model_len = max_model_len;
  s.num_speculative_tokens = proposer ? c.speculative.num_speculative_tokens : 0;
  s.late_masks = late_masks;
  if (spec.sliding_window > 0) {
    // A chunk of n tokens from position q touches sliding pages from the one holding q-W+1 to the one
    // holding q+n-1: at most floor((W+n-2)/P)+2 pages. Keep that within the pool so one sequence alone
    // always fits.
    s.max_chunk_tokens = (spec.num_sliding_pages - 1) * spec.page_size - spec.sliding_window + 1;
  }
  return s;
}

}  // namespace

Engine::Engine(std::shared_ptr<runtime::Backend> backend, EngineConfig config)
    : backend_(std::move(backend)),
      config_(config),
      max_model_len_(
          resolved_max_model_len(config, backend_->model_config(), checked_spec(backend_->kv_spec()))),
      proposer_(checked_proposer(config, *backend_)),
      backend_proposer_(dynamic_cast<BackendProposer*>(proposer_.get())),
      blocks_(backend_->kv_spec(), config.enable_prefix_caching),
      scheduler_(scheduler_config(config, blocks_.spec(), max_model_len_, proposer_.get(),
                                  backend_->accepts_late_masks()),
                 &blocks_) {
  const auto& model = backend_->model_config();
  ORCHID_CHECK(config_.first_id >= 1 && config_.id_stride >= 1, "request ids {} + k * {}", config_.first_id,
               config_.id_stride);
  round_ = config_.lockstep;
  const int32_t lockstep = backend_->lockstep_replicas();
  ORCHID_CHECK(lockstep == 1 ? !round_ : round_ && round_->size() == lockstep,
               "the {} backend steps with {} replicas; this engine's step round has {}", backend_->name(),
               lockstep, round_ ? round_->size() : 0);
  next_id_ = config_.first_id;
  vocab_size_ = int32_t(model.vocab_size);
  for (int64_t id : model.eos_token_ids) eos_ids_.push_back(int32_t(id));
  seed_state_ =
      config_.seed ? *config_.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  if (config_.async_scheduling) {
    const char* why = round_                                         ? "the engines of a lockstep group"
                      : proposer_                                    ? "speculative decoding"
                      : config_.logits != runtime::LogitsMode::kNone ? "logits output"
                                                                     : nullptr;
    if (why)
      spdlog::info("engine: asynchronous scheduling does not apply with {}; steps run one at a time", why);
    pipelined_ = why == nullptr;
    if (pipelined_ && !backend_->launches_async())
      spdlog::info(
          "engine: the {} backend computes a step when it is launched: --async-scheduling reorders "
          "the steps' host work but overlaps nothing",
          backend_->name());
  }
}

Engine::~Engine() {
  try {
    stop();
  } catch (const std::exception& e) {
    spdlog::error("engine: while stopping: {}", e.what());
  }
}

std::shared_ptr<RequestStream> Engine::submit(RequestSpec spec) {
  validate_request(spec, vocab_size_, max_model_len_);
  if (spec.constraint && !backend_->applies_token_masks())
    fail("structured outputs are not available on the {} backend yet (it does not apply token masks)",
         backend_->name());
  const int32_t import_len = checked_import(spec);
  StopConfig stop;
  stop.stop_ids = spec.stop_token_ids;
  if (!spec.ignore_eos) stop.stop_ids.insert(stop.stop_ids.end(), eos_ids_.begin(), eos_ids_.end());
  std::sort(stop.stop_ids.begin(), stop.stop_ids.end());
  stop.stop_ids.erase(std::unique(stop.stop_ids.begin(), stop.stop_ids.end()), stop.stop_ids.end());
  stop.stop_strings = std::move(spec.stop_strings);
  stop.include_stop_str_in_output = spec.include_stop_str_in_output;
  stop.min_tokens = spec.min_tokens;
  stop.max_tokens = spec.max_tokens > 0 ? spec.max_tokens : std::numeric_limits<int32_t>::max();

  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (!failure_.empty()) fail("engine stopped after an internal error: {}", failure_);
    if (stopping_) fail("engine is stopped");
    const int64_t id = next_id_;
    next_id_ += config_.id_stride;
    auto seq = std::make_unique<Sequence>(id, StopChecker(std::move(stop), std::move(spec.decoder)));
    seq->arrival = uint64_t(id);
    seq->priority = spec.priority;
    seq->prompt_len = int32_t(spec.prompt.size());
    seq->tokens = std::move(spec.prompt);
    seq->params = spec.sampling;
    seq->params.seed = spec.seed ? *spec.seed : splitmix64(seed_state_);
    seq->constraint = std::move(spec.constraint);
    seq->kv_export = spec.kv_export;
    seq->kv_share = std::move(spec.kv_share);
    seq->kv_share_ranks = spec.kv_share_ranks;
    if (import_len > 0) {
      seq->kv_import = std::move(spec.kv_import);
      seq->import_len = import_len;
    }
    seq->stream = stream = std::make_shared<RequestStream>(id);
    seq->arrival_time = seq->last_token_time = Sequence::Clock::now();
    inbox_.added.push_back(std::move(seq));
    ++submitted_;
    ++outstanding_;
  }
  inbox_cv_.notify_one();
  if (round_) round_->notify_work();
  return stream;
}

void Engine::abort(int64_t id) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox_.aborted.push_back(id);
  }
  inbox_cv_.notify_one();
  if (round_) round_->notify_work();
}

void Engine::take_inbox() {
  Inbox in;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    std::swap(in, inbox_);
  }
  for (auto& seq : in.added) scheduler_.add(std::move(seq));
  for (int64_t id : in.aborted)
    if (Sequence* s = scheduler_.find(id)) finish(s, FinishReason::kAbort, {});
}

int32_t Engine::checked_import(const RequestSpec& spec) const {
  if ((spec.kv_export || spec.kv_import) && !backend_->supports_kv_handoff())
    fail("K/V handoff (prefill/decode disaggregation) is not available on the {} backend", backend_->name());
  if (!spec.kv_import) return 0;
  const runtime::KvPages& kv = *spec.kv_import;
  if (kv.layout != backend_->kv_layout())
    fail("K/V handed over in another layout ({}); this instance's is {}", kv.layout, backend_->kv_layout());
  if (kv.share) check_share(*kv.share);
  // The prefix the prompt shares with the handed-over positions, less the last prompt token: it is always
  // computed here, to have logits to sample from.
  if (kv.tokens.size() != size_t(kv.num_tokens))
    fail("K/V handed over: {} token ids for {} positions", kv.tokens.size(), kv.num_tokens);
  const int32_t shared = int32_t(
      std::mismatch(kv.tokens.begin(), kv.tokens.end(), spec.prompt.begin(), spec.prompt.end()).first -
      kv.tokens.begin());
  const int32_t len = std::min<int32_t>(shared, int32_t(spec.prompt.size()) - 1);
  if (len <= 0) return 0;
  const int32_t p = blocks_.page_size(), pages = (len + p - 1) / p;
  if (kv.num_full_pages < pages)
    fail("K/V handed over: {} full pages for {} positions", kv.num_full_pages, len);
  if (blocks_.has_sliding() && (kv.first_sliding_page > blocks_.first_window_page(len) ||
                                kv.first_sliding_page + kv.num_sliding_pages < pages))
    fail("K/V handed over: sliding pages {}..{} do not hold the window of position {}", kv.first_sliding_page,
         kv.first_sliding_page + kv.num_sliding_pages, len);
  return len;
}

void Engine::open_kv_share(const runtime::KvShare& share) {
  check_share(share);
}

void Engine::check_share(const runtime::KvShare& share) const {
  if (share.transport != backend_->kv_share_transport())
    fail("K/V shared over {}; this instance takes {}", share.transport,
         backend_->kv_share_transport().empty() ? "none" : backend_->kv_share_transport());
  backend_->open_kv_share(share);
}

void Engine::drop_expiring_shares() {
  // A waiting sequence may be admitted in this step and copy its pages right after; a lease that ends
  // before then (kKvShareMarginMs to spare) may already hold other pages, so the prompt is computed here.
  constexpr int64_t kKvShareMarginMs = 2000;
  const int64_t now = runtime::steady_now_ms();
  for (Sequence* s : scheduler_.waiting()) {
    if (!s->kv_import || !s->kv_import->share || s->kv_import->share->expires_ms - now > kKvShareMarginMs)
      continue;
    spdlog::warn("engine: request {}: the shared K/V's lease ends in {} ms; computing the prompt here", s->id,
                 s->kv_import->share->expires_ms - now);
    s->kv_import.reset();
    s->import_len = 0;
  }
}

void Engine::import_kv(Sequence* s) {
  const runtime::KvPages& kv = *s->kv_import;
  const int32_t pages = (s->import_len + blocks_.page_size() - 1) / blocks_.page_size();
  std::vector<int32_t> full(size_t(kv.num_full_pages), runtime::kNoPage);
  for (int32_t k = 0; k < std::min(pages, kv.num_full_pages); ++k) full[size_t(k)] = s->pages.full[size_t(k)];
  std::vector<int32_t> sliding(size_t(kv.num_sliding_pages), runtime::kNoPage);
  for (int32_t j = 0; j < kv.num_sliding_pages; ++j) {
    const int32_t logical = kv.first_sliding_page + j;
    if (logical >= s->pages.sliding_begin && logical < pages)
      sliding[size_t(j)] = s->pages.sliding[size_t(logical)];
  }
  backend_->write_kv(kv, full, sliding);
  kv_import_bytes_ += int64_t(kv.bytes());
  if (kv.share) ++kv_shared_imports_;
  s->kv_import.reset();
}

void Engine::finish(Sequence* s, FinishReason reason, RequestEvent ev) {
  if (reason == FinishReason::kAbort || reason == FinishReason::kError) ev.text += s->stop.release_text();
  ev.finish = reason;
  ev.usage.prompt_tokens = s->prompt_len;
  ev.usage.completion_tokens = s->num_outputs();
  ev.usage.cached_tokens = s->cached_tokens;
  ev.usage.imported_tokens = s->imported_tokens;
  ev.usage.num_preemptions = s->num_preemptions;
  if (s->kv_export && s->pages.holds_pages() && reason != FinishReason::kError) {
    // Copied out before the pages go back to the pools; without it the receiver computes the prompt itself.
    try {
      const SeqPages& p = s->pages;
      const std::vector<int32_t> sliding(p.sliding.begin() + p.sliding_begin, p.sliding.end());
      std::optional<runtime::KvPages> shared;
      if (!s->kv_share.empty() && s->kv_share == backend_->kv_share_transport())
        shared = backend_->share_kv(p.full, sliding, p.sliding_begin, s->num_computed, s->kv_share_ranks);
      if (shared) ++kv_shared_exports_;
      auto kv = std::make_shared<runtime::KvPages>(
          shared ? std::move(*shared) : backend_->read_kv(p.full, sliding, p.sliding_begin, s->num_computed));
      kv->tokens.assign(s->tokens.begin(), s->tokens.begin() + s->num_computed);
      ev.kv = std::move(kv);
      kv_export_bytes_ += int64_t(ev.kv->bytes());
    } catch (const Error& e) {
      spdlog::error("engine: request {}: K/V not handed over: {}", s->id, e.what());
    }
  }
  scheduler_.finish(s);
  s->stream->push(std::move(ev));
  --outstanding_;
  switch (reason) {
    case FinishReason::kAbort:
      ++aborted_;
      break;
    case FinishReason::kError:
      ++failed_;
      break;
    default:
      ++finished_;
      break;
  }
}

bool Engine::step() {
  ORCHID_CHECK(!running_thread_, "Engine::step() while the loop thread runs");
  return step_once();
}

bool Engine::step_once() {
  if (launched_) return step_pipelined();
  if (round_) round_epoch_ = round_->work_epoch();  // before the inbox: later work wakes this engine
  take_inbox();
  drop_expiring_shares();
  const auto t0 = Sequence::Clock::now();
  if (!scheduler_.schedule(plan_)) {
    ORCHID_CHECK(scheduler_.num_running() == 0 && scheduler_.num_waiting() == 0,
                 "nothing scheduled with {} running and {} waiting", scheduler_.num_running(),
                 scheduler_.num_waiting());
    update_metrics(t0, 0.0);
    return round_ && step_empty();
  }
  for (const ScheduledSeq& entry : plan_) {
    if (entry.first_admission)
      step_queue_.push_back(std::chrono::duration<double>(t0 - entry.seq->arrival_time).count());
    if (entry.import_kv) import_kv(entry.seq);
  }
  runtime::StepBatch& batch = scheduler_.batch();
  if (backend_proposer_)  // the head proposes for every sampled sequence; the scheduler decides what is used
    for (auto& s : batch.seqs) s.num_propose = s.sample ? backend_proposer_->num_propose() : 0;
  // Waits for the mask worker however this scope is left: its jobs point into sequences and the batch.
  struct MaskScope {
    Engine* engine;
    bool active;
    ~MaskScope() {
      if (active) engine->end_masks();
    }
  } masks{this, start_masks(batch)};
  // Lockstep: everything that may throw is done; from kRun on, nothing stands between this engine and
  // forward(), which the other engines' backends are entering too.
  if (round_ && round_->arrive(true) == StepRound::Outcome::kClosed) return false;
  const auto t_forward = Sequence::Clock::now();
  try {
    if (pipelined_)
      backend_->launch(batch);
    else
      output_ = backend_->forward(batch);
  } catch (const Error& e) {
    // The backend refused this batch; its requests fail, the others carry on.
    spdlog::error("engine: step failed: {}", e.what());
    fail_plan(plan_, e.what());
    update_metrics(Sequence::Clock::now(), 0.0);
    return true;
  }
  if (pipelined_) {  // read by the next call, after the step that follows it is launched, if one can be
    launched_ = true;
    mark_launched(plan_);
    step_phase_[0] += std::chrono::duration<double>(t_forward - t0).count();
    step_phase_[1] += std::chrono::duration<double>(Sequence::Clock::now() - t_forward).count();
    return true;
  }
  const auto t_outputs = Sequence::Clock::now();
  if (masks.active) {
    masks.active = false;
    end_masks();
  }
  process_outputs(output_);
  end_step(t0, t_forward, t_outputs);
  return true;
}

void Engine::end_step(Sequence::Clock::time_point t0, Sequence::Clock::time_point t_backend,
                      Sequence::Clock::time_point t_outputs) {
  const auto t1 = Sequence::Clock::now();
  auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const double wait = std::min(output_.device_wait_seconds, seconds(t_backend, t_outputs));
  step_phase_[0] += seconds(t0, t_backend);
  step_phase_[1] += seconds(t_backend, t_outputs) - wait;
  step_phase_[2] += wait;
  step_phase_[3] += seconds(t_outputs, t1);
  update_metrics(t1, seconds(t0, t1));
}

bool Engine::step_pipelined() {
  const auto t0 = Sequence::Clock::now();
  bool stopping = false, late_masks = false;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    stopping = stopping_;
  }
  // Arrivals join the queue and aborts end their requests while the launched step runs: pages it holds
  // that go back to the pools are handed out only to later steps, which the backend runs after it.
  take_inbox();
  drop_expiring_shares();
  bool next = !stopping && scheduler_.schedule(next_plan_, /*ahead=*/true);
  if (next) {
    for (const ScheduledSeq& entry : next_plan_) {
      if (entry.first_admission)
        step_queue_.push_back(std::chrono::duration<double>(t0 - entry.seq->arrival_time).count());
      if (entry.import_kv) import_kv(entry.seq);
    }
    // A structured output's mask follows what the launched step draws: its row is computed once that step
    // is read, and handed over before anything else is launched (Backend::supply_masks).
    late_masks = assign_masks(scheduler_.batch(), next_plan_);
    scheduler_.batch().masks_later = late_masks;
  }
  const auto t_launch = Sequence::Clock::now();
  std::string launch_error;
  if (next) {
    try {
      backend_->launch(scheduler_.batch());
      ++pipelined_steps_;
    } catch (const Error& e) {
      next = false;
      launch_error = e.what();
    }
  }
  output_ = backend_->collect();  // plan_'s step; a failure here is the engine's (loop: fail_all)
  const auto t_outputs = Sequence::Clock::now();
  process_outputs(output_);
  if (!launch_error.empty()) {
    spdlog::error("engine: step failed: {}", launch_error);
    fail_plan(next_plan_, launch_error);
  }
  if (next && late_masks) {  // the constraints have heard the draws the masks follow
    start_mask_jobs(scheduler_.batch());
    end_masks();
    backend_->supply_masks(scheduler_.batch());
  }
  if (next) {
    std::swap(plan_, next_plan_);
    mark_launched(plan_);
  }
  launched_ = next;
  end_step(t0, t_launch, t_outputs);
  return true;
}

void Engine::mark_launched(const std::vector<ScheduledSeq>& plan) {
  int32_t sample = 0;
  for (const ScheduledSeq& entry : plan) {
    const int32_t slot = entry.sample ? sample++ : -1;
    if (entry.seq->state == SeqState::kFinished) continue;  // ended by the step before's draw
    entry.seq->ahead = entry.num_tokens;
    entry.seq->ahead_sample = slot;
  }
}

void Engine::abandon_launched() {
  if (!launched_) return;
  launched_ = false;
  try {
    backend_->collect();
  } catch (const std::exception& e) {
    spdlog::error("engine: the last launched step failed: {}", e.what());
  }
}

void Engine::fail_plan(const std::vector<ScheduledSeq>& plan, const std::string& message) {
  for (const ScheduledSeq& entry : plan) {
    if (entry.seq->state == SeqState::kFinished) continue;
    RequestEvent ev;
    ev.error = message;
    finish(entry.seq, FinishReason::kError, std::move(ev));
  }
}

bool Engine::step_empty() {
  if (round_->arrive(false) != StepRound::Outcome::kRun) return false;
  static const runtime::StepBatch kNothing;
  backend_->forward(kNothing);  // a failure here is the group's: the loop fails this engine
  return true;
}

bool Engine::start_masks(runtime::StepBatch& batch) {
  if (!assign_masks(batch, plan_)) return false;
  start_mask_jobs(batch);
  batch.token_masks_ready = [this] { mask_worker_.wait(); };
  return true;
}

bool Engine::assign_masks(runtime::StepBatch& batch, const std::vector<ScheduledSeq>& plan) {
  batch.token_masks.clear();
  batch.mask_words = 0;
  batch.token_masks_ready = nullptr;
  batch.masks_later = false;
  masked_seqs_.clear();
  for (const ScheduledSeq& entry : plan)
    if (entry.sample && entry.seq->constraint) masked_seqs_.push_back(entry.seq);
  if (masked_seqs_.empty()) return false;
  const size_t words = (size_t(vocab_size_) + 31) / 32;
  batch.mask_words = int32_t(words);
  batch.token_masks.resize(masked_seqs_.size() * words);
  ORCHID_CHECK(batch.seqs.size() == plan.size(), "batch of {} for a plan of {}", batch.seqs.size(),
               plan.size());
  int32_t row = 0;
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i].sample && plan[i].seq->constraint) batch.seqs[i].mask_row = row++;
  return true;
}

void Engine::start_mask_jobs(runtime::StepBatch& batch) {
  const size_t words = size_t(batch.mask_words);
  std::vector<MaskJob> jobs;
  jobs.reserve(masked_seqs_.size());
  for (size_t row = 0; row < masked_seqs_.size(); ++row) {
    Sequence* s = masked_seqs_[row];
    const std::span<uint32_t> mask(batch.token_masks.data() + row * words, words);
    if (s->state == SeqState::kFinished) {  // ended by the step before's draw: its row here is dropped
      std::fill(mask.begin(), mask.end(), ~0u);
      continue;
    }
    const int32_t remaining =
        std::min(s->stop.config().max_tokens - s->num_outputs(), max_model_len_ - int32_t(s->tokens.size()));
    jobs.push_back({s->constraint.get(), std::max(1, remaining), mask});
    mask_job_seqs_.push_back(s);
  }
  mask_worker_.start(std::move(jobs));
}

void Engine::end_masks() {
  mask_worker_.wait();
  for (const auto& [job, message] : mask_worker_.failures())
    mask_job_seqs_[job]->constraint_error = "structured output: " + message;
  mask_job_seqs_.clear();
}

void Engine::process_outputs(const runtime::StepOutput& out) {
  const auto now = Sequence::Clock::now();
  size_t next_sample = 0, next_sampled_seq = 0, next_proposal = 0;
  for (const ScheduledSeq& entry : plan_) {
    Sequence* s = entry.seq;
    if (s->state == SeqState::kFinished) {
      // Pipelining: the sequence ended (by the token the step before drew, or an abort) after this step
      // was launched; what it computed and drew here is dropped.
      ORCHID_CHECK(pipelined_ && entry.num_draft == 0, "a finished sequence in the step's plan");
      if (entry.sample) {
        ORCHID_CHECK(next_sample < out.samples.size(), "a pipelined step's draw is missing");
        ++next_sample;
        ++next_sampled_seq;
      }
      continue;
    }
    s->ahead = 0;  // what the step adds is in num_computed and tokens from here on
    s->ahead_sample = -1;
    const int32_t start = s->num_computed;
    const int32_t fed_end = start + entry.num_tokens - entry.num_draft;
    step_prompt_tokens_ += std::max(0, std::min(fed_end, s->prompt_len) - start);
    if (!entry.sample) {
      scheduler_.complete(entry);
      continue;
    }
    int32_t accepted = 0;
    if (!out.num_accepted.empty()) {
      ORCHID_CHECK(next_sampled_seq < out.num_accepted.size(), "backend returned too few acceptance counts");
      accepted = out.num_accepted[next_sampled_seq];
    }
    ++next_sampled_seq;
    ORCHID_CHECK(accepted >= 0 && accepted <= entry.num_draft, "backend accepted {} of {} drafts", accepted,
                 entry.num_draft);
    const size_t drawn = size_t(accepted) + 1;
    ORCHID_CHECK(next_sample + drawn <= out.samples.size(), "backend returned {} samples, more were asked",
                 out.samples.size());
    // The tokens go in first: the pages they complete are published (prefix cache) by complete().
    const int32_t length = int32_t(s->tokens.size());
    for (size_t i = 0; i < drawn; ++i) {
      const int32_t token = out.samples[next_sample + i].token;
      ORCHID_CHECK(token >= 0 && token < vocab_size_, "backend sampled token {}", token);
      s->tokens.push_back(token);
    }
    if (backend_proposer_ && next_sampled_seq - 1 < out.num_proposals.size()) {
      const int32_t n = out.num_proposals[next_sampled_seq - 1];
      ORCHID_CHECK(n >= 0 && next_proposal + size_t(n) <= out.proposals.size(),
                   "backend returned {} proposals, more were counted", out.proposals.size());
      backend_proposer_->store(s->id, int32_t(s->tokens.size()),
                               std::span<const int32_t>(out.proposals.data() + next_proposal, size_t(n)));
      next_proposal += size_t(n);
    }
    scheduler_.complete(entry, accepted);
    for (size_t i = 0; i < drawn; ++i)
      if (!emit(s, out.samples[next_sample + i], length + int32_t(i) + 1, i == 0, now)) break;
    next_sample += drawn;
  }
  ORCHID_CHECK(next_sample == out.samples.size(), "backend returned {} samples for {} requested",
               out.samples.size(), next_sample);
  ORCHID_CHECK(next_proposal == out.proposals.size(), "backend returned {} proposals, {} were counted",
               out.proposals.size(), next_proposal);
  ORCHID_CHECK(out.num_accepted.empty() || next_sampled_seq == out.num_accepted.size(),
               "backend returned {} acceptance counts for {} sampled sequences", out.num_accepted.size(),
               next_sampled_seq);
}

bool Engine::emit(Sequence* s, const runtime::SampledToken& st, int32_t length, bool first_in_step,
                  Sequence::Clock::time_point now) {
  ++step_generated_tokens_;
  if (s->constraint && s->constraint_error.empty() && !s->constraint->accept(st.token))
    s->constraint_error = fmt::format(
        "structured output: the backend sampled token {}, which the format does not allow", st.token);
  if (!s->constraint_error.empty()) {
    s->tokens.resize(size_t(length));
    RequestEvent ev;
    ev.error = s->constraint_error;
    finish(s, FinishReason::kError, std::move(ev));
    return false;
  }
  const int32_t n_out = length - s->prompt_len;
  StopOutcome so = s->stop.on_token(st.token, n_out, length >= max_model_len_);

  // Tokens after the first of a step (accepted drafts) arrive together with it.
  const auto since = n_out == 1 ? s->arrival_time : s->last_token_time;
  (n_out == 1 ? step_ttft_ : step_itl_)
      .push_back(first_in_step ? std::chrono::duration<double>(now - since).count() : 0.0);
  s->last_token_time = now;

  const runtime::SampledToken* logprob = s->params.num_logprobs >= 0 ? &st : nullptr;
  if (so.finish == FinishReason::kNone) {
    s->stream->push_token(st.token, logprob, std::move(so.text));
    return true;
  }
  s->tokens.resize(size_t(length));  // what followed the stop in this step is not output
  RequestEvent ev;
  ev.token_ids.push_back(st.token);
  if (logprob) ev.logprobs.push_back(st);
  ev.text = std::move(so.text);
  ev.stop_token = so.stop_token;
  ev.stop_string = std::move(so.stop_string);
  finish(s, so.finish, std::move(ev));
  return false;
}

void Engine::update_metrics(Sequence::Clock::time_point now, double step_seconds) {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  EngineMetrics& m = metrics_;
  m.num_waiting = int64_t(scheduler_.num_waiting());
  m.num_running = int64_t(scheduler_.num_running());
  const PagePool& full = blocks_.full_pool();
  const PagePool& sliding = blocks_.sliding_pool();
  m.kv_full_pages_total = full.size();
  m.kv_full_pages_used = full.num_used();
  m.kv_full_pages_cached = full.num_idle_cached();
  m.kv_sliding_pages_total = sliding.size();
  m.kv_sliding_pages_used = sliding.num_used();
  m.kv_sliding_pages_cached = sliding.num_idle_cached();
  m.kv_evictions = full.num_evictions() + sliding.num_evictions();
  const SchedulerCounters& c = scheduler_.counters();
  m.preemptions = c.preemptions;
  m.prefix_query_tokens = c.prefix_query_tokens;
  m.prefix_hit_tokens = c.prefix_hit_tokens;
  m.kv_imported_tokens = c.imported_tokens;
  m.kv_import_bytes = kv_import_bytes_;
  m.kv_export_bytes = kv_export_bytes_;
  m.kv_shared_exports = kv_shared_exports_;
  m.kv_shared_imports = kv_shared_imports_;
  m.spec_drafts = c.spec_drafts;
  m.spec_draft_tokens = c.spec_draft_tokens;
  m.spec_accepted_tokens = c.spec_accepted_tokens;
  m.requests_finished = finished_;
  m.requests_aborted = aborted_;
  m.requests_failed = failed_;
  m.pipelined_steps = pipelined_steps_;
  if (step_seconds > 0) {
    ++m.steps;
    m.step_time.observe(step_seconds);
  }
  m.step_schedule_seconds += step_phase_[0];
  m.step_backend_host_seconds += step_phase_[1];
  m.step_device_wait_seconds += step_phase_[2];
  m.step_outputs_seconds += step_phase_[3];
  step_phase_ = {};
  m.prompt_tokens += step_prompt_tokens_;
  m.generation_tokens += step_generated_tokens_;
  prompt_rate_.add(now, step_prompt_tokens_);
  generation_rate_.add(now, step_generated_tokens_);
  m.prompt_tokens_per_s = prompt_rate_.rate(now);
  m.generation_tokens_per_s = generation_rate_.rate(now);
  for (double v : step_ttft_) m.time_to_first_token.observe(v);
  for (double v : step_queue_) m.queue_time.observe(v);
  step_queue_.clear();
  for (double v : step_itl_) m.inter_token_latency.observe(v);
  step_prompt_tokens_ = step_generated_tokens_ = 0;
  step_ttft_.clear();
  step_itl_.clear();
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m;
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    m = metrics_;
  }
  std::lock_guard<std::mutex> lock(inbox_mu_);
  m.num_waiting += int64_t(inbox_.added.size());
  m.requests_submitted = submitted_;
  m.kv_share_leases = int64_t(backend_->kv_share_leases());  // live: releases come between steps
  return m;
}

void Engine::run_until_idle() {
  while (step()) {
  }
}

void Engine::check_invariants() const {
  scheduler_.check_invariants();
}

void Engine::start() {
  ORCHID_CHECK(!thread_.joinable(), "engine started twice");
  if (stopping_) fail("engine is stopped");
  running_thread_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Engine::loop() {
  while (!stopping_) {
    bool worked = false;
    try {
      worked = step_once();
    } catch (const std::exception& e) {
      // A broken invariant: the engine state cannot be trusted any more. Fail everything and refuse work;
      // in lockstep, the other engines cannot step without this one: they end too.
      spdlog::critical("engine: {}", e.what());
      fail_all(e.what());
      if (round_) round_->close(e.what());
      return;
    }
    if (round_ && round_->closed()) {
      leave_closed_round();
      return;
    }
    if (worked) continue;
    if (round_) {
      round_->wait_for_work(round_epoch_);
    } else {
      std::unique_lock<std::mutex> lock(inbox_mu_);
      inbox_cv_.wait(lock, [&] { return stopping_ || !inbox_.added.empty() || !inbox_.aborted.empty(); });
    }
  }
}

void Engine::leave_closed_round() {
  const std::string reason = round_->close_reason();
  if (!reason.empty()) {
    fail_all("another engine of this lockstep group failed: " + reason);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    stopping_ = true;
  }
  take_inbox();
  for (Sequence* s : scheduler_.sequences()) finish(s, FinishReason::kAbort, {});
}

void Engine::fail_all(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    failure_ = message;
  }
  abandon_launched();
  take_inbox();
  for (Sequence* s : scheduler_.sequences()) {
    RequestEvent ev;
    ev.error = message;
    try {
      finish(s, FinishReason::kError, std::move(ev));
    } catch (const std::exception&) {
      // The pages cannot be released cleanly; the consumer must still hear the end.
      if (!s->stream->finished()) {
        RequestEvent last;
        last.finish = FinishReason::kError;
        last.error = message;
        s->stream->push(std::move(last));
      }
    }
  }
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  inbox_cv_.notify_all();
  if (round_) round_->close();  // the other engines of the group stop too: none can step alone
  if (thread_.joinable()) thread_.join();
  running_thread_ = false;
  if (!failure_.empty()) return;
  abandon_launched();
  take_inbox();
  for (Sequence* s : scheduler_.sequences()) finish(s, FinishReason::kAbort, {});
}

}  // namespace orchid::engine
