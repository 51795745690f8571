#include "cli/bench_serve.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "server/http_client.h"
#include "server/http_url.h"

namespace orchid::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

using Url = server::HttpUrl;

struct Prompt {
  Json prompt;             // an array of token ids or a string
  int64_t tokens = -1;     // known for id arrays; from the server's usage otherwise
  int64_t max_tokens = 0;  // the output length asked for
};

std::vector<Prompt> make_prompts(const ServeBenchOptions& o) {
  std::vector<Prompt> out;
  if (!o.dataset.empty()) {
    std::ifstream in(o.dataset);
    if (!in) fail("--dataset {}: cannot open the file", o.dataset);
    std::string line;
    int64_t n = 0;
    std::vector<Prompt> file;
    while (std::getline(in, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Json j;
      try {
        j = Json::parse(line);
      } catch (const std::exception& e) {
        fail("--dataset {}: line {} is not JSON ({})", o.dataset, n, e.what());
      }
      if (!j.is_object() || !j.contains("prompt") || !(j["prompt"].is_string() || j["prompt"].is_array()))
        fail("--dataset {}: line {} needs \"prompt\": a string or an array of token ids", o.dataset, n);
      Prompt p;
      p.prompt = j["prompt"];
      if (p.prompt.is_array()) p.tokens = int64_t(p.prompt.size());
      p.max_tokens = o.output_len;
      if (j.contains("max_tokens")) {
        if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<int64_t>() < 1)
          fail("--dataset {}: line {}: max_tokens must be a positive integer", o.dataset, n);
        p.max_tokens = j["max_tokens"].get<int64_t>();
      }
      file.push_back(std::move(p));
    }
    if (file.empty()) fail("--dataset {}: no prompts", o.dataset);
    for (int64_t i = 0; i < o.num_prompts; ++i) out.push_back(file[size_t(i) % file.size()]);
    return out;
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> id(0, o.vocab - 1);
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    Prompt p;
    p.prompt = Json::array();
    for (int64_t t = 0; t < o.input_len; ++t) p.prompt.push_back(id(rng));
    p.tokens = o.input_len;
    p.max_tokens = o.output_len;
    out.push_back(std::move(p));
  }
  return out;
}

template <class Request>
void set_common_headers(Request& req, const Url& u, const std::string& api_key) {
  req.set(http::field::host, u.host + ":" + u.port);
  req.set(http::field::user_agent, "orchid-bench-serve");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
}

// GET `target` on the server (one connection, 30 s at most); throws on a failed connection.
http::response<http::string_body> http_get(const Url& u, const std::string& target,
                                           const std::string& api_key) {
  http::request<http::empty_body> req{http::verb::get, target, 11};
  set_common_headers(req, u, api_key);
  return server::http_exchange(u, req, std::chrono::seconds(30), uint64_t(1) << 26);
}

// The server's first model id (GET /v1/models).
std::string first_model(const Url& u, const std::string& api_key) {
  try {
    const auto res = http_get(u, u.base + "/v1/models", api_key);
    if (res.result_int() != 200)
      fail("GET /v1/models answered {}: {}", res.result_int(), res.body().substr(0, 300));
    const Json j = Json::parse(res.body());
    if (!j.contains("data") || !j["data"].is_array() || j["data"].empty() || !j["data"][0].contains("id"))
      fail("GET /v1/models: no model listed (pass --served-model)");
    return j["data"][0]["id"].get<std::string>();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("cannot reach {}:{} ({}); is the server up?", u.host, u.port, e.what());
  }
}

// Speculative decoding counters from the server's /metrics, orchid's or vLLM's names (summed over label
// sets); all zero when the server has none or no /metrics.
struct SpecCounters {
  double drafts = 0, draft_tokens = 0, accepted_tokens = 0;
};

