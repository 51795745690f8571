#include "harmony/render.h"

#include "core/error.h"
#include "harmony/tokens.h"
#include "harmony/typescript.h"

namespace orchid::harmony {
namespace {

void add_special(Pieces* out, int32_t id) {
  out->push_back(Piece{id, {}});
}
void add_text(Pieces* out, std::string text) {
  out->push_back(Piece{-1, std::move(text)});
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

void render_header(const Message& m, Pieces* out) {
  add_special(out, kStartId);
  if (m.author.role == Role::kTool) {
    // A tool message is authored by the tool itself: "functions.get_weather", "browser.search".
    if (!m.author.name) fail("harmony: a tool message needs an author name (e.g. \"functions.NAME\")");
    add_text(out, *m.author.name);
  } else {
    add_text(out, std::string(role_name(m.author.role)));
    if (m.author.name) add_text(out, ":" + *m.author.name);
  }
  if (m.recipient && *m.recipient != "all") add_text(out, " to=" + *m.recipient);
  if (m.channel) {
    add_special(out, kChannelId);
    add_text(out, *m.channel);
  }
  if (m.content_type) {
    const std::string& ct = *m.content_type;
    if (ct.starts_with(kConstrainLiteral)) {
      // "<|constrain|>json" is the special token followed by the data type as text.
      add_text(out, " ");
      add_special(out, kConstrainId);
      if (ct.size() > kConstrainLiteral.size()) add_text(out, ct.substr(kConstrainLiteral.size()));
    } else {
      add_text(out, " " + ct);
    }
  }
  add_special(out, kMessageId);
}

}  // namespace

std::string system_body(const SystemContent& s, const RenderOptions& options) {
  std::vector<std::string> sections;
  std::vector<std::string> top;
  if (s.model_identity) top.push_back(*s.model_identity);
  if (s.knowledge_cutoff) top.push_back("Knowledge cutoff: " + *s.knowledge_cutoff);
  if (s.conversation_start_date) top.push_back("Current date: " + *s.conversation_start_date);
  if (!top.empty()) sections.push_back(join(top, "\n"));
  if (s.reasoning_effort) sections.push_back("Reasoning: " + std::string(effort_name(*s.reasoning_effort)));
  if (s.tools && !s.tools->empty()) sections.push_back(render_tools_section(*s.tools));
  if (s.channel_config && !s.channel_config->valid_channels.empty()) {
    std::string line = "# Valid channels: " + join(s.channel_config->valid_channels, ", ") + ".";
    if (s.channel_config->channel_required) line += " Channel must be included for every message.";
    if (options.conversation_has_function_tools)
      line += "\nCalls to these tools must go to the commentary channel: 'functions'.";
    sections.push_back(std::move(line));
  }
  return join(sections, "\n\n");
}

std::string developer_body(const DeveloperContent& d) {
  std::vector<std::string> sections;
  if (d.instructions) {
    sections.push_back("# Instructions");
    sections.push_back(*d.instructions);
  }
  if (d.tools && !d.tools->empty()) sections.push_back(render_tools_section(*d.tools));
  return join(sections, "\n\n");
}

Pieces render_message(const Message& m, const RenderOptions& options) {
  Pieces out;
  render_header(m, &out);
  for (const Content& c : m.content) {
    if (const auto* t = std::get_if<TextContent>(&c)) {
      add_text(&out, t->text);
    } else if (const auto* s = std::get_if<SystemContent>(&c)) {
      if (m.author.role != Role::kSystem)
        fail("harmony: system content may only appear in a system message, found in a {} message",
             role_name(m.author.role));
      add_text(&out, system_body(*s, options));
    } else {
      if (m.author.role != Role::kDeveloper)
        fail("harmony: developer content may only appear in a developer message, found in a {} message",
             role_name(m.author.role));
      add_text(&out, developer_body(std::get<DeveloperContent>(c)));
    }
  }
  // Any recipient makes an assistant message a tool call, "all" included although it is not printed.
  add_special(&out, m.author.role == Role::kAssistant && m.recipient ? kCallId : kEndId);
  return out;
}

bool has_function_tools(const Conversation& conversation) {
  for (const Message& m : conversation.messages) {
    for (const Content& c : m.content) {
      const auto* d = std::get_if<DeveloperContent>(&c);
      if (!d || !d->tools) continue;
      auto it = d->tools->find("functions");
      if (it != d->tools->end() && !it->second.tools.empty()) return true;
    }
  }
  return false;
}

std::vector<size_t> kept_message_indices(const Conversation& conversation, const RenderConfig& config) {
  const auto& msgs = conversation.messages;
  bool last_assistant_is_final = false;
  for (auto it = msgs.rbegin(); it != msgs.rend(); ++it) {
    if (it->author.role == Role::kAssistant) {
      last_assistant_is_final = it->channel == "final";
      break;
    }
  }
  const bool drop = config.auto_drop_analysis && last_assistant_is_final;
  size_t first_final = msgs.size();
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].channel == "final") {
      first_final = i;
      break;
    }
  }
  std::vector<size_t> kept;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (drop && i < first_final && msgs[i].channel == "analysis") continue;
    kept.push_back(i);
  }
  return kept;
}

Pieces render_conversation(const Conversation& conversation, const RenderConfig& config) {
  const RenderOptions options{has_function_tools(conversation)};
  Pieces out;
  for (size_t i : kept_message_indices(conversation, config)) {
    Pieces p = render_message(conversation.messages[i], options);
    out.insert(out.end(), std::make_move_iterator(p.begin()), std::make_move_iterator(p.end()));
  }
  return out;
}

Pieces render_for_completion(const Conversation& conversation, Role next_role, const RenderConfig& config) {
  Pieces out = render_conversation(conversation, config);
  add_special(&out, kStartId);
  add_text(&out, std::string(role_name(next_role)));
  return out;
}

Pieces render_for_training(const Conversation& conversation, const RenderConfig& config) {
  Pieces out = render_conversation(conversation, config);
  if (!conversation.messages.empty() && !out.empty()) {
    const Message& last = conversation.messages.back();
    if (last.author.role == Role::kAssistant && last.channel == "final") out.back() = Piece{kReturnId, {}};
  }
  return out;
}

std::vector<int32_t> render_completion_ids(const Conversation& conversation, const tokenizer::Tokenizer& tok,
                                           Role next_role, const RenderConfig& config) {
  return pieces_ids(render_for_completion(conversation, next_role, config), tok);
}

std::string pieces_text(const Pieces& pieces) {
  std::string out;
  for (const Piece& p : pieces) {
    if (p.is_special()) {
      auto lit = structural_literal(p.special);
      ORCHID_CHECK(lit.has_value(), "renderer produced a non-structural special id {}", p.special);
      out += *lit;
    } else {
      out += p.text;
    }
  }
  return out;
}

std::vector<int32_t> pieces_ids(const Pieces& pieces, const tokenizer::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const Piece& p : pieces) {
    if (p.is_special()) {
      ids.push_back(p.special);
    } else {
      std::vector<int32_t> t = tok.encode_ordinary(p.text);
      ids.insert(ids.end(), t.begin(), t.end());
    }
  }
  return ids;
}

}  // namespace orchid::harmony
