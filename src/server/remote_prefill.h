// Prefill/decode disaggregation between server processes. A prefill instance (`serve --role prefill`)
// answers POST /v1/internal/prefill: {"prompt": [token ids], "transport": "shm"|"cuda_ipc", "ranks": n
// (both optional: how the decode instance can take the K/V in place, and its tensor-parallel ranks)} in,
// the prompt's K/V out (runtime/kv_pages_codec.h bytes), or, when asked for a transport its backend shares
// over and its export buffer has room, where the K/V lie in that buffer under a lease (runtime/kv_share.h);
// POST /v1/internal/release {"lease": id} ends the lease (it also ends by itself, --kv-share-timeout). A
// decode instance (`serve --role decode --prefill-url URL ...`) is the front: it renders and tokenizes each
// request as usual, asks the least busy prefill instance for the prompt's K/V, submits the request with them
// (engine: RequestSpec::kv_import) and streams the answer itself. A prefill instance that fails or times out
// is skipped for a while and the prompt is computed locally, so no request is lost to a prefill instance;
// a thread also asks every instance's GET /health every health interval and skips those that do not
// answer 200 (loading, draining, hung, gone) until they do, so requests do not wait out a timeout to find
// out. docs/design.md says why the decode instance and not a separate router is the front.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/metrics.h"
#include "runtime/backend.h"
#include "server/http_url.h"

namespace orchid::server {

struct RemotePrefillCounters {
  int64_t requests = 0, failures = 0, bytes = 0;
  int64_t shared = 0, shared_bytes = 0;  // prompts whose K/V came in place, and their bytes
  double seconds = 0;                    // waiting for prefill instances, transfer included
  int64_t instances = 0, healthy = 0;    // prefill instances, and those whose last health check passed
  // Per answered prompt: the prefill instance's own time (queue and compute, its X-Orchid-Prefill-Seconds)
  // and the rest (request, K/V transfer, decoding the body): TTFT's share of each.
  engine::Histogram prefill_seconds = engine::Histogram::latency_seconds();
  engine::Histogram transfer_seconds = engine::Histogram::latency_seconds();
};

class RemotePrefill {
 public:
  // `urls`: the prefill instances; `api_key` sent to them; prompts shorter than `min_prompt_tokens` are
  // computed locally (one token needs no K/V); `health_interval`: between two health checks of every
  // instance (0: none; an instance is then skipped only after a failed prefill).
  RemotePrefill(const std::vector<std::string>& urls, std::string api_key, std::chrono::milliseconds timeout,
                int32_t min_prompt_tokens = 2,
                std::chrono::milliseconds health_interval = std::chrono::milliseconds(2000));
  ~RemotePrefill();

  // The K/V of `prompt` from the least busy instance (fewest prompt tokens in flight) that answers, or null
  // (the caller computes the prompt). `transport` ("" for bytes) asks for them in place; such pages end their
  // lease at the prefill instance when the last reference to them goes (after the engine copied them, or
  // dropped them). Any thread; blocks for the prefill.
  std::shared_ptr<const runtime::KvPages> fetch(const std::vector<int32_t>& prompt,
                                                const std::string& transport = {}, int32_t ranks = 0);
  RemotePrefillCounters counters() const;
  // Leases whose release was asked for and not yet sent (tests: 0 once idle).
  int64_t pending_releases() const;

 private:
  struct Instance {
    HttpUrl url;
    std::string name;
    std::atomic<int64_t> outstanding{0};         // prompts sent and not answered
    std::atomic<int64_t> outstanding_tokens{0};  // their tokens: what the instance still has to compute
    std::atomic<int64_t> down_until_ms{0};       // skipped until then after a failure (steady clock)
    std::atomic<bool> healthy{true};             // the last health check passed (or none ran yet)
  };
  // The instance with the fewest outstanding prompt tokens (then prompts) that has not failed lately.
  Instance* pick();

  std::vector<std::unique_ptr<Instance>> instances_;
  std::string api_key_;
  std::chrono::milliseconds timeout_;
  int32_t min_prompt_tokens_;
  std::atomic<int64_t> requests_{0}, failures_{0}, bytes_{0}, micros_{0}, shared_{0}, shared_bytes_{0};
  class Releaser;  // sends POST /v1/internal/release from a thread of its own
  std::shared_ptr<Releaser> releaser_;
  class HealthChecker;                     // asks GET /health of every instance from a thread of its own
  std::unique_ptr<HealthChecker> health_;  // last: stopped first, while the instances still exist
  mutable std::mutex histograms_mu_;
  engine::Histogram prefill_seconds_ = engine::Histogram::latency_seconds();
  engine::Histogram transfer_seconds_ = engine::Histogram::latency_seconds();
};

class ServerContext;
struct HttpRequest;
struct HttpResponse;

// POST /v1/internal/prefill on a prefill instance.
HttpResponse handle_internal_prefill(ServerContext& ctx, const HttpRequest& r);
// POST /v1/internal/release on a prefill instance: {"lease": id} -> {"released": true|false}.
HttpResponse handle_internal_release(ServerContext& ctx, const HttpRequest& r);

}  // namespace orchid::server
