#include "engine/request_stream.h"

#include <utility>

#include "core/error.h"

namespace orchid::engine {

void merge_event(RequestEvent& into, RequestEvent&& from) {
  into.token_ids.insert(into.token_ids.end(), from.token_ids.begin(), from.token_ids.end());
  for (auto& lp : from.logprobs) into.logprobs.push_back(std::move(lp));
  into.text += from.text;
  if (from.finished()) {
    into.finish = from.finish;
    into.stop_token = from.stop_token;
    into.stop_string = std::move(from.stop_string);
    into.error = std::move(from.error);
    into.usage = from.usage;
    into.kv = std::move(from.kv);
  }
}

std::optional<RequestEvent> RequestStream::next(std::chrono::nanoseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || final_taken_; });
  if (queue_.empty()) return std::nullopt;
  RequestEvent ev = std::move(queue_.front());
  queue_.pop_front();
  final_taken_ = ev.finished();
  return ev;
}

std::optional<RequestEvent> RequestStream::poll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return std::nullopt;
  RequestEvent ev = std::move(queue_.front());
  queue_.pop_front();
  final_taken_ = ev.finished();
  return ev;
}

std::vector<RequestEvent> RequestStream::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RequestEvent> out(std::make_move_iterator(queue_.begin()),
                                std::make_move_iterator(queue_.end()));
  queue_.clear();
  if (!out.empty()) final_taken_ = out.back().finished();
  return out;
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return final_pushed_;
}

RequestEvent RequestStream::wait_all() {
  RequestEvent all;
  std::unique_lock<std::mutex> lock(mu_);
  ORCHID_CHECK(!final_taken_, "request {}: stream already consumed", id_);
  while (true) {
    cv_.wait(lock, [&] { return !queue_.empty(); });
    while (!queue_.empty()) {
      RequestEvent ev = std::move(queue_.front());
      queue_.pop_front();
      final_taken_ = ev.finished();
      merge_event(all, std::move(ev));
      if (final_taken_) return all;
    }
  }
}

void RequestStream::set_listener(std::function<void()> listener) {
  auto shared = listener ? std::make_shared<const std::function<void()>>(std::move(listener)) : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(shared);
}

void RequestStream::push(RequestEvent event) {
  std::shared_ptr<const std::function<void()>> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ORCHID_CHECK(!final_pushed_, "request {}: event after the final one", id_);
    final_pushed_ = event.finished();
    if (queue_.empty()) {
      queue_.push_back(std::move(event));
    } else {
      merge_event(queue_.back(), std::move(event));
    }
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) (*listener)();
}

void RequestStream::push_token(int32_t id, const runtime::SampledToken* logprob, std::string&& text) {
  std::shared_ptr<const std::function<void()>> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ORCHID_CHECK(!final_pushed_, "request {}: event after the final one", id_);
    if (queue_.empty()) queue_.emplace_back();
    RequestEvent& ev = queue_.back();
    ev.token_ids.push_back(id);
    if (logprob) ev.logprobs.push_back(*logprob);
    ev.text += text;
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) (*listener)();
}

}  // namespace orchid::engine
