// The Backend interface: one forward step over a batch of sequences, tokens in, sampled tokens out.
// The engine builds StepBatch (plain host data) and never sees how a backend computes it; the CPU
// (fp32 reference) and CUDA backends implement it, so every engine and server test runs on the CPU.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "runtime/kv_share.h"
#include "runtime/sampling_params.h"

namespace orchid::runtime {

// The paged KV cache, as the engine's block manager sees it. Logical page k of a sequence holds
// positions [k*page_size, (k+1)*page_size). Full-attention layers and sliding-window layers have separate
// page pools (a sliding layer only ever needs the last `sliding_window` positions), and one page id
// addresses that page in every layer of its kind.
struct KvCacheSpec {
  int32_t page_size = 16;
  int32_t num_full_pages = 0;
  int32_t num_sliding_pages = 0;
  int32_t sliding_window = 0;  // from the model; 0 if it has no sliding layers
};

inline constexpr int32_t kNoPage = -1;  // a sliding-table entry whose positions left the window

// One sequence's part of a step.
struct StepSequence {
  int64_t seq_id = 0;               // engine's id; lets a backend cache per-sequence state if it wants
  int32_t token_begin = 0;          // first of this sequence's new tokens in StepBatch::tokens
  int32_t num_tokens = 0;           // new tokens this step: a prefill chunk, or 1 when decoding
  int32_t start_pos = 0;            // position of the first new token = tokens already in the cache
  int32_t full_table_begin = 0;     // pages in StepBatch::full_page_table
  int32_t num_full_pages = 0;       // covers at least positions [0, start_pos + num_tokens)
  int32_t sliding_table_begin = 0;  // pages in StepBatch::sliding_page_table, same logical indexing;
  int32_t num_sliding_pages = 0;    // entries before the window may be kNoPage
  bool sample = false;              // sample one token after the last new token
  int32_t sample_index = 0;         // index of the sampled token in the request's output (seeded RNG counter)
  // Speculative decoding: the last num_draft new tokens are proposed continuations, not yet output. The
  // backend samples after each of the last num_draft + 1 new tokens in turn (sample indices sample_index,
  // sample_index + 1, ...) and stops at the first draw that differs from the proposal after it: the draws
  // are the ones decoding without drafts would make, so the output is the same token for token.
  // Requires sample; the penalty history then ends with the drafts (see output_history_len).
  int32_t num_draft = 0;
  // Speculative decoding with the backend's own draft head (EAGLE-3, Backend::max_proposals): after
  // sampling, propose this many tokens to follow the sequence's last sampled one (StepOutput::proposals).
  // Requires sample.
  int32_t num_propose = 0;
  int32_t params_index = 0;  // into StepBatch::params
  // Token history for penalties (only filled when params.uses_penalties()): ranges of history_tokens. The
  // output range holds the outputs before the first sampled position; the num_draft drafts follow it.
  int32_t prompt_history_begin = 0, prompt_history_len = 0;
  int32_t output_history_begin = 0, output_history_len = 0;
  // Tokens the sampler must not draw (SampleInput::banned_tokens): the request's stop ids and EOS while
  // min_tokens is not reached. A range of StepBatch::banned_tokens; empty for most sequences.
  int32_t banned_begin = 0, num_banned = 0;
  // Structured outputs: the row of StepBatch::token_masks that limits what may be sampled; -1: no limit.
  int32_t mask_row = -1;
};

enum class LogitsMode : uint8_t { kNone, kSampled, kAll };

// Pipelined steps (Backend::launch): token `token` of a batch is the one sampled at `sample`
// (StepOutput::samples) by the step launched just before it, which the engine has not seen yet.
struct TokenFromPrevious {
  int32_t token = 0;
  int32_t sample = 0;
};

struct StepBatch {
  std::vector<int32_t> tokens;  // new tokens of all sequences, back to back
  std::vector<StepSequence> seqs;
  std::vector<int32_t> full_page_table;
  std::vector<int32_t> sliding_page_table;
  std::vector<SamplingParams> params;
  std::vector<int32_t> history_tokens;
  std::vector<int32_t> banned_tokens;
  LogitsMode logits = LogitsMode::kNone;  // also return raw logits (tests, `orchid forward`)
  // Allowed-token bitmasks of the constrained sequences (StepSequence::mask_row), `mask_words` uint32 words
  // a row, rows back to back: token t may be sampled iff bit t % 32 of word t / 32 is set; mask_words is
  // ceil(vocab_size / 32). The rows may still be being written when forward() starts (the engine computes
  // them while the model runs): call wait_token_masks() before reading them, right before sampling.
  std::vector<uint32_t> token_masks;
  int32_t mask_words = 0;
  std::function<void()> token_masks_ready;
  // Tokens that come from the previous launched step's samples (Backend::launch); StepBatch::tokens holds
  // a placeholder (0) there. Likewise entries of history_tokens (a penalized sequence's history ends with
  // the token the launched step draws). Both empty for a batch run with forward().
  std::vector<TokenFromPrevious> from_previous;
  std::vector<TokenFromPrevious> history_from_previous;  // .token: an index into history_tokens
  // Launched with its token masks still to come (asynchronous scheduling: they follow the draws of the step
  // launched before, which the engine reads after this launch): Backend::supply_masks() brings them.
  bool masks_later = false;

