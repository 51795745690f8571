// The part of every generation response that deals with the engine: one engine request per choice,
// engine wake-ups relayed to the HTTP connection, aborts when the client leaves, and the admission slot
// held until the response is complete. Each API derives the formatting: what an event of one choice adds
// to the body, and what the end of all choices adds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/request_stream.h"
#include "server/http_server.h"
#include "server/server_context.h"

namespace orchid::server {

class EngineResponse : public ResponseStream {
 public:
  EngineResponse(ServerContext& ctx, bool streamed, Admission admission);
  ~EngineResponse() override;

  // Submits the engine request of the next choice (before the response is handed to the HTTP layer).
  void add_choice(engine::RequestSpec spec);

  bool chunked() const override { return streamed_; }
  void start(std::function<void()> wake) override;
  Pull pull(std::string* body, HttpResponse* response) override;
  void cancel() override;

 protected:
  // Before the first event: what a streamed response sends at once (the Responses API's response.created).
  virtual void on_start(std::string* body) {}
  // One event of choice `index` (merged: everything since the last one). Streamed responses append to body.
  virtual void on_event(size_t index, engine::RequestEvent& event, std::string* body) = 0;
  // All choices are complete: a streamed response appends its tail, an unstreamed one fills `response`.
  virtual void on_complete(std::string* body, HttpResponse* response) = 0;
  // Ends choice `index` early (a stop string matched): the engine request is aborted, later events ignored.
  void stop_choice(size_t index);
  size_t num_choices() const { return choices_.size(); }
  ServerContext& ctx() { return ctx_; }
  bool streamed() const { return streamed_; }

 private:
  struct Choice {
    std::shared_ptr<engine::RequestStream> stream;
    bool done = false;
  };

  ServerContext& ctx_;
  const bool streamed_;
  Admission admission_;
  std::vector<Choice> choices_;
  bool started_ = false;
  bool completed_ = false;
};

// "data: <json>\n\n"
std::string sse_data(const std::string& json);
// "event: <type>\ndata: <json>\n\n" (the Responses API's named events)
std::string sse_event(std::string_view type, const std::string& json);

}  // namespace orchid::server
