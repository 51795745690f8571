// What the server needs of whatever answers its requests: one Engine, a data-parallel group of engines
// (engine_group.h), later a prefill/decode pair. Every call is thread-safe.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/request_stream.h"

namespace orchid::engine {

class ServingEngine {
 public:
  virtual ~ServingEngine() = default;
  // Throws orchid::Error for an invalid request or a stopped engine.
  virtual std::shared_ptr<RequestStream> submit(RequestSpec spec) = 0;
  // The request ends with FinishReason::kAbort; unknown or finished ids are ignored.
  virtual void abort(int64_t id) = 0;
  virtual EngineMetrics metrics() const = 0;
  virtual int32_t max_model_len() const = 0;
  virtual int32_t vocab_size() const = 0;
  // Requests submitted and not finished yet (a load balancer's measure).
  virtual int64_t outstanding() const = 0;
  // Stops serving; requests still in flight finish with kAbort.
  virtual void stop() = 0;
};

}  // namespace orchid::engine
