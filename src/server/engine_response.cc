#include "server/engine_response.h"

#include "core/error.h"

namespace orchid::server {

EngineResponse::EngineResponse(ServerContext& ctx, bool streamed, Admission admission)
    : ctx_(ctx), streamed_(streamed), admission_(std::move(admission)) {}

EngineResponse::~EngineResponse() {
  cancel();
}

void EngineResponse::add_choice(engine::RequestSpec spec) {
  try {
    choices_.push_back({ctx_.submit(std::move(spec)), false});
  } catch (...) {
    cancel();  // choices already submitted must not run on
    throw;
  }
}

void EngineResponse::start(std::function<void()> wake) {
  auto shared = std::make_shared<std::function<void()>>(std::move(wake));
  for (auto& c : choices_) c.stream->set_listener([shared] { (*shared)(); });
  (*shared)();
}

ResponseStream::Pull EngineResponse::pull(std::string* body, HttpResponse* response) {
  if (completed_) return Pull::kDone;
  if (!started_) {
    started_ = true;
    on_start(body);
  }
  bool all_done = true;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (c.done) continue;
    for (engine::RequestEvent& ev : c.stream->drain()) {
      const bool last = ev.finished();
      on_event(i, ev, body);
      if (last) c.done = true;
    }
    all_done = all_done && c.done;
  }
  if (!all_done) return body->empty() ? Pull::kPending : Pull::kData;
  completed_ = true;
  on_complete(body, response);
  return Pull::kDone;
}

void EngineResponse::stop_choice(size_t index) {
  ORCHID_CHECK(index < choices_.size());
  if (auto* e = ctx_.engine_if_loaded()) e->abort(choices_[index].stream->id());
}

void EngineResponse::cancel() {
  engine::ServingEngine* e = ctx_.engine_if_loaded();
  for (auto& c : choices_) {
    if (!c.done && e) e->abort(c.stream->id());
    c.stream->set_listener(nullptr);
  }
}

std::string sse_data(const std::string& json) {
  return "data: " + json + "\n\n";
}

std::string sse_event(std::string_view type, const std::string& json) {
  return "event: " + std::string(type) + "\ndata: " + json + "\n\n";
}

}  // namespace orchid::server