  void wait_token_masks() const {
    if (token_masks_ready) token_masks_ready();
  }

  int32_t num_tokens() const { return int32_t(tokens.size()); }
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;                        // log-softmax of the raw logits; valid if requested
  std::vector<std::pair<int32_t, float>> top;  // the N most likely tokens and their logprobs
};

struct StepOutput {
  // Per sequence with sample=true, in StepBatch::seqs order: 1 + its accepted drafts.
  std::vector<SampledToken> samples;
  // Per sequence with sample=true: how many of its drafts were accepted. Empty when no sequence had any.
  std::vector<int32_t> num_accepted;
  // A backend with a draft head: per sequence with sample=true, how many tokens it proposes to follow its
  // last sample (up to StepSequence::num_propose), and those tokens back to back. Empty without a head.
  std::vector<int32_t> num_proposals;
  std::vector<int32_t> proposals;
  // kSampled: one row per sampled sequence; kAll: one row per token of StepBatch::tokens.
  std::vector<float> logits;
  int64_t logits_rows = 0;
  // Seconds forward() spent blocked on the device's work (a backend that computes asynchronously: the
  // rest of forward()'s time is host work during which the device may be idle). 0 for the CPU backend.
  double device_wait_seconds = 0;
};

// One sequence's K/V as handed from one instance to another (prefill/decode disaggregation): the contents
// of its logical pages 0 .. ceil(num_tokens / page_size) - 1 of the full-attention pool, and of the sliding
// pool from logical page first_sliding_page on (what its window still needs), in the backend's own layout.
// `layout` names that layout (backend, dtype, layer and head counts, page size); a backend refuses pages of
// another layout. The bytes come in `ranks` parts, one per tensor-parallel rank of the sender in rank order
// (each its consecutive share of the KV heads); a receiver with another rank count regroups them
// (runtime/kv_reshard.h).
struct KvPages {
  std::string layout;
  int32_t num_tokens = 0;       // positions whose K/V are valid
  std::vector<int32_t> tokens;  // their token ids (a receiver takes only the prefix its prompt shares)
  int32_t first_sliding_page = 0;
  int32_t num_full_pages = 0, num_sliding_pages = 0;
  int32_t ranks = 1;
  std::vector<uint8_t> full, sliding;
  // Handed over in place (runtime/kv_share.h): the bytes lie in the exporter's buffer, not in full/sliding.
  std::shared_ptr<const KvShare> share;
  uint64_t bytes() const { return share ? share->bytes() : uint64_t(full.size() + sliding.size()); }
};

// What every backend's read_kv starts from (the counts, no bytes yet), and the checks every write_kv makes:
// the layout is this backend's and there is one page for each page of `kv`.
KvPages kv_pages_for(std::string layout, size_t num_full_pages, size_t num_sliding_pages,
                     int32_t first_sliding_page, int32_t num_tokens);
void check_kv_pages_fit(const KvPages& kv, const std::string& layout, size_t num_full_pages,
                        size_t num_sliding_pages);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const model::ModelConfig& model_config() const = 0;
  virtual KvCacheSpec kv_spec() const = 0;
  // Most new tokens one step may carry (the backend's workspace size); the engine never exceeds it.
  virtual int32_t max_step_tokens() const { return 1 << 30; }
  // Most sequences one step may carry.
  virtual int32_t max_step_seqs() const { return 1 << 30; }
  // Most drafts (StepSequence::num_draft) one sequence may carry; 0: no speculative decoding.
  virtual int32_t max_draft_tokens() const { return 0; }
  // Most tokens the backend's own draft head (EAGLE-3) proposes per sequence and step
  // (StepSequence::num_propose); 0: it has none.
  virtual int32_t max_proposals() const { return 0; }
  // Batch sizes whose plain decode steps the backend runs as captured graphs, smallest first (a step of B
  // sequences takes the first that holds B). A size's first step runs eagerly, timing the GEMMs' choices,
  // and is captured: runtime::warm_up runs one of each before serving. Empty: no graphs.
  virtual std::vector<int32_t> decode_graph_batches() const { return {}; }
  // Prompt lengths whose prefills runtime::warm_up also runs before serving, because the first prefill of a
  // size pays one-time costs that a 128-token prompt does not (the GPU's GEMM library picks its kernels by
  // size and loads each at its first launch: 1-3 ms apiece). Empty: none.
  virtual std::vector<int32_t> prefill_warm_up_lengths() const { return {}; }
  // Whether forward() samples within StepBatch::token_masks (structured outputs). The engine refuses
  // constrained requests on a backend that does not.
  virtual bool applies_token_masks() const { return false; }
  // Runs the model on every new token, writes their K/V into the pages given, and samples where asked.
  // Throws orchid::Error for a batch that is invalid for this backend (bad token id, page out of range).
  virtual StepOutput forward(const StepBatch& batch) = 0;
  // Data-parallel attention replicas whose ranks share collectives (the MoE's expert ranks span them):
  // how many backends, this one included, must run every forward() at the same time, each on its own
  // thread, with an empty StepBatch where one has nothing to do (engine::StepRound, runtime/lockstep.h).
  // 1: this backend steps alone. A lockstep replica that refuses its batch (orchid::Error) has still taken
  // part in the step's collectives.
  virtual int32_t lockstep_replicas() const { return 1; }

