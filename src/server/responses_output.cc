#include "server/responses_output.h"

#include "server/engine_response.h"

namespace orchid::server {

namespace {

Json text_part(const std::string& text) {
  return {
      {"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
}

Json reasoning_part(const std::string& text) {
  return {{"type", "reasoning_text"}, {"text", text}};
}

}  // namespace

ResponsesOutput::ResponsesOutput(std::shared_ptr<const tokenizer::Tokenizer> tok,
                                 const std::vector<int32_t>& forced_prefix, IdMaker new_id)
    : output_(std::move(tok), forced_prefix), new_id_(std::move(new_id)) {}

void ResponsesOutput::push(std::span<const int32_t> tokens, std::string* sse) {
  std::vector<OutputEvent> events;
  for (int32_t t : tokens) output_.push(t, nullptr, &events);
  for (const OutputEvent& e : events) translate(e, sse);
}

void ResponsesOutput::finish(bool cut, std::string* sse) {
  if (cut) {
    // Items closed only by the end of the output were cut short.
    for (size_t i = 0; i < output_.items().size(); ++i)
      if (!output_.items()[i].done) incomplete_[i] = true;
  }
  std::vector<OutputEvent> events;
  output_.finish(&events);
  for (const OutputEvent& e : events) translate(e, sse);
}

void ResponsesOutput::event(const std::string& type, const Json& fields, std::string* sse) {
  Json e = {{"type", type}, {"sequence_number", sequence_number_++}};
  for (auto it = fields.begin(); it != fields.end(); ++it) e[it.key()] = it.value();
  *sse += sse_event(type, json_text(e));
}

Json ResponsesOutput::output_json() const {
  Json output = Json::array();
  for (size_t i = 0; i < output_.items().size(); ++i) output.push_back(item_json(i));
  return output;
}

Json ResponsesOutput::started_item_json(size_t index) const {
  const OutputItem& item = output_.items()[index];
  const Ids& ids = ids_[index];
  switch (item.kind) {
    case ItemKind::kReasoning:
      return {{"id", ids.id},
              {"type", "reasoning"},
              {"summary", Json::array()},
              {"content", Json::array()},
              {"status", "in_progress"}};
    case ItemKind::kFunctionCall:
      return {{"id", ids.id},      {"type", "function_call"}, {"call_id", ids.call_id},
              {"name", item.name}, {"arguments", ""},         {"status", "in_progress"}};
    case ItemKind::kMessage:
    default:
      return {{"id", ids.id},
              {"type", "message"},
              {"role", "assistant"},
              {"status", "in_progress"},
              {"content", Json::array()}};
  }
}

Json ResponsesOutput::item_json(size_t index) const {
  const OutputItem& item = output_.items()[index];
  Json j = started_item_json(index);
  if (!item.done) return j;
  j["status"] = incomplete_[index] ? "incomplete" : "completed";
  switch (item.kind) {
    case ItemKind::kReasoning:
      j["content"].push_back(reasoning_part(item.text));
      break;
    case ItemKind::kFunctionCall:
      j["arguments"] = item.text;
      break;
    case ItemKind::kMessage:
      j["content"].push_back(text_part(item.text));
      break;
  }
  return j;
}

void ResponsesOutput::translate(const OutputEvent& e, std::string* sse) {
  const OutputItem& item = output_.items()[e.item];
  if (e.type == OutputEvent::Type::kBegin) {
    Ids ids;
    ids.id = new_id_(item.kind == ItemKind::kReasoning      ? "rs_"
                     : item.kind == ItemKind::kFunctionCall ? "fc_"
                                                            : "msg_");
    if (item.kind == ItemKind::kFunctionCall) ids.call_id = new_id_("call_");
    ids_.push_back(std::move(ids));
    incomplete_.resize(ids_.size(), false);
  }
  if (!sse) return;
  auto at = [&](Json extra) {
    Json j = {{"item_id", ids_[e.item].id}, {"output_index", e.item}};
    for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
    return j;
  };
  switch (e.type) {
    case OutputEvent::Type::kBegin:
      event("response.output_item.added", {{"output_index", e.item}, {"item", started_item_json(e.item)}},
            sse);
      if (item.kind == ItemKind::kMessage)
        event("response.content_part.added", at({{"content_index", 0}, {"part", text_part("")}}), sse);
      if (item.kind == ItemKind::kReasoning)
        event("response.content_part.added", at({{"content_index", 0}, {"part", reasoning_part("")}}), sse);
      return;
    case OutputEvent::Type::kDelta:
      if (e.delta.empty()) return;
      if (item.kind == ItemKind::kMessage)
        event("response.output_text.delta",
              at({{"content_index", 0}, {"delta", e.delta}, {"logprobs", Json::array()}}), sse);
      else if (item.kind == ItemKind::kReasoning)
        event("response.reasoning_text.delta", at({{"content_index", 0}, {"delta", e.delta}}), sse);
      else
        event("response.function_call_arguments.delta", at({{"delta", e.delta}}), sse);
      return;
    case OutputEvent::Type::kEnd:
      if (item.kind == ItemKind::kMessage) {
        event("response.output_text.done",
              at({{"content_index", 0}, {"text", item.text}, {"logprobs", Json::array()}}), sse);
        event("response.content_part.done", at({{"content_index", 0}, {"part", text_part(item.text)}}), sse);
      } else if (item.kind == ItemKind::kReasoning) {
        event("response.reasoning_text.done", at({{"content_index", 0}, {"text", item.text}}), sse);
        event("response.content_part.done", at({{"content_index", 0}, {"part", reasoning_part(item.text)}}),
              sse);
      } else {
        event("response.function_call_arguments.done", at({{"arguments", item.text}, {"name", item.name}}),
              sse);
      }
      event("response.output_item.done", {{"output_index", e.item}, {"item", item_json(e.item)}}, sse);
      return;
  }
}

}  // namespace orchid::server
