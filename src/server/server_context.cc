#include "server/server_context.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "core/error.h"
#include "server/api_error.h"

namespace orchid::server {

Admission& Admission::operator=(Admission&& o) noexcept {
  if (this != &o) {
    if (ctx_) ctx_->in_flight_ -= n_;
    ctx_ = o.ctx_;
    n_ = o.n_;
    o.ctx_ = nullptr;
  }
  return *this;
}

Admission::~Admission() {
  if (ctx_) ctx_->in_flight_ -= n_;
}

ServerContext::ServerContext(ServerOptions options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer)
    : options_(std::move(options)), tokenizer_(std::move(tokenizer)) {
  id_state_ = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
}

void ServerContext::set_engine(std::shared_ptr<engine::ServingEngine> engine) {
  engine_ = std::move(engine);
  phase_ = Phase::kReady;
}

engine::ServingEngine& ServerContext::engine() {
  const Phase p = phase_;
  if (p == Phase::kLoading) throw ApiError(503, "the model is still loading; try again shortly");
  if (p == Phase::kDraining) throw ApiError(503, "the server is shutting down");
  return *engine_;
}

void ServerContext::check_model(const std::string* model) const {
  if (!model || *model == options_.served_model_name || *model == options_.model_path) return;
  throw ApiError(404,
                 fmt::format("The model `{}` does not exist; this server serves `{}`.", *model,
                             options_.served_model_name),
                 "model", "model_not_found");
}

Admission ServerContext::admit(int64_t n) {
  const int64_t limit = int64_t(options_.max_num_seqs) + options_.max_waiting_requests;
  const int64_t now = in_flight_.fetch_add(n) + n;
  if (now > limit) {
    in_flight_ -= n;
    ++rejected_;
    throw ApiError(429,
                   fmt::format("the server is at its limit of {} requests in flight; retry later", limit), {},
                   "rate_limit_exceeded");
  }
  return Admission(this, n);
}

std::shared_ptr<engine::RequestStream> ServerContext::submit(engine::RequestSpec spec) {
  engine::ServingEngine& e = engine();
  try {
    engine::validate_request(spec, e.vocab_size(), e.max_model_len());
  } catch (const Error& err) {
    throw ApiError(400, err.what());
  }
  if (remote_prefill_ && !spec.kv_import)
    spec.kv_import = remote_prefill_->fetch(
        spec.prompt, options_.kv_transfer == "host" ? std::string() : e.kv_share_transport(), e.kv_ranks());
  // Shared K/V this engine cannot map (another GPU without peer access, a region gone): the request goes
  // on without them (the pages' lease ends as they are dropped) and the prompt is computed here.
  if (spec.kv_import && spec.kv_import->share) {
    try {
      e.open_kv_share(*spec.kv_import->share);
    } catch (const Error& err) {
      spdlog::warn("decode: K/V shared over {} not taken ({}); computing the prompt here",
                   spec.kv_import->share->transport, err.what());
      spec.kv_import.reset();
    }
  }
  try {
    return e.submit(std::move(spec));
  } catch (const Error& err) {  // the engine stopped
    throw ApiError(503, err.what());
  }
}

std::string ServerContext::new_id(std::string_view prefix) {
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(id_mu_);
    // splitmix64: ids only need to be unique, not secret.
    auto next = [this] {
      uint64_t z = (id_state_ += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    a = next();
    b = next();
  }
  return fmt::format("{}{:016x}{:08x}", prefix, a, uint32_t(b));
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace orchid::server