  // Pipelined steps (the engine's asynchronous scheduling, --async-scheduling): launch() starts a step and
  // returns once it no longer needs `b`; collect() returns the output of the oldest launched step not yet
  // collected, waiting for it. At most two steps are uncollected at a time, so the host prepares step N+1
  // while the device runs step N. A batch's from_previous tokens are the samples of the step launched just
  // before it. The default runs forward() inside launch() (nothing overlaps, the results are the same);
  // launches_async() says whether launch() returns before the device's work is done.
  virtual void launch(const StepBatch& b);
  virtual StepOutput collect();
  virtual bool launches_async() const { return false; }
  // A step launched with masks_later gets its token masks here, `b` being that batch with its masks written,
  // before the next launch or collect. Whether this backend takes masks so (the default does: it computes
  // such a step when they come).
  virtual void supply_masks(const StepBatch& b);
  virtual bool accepts_late_masks() const { return true; }

  // K/V handoff (prefill/decode disaggregation). read_kv copies the pages out (full_pages[k] holds logical
  // page k; sliding_pages[k] logical page first_sliding_page + k); write_kv copies pages of the same layout
  // into the given pages, one per page of `kv` (kNoPage: not wanted). Both run between steps on the engine
  // thread. The default: not supported.
  virtual bool supports_kv_handoff() const { return false; }
  virtual std::string kv_layout() const { return {}; }
  virtual KvPages read_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                          int32_t first_sliding_page, int32_t num_tokens);
  virtual void write_kv(const KvPages& kv, std::span<const int32_t> full_pages,
                        std::span<const int32_t> sliding_pages);
  // K/V handed over in place on one machine (runtime/kv_share.h). The transport this backend exports and
  // imports ("cuda_ipc", "shm"), or "" for none. share_kv is read_kv into the export buffer under a lease:
  // pages with `share` set and no bytes, or nullopt when the buffer has no room or the receiver could not
  // take them in place (receiver_ranks: its tensor-parallel rank count, 0 when unknown) (engine thread).
  // release_kv_share ends a lease, false when unknown (any thread). open_kv_share maps what a share names,
  // throwing orchid::Error when it cannot, so that write_kv of it does not fail later (any thread).
  virtual std::string kv_share_transport() const { return {}; }
  virtual std::optional<KvPages> share_kv(std::span<const int32_t> full_pages,
                                          std::span<const int32_t> sliding_pages, int32_t first_sliding_page,
                                          int32_t num_tokens, int32_t receiver_ranks);
  virtual int32_t kv_ranks() const { return 1; }  // the parts read_kv's bytes come in (KvPages::ranks)
  virtual bool release_kv_share(uint64_t lease);
  virtual size_t kv_share_leases() const { return 0; }  // leases held now (any thread)
  virtual void open_kv_share(const KvShare& share);

  // Verification (teacher forcing): decoder layer `layer` alone on hidden states x [n, hidden] at positions
  // 0..n-1 of a fresh sequence. Returns the layer's output residual stream [n, hidden]; fills `topk` with the
  // experts each token chose [n, k] when given. Uses the KV cache's first pages.
  virtual std::vector<float> run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                                       std::vector<int32_t>* topk);

 private:
  // The default launch()/collect(): outputs computed at launch (or when late masks come), and the last
  // launched step's tokens.
  void run_launched(const StepBatch& b);
  std::deque<StepOutput> launched_;
  std::vector<int32_t> last_launched_tokens_;
  std::unique_ptr<StepBatch> awaiting_masks_;
};

// Fills b's tokens and history entries that come from the step launched before it from `previous` (that
// step's sampled tokens) and clears the lists; throws orchid::InternalError for a sample that is not there.
void fill_from_previous(StepBatch& b, std::span<const int32_t> previous);

// The checks every backend makes of a batch before running it: token ids in the vocabulary, sequences back
// to back, positions within `max_positions`, page tables long enough and inside the pools, sampling
// parameters present. User-visible limits throw orchid::Error; a malformed batch (a scheduler bug) stops
// at a CHECK.
void validate_step(const StepBatch& b, const model::ModelConfig& c, const KvCacheSpec& spec,
                   int64_t max_positions);

// A batch of one sequence of n new tokens at positions 0..n-1 with pages 0.. of each pool (sliding pages as
// a ring over the sliding pool); tokens are zeros. For run_layer implementations and tests.
StepBatch single_sequence_batch(const KvCacheSpec& spec, int32_t n);

}  // namespace orchid::runtime
