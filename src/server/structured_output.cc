#include "server/structured_output.h"

#include "core/error.h"
#include "server/api_error.h"

namespace orchid::server {
namespace {

using structured::OutputFormat;

RequestedFormat schema_format(const Json& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_boolean())
    bad_request(param, "{}: expected a JSON Schema object", param);
  return {{OutputFormat::Kind::kJsonSchema, schema.dump(), {}}, param};
}

// vLLM's guided_json / structured_outputs.json: a schema object or its JSON text.
RequestedFormat json_value_format(const Json& v, const std::string& param) {
  if (v.is_string()) {
    Json parsed = Json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) bad_request(param, "{}: not valid JSON", param);
    return schema_format(parsed, param);
  }
  return schema_format(v, param);
}

RequestedFormat string_format(OutputFormat::Kind kind, const Json& v, const std::string& param) {
  if (!v.is_string() || v.get<std::string>().empty())
    bad_request(param, "{}: expected a non-empty string", param);
  return {{kind, v.get<std::string>(), {}}, param};
}

RequestedFormat choice_format(const Json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) bad_request(param, "{}: expected a non-empty array of strings", param);
  RequestedFormat r{{OutputFormat::Kind::kChoice, {}, {}}, param};
  for (const Json& c : v) {
    if (!c.is_string()) bad_request(param, "{}: expected a non-empty array of strings", param);
    r.format.choices.push_back(c.get<std::string>());
  }
  return r;
}

// The fields of a json_schema format object (chat's json_schema, Responses' text.format).
RequestedFormat json_schema_fields(JsonFields& f) {
  const auto name = f.string("name");
  if (name && (name->empty() || name->size() > 64))
    bad_request(f.name("name"), "{}: expected 1 to 64 characters", f.name("name"));
  f.string("description");
  f.boolean("strict");
  const Json* schema = f.get("schema");
  if (!schema) bad_request(f.name("schema"), "{}: missing", f.name("schema"));
  RequestedFormat r = schema_format(*schema, f.name("schema"));
  f.reject_unknown();
  return r;
}

void set_once(std::optional<RequestedFormat>& out, RequestedFormat f) {
  if (out) bad_request(f.param, "{}: only one of {} and {} may be given", f.param, out->param, f.param);
  out = std::move(f);
}

xgrammar::CompiledGrammar compiled(structured::GrammarVocabulary& vocab, const RequestedFormat& f) {
  try {
    return structured::compile(f.format, vocab);
  } catch (const Error& e) {
    bad_request(f.param, "{}: {}", f.param, e.what());
  }
}

std::vector<int32_t> header_ids(const tokenizer::Tokenizer& tok, const std::string& text) {
  return tok.encode(text, {"<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>"});
}

}  // namespace

std::optional<RequestedFormat> read_response_format(JsonFields& f, const std::string& key) {
  const Json* rf = f.get(key);
  if (!rf) return std::nullopt;
  JsonFields ff(*rf, f.name(key));
  const auto type = ff.string("type");
  std::optional<RequestedFormat> out;
  if (type == "json_schema") {
    const Json* js = ff.get("json_schema");
    if (!js) bad_request(ff.name("json_schema"), "{}: missing", ff.name("json_schema"));
    JsonFields jf(*js, ff.name("json_schema"));
    out = json_schema_fields(jf);
  } else if (type == "json_object") {
    out = RequestedFormat{{OutputFormat::Kind::kJsonObject, {}, {}}, f.name(key)};
  } else if (type != "text") {
    bad_request(ff.name("type"), "{}: expected \"text\", \"json_object\" or \"json_schema\"",
                ff.name("type"));
  }
  ff.reject_unknown();
  return out;
}

std::optional<RequestedFormat> read_text_format(const Json& text, const std::string& param) {
  JsonFields tf(text, param);
  tf.string("verbosity");
  std::optional<RequestedFormat> out;
  if (const Json* format = tf.get("format")) {
    JsonFields ff(*format, tf.name("format"));
    const auto type = ff.string("type");
    if (type == "json_schema") {
      out = json_schema_fields(ff);
    } else {
      if (type == "json_object")
        out = RequestedFormat{{OutputFormat::Kind::kJsonObject, {}, {}}, tf.name("format")};
      else if (type != "text")
        bad_request(ff.name("type"), "{}: expected \"text\", \"json_object\" or \"json_schema\"",
                    ff.name("type"));
      ff.reject_unknown();
    }
  }
  tf.reject_unknown();
  return out;
}

