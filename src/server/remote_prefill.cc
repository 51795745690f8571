#include "server/remote_prefill.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/error.h"
#include "runtime/kv_pages_codec.h"
#include "server/api_error.h"
#include "server/http_client.h"
#include "server/http_server.h"
#include "server/json_body.h"
#include "server/server_context.h"

namespace orchid::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

constexpr int64_t kDownMillis = 5000;  // how long a failed instance is skipped

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One POST of a JSON body to an instance; returns the response. Throws on any failure.
http::response<http::string_body> post_json(const HttpUrl& url, const std::string& path,
                                            const std::string& body, const std::string& api_key,
                                            std::chrono::milliseconds timeout, uint64_t body_limit) {
  http::request<http::string_body> req{http::verb::post, url.base + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::content_type, "application/json");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  req.body() = body;
  req.prepare_payload();
  return http_exchange(url, req, timeout, body_limit);
}

// One GET of an instance's path; its status. Throws on any failure.
int get_status(const HttpUrl& url, const std::string& path, std::chrono::milliseconds timeout) {
  http::request<http::empty_body> req{http::verb::get, url.base + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  return http_exchange(url, req, timeout, 1 << 16).result_int();
}

}  // namespace

// Every interval, GET /health of each instance (a second at most each); an instance that does not answer
// 200 is skipped by pick() until one does.
class RemotePrefill::HealthChecker {
 public:
  HealthChecker(const std::vector<std::unique_ptr<Instance>>& instances, std::chrono::milliseconds interval)
      : instances_(instances), interval_(interval), thread_([this] { run(); }) {}
  ~HealthChecker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void run() {
    const auto timeout = std::min(interval_, std::chrono::milliseconds(1000));
    for (;;) {
      for (const auto& in : instances_) {
        bool ok = false;
        try {
          ok = get_status(in->url, "/health", timeout) == 200;
        } catch (const std::exception&) {
        }
        if (in->healthy.exchange(ok) != ok) {
          if (ok)
            spdlog::info("remote prefill: {} is healthy again", in->name);
          else
            spdlog::warn("remote prefill: {} fails its health check; prompts go elsewhere", in->name);
        }
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, interval_, [&] { return stop_; })) return;
    }
  }
  const std::vector<std::unique_ptr<Instance>>& instances_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

// Ends leases at prefill instances off the engine's thread: the pages' deleter only queues the lease.
// A release that fails is dropped (the lease ends by itself at the prefill instance).
class RemotePrefill::Releaser {
 public:
  explicit Releaser(std::string api_key) : api_key_(std::move(api_key)), thread_([this] { run(); }) {}
  ~Releaser() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(const HttpUrl& url, uint64_t lease) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({url, lease});
      ++pending_;
    }
    cv_.notify_one();
  }
  int64_t pending() const { return pending_.load(); }

 private:
  struct Item {
    HttpUrl url;
    uint64_t lease;
  };
  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and every release sent
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        const auto res = post_json(item.url, "/v1/internal/release", Json({{"lease", item.lease}}).dump(),
                                   api_key_, std::chrono::milliseconds(2000), 1 << 16);
        if (res.result_int() != 200)
          spdlog::debug("remote prefill: release {}: {}", item.lease, res.result_int());
      } catch (const std::exception& e) {
        spdlog::debug("remote prefill: release {}: {}", item.lease, e.what());
      }
      --pending_;
    }
  }
  std::string api_key_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::atomic<int64_t> pending_{0};
  std::thread thread_;  // last: starts once the rest is built
};

RemotePrefill::~RemotePrefill() = default;

int64_t RemotePrefill::pending_releases() const {
  return releaser_->pending();
}

RemotePrefill::RemotePrefill(const std::vector<std::string>& urls, std::string api_key,
                             std::chrono::milliseconds timeout, int32_t min_prompt_tokens,
                             std::chrono::milliseconds health_interval)
    : api_key_(std::move(api_key)),
      timeout_(timeout),
      min_prompt_tokens_(std::max(2, min_prompt_tokens)),
      releaser_(std::make_shared<Releaser>(api_key_)) {
  if (urls.empty()) fail("--prefill-url: a decode instance needs at least one prefill instance");
  for (const std::string& u : urls) {
    auto in = std::make_unique<Instance>();
    in->url = parse_http_url(u, "--prefill-url");
    in->name = u;
    instances_.push_back(std::move(in));
  }
  if (health_interval.count() > 0) health_ = std::make_unique<HealthChecker>(instances_, health_interval);
}

RemotePrefill::Instance* RemotePrefill::pick() {
  const int64_t now = now_ms();
  Instance* best = nullptr;
  for (const auto& in : instances_) {
    if (in->down_until_ms.load() > now || !in->healthy.load()) continue;
    const auto load = [](const Instance* i) {
      return std::make_pair(i->outstanding_tokens.load(), i->outstanding.load());
    };
    if (!best || load(in.get()) < load(best)) best = in.get();
  }
  return best;
}

