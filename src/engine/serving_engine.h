// What the server needs of whatever answers its requests: one Engine, a data-parallel group of engines
// (engine_group.h), later a prefill/decode pair. Every call is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
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
  // K/V handed over in place (runtime/kv_share.h): the transport this engine's backend takes ("" none),
  // and the end of a lease it exported (any thread; false when unknown).
  virtual std::string kv_share_transport() const { return {}; }
  virtual int32_t kv_ranks() const { return 1; }  // the tensor-parallel parts of its K/V (KvPages::ranks)
  virtual bool release_kv_share(uint64_t /*lease*/) { return false; }
  // Maps what a share names (any thread); throws orchid::Error when this engine cannot take it.
  virtual void open_kv_share(const runtime::KvShare& share) {
    fail("this engine cannot take K/V shared over {}", share.transport);
  }
};

}  // namespace orchid::engine