std::optional<RequestedFormat> read_vllm_format(JsonFields& f) {
  std::optional<RequestedFormat> out;
  if (const Json* v = f.get("guided_json")) set_once(out, json_value_format(*v, f.name("guided_json")));
  if (const Json* v = f.get("guided_regex"))
    set_once(out, string_format(OutputFormat::Kind::kRegex, *v, f.name("guided_regex")));
  if (const Json* v = f.get("guided_grammar"))
    set_once(out, string_format(OutputFormat::Kind::kGrammar, *v, f.name("guided_grammar")));
  if (const Json* v = f.get("guided_choice")) set_once(out, choice_format(*v, f.name("guided_choice")));
  f.ignore({"guided_decoding_backend", "guided_whitespace_pattern"});
  if (const Json* so = f.get("structured_outputs")) {
    JsonFields sf(*so, f.name("structured_outputs"));
    if (const Json* v = sf.get("json")) set_once(out, json_value_format(*v, sf.name("json")));
    if (const Json* v = sf.get("regex"))
      set_once(out, string_format(OutputFormat::Kind::kRegex, *v, sf.name("regex")));
    if (const Json* v = sf.get("grammar"))
      set_once(out, string_format(OutputFormat::Kind::kGrammar, *v, sf.name("grammar")));
    if (const Json* v = sf.get("choice")) set_once(out, choice_format(*v, sf.name("choice")));
    if (sf.boolean("json_object").value_or(false))
      set_once(out, RequestedFormat{{OutputFormat::Kind::kJsonObject, {}, {}}, sf.name("json_object")});
    sf.ignore({"disable_any_whitespace", "disable_fallback", "disable_additional_properties",
               "whitespace_pattern"});
    sf.reject_unknown();
  }
  return out;
}

std::unique_ptr<StructuredOutput> StructuredOutput::for_harmony(
    ServerContext& ctx, const std::optional<RequestedFormat>& format, const std::vector<FunctionTool>& tools,
    bool tool_required, const std::string& named_tool, std::optional<int64_t> reasoning_budget) {
  bool strict = false;
  for (const FunctionTool& t : tools) strict |= t.strict;
  if (!format && !strict) return nullptr;
  auto out = std::make_unique<StructuredOutput>();
  out->vocab_ = structured::GrammarVocabulary::of(ctx.tokenizer_ptr());
  structured::GrammarVocabulary& vocab = *out->vocab_;
  const tokenizer::Tokenizer& tok = ctx.tokenizer();
  auto layout = std::make_shared<structured::TurnLayout>();
  const int32_t call = vocab.special("<|call|>");

  auto tool_grammar = [&](const FunctionTool& t, size_t i) {
    const std::string param = "tools[" + std::to_string(i) + "].parameters";
    if (t.strict && t.parameters)
      return compiled(vocab, {{OutputFormat::Kind::kJsonSchema, t.parameters->dump(), {}}, param});
    return compiled(vocab, {{OutputFormat::Kind::kJsonObject, {}, {}}, param});
  };
  if (!named_tool.empty()) {
    // The prompt holds the whole call header already.
    for (size_t i = 0; i < tools.size(); ++i)
      if (tools[i].name == named_tool) layout->branches.push_back({{}, tool_grammar(tools[i], i), call});
  } else if (tool_required) {
    // The prompt ends with "commentary to=functions": the rest of the header picks the tool.
    for (size_t i = 0; i < tools.size(); ++i)
      layout->branches.push_back({header_ids(tok, "." + tools[i].name + " <|constrain|>json<|message|>"),
                                  tool_grammar(tools[i], i), call});
  } else {
    layout->analysis = true;
    layout->analysis_header = header_ids(tok, "<|channel|>analysis<|message|>");
    layout->analysis_end = vocab.special("<|end|>");
    layout->analysis_reopen = header_ids(tok, "<|start|>assistant<|channel|>");
    layout->reasoning_budget = int32_t(reasoning_budget.value_or(structured::kDefaultReasoningBudget));
    structured::TurnBranch final_branch{header_ids(tok, "final<|message|>"), std::nullopt,
                                        vocab.special("<|return|>")};
    if (format) final_branch.grammar = compiled(vocab, *format);
    layout->branches.push_back(std::move(final_branch));
    for (size_t i = 0; i < tools.size(); ++i)
      layout->branches.push_back(
          {header_ids(tok, "commentary to=functions." + tools[i].name + " <|constrain|>json<|message|>"),
           tool_grammar(tools[i], i), call});
  }
  if (layout->branches.empty()) return nullptr;
  out->layout_ = std::move(layout);
  return out;
}

std::unique_ptr<StructuredOutput> StructuredOutput::for_completion(ServerContext& ctx,
                                                                   const RequestedFormat& format) {
  auto out = std::make_unique<StructuredOutput>();
  out->vocab_ = structured::GrammarVocabulary::of(ctx.tokenizer_ptr());
  auto layout = std::make_shared<structured::TurnLayout>();
  layout->branches.push_back({{}, compiled(*out->vocab_, format), out->vocab_->special("<|return|>")});
  out->layout_ = std::move(layout);
  return out;
}

std::unique_ptr<engine::TokenConstraint> StructuredOutput::make() const {
  return std::make_unique<structured::TurnConstraint>(vocab_, layout_);
}

}  // namespace orchid::server
