// What every API handler shares: the served model's name, the tokenizer, the engine once it is loaded, the
// serving phase (loading, ready, draining) and the admission limit that turns an overfull queue into 429.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/serving_engine.h"
#include "server/remote_prefill.h"
#include "tokenizer/tokenizer.h"

namespace orchid::server {

struct ServerOptions {
  std::string served_model_name = "orchid";
  std::string model_path;  // also accepted as the request's `model`
  std::string api_key;     // empty: no authentication
  // Requests admitted at once beyond the running ones (--max-num-seqs); more get 429.
  int32_t max_waiting_requests = 1024;
  int32_t max_num_seqs = 256;
  std::string default_reasoning_effort = "medium";
  bool chat_page = true;  // serve the built-in chat page at / (--no-chat-page turns it off)
  // Origins that browsers may call from ("*": any; empty: none), see cors.h.
  std::vector<std::string> allowed_origins = {"*"};
  // Disaggregation (server/remote_prefill.h): "both" (prefill and decode here), "prefill" (also answers
  // /v1/internal/prefill) or "decode" (prompts' K/V from prefill instances).
  std::string role = "both";
  // --kv-transfer on a decode instance: "auto" takes a prompt's K/V in place (runtime/kv_share.h) when the
  // backend can and the prefill instance offers it, "host" always as bytes over HTTP.
  std::string kv_transfer = "auto";
};

enum class Phase { kLoading, kReady, kDraining };

class ServerContext;

// Holds `n` admitted generation requests for as long as a response is being produced.
class Admission {
 public:
  Admission() = default;
  Admission(ServerContext* ctx, int64_t n) : ctx_(ctx), n_(n) {}
  Admission(Admission&& o) noexcept : ctx_(o.ctx_), n_(o.n_) { o.ctx_ = nullptr; }
  Admission& operator=(Admission&& o) noexcept;
  ~Admission();

 private:
  ServerContext* ctx_ = nullptr;
  int64_t n_ = 0;
};

class ServerContext {
 public:
  ServerContext(ServerOptions options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer);

  const ServerOptions& options() const { return options_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_ptr() const { return tokenizer_; }

  // The engine is ready: requests are served from now on.
  void set_engine(std::shared_ptr<engine::ServingEngine> engine);
  void begin_draining() { phase_ = Phase::kDraining; }
  Phase phase() const { return phase_; }
  // The engine, or ApiError 503 while loading or draining.
  engine::ServingEngine& engine();
  engine::ServingEngine* engine_if_loaded() const { return engine_.get(); }

  // Throws ApiError 404 unless `model` names the served model (an absent model is accepted).
  void check_model(const std::string* model) const;
  // Reserves `n` requests, or throws ApiError 429 when the server already holds its limit.
  Admission admit(int64_t n);
  // Submits to the engine; engine rejections become ApiError (400 for a bad request, 503 when stopped). On a
  // decode instance the prompt's K/V come from a prefill instance first, when one answers.
  std::shared_ptr<engine::RequestStream> submit(engine::RequestSpec spec);
  void set_remote_prefill(std::shared_ptr<RemotePrefill> p) { remote_prefill_ = std::move(p); }
  const RemotePrefill* remote_prefill() const { return remote_prefill_.get(); }

  int64_t requests_in_flight() const { return in_flight_; }
  int64_t requests_rejected() const { return rejected_; }
  // "chatcmpl-<24 hex>" and the like.
  std::string new_id(std::string_view prefix);

 private:
  friend class Admission;

  ServerOptions options_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::shared_ptr<engine::ServingEngine> engine_;
  std::shared_ptr<RemotePrefill> remote_prefill_;
  std::atomic<Phase> phase_{Phase::kLoading};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> rejected_{0};
  std::mutex id_mu_;
  uint64_t id_state_ = 0;
};

// Seconds since the Unix epoch (the `created` fields).
int64_t unix_time();

}  // namespace orchid::server
