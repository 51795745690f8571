// The engine: accepts requests from any thread, runs continuous batching on one loop thread (or step by
// step on the caller's thread, for tests), and streams each request's tokens back through its own stream.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/block_manager.h"
#include "engine/mask_worker.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/scheduler.h"
#include "engine/serving_engine.h"
#include "engine/speculative_config.h"
#include "engine/step_round.h"
#include "runtime/backend.h"

namespace orchid::engine {

class BackendProposer;

struct EngineConfig {
  int32_t max_num_seqs = 256;             // --max-num-seqs
  int32_t max_num_batched_tokens = 8192;  // --max-num-batched-tokens
  int32_t max_model_len = 0;              // --max-model-len; 0: what the model and the KV pool allow
  bool enable_prefix_caching = true;      // --no-enable-prefix-caching turns it off
  std::optional<uint64_t> seed;           // seeds requests that bring none; none: nondeterministic
  runtime::LogitsMode logits = runtime::LogitsMode::kNone;
  // Request ids are first_id, first_id + id_stride, ...: the engines of a group hand out disjoint ids.
  int64_t first_id = 1, id_stride = 1;
  SpeculativeConfig speculative;  // --speculative-config
  // A proposer of the caller's instead of speculative.method's (speculative.num_speculative_tokens still
  // bounds the drafts): tests, embedders.
  std::shared_ptr<Proposer> proposer;
  // The round barrier of a group of engines that step in lockstep (required when the backend's
  // lockstep_replicas() > 1; engine_group.h sets it). Each step then waits for the other engines to
  // schedule theirs, and an engine with nothing to do runs an empty step while the others have work.
  // Stopping one engine of such a group stops them all.
  std::shared_ptr<StepRound> lockstep;
  // Asynchronous scheduling (the commands' default on the CUDA backend): while the backend runs a decode
  // step, the engine plans and launches the next one (its tokens are the running step's draws, which only the
  // backend knows yet) and then reads the running step's outputs (Backend::launch). The outputs are the same
  // as without; a sequence that ends by the token it draws has one more step computed and dropped. Off with
  // speculative decoding, logits output and lockstep groups (their steps run one at a time).
  bool async_scheduling = false;
};

class Engine final : public ServingEngine {
 public:
  Engine(std::shared_ptr<runtime::Backend> backend, EngineConfig config);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Any thread. Throws orchid::Error for an invalid request or a stopped engine.
  std::shared_ptr<RequestStream> submit(RequestSpec spec) override;
  // Any thread. The request ends with FinishReason::kAbort at the next step; unknown or finished ids are
  // ignored.
  void abort(int64_t id) override;

  // Runs steps on a background thread until stop().
  void start();
  // Stops the loop thread; requests still in flight finish with kAbort.
  void stop() override;
  // One step on the caller's thread (only while the loop thread is not running). False when there was
  // nothing to do.
  bool step();
  // Steps until no request is left (caller's thread).
  void run_until_idle();

  EngineMetrics metrics() const override;
  const EngineConfig& config() const { return config_; }
  int32_t max_model_len() const override { return max_model_len_; }
  int64_t outstanding() const override { return outstanding_.load(); }
  int32_t vocab_size() const override { return vocab_size_; }
  std::string kv_share_transport() const override { return backend_->kv_share_transport(); }
  int32_t kv_ranks() const override { return backend_->kv_ranks(); }
  bool release_kv_share(uint64_t lease) override { return backend_->release_kv_share(lease); }
  void open_kv_share(const runtime::KvShare& share) override;
  const runtime::KvCacheSpec& kv_spec() const { return blocks_.spec(); }
  runtime::Backend& backend() { return *backend_; }
  // The logits of the last step (when config.logits asks for them).
  const runtime::StepOutput& last_output() const { return output_; }

  // Tests, between steps on the caller's thread: all scheduler and block-manager invariants.
  void check_invariants() const;
  size_t num_live_requests() const { return scheduler_.num_sequences(); }

 private:
  struct Inbox {
    std::vector<std::unique_ptr<Sequence>> added;
    std::vector<int64_t> aborted;
  };