SpecCounters spec_counters(const Url& u, const std::string& api_key) {
  SpecCounters c;
  try {
    const auto res = http_get(u, u.base + "/metrics", api_key);
    if (res.result_int() != 200) return c;
    std::istringstream lines(res.body());
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t name_end = line.find_first_of("{ ");
      const size_t value_at = line.rfind(' ');
      if (name_end == std::string::npos || value_at == std::string::npos) continue;
      const std::string name = line.substr(0, name_end);
      const double value = std::strtod(line.c_str() + value_at + 1, nullptr);
      if (name == "orchid_spec_decode_drafts_total" || name == "vllm:spec_decode_num_drafts_total")
        c.drafts += value;
      else if (name == "orchid_spec_decode_draft_tokens_total" ||
               name == "vllm:spec_decode_num_draft_tokens_total")
        c.draft_tokens += value;
      else if (name == "orchid_spec_decode_accepted_tokens_total" ||
               name == "vllm:spec_decode_num_accepted_tokens_total")
        c.accepted_tokens += value;
    }
  } catch (const std::exception&) {
    // No metrics: nothing to report.
  }
  return c;
}

struct Shared {
  const ServeBenchOptions* opts;
  Url url;
  tcp::resolver::results_type endpoints;
  std::vector<std::string> bodies;
  std::vector<double> send_at;  // seconds after the start
  std::vector<ServeRequestResult> results;
  Clock::time_point start;
  size_t next = 0;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Handles the complete SSE events at the front of `pending` (events end with a blank line).
void consume_events(std::string& pending, ServeRequestResult& r, Clock::time_point sent, double& last_chunk,
                    bool& done) {
  size_t pos;
  while ((pos = pending.find("\n\n")) != std::string::npos) {
    const std::string event = pending.substr(0, pos);
    pending.erase(0, pos + 2);
    size_t line_start = 0;
    while (line_start < event.size()) {
      size_t eol = event.find('\n', line_start);
      if (eol == std::string::npos) eol = event.size();
      std::string_view line(event.data() + line_start, eol - line_start);
      line_start = eol + 1;
      if (line.rfind("data:", 0) != 0) continue;
      line.remove_prefix(5);
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      if (line == "[DONE]") {
        done = true;
        continue;
      }
      const double t = seconds_since(sent);
      const bool has_usage = line.find("\"usage\"") != std::string_view::npos;
      const bool has_error = line.find("\"error\"") != std::string_view::npos;
      if (has_usage || has_error) {  // parse only these; token chunks need just their arrival time
        try {
          const Json j = Json::parse(line);
          if (j.contains("error") && !j["error"].is_null()) {
            r.error = j["error"].is_object() && j["error"].contains("message")
                          ? j["error"]["message"].get<std::string>()
                          : j["error"].dump();
            continue;
          }
          if (j.contains("usage") && j["usage"].is_object()) {
            r.output_tokens = j["usage"].value("completion_tokens", int64_t(-1));
            r.prompt_tokens = j["usage"].value("prompt_tokens", r.prompt_tokens);
          }
          if (j.contains("choices") && j["choices"].is_array() && j["choices"].empty()) continue;
        } catch (const std::exception&) {
          // a token chunk whose text happens to contain the word: counted as a chunk below
        }
      }
      if (line.find("\"choices\":[]") != std::string_view::npos) continue;
      if (r.ttft == 0)
        r.ttft = t;
      else
        r.itl.push_back(t - last_chunk);
      last_chunk = t;
    }
  }
}

asio::awaitable<void> run_request(Shared& sh, size_t i) {
  ServeRequestResult& r = sh.results[i];
  const ServeBenchOptions& o = *sh.opts;
  const Clock::time_point sent = Clock::now();
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  stream.expires_after(std::chrono::milliseconds(int64_t(o.timeout_s * 1000)));
  beast::error_code ec;
  auto token = asio::redirect_error(asio::use_awaitable, ec);
  auto failed = [&](const char* what) {
    r.error = fmt::format("{}: {}", what, ec.message());
    r.e2e = seconds_since(sent);
  };
  co_await stream.async_connect(sh.endpoints, token);
  if (ec) co_return failed("connect");
  http::request<http::string_body> req{http::verb::post, sh.url.base + "/v1/completions", 11};
  set_common_headers(req, sh.url, o.api_key);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  req.body() = sh.bodies[i];
  req.prepare_payload();
  co_await http::async_write(stream, req, token);
  if (ec) co_return failed("send");
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::uint64_t(1) << 40);  // streams of any length
  co_await http::async_read_header(stream, buf, parser, token);
  if (ec) co_return failed("response head");
  const int status = parser.get().result_int();
  std::string pending, body_text;
  double last_chunk = 0;
  bool done = false;
  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    co_await http::async_read_some(stream, buf, parser, token);  // returns as bytes arrive: chunk times
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return failed("response body");
    const size_t got = sizeof(chunk) - parser.get().body().size;
    if (status != 200) {
      body_text.append(chunk, got);
      continue;
    }
    pending.append(chunk, got);
    consume_events(pending, r, sent, last_chunk, done);
  }
  r.e2e = seconds_since(sent);
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  if (status != 200) {
    r.error = fmt::format("HTTP {}: {}", status, body_text.substr(0, 300));
    co_return;
  }
  if (!r.error.empty()) co_return;
  if (!done) {
    r.error = "the stream ended without [DONE]";
    co_return;
  }
  if (r.output_tokens < 0) {
    r.error = "no usage in the stream (the server ignored stream_options.include_usage)";
    co_return;
  }
  r.ok = true;
}

