#include "server/remote_prefill.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cstdlib>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/error.h"
#include "runtime/kv_pages_codec.h"
#include "server/api_error.h"
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

}  // namespace

RemotePrefill::RemotePrefill(const std::vector<std::string>& urls, std::string api_key,
                             std::chrono::milliseconds timeout, int32_t min_prompt_tokens)
    : api_key_(std::move(api_key)), timeout_(timeout), min_prompt_tokens_(std::max(2, min_prompt_tokens)) {
  if (urls.empty()) fail("--prefill-url: a decode instance needs at least one prefill instance");
  for (const std::string& u : urls) {
    auto in = std::make_unique<Instance>();
    in->url = parse_http_url(u, "--prefill-url");
    in->name = u;
    instances_.push_back(std::move(in));
  }
}

RemotePrefill::Instance* RemotePrefill::pick() {
  const int64_t now = now_ms();
  Instance* best = nullptr;
  for (const auto& in : instances_) {
    if (in->down_until_ms.load() > now) continue;
    if (!best || in->outstanding.load() < best->outstanding.load()) best = in.get();
  }
  return best;
}

std::shared_ptr<const runtime::KvPages> RemotePrefill::fetch(const std::vector<int32_t>& prompt) {
  if (int32_t(prompt.size()) < min_prompt_tokens_) return nullptr;
  Instance* in = pick();
  if (!in) return nullptr;  // every instance failed lately: compute here
  ++requests_;
  ++in->outstanding;
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const runtime::KvPages> kv;
  try {
    boost::asio::io_context io;
    tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(timeout_);
    stream.connect(resolver.resolve(in->url.host, in->url.port));
    http::request<http::string_body> req{http::verb::post, in->url.base + "/v1/internal/prefill", 11};
    req.set(http::field::host, in->url.host + ":" + in->url.port);
    req.set(http::field::content_type, "application/json");
    if (!api_key_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
    req.body() = Json({{"prompt", prompt}}).dump();
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(uint64_t(1) << 36);
    http::read(stream, buf, parser);
    const auto& res = parser.get();
    if (res.result_int() != 200) fail("answered {}: {}", res.result_int(), res.body().substr(0, 200));
    kv = std::make_shared<runtime::KvPages>(runtime::decode_kv_pages(res.body()));
    bytes_ += int64_t(res.body().size());
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

}  // namespace orchid::server