  void loop();
  bool step_once();
  // A step is launched and not read (async scheduling): plans and launches the step after it when it can
  // (Scheduler::schedule ahead), then reads the launched one.
  bool step_pipelined();
  // The sequences of a plan just launched: what it computes and draws, for the plan after it.
  void mark_launched(const std::vector<ScheduledSeq>& plan);
  // Reads a launched step that will not be processed (the engine stops) and forgets it.
  void abandon_launched();
  void fail_plan(const std::vector<ScheduledSeq>& plan, const std::string& message);
  // Lockstep, nothing scheduled: takes part in the round, with an empty step when another engine has work.
  bool step_empty();
  // The loop's end once the group's rounds are closed: a stop aborts what this engine holds, a failure
  // elsewhere fails it.
  void leave_closed_round();
  void take_inbox();
  void finish(Sequence* seq, FinishReason reason, RequestEvent event);
  // The positions of spec.kv_import this engine takes (0: none); throws orchid::Error for K/V it cannot.
  int32_t checked_import(const RequestSpec& spec) const;
  // The share's transport is the backend's and its regions map; throws orchid::Error otherwise.
  void check_share(const runtime::KvShare& share) const;
  // Waiting sequences whose shared K/V (runtime/kv_share.h) would expire before the copy compute instead.
  void drop_expiring_shares();
  // Writes a just-admitted sequence's handed-over K/V into its pages.
  void import_kv(Sequence* seq);
  // One sampled token of a sequence, already in seq->tokens[length - 1]: constraint, stop checks, streaming.
  // False when the sequence ended there (its tokens then end at `length`).
  bool emit(Sequence* seq, const runtime::SampledToken& st, int32_t length, bool first_in_step,
            Sequence::Clock::time_point now);
  void process_outputs(const runtime::StepOutput& out);
  // Sizes the step's token masks and starts computing them; false when no sequence is constrained.
  bool start_masks(runtime::StepBatch& batch);
  // The two halves of start_masks: the rows of the plan's constrained sequences (masked_seqs_), and the
  // jobs that compute them (a sequence that ended meanwhile gets a row allowing everything).
  bool assign_masks(runtime::StepBatch& batch, const std::vector<ScheduledSeq>& plan);
  void start_mask_jobs(runtime::StepBatch& batch);
  void end_masks();
  void fail_all(const std::string& message);
  void update_metrics(Sequence::Clock::time_point now, double step_seconds);
  // A step's time by phase (planning from t0, the backend from t_backend, the outputs from t_outputs to
  // now; the device wait out of the backend's share), then update_metrics.
  void end_step(Sequence::Clock::time_point t0, Sequence::Clock::time_point t_backend,
                Sequence::Clock::time_point t_outputs);

  std::shared_ptr<runtime::Backend> backend_;
  EngineConfig config_;
  int32_t max_model_len_ = 0;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> eos_ids_;
  std::shared_ptr<Proposer> proposer_;           // speculative decoding; null: off
  BackendProposer* backend_proposer_ = nullptr;  // proposer_ when the backend's head proposes
  BlockManager blocks_;
  Scheduler scheduler_;

  mutable std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  Inbox inbox_;
  int64_t next_id_ = 1;
  std::atomic<int64_t> outstanding_{0};
  uint64_t seed_state_ = 0;
  std::atomic<bool> stopping_{false};
  std::string failure_;  // set when the loop died; submit() refuses new work

  std::thread thread_;
  std::atomic<bool> running_thread_{false};
  std::shared_ptr<StepRound> round_;  // config_.lockstep
  uint64_t round_epoch_ = 0;          // its work epoch when this engine last looked at its inbox

  // Engine-thread state.
  bool pipelined_ = false;  // config_.async_scheduling, where it applies
  bool launched_ = false;   // plan_'s step is launched and not read yet (pipelining)
  std::vector<ScheduledSeq> plan_, next_plan_;
  MaskWorker mask_worker_;
  std::vector<Sequence*> masked_seqs_;    // the step's constrained sequences, in mask row order
  std::vector<Sequence*> mask_job_seqs_;  // the started mask jobs' sequences
  runtime::StepOutput output_;
  int64_t step_prompt_tokens_ = 0, step_generated_tokens_ = 0;
  std::vector<double> step_ttft_, step_itl_;
  int64_t finished_ = 0, aborted_ = 0, failed_ = 0, submitted_ = 0, pipelined_steps_ = 0;
  int64_t kv_import_bytes_ = 0, kv_export_bytes_ = 0;
  int64_t kv_shared_exports_ = 0, kv_shared_imports_ = 0;
  std::vector<double> step_queue_;      // this step's first admissions: seconds each waited
  std::array<double, 4> step_phase_{};  // this step's schedule / backend host / device wait / outputs seconds

  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;
  RateMeter generation_rate_, prompt_rate_;
};

}  // namespace orchid::engine