asio::awaitable<void> worker(Shared& sh) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (sh.next < sh.results.size()) {
    const size_t i = sh.next++;
    const auto at =
        sh.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sh.send_at[i]));
    if (at > Clock::now()) {
      timer.expires_at(at);
      beast::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    co_await run_request(sh, i);
  }
}

struct Stats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
Stats stats_ms(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return 1e3 * v[std::min(v.size() - 1, size_t(f * double(v.size() - 1) + 0.5))]; };
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = 1e3 * sum / double(v.size());
  s.p50 = q(0.5);
  s.p90 = q(0.9);
  s.p99 = q(0.99);
  return s;
}
Json stats_json(const Stats& s) {
  return {{"mean_ms", s.mean}, {"p50_ms", s.p50}, {"p90_ms", s.p90}, {"p99_ms", s.p99}};
}

}  // namespace

int run_serve_bench(const ServeBenchOptions& o) {
  if (o.num_prompts < 1) fail("--num-prompts must be positive");
  if (o.dataset.empty() && (o.input_len < 1 || o.output_len < 1))
    fail("--input-len and --output-len must be positive");
  Shared sh;
  sh.opts = &o;
  sh.url = server::parse_http_url(o.url, "--url");
  const std::string model = o.model.empty() ? first_model(sh.url, o.api_key) : o.model;
  Json extra = Json::object();
  if (!o.extra_body.empty()) {
    try {
      extra = Json::parse(o.extra_body);
    } catch (const Json::exception& e) {
      fail("--extra-body: not valid JSON ({})", e.what());
    }
    if (!extra.is_object()) fail("--extra-body must be a JSON object, got {}", o.extra_body);
  }
  const auto prompts = make_prompts(o);
  for (const Prompt& p : prompts) {
    Json body = {{"model", model},   {"prompt", p.prompt}, {"max_tokens", p.max_tokens},
                 {"temperature", 0}, {"stream", true},     {"stream_options", {{"include_usage", true}}}};
    if (o.ignore_eos) body["ignore_eos"] = true;
    body.update(extra);
    sh.bodies.push_back(body.dump());
    ServeRequestResult r;
    r.expected_output = p.max_tokens;
    r.prompt_tokens = std::max<int64_t>(p.tokens, 0);
    sh.results.push_back(r);
  }
  // Poisson arrivals: exponential gaps of mean 1 / rate (0: everything at t = 0).
  std::mt19937_64 rng(o.seed ^ 0x5eedull);
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
  double t = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    sh.send_at.push_back(o.request_rate > 0 ? t : 0.0);
    if (o.request_rate > 0) t += gap(rng);
  }
  asio::io_context io(1);
  tcp::resolver resolver(io);
  try {
    sh.endpoints = resolver.resolve(sh.url.host, sh.url.port);
  } catch (const std::exception& e) {
    fail("--url {}: cannot resolve {} ({})", o.url, sh.url.host, e.what());
  }
  const int64_t workers = o.max_concurrency > 0 ? std::min(o.max_concurrency, o.num_prompts) : o.num_prompts;
  const SpecCounters spec_before = spec_counters(sh.url, o.api_key);
  sh.start = Clock::now();
  for (int64_t w = 0; w < workers; ++w) asio::co_spawn(io, worker(sh), asio::detached);
  io.run();
  const double duration = seconds_since(sh.start);
  const SpecCounters spec_after = spec_counters(sh.url, o.api_key);
  const SpecCounters spec{spec_after.drafts - spec_before.drafts,
                          spec_after.draft_tokens - spec_before.draft_tokens,
                          spec_after.accepted_tokens - spec_before.accepted_tokens};

  int64_t ok = 0, errors = 0, mismatched = 0, in_tokens = 0, out_tokens = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  std::vector<std::string> first_errors;
  for (const auto& r : sh.results) {
    if (!r.ok) {
      ++errors;
      if (first_errors.size() < 3) first_errors.push_back(r.error);
      continue;
    }
    ++ok;
    in_tokens += r.prompt_tokens;
    out_tokens += r.output_tokens;
    if (o.ignore_eos && r.output_tokens != r.expected_output) ++mismatched;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) / double(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  const Stats s_ttft = stats_ms(ttft), s_tpot = stats_ms(tpot), s_itl = stats_ms(itl), s_e2e = stats_ms(e2e);
  Json out = {{"bench", "serve"},
              {"url", o.url},
              {"model", model},
              {"num_prompts", o.num_prompts},
              {"input_len", o.dataset.empty() ? Json(o.input_len) : Json(nullptr)},
              {"output_len", o.output_len},
              {"max_concurrency", o.max_concurrency},
              {"request_rate", o.request_rate},
              {"completed", ok},
              {"errors", errors},
              {"length_mismatches", mismatched},
              {"duration_s", duration},
              {"input_tokens", in_tokens},
              {"output_tokens", out_tokens},
              {"request_throughput", double(ok) / duration},
              {"output_tokens_per_s", double(out_tokens) / duration},
              {"total_tokens_per_s", double(in_tokens + out_tokens) / duration},
              {"ttft", stats_json(s_ttft)},
              {"tpot", stats_json(s_tpot)},
              {"itl", stats_json(s_itl)},
              {"e2e", stats_json(s_e2e)},
              {"first_errors", first_errors}};
  if (spec.draft_tokens > 0) {
    out["spec_decode"] = {
        {"drafts", spec.drafts},
        {"draft_tokens", spec.draft_tokens},
        {"accepted_tokens", spec.accepted_tokens},
        {"acceptance_rate", spec.accepted_tokens / spec.draft_tokens},
        {"mean_accepted_length", spec.drafts > 0 ? 1.0 + spec.accepted_tokens / spec.drafts : 0.0}};
  }
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("serve: %s (%s), %lld requests, %s, %s\n", o.url.c_str(), model.c_str(),
                (long long)o.num_prompts,
                o.dataset.empty() ? fmt::format("{} in / {} out tokens", o.input_len, o.output_len).c_str()
                                  : o.dataset.c_str(),
                o.request_rate > 0      ? fmt::format("{} req/s", o.request_rate).c_str()
                : o.max_concurrency > 0 ? fmt::format("at most {} at a time", o.max_concurrency).c_str()
                                        : "all at once");
    std::printf("completed %lld, errors %lld, length mismatches %lld, duration %.2f s\n", (long long)ok,
                (long long)errors, (long long)mismatched, duration);
    std::printf("output tok/s %.1f, total tok/s %.1f, requests/s %.2f\n", double(out_tokens) / duration,
                double(in_tokens + out_tokens) / duration, double(ok) / duration);
    std::printf("| ms | mean | p50 | p90 | p99 |\n|---|---|---|---|---|\n");
    for (auto [name, s] : {std::pair{"TTFT", s_ttft}, {"TPOT", s_tpot}, {"ITL", s_itl}, {"E2E", s_e2e}})
      std::printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", name, s.mean, s.p50, s.p90, s.p99);
    if (spec.draft_tokens > 0)
      std::printf("speculative: %.0f drafts of %.0f tokens, acceptance %.3f, mean accepted length %.2f\n",
                  spec.drafts, spec.draft_tokens, spec.accepted_tokens / spec.draft_tokens,
                  spec.drafts > 0 ? 1.0 + spec.accepted_tokens / spec.drafts : 0.0);
    for (const auto& e : first_errors) std::printf("error: %s\n", e.c_str());
  }
  return errors == 0 && mismatched == 0 ? 0 : 1;
}

}  // namespace orchid::cli
