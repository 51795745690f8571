// The per-request event stream: the engine thread pushes, any thread consumes. Consumers either block with
// a timeout (CLI, tests) or poll from an event loop after a listener callback wakes them (server).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/request.h"

namespace orchid::engine {

class RequestStream {
 public:
  explicit RequestStream(int64_t id) : id_(id) {}
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  int64_t id() const { return id_; }

  // Next event (everything that arrived since the previous one), waiting up to `timeout`; nullopt on timeout
  // or once the final event has been taken.
  std::optional<RequestEvent> next(std::chrono::nanoseconds timeout);
  // Next event if one is queued, without waiting.
  std::optional<RequestEvent> poll();
  // Every queued event, without waiting.
  std::vector<RequestEvent> drain();
  // The final event has been pushed (it may still be queued).
  bool finished() const;
  // Waits for the final event and merges everything into one event (ids, logprobs and text concatenated).
  RequestEvent wait_all();

  // Called on the engine thread after each push; it must be cheap and must not call back into the engine.
  void set_listener(std::function<void()> listener);

  // Engine side. Pushing after the final event is a programming error. Events the consumer has not taken
  // yet are merged (ids, logprobs and text appended), so a slow consumer finds one event, not thousands.
  void push(RequestEvent event);
  // push() of a non-final event holding one token, without building the event when it can be merged.
  void push_token(int32_t id, const runtime::SampledToken* logprob, std::string&& text);

 private:
  const int64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> queue_;
  bool final_pushed_ = false;
  bool final_taken_ = false;
  std::shared_ptr<const std::function<void()>> listener_;
};

// Appends `from` to `into` (ids, logprobs, text; finish fields and usage when `from` is final).
void merge_event(RequestEvent& into, RequestEvent&& from);

}  // namespace orchid::engine
