// Generated tokens -> the Responses API's output: the items of the response object and, for a streamed
// response, the event sequence the OpenAI Responses API sends. Each item is announced as it starts
// (response.output_item.added with status "in_progress" and nothing in content / arguments / summary), its
// content part is added, its deltas follow, then its .done events and response.output_item.done with the
// finished item. Clients (the openai SDK's responses.stream()) build their running snapshot by appending the
// deltas to the added item, so the added item must never carry text: it is built from what is known when the
// item begins, not from the item's state after the whole engine event was read.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/harmony_output.h"
#include "server/json_body.h"
#include "tokenizer/tokenizer.h"

namespace orchid::server {

class ResponsesOutput {
 public:
  // Makes a unique id with the given prefix (rs_, fc_, msg_, call_).
  using IdMaker = std::function<std::string(std::string_view prefix)>;

  ResponsesOutput(std::shared_ptr<const tokenizer::Tokenizer> tok, const std::vector<int32_t>& forced_prefix,
                  IdMaker new_id);

  // Generated tokens. With `sse` (a streamed response) the events they cause are appended to it.
  void push(std::span<const int32_t> tokens, std::string* sse);
  // The end of the output. `cut`: it stopped at max_output_tokens, so the item still in progress is
  // reported with status "incomplete".
  void finish(bool cut, std::string* sse);
  // A lifecycle event (response.created, response.completed, ...) in the same numbered sequence.
  void event(const std::string& type, const Json& fields, std::string* sse);

  // The response object's `output` array.
  Json output_json() const;
  int32_t reasoning_tokens() const { return output_.reasoning_tokens(); }

 private:
  struct Ids {
    std::string id, call_id;
  };

  void translate(const OutputEvent& e, std::string* sse);
  Json item_json(size_t index) const;
  // The item as it is announced when it begins: in progress, empty.
  Json started_item_json(size_t index) const;

  HarmonyOutput output_;
  IdMaker new_id_;
  std::vector<Ids> ids_;
  std::vector<bool> incomplete_;
  int64_t sequence_number_ = 0;
};

}  // namespace orchid::server
