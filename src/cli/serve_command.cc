// orchid serve MODEL [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--served-model-name NAME] ...
// The OpenAI-compatible server. It listens at once (503 while the model loads), serves until SIGTERM or
// SIGINT, then drains: no new requests, the ones in progress finish (up to --shutdown-timeout), exit 0.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <chrono>

#include <atomic>
#include <csignal>
#include <ctime>
#include <thread>

#include "cli/backend_options.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_setup.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "runtime/warm_up.h"
#include "server/openai_server.h"
#include "server/testing/replay_backend.h"

namespace orchid::cli {

namespace {

struct ServeArgs {
  std::string model, replay_file;
  server::HttpServerOptions http;
  server::ServerOptions server;
  BackendOptions backend;  // --max-model-len, --max-num-seqs, --max-num-batched-tokens, --block-size, ...
  bool no_prefix_caching = false;
  bool no_warmup = false;
  int32_t warmup_max_batch = 0;  // 0: every decode graph batch size
  int64_t seed = -1;
  double shutdown_timeout_s = 30;
  std::vector<std::string> prefill_urls;  // --role decode
  double prefill_timeout_s = 300;
  double prefill_health_interval_s = 2;
  double kv_share_buffer_gib = -1;  // --role prefill: the K/V export buffer (-1: 2 GiB there, 0 elsewhere)
  double kv_share_timeout_s = 60;
};

std::shared_ptr<runtime::Backend> make_backend(const ServeArgs& a,
                                               const std::shared_ptr<const tokenizer::Tokenizer>& tok) {
  if (a.replay_file.empty()) return a.backend.create(a.model);
  server::testing::ReplayOptions o = server::testing::load_replay_file(a.replay_file, *tok);
  return std::make_shared<server::testing::ReplayBackend>(std::move(o), tok);
}

// --allowed-origins as vLLM spells it too: '["https://a.example", "https://b.example"]' (split at the commas
// already), so brackets, quotes and blanks around each origin are dropped.
std::vector<std::string> origin_list(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (const std::string& g : given) {
    const size_t b = g.find_first_not_of(" \t[\"'"), e = g.find_last_not_of(" \t]\"'");
    if (b != std::string::npos && e >= b) out.push_back(g.substr(b, e - b + 1));
  }
  return out;
}

// Waits up to `ms` for one of the blocked signals in `set`; 0 if none came.
int wait_signal(const sigset_t& set, int ms) {
  timespec ts{ms / 1000, long(ms % 1000) * 1000000L};
  const int s = sigtimedwait(&set, nullptr, &ts);
  return s > 0 ? s : 0;
}

void serve(const ServeArgs& a) {
  if (a.backend.run_as_worker(a.model)) return;  // rank 0 serves HTTP; the other ranks its steps
  a.backend.kv_dtype();  // a bad --kv-cache-dtype fails before the server listens, not while it loads
  // Signals are taken synchronously by this thread; every thread started from here inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  server::ServerOptions so = a.server;
  so.model_path = a.model;
  if (so.served_model_name.empty()) so.served_model_name = a.model;
  so.max_num_seqs = a.backend.max_num_seqs;
  so.allowed_origins = origin_list(a.server.allowed_origins);
  auto tok = tokenizer::Tokenizer::for_model(a.model);
  server::ServerContext ctx(so, tok);
  if (so.role == "decode")
    ctx.set_remote_prefill(std::make_shared<server::RemotePrefill>(
        a.prefill_urls, so.api_key, std::chrono::milliseconds(int64_t(a.prefill_timeout_s * 1000)), 2,
        std::chrono::milliseconds(int64_t(a.prefill_health_interval_s * 1000))));
  else if (!a.prefill_urls.empty())
    fail("--prefill-url is for --role decode");
  server::OpenAIServer http(ctx, a.http);
  http.start();
  spdlog::info("orchid serve: listening on http://{}:{} (model {} is loading)", a.http.host, http.port(),
               a.model);
  if (so.chat_page) spdlog::info("orchid serve: chat page at http://{}:{}/", a.http.host, http.port());

  std::shared_ptr<engine::ServingEngine> engine;
  std::string load_error;
  std::atomic<bool> loaded{false};
  std::thread loader([&] {
    try {
      // --dp N: N engines (each its own replica: backend ranks and KV cache) behind this endpoint.
      const int replicas = a.backend.dp;
      std::vector<std::shared_ptr<runtime::Backend>> backends;
      if (a.replay_file.empty()) {
        backends = a.backend.create_replicas(a.model);
      } else {
        for (int i = 0; i < replicas; ++i) backends.push_back(make_backend(a, tok));
      }
      const std::string backend_name = backends[0]->name();
      const bool lockstep = backends[0]->lockstep_replicas() > 1;
      if (backend_name == "cuda" && !a.no_warmup) {
        for (const auto& backend : backends) {
          try {
            const int32_t max_batch = a.warmup_max_batch > 0 ? a.warmup_max_batch : (1 << 30);
            const double seconds = runtime::warm_up(*backend, max_batch);
            const auto batches = backend->decode_graph_batches();
            int32_t captured = 1;
            for (int32_t B : batches)
              if (B <= max_batch) captured = std::max(captured, B);
            spdlog::info(
                "orchid serve: warm-up (kernels, GEMM choices, prompts of up to {} tokens, decode "
                "graphs of 1 to {} sequences) in {:.2f} s",
                runtime::longest_warm_up_prompt(*backend), captured, seconds);
          } catch (const std::exception& e) {  // e.g. a KV cache too small for the warm-up's prompt
            spdlog::warn("orchid serve: warm-up skipped: {}", e.what());
          }
        }
      }
      if (so.role != "both" && !backends[0]->supports_kv_handoff())
        fail("--role {}: the {} backend cannot hand K/V over yet", so.role, backend_name);
      engine = start_engines(backends, [&](runtime::Backend& backend) {
        engine::EngineConfig config;
        config.max_num_seqs = a.backend.max_num_seqs;
        config.max_num_batched_tokens = a.backend.max_num_batched_tokens;
        config.async_scheduling = a.backend.async_scheduling();
        config.enable_prefix_caching = !a.no_prefix_caching;
        config.speculative = a.backend.speculative();
        config.proposer = a.backend.draft_proposer(config.speculative, backend);
        if (a.seed >= 0) config.seed = uint64_t(a.seed);
        if (a.backend.max_model_len > 0) {
          const runtime::KvCacheSpec kv = backend.kv_spec();
          config.max_model_len =
              int32_t(std::min<int64_t>({a.backend.max_model_len, int64_t(kv.num_full_pages) * kv.page_size,
                                         backend.model_config().max_position_embeddings}));
        }
        return config;
      });
      ctx.set_engine(engine);
      spdlog::info("orchid serve: ready: {} on the {} backend{}, max_model_len {}, served as '{}'", a.model,
                   backend_name,
                   replicas == 1 ? std::string()
                   : lockstep ? fmt::format(" x {} engines (--dp) in lockstep, sharing the experts", replicas)
                              : fmt::format(" x {} engines (--dp)", replicas),
                   engine->max_model_len(), so.served_model_name);
    } catch (const std::exception& e) {
      load_error = e.what();
    }
    loaded = true;
  });

  int sig = 0;
  while (!sig && !(loaded && !load_error.empty())) sig = wait_signal(set, 200);
  if (!loaded) {
    // Loading cannot be interrupted; nothing was served yet, so there is nothing to drain.
    spdlog::warn("orchid serve: signal {} while loading; exiting", sig);
    http.stop();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  loader.join();
  if (!load_error.empty()) {
    http.stop();
    fail("{}", load_error);
  }

  spdlog::info("orchid serve: signal {}: draining (up to {} s)", sig, a.shutdown_timeout_s);
  http.begin_drain();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(a.shutdown_timeout_s * 1000));
  while (!http.idle() && std::chrono::steady_clock::now() < deadline) {
    if (wait_signal(set, 50)) {
      spdlog::warn("orchid serve: second signal: stopping now");
      break;
    }
  }
  if (!http.idle()) spdlog::warn("orchid serve: requests still in progress are cut off");
  http.stop();
  engine->stop();
  spdlog::info("orchid serve: stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  a->server.served_model_name.clear();
  auto* cmd =
      app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat completions, responses, completions)");
  cmd->add_option("MODEL", a->model,
                  "model directory or synthetic:tiny|20b|120b[@seed] (default: the trained tiny model, "
                  "models/orchid-tiny)");
  cmd->add_option("--host", a->http.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", a->http.port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", a->server.api_key, "require `Authorization: Bearer KEY` on /v1 routes")
      ->envname("ORCHID_API_KEY");
  cmd->add_option(
         "--role", a->server.role,
         "prefill/decode disaggregation: both (default), prefill (also answers other instances' prefill "
         "requests) or decode (prompts' K/V from --prefill-url instances, computed here when none answers)")
      ->check(CLI::IsMember({"both", "prefill", "decode"}))
      ->capture_default_str();
  cmd->add_option(
      "--prefill-url", a->prefill_urls,
      "a prefill instance (http://HOST:PORT) for --role decode; repeatable: the least busy one is asked");
  cmd->add_option("--prefill-timeout", a->prefill_timeout_s,
                  "seconds to wait for a prefill instance before computing the prompt here")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--prefill-health-interval", a->prefill_health_interval_s,
                  "--role decode: seconds between health checks of each prefill instance (GET /health); one "
                  "that fails gets no prompts until it passes again (0: no checks)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--kv-transfer", a->server.kv_transfer,
                  "--role decode: take prompts' K/V in place from a prefill instance on this machine (auto: "
                  "CUDA IPC or shared memory when both sides can) or always as bytes over HTTP (host)")
      ->check(CLI::IsMember({"auto", "host"}))
      ->capture_default_str();
  cmd->add_option("--kv-share-buffer", a->kv_share_buffer_gib,
                  "--role prefill: GiB a rank keeps for K/V handed over in place, held until the decode "
                  "instance releases them (default 2; 0: always as bytes)")
      ->check(CLI::Range(0.0, 1024.0));
  cmd->add_option("--kv-share-timeout", a->kv_share_timeout_s,
                  "--role prefill: seconds a range of the K/V export buffer waits for its decode instance")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--served-model-name", a->server.served_model_name,
                  "model name in the API (default: the MODEL argument)");
  cmd->add_option("--max-waiting-requests", a->server.max_waiting_requests,
                  "requests admitted beyond --max-num-seqs; more get 429")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--default-reasoning-effort", a->server.default_reasoning_effort,
                  "reasoning effort when a request names none")
      ->check(CLI::IsMember({"low", "medium", "high"}))
      ->capture_default_str();
  cmd->add_option("--max-request-bytes", a->http.max_body_bytes, "largest request body; larger ones get 413")
      ->check(CLI::Range(size_t(1024), size_t(1) << 31))
      ->capture_default_str();
  cmd->add_option("--http-threads", a->http.threads, "threads serving HTTP connections (I/O only)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--request-threads", a->http.request_threads,
                  "threads that parse, render and tokenize requests (default: half the cores, 2..16)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-queued-requests", a->http.max_queued_requests,
                  "requests waiting for a request thread; more get 503 with Retry-After "
                  "(default: 128 per request thread, at least 1024)")
      ->check(CLI::Range(size_t(1), size_t(1) << 20));
  cmd->add_option("--max-connections-per-client", a->http.max_connections_per_client,
                  "open connections per client address; more get 429 (0: no limit; raise it behind a proxy)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--allowed-origins", a->server.allowed_origins,
                  "origins browsers may call from (comma-separated or a JSON list; * for any)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", a->shutdown_timeout_s,
                  "seconds to let requests in progress finish after SIGTERM")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->add_flag(
      "--no-chat-page", [a](int64_t) { a->server.chat_page = false; },
      "do not serve the built-in chat page at / (the API is unchanged)");
  cmd->add_flag("--no-enable-prefix-caching", a->no_prefix_caching,
                "do not reuse cached KV pages of prefixes");
  cmd->add_flag("--no-warmup", a->no_warmup,
                "skip the start-up warm-up on the GPU (the first request then pays kernel loading and graph "
                "capture)");
  cmd->add_option("--warmup-max-batch", a->warmup_max_batch,
                  "capture the decode graphs of at most this many sequences at start-up (0: every batch size "
                  "up to --max-num-seqs; larger batches capture theirs on first use, in a request's time)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed for requests that bring none (default: random)")
      ->check(CLI::Range(int64_t(0), INT64_MAX));
  // Tests only: replay scripted Harmony output instead of running the model.
  cmd->add_option("--replay", a->replay_file, "")->group("");
  a->backend.add_flags(cmd);
  cmd->callback([a] {
    if (a->server.role != "prefill" && a->kv_share_buffer_gib > 0)
      fail("--kv-share-buffer is for --role prefill");
    const double gib = a->server.role != "prefill"  ? 0.0
                       : a->kv_share_buffer_gib < 0 ? 2.0
                                                    : a->kv_share_buffer_gib;
    a->backend.kv_share_bytes = uint64_t(gib * double(uint64_t(1) << 30));
    a->backend.kv_share_timeout_ms = int64_t(a->kv_share_timeout_s * 1000);
    if (a->model.empty()) {
      a->model = default_model_dir();
      if (a->server.served_model_name.empty()) a->server.served_model_name = kDefaultModelName;
    }
    serve(*a);
  });
}

}  // namespace orchid::cli
