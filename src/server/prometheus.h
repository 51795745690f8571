// GET /metrics: the engine's metrics and the HTTP server's counters in the Prometheus text format (0.0.4).
#pragma once

#include <optional>
#include <string>

#include "engine/metrics.h"
#include "server/http_server.h"
#include "server/remote_prefill.h"

namespace orchid::server {

struct ServerMetrics {
  HttpCounters http;
  int64_t requests_in_flight = 0;  // generation requests admitted and not yet answered
  int64_t requests_rejected = 0;   // 429
  bool ready = false;
  // A decode instance's requests to prefill instances (disaggregation); absent elsewhere.
  std::optional<RemotePrefillCounters> remote_prefill;
};

class PrometheusWriter {
 public:
  void gauge(const std::string& name, const std::string& help, double value);
  void counter(const std::string& name, const std::string& help, double value);  // name ends in _total
  void histogram(const std::string& name, const std::string& help, const engine::Histogram& h);
  const std::string& text() const { return out_; }

 private:
  void head(const std::string& name, const std::string& help, const char* type);
  std::string out_;
};

// `engine` is null while the model loads.
std::string prometheus_text(const engine::EngineMetrics* engine, const ServerMetrics& server);

}  // namespace orchid::server