std::shared_ptr<const runtime::KvPages> RemotePrefill::fetch(const std::vector<int32_t>& prompt,
                                                             const std::string& transport, int32_t ranks) {
  if (int32_t(prompt.size()) < min_prompt_tokens_) return nullptr;
  Instance* in = pick();
  if (!in) return nullptr;  // every instance failed lately: compute here
  ++requests_;
  ++in->outstanding;
  in->outstanding_tokens += int64_t(prompt.size());
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const runtime::KvPages> kv;
  try {
    Json body = {{"prompt", prompt}};
    if (!transport.empty()) body["transport"] = transport;
    if (ranks > 0) body["ranks"] = ranks;
    const auto res =
        post_json(in->url, "/v1/internal/prefill", body.dump(), api_key_, timeout_, uint64_t(1) << 36);
    if (res.result_int() != 200) fail("answered {}: {}", res.result_int(), res.body().substr(0, 200));
    auto pages = std::make_unique<runtime::KvPages>(runtime::decode_kv_pages(res.body()));
    bytes_ += int64_t(res.body().size());
    if (pages->share) {
      // In place: the lease ends when the engine is done with the pages (copied or dropped).
      ++shared_;
      shared_bytes_ += int64_t(pages->share->bytes());
      const uint64_t lease = pages->share->lease;
      kv = std::shared_ptr<const runtime::KvPages>(
          pages.release(), [releaser = releaser_, url = in->url, lease](const runtime::KvPages* p) {
            releaser->post(url, lease);
            delete p;
          });
    } else {
      kv = std::move(pages);
    }
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double prefill = 0;
    if (auto it = res.find("X-Orchid-Prefill-Seconds"); it != res.end())
      prefill = std::min(total, std::max(0.0, std::strtod(std::string(it->value()).c_str(), nullptr)));
    std::lock_guard<std::mutex> lock(histograms_mu_);
    prefill_seconds_.observe(prefill);
    transfer_seconds_.observe(total - prefill);
  } catch (const std::exception& e) {
    ++failures_;
    in->down_until_ms = now_ms() + kDownMillis;
    spdlog::warn("remote prefill {}: {}; computing the prompt here", in->name, e.what());
    kv = nullptr;
  }
  --in->outstanding;
  in->outstanding_tokens -= int64_t(prompt.size());
  micros_ +=
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  return kv;
}

RemotePrefillCounters RemotePrefill::counters() const {
  RemotePrefillCounters c;
  c.requests = requests_.load();
  c.failures = failures_.load();
  c.bytes = bytes_.load();
  c.seconds = double(micros_.load()) * 1e-6;
  c.shared = shared_.load();
  c.shared_bytes = shared_bytes_.load();
  c.instances = int64_t(instances_.size());
  for (const auto& in : instances_) c.healthy += in->healthy.load();
  std::lock_guard<std::mutex> lock(histograms_mu_);
  c.prefill_seconds = prefill_seconds_;
  c.transfer_seconds = transfer_seconds_;
  return c;
}

HttpResponse handle_internal_prefill(ServerContext& ctx, const HttpRequest& r) {
  const Json body = parse_json_body(r.body);
  JsonFields f(body, "");
  const Json* prompt = f.get("prompt");
  if (!prompt || !prompt->is_array() || prompt->empty())
    throw ApiError(400, "prompt: expected a non-empty array of token ids", "prompt");
  const Json* transport = f.get("transport");
  if (transport && !transport->is_string())
    throw ApiError(400, "transport: expected a string (shm, cuda_ipc)", "transport");
  const Json* ranks = f.get("ranks");
  if (ranks && (!ranks->is_number_integer() || ranks->get<int64_t>() < 1 || ranks->get<int64_t>() > 4096))
    throw ApiError(400, "ranks: expected the decode instance's tensor-parallel rank count", "ranks");
  f.reject_unknown();
  engine::RequestSpec spec;
  for (const Json& t : *prompt) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      throw ApiError(400, "prompt: expected token ids (non-negative integers)", "prompt");
    spec.prompt.push_back(int32_t(t.get<int64_t>()));
  }
  // Only the K/V matter: one greedy token, whatever it is.
  spec.sampling.temperature = 0;
  spec.max_tokens = 1;
  spec.ignore_eos = true;
  spec.kv_export = true;
  if (transport) spec.kv_share = transport->get<std::string>();  // taken when the backend shares over it
  if (ranks) spec.kv_share_ranks = int32_t(ranks->get<int64_t>());
  Admission admitted = ctx.admit(1);
  const auto t0 = std::chrono::steady_clock::now();
  const engine::RequestEvent ev = ctx.submit(std::move(spec))->wait_all();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ev.finish == engine::FinishReason::kError) throw ApiError(500, "prefill failed: " + ev.error);
  if (!ev.kv) throw ApiError(503, "prefill: the K/V could not be read out");
  HttpResponse res;
  res.content_type = "application/octet-stream";
  res.headers.emplace_back("X-Orchid-Prefill-Seconds", fmt::format("{:.6f}", seconds));
  res.body = runtime::encode_kv_pages(*ev.kv);
  return res;
}

HttpResponse handle_internal_release(ServerContext& ctx, const HttpRequest& r) {
  const Json body = parse_json_body(r.body);
  JsonFields f(body, "");
  const Json* lease = f.get("lease");
  if (!lease || !lease->is_number_unsigned())
    throw ApiError(400, "lease: expected the lease id of a prefill answer", "lease");
  f.reject_unknown();
  HttpResponse res;
  res.body = Json({{"released", ctx.engine().release_kv_share(lease->get<uint64_t>())}}).dump();
  return res;
}

}  // namespace orchid::server
