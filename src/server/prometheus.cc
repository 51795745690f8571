#include "server/prometheus.h"

#include <fmt/format.h>

#include <cmath>

namespace orchid::server {

namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

}  // namespace

void PrometheusWriter::head(const std::string& name, const std::string& help, const char* type) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PrometheusWriter::gauge(const std::string& name, const std::string& help, double value) {
  head(name, help, "gauge");
  out_ += name + " " + number(value) + "\n";
}

void PrometheusWriter::counter(const std::string& name, const std::string& help, double value) {
  head(name, help, "counter");
  out_ += name + " " + number(value) + "\n";
}

void PrometheusWriter::histogram(const std::string& name, const std::string& help,
                                 const engine::Histogram& h) {
  head(name, help, "histogram");
  // Prometheus buckets are cumulative; the engine's are not.
  uint64_t cumulative = 0;
  const auto& bounds = h.upper_bounds();
  const auto& counts = h.bucket_counts();
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    out_ += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, number(bounds[i]), cumulative);
  }
  out_ += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, h.count());
  out_ += fmt::format("{}_sum {}\n{}_count {}\n", name, number(h.sum()), name, h.count());
}

std::string prometheus_text(const engine::EngineMetrics* e, const ServerMetrics& s) {
  PrometheusWriter w;
  w.gauge("orchid_ready", "1 once the model is loaded and requests are served", s.ready ? 1 : 0);
  w.gauge("orchid_http_connections_open", "open HTTP connections", double(s.http.connections_open));
  w.counter("orchid_http_connections_total", "HTTP connections accepted", double(s.http.connections_total));
  w.counter("orchid_http_connections_rejected_total",
            "connections refused: too many open, or too many from one client (429)",
            double(s.http.connections_rejected));
  w.gauge("orchid_http_requests_active", "HTTP requests read and not yet answered in full",
          double(s.http.requests_active));
  w.counter("orchid_http_requests_total", "HTTP requests read", double(s.http.requests_total));
  w.counter("orchid_http_responses_cancelled_total", "responses cut short because the client left",
            double(s.http.responses_cancelled));
  w.counter("orchid_http_timeouts_total", "connections closed by a read, write or idle timeout",
            double(s.http.timeouts));
  w.gauge("orchid_http_requests_queued",
          "requests waiting for a request thread (parsing, rendering, tokenizing)",
          double(s.http.requests_queued));
  w.counter("orchid_http_requests_rejected_busy_total",
            "requests refused with 503: the request queue was full", double(s.http.requests_rejected_busy));
  w.gauge("orchid_requests_in_flight", "generation requests admitted and not yet answered",
          double(s.requests_in_flight));
  w.counter("orchid_requests_rejected_total", "generation requests refused with 429",
            double(s.requests_rejected));
  if (const auto& p = s.remote_prefill) {
    w.counter("orchid_remote_prefill_requests_total", "prompts sent to a prefill instance",
              double(p->requests));
    w.counter("orchid_remote_prefill_failures_total",
              "prompts a prefill instance did not answer (computed here)", double(p->failures));
    w.counter("orchid_remote_prefill_bytes_total", "K/V bytes received from prefill instances",
              double(p->bytes));
    w.counter("orchid_remote_prefill_shared_total",
              "prompts whose K/V a prefill instance handed over in place (shared memory, CUDA IPC)",
              double(p->shared));
    w.counter("orchid_remote_prefill_shared_bytes_total", "K/V bytes handed over in place",
              double(p->shared_bytes));
    w.counter("orchid_remote_prefill_seconds_total", "time waiting for prefill instances, transfer included",
              p->seconds);
    w.gauge("orchid_prefill_instances", "prefill instances this decode instance sends prompts to",
            double(p->instances));
    w.gauge("orchid_prefill_instances_healthy", "prefill instances whose last health check passed",
            double(p->healthy));
    w.histogram("orchid_remote_prefill_compute_seconds",
                "a prefill instance's time for one prompt (its queue and compute): TTFT's prefill share",
                p->prefill_seconds);
    w.histogram("orchid_remote_prefill_transfer_seconds",
                "the rest of a remote prefill (request, K/V transfer, decoding): TTFT's transfer share",
                p->transfer_seconds);
  }
  if (!e) return w.text();

  w.gauge("orchid_num_requests_waiting", "requests queued, preempted ones included", double(e->num_waiting));
  w.gauge("orchid_num_requests_running", "sequences in the running batch", double(e->num_running));
  w.gauge("orchid_kv_full_pages_total", "KV pages of the full-attention pool", e->kv_full_pages_total);
  w.gauge("orchid_kv_full_pages_used", "full-attention KV pages held by sequences", e->kv_full_pages_used);
  w.gauge("orchid_kv_full_pages_cached", "full-attention KV pages idle in the prefix cache",
          e->kv_full_pages_cached);
  w.gauge("orchid_kv_sliding_pages_total", "KV pages of the sliding-window pool", e->kv_sliding_pages_total);
  w.gauge("orchid_kv_sliding_pages_used", "sliding-window KV pages held by sequences",
          e->kv_sliding_pages_used);
  w.gauge("orchid_kv_sliding_pages_cached", "sliding-window KV pages idle in the prefix cache",
          e->kv_sliding_pages_cached);
  w.gauge("orchid_kv_cache_usage_ratio", "fraction of full-attention KV pages held by sequences",
          e->kv_full_pages_total ? double(e->kv_full_pages_used) / e->kv_full_pages_total : 0.0);
  w.gauge("orchid_generation_tokens_per_second", "generated tokens per second over the last 10 s",
          e->generation_tokens_per_s);
  w.gauge("orchid_prompt_tokens_per_second", "prompt tokens computed per second over the last 10 s",
          e->prompt_tokens_per_s);
  w.counter("orchid_engine_steps_total", "engine steps run", double(e->steps));
  w.counter("orchid_requests_submitted_total", "requests submitted to the engine",
            double(e->requests_submitted));
  w.counter("orchid_requests_finished_total", "requests that ended with stop or length",
            double(e->requests_finished));
  w.counter("orchid_requests_aborted_total", "requests aborted (client gone, stop string, shutdown)",
            double(e->requests_aborted));
  w.counter("orchid_requests_failed_total", "requests that failed in the backend",
            double(e->requests_failed));
  w.counter("orchid_prompt_tokens_total", "prompt tokens computed (prefix-cache hits excluded)",
            double(e->prompt_tokens));
  w.counter("orchid_generation_tokens_total", "tokens generated", double(e->generation_tokens));
  w.counter("orchid_preemptions_total", "sequences preempted for lack of KV pages", double(e->preemptions));
  w.counter("orchid_prefix_cache_queries_total", "prompt tokens looked up in the prefix cache",
            double(e->prefix_query_tokens));
  w.counter("orchid_prefix_cache_hits_total", "prompt tokens served from the prefix cache",
            double(e->prefix_hit_tokens));
  w.counter("orchid_kv_evictions_total", "cached KV pages evicted", double(e->kv_evictions));
  w.counter("orchid_kv_imported_tokens_total", "prompt tokens whose K/V another instance handed over",
            double(e->kv_imported_tokens));
  w.counter("orchid_kv_import_bytes_total", "K/V bytes taken from another instance",
            double(e->kv_import_bytes));
  w.counter("orchid_kv_export_bytes_total", "K/V bytes handed to another instance",
            double(e->kv_export_bytes));
  w.counter("orchid_kv_shared_exports_total", "prompts whose K/V this instance handed over in place",
            double(e->kv_shared_exports));
  w.counter("orchid_kv_shared_imports_total", "prompts whose K/V this instance took in place",
            double(e->kv_shared_imports));
  w.gauge("orchid_kv_share_leases", "ranges of the K/V export buffer held for a decode instance",
          double(e->kv_share_leases));
  w.counter("orchid_spec_decode_drafts_total", "sequence-steps that carried speculative drafts",
            double(e->spec_drafts));
  w.counter("orchid_spec_decode_draft_tokens_total", "speculative draft tokens verified",
            double(e->spec_draft_tokens));
  w.counter("orchid_spec_decode_accepted_tokens_total", "speculative draft tokens accepted",
            double(e->spec_accepted_tokens));
  w.histogram("orchid_time_to_first_token_seconds", "time from arrival to the first generated token",
              e->time_to_first_token);
  w.histogram("orchid_inter_token_latency_seconds", "time between consecutive generated tokens",
              e->inter_token_latency);
  w.histogram("orchid_step_time_seconds", "duration of one engine step", e->step_time);
  w.histogram("orchid_request_queue_time_seconds",
              "time a request waited in the engine's queue before it was first scheduled", e->queue_time);
  w.counter("orchid_step_schedule_seconds_total",
            "steps' time planning (plan, K/V imports, mask jobs started)", e->step_schedule_seconds);
  w.counter("orchid_step_backend_host_seconds_total",
            "steps' time in the backend not waiting for the device (host work; the GPU may be idle)",
            e->step_backend_host_seconds);
  w.counter("orchid_step_device_wait_seconds_total", "steps' time the backend waited for the device",
            e->step_device_wait_seconds);
  w.counter("orchid_step_outputs_seconds_total", "steps' time taking the outputs (stop checks, events, text)",
            e->step_outputs_seconds);
  w.counter("orchid_pipelined_steps_total",
            "steps launched while the step before them still ran (--async-scheduling)", e->pipelined_steps);
  return w.text();
}

}  // namespace orchid::server
