"""The scenarios of openai-harmony's own tests (rendering and parsing), rebuilt from their inputs.

Render cases are (name, messages as openai-harmony JSON, options); parse cases are (name, ids, role).
"""

from __future__ import annotations

from openai_harmony import (Author, DeveloperContent, Message, ReasoningEffort, Role, SystemContent,
                            ToolDescription)

IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
WEATHER_PARAMS = {"type": "object", "properties": {
    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
    "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
    "required": ["location"]}
MULTI_WEATHER_PARAMS = {"type": "object", "properties": {
    "locations": {"type": "array", "items": {"type": "string"},
                  "description": 'List of city and state, e.g. ["San Francisco, CA", "New York, NY"]'},
    "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
    "required": ["locations"]}
KITCHENSINK_PARAMS = {"description": "params object", "type": "object", "properties": {
    "string": {"type": "string", "title": "STRING", "description": "A string", "examples": ["hello", "world"]},
    "string_nullable": {"type": "string", "nullable": True, "description": "A nullable string",
                        "default": "the default"},
    "string_enum": {"type": "string", "enum": ["a", "b", "c"]},
    "oneof_string_or_number": {"oneOf": [{"type": "string", "default": "default_string_in_oneof"},
                                         {"type": "number", "description": "numbers can happen too"}],
                               "description": "a oneof", "default": 20}}}


def d(*messages: Message) -> list:
    return [m.to_dict() for m in messages]


def sys_msg(content: SystemContent) -> Message:
    return Message.from_role_and_content(Role.SYSTEM, content)


def user(text: str) -> Message:
    return Message.from_role_and_content(Role.USER, text)


def asst(text: str, channel: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)


def named_render_cases() -> list:
    cases = [("simple_convo", d(sys_msg(SystemContent.new().with_model_identity(IDENTITY)), user("What is 2 + 2?")),
              {"op": "completion"})]
    for effort in (ReasoningEffort.LOW, ReasoningEffort.MEDIUM, ReasoningEffort.HIGH):
        for instr in (True, False):
            msgs = [sys_msg(SystemContent.new().with_model_identity(IDENTITY).with_reasoning_effort(effort))]
            if instr:
                msgs.append(Message.from_role_and_content(
                    Role.DEVELOPER, DeveloperContent.new().with_instructions("Answer the user's questions like a robot.")))
            msgs.append(user("What is the capital of the largest country in the world?"))
            cases.append((f"simple_convo_{effort.value.lower()}_effort{'' if instr else '_no_instruction'}", d(*msgs),
                          {"op": "completion"}))
    reasoning = SystemContent.new().with_model_identity(IDENTITY).with_required_channels(["analysis", "final"])
    cases += [
        ("reasoning_system_message", d(sys_msg(reasoning.model_copy().with_reasoning_effort(ReasoningEffort.MEDIUM)),
                                       user("What is 2 + 2?")), {"op": "completion"}),
        ("reasoning_system_message_no_instruction",
         d(sys_msg(reasoning.model_copy().with_reasoning_effort(ReasoningEffort.HIGH)),
           user("What is the best place to eat candy in the world?")), {"op": "completion"}),
        ("reasoning_system_message_with_dates",
         d(sys_msg(reasoning.model_copy().with_reasoning_effort(ReasoningEffort.MEDIUM)
                   .with_conversation_start_date("2021-01-01").with_knowledge_cutoff("2021-01")),
           user("What is 42 * pi?")), {"op": "completion"}),
    ]
    dev = DeveloperContent.new().with_instructions("Always respond in riddles").with_function_tools([
        ToolDescription.new("get_location", "Gets the location of the user."),
        ToolDescription.new("get_current_weather", "Gets the current weather in the provided location.",
                            parameters=WEATHER_PARAMS),
        ToolDescription.new("get_multiple_weathers", "Gets the current weather in the provided list of locations.",
                            parameters=MULTI_WEATHER_PARAMS),
        ToolDescription.new("kitchensink", "A function with various complex schemas.", parameters=KITCHENSINK_PARAMS),
    ])
    cases.append(("render_functions_with_parameters",
                  d(sys_msg(SystemContent.new().with_reasoning_effort(ReasoningEffort.HIGH)
                            .with_conversation_start_date("2025-06-28")),
                    Message.from_role_and_content(Role.DEVELOPER, dev), user("What is the weather like in SF?")),
                  {"op": "completion"}))
    dated = SystemContent.new().with_conversation_start_date("2025-06-28")
    lookup = DeveloperContent.new().with_function_tools([ToolDescription.new(
        "lookup_weather", "Use this tool to lookup the weather in a given location. Call it with the parameter "
        "'location', can be any textual description of a location.",
        parameters={"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]})])
    cases += [
        ("no_tools", d(sys_msg(dated.model_copy())), {"op": "completion"}),
        ("browser_tool_only", d(sys_msg(dated.model_copy().with_browser_tool())), {"op": "completion"}),
        ("browser_and_function_tool", d(sys_msg(dated.model_copy().with_browser_tool()),
                                        Message.from_role_and_content(Role.DEVELOPER, lookup)), {"op": "completion"}),
        ("browser_and_python_tool", d(sys_msg(dated.model_copy().with_browser_tool().with_python_tool())),
         {"op": "completion"}),
    ]
    cot = [user("What is 2 + 2?"), asst("User asks: “What is 2 + 2?” Simple arithmetic. Provide answer.", "analysis"),
           asst("2 + 2 equals 4.", "final"), user("What about 9 / 2?")]
    cases += [
        ("dropping_cot_by_default", d(*cot), {"op": "completion", "auto_drop": True}),
        ("preserve_cot", d(*cot), {"op": "completion", "auto_drop": False}),
        ("does_not_drop_if_ongoing_analysis", d(
            user("What is the weather in SF?"),
            asst("User asks: “What is the weather in SF?” We need to use lookup_weather tool.", "analysis"),
            asst('{"location": "San Francisco"}', "commentary").with_recipient("functions.lookup_weather")
            .with_content_type("<|constrain|>json"),
            Message.from_author_and_content(Author.new(Role.TOOL, "functions.lookup_weather"),
                                            '{"temperature": 20, "description": "sunny"}')),
         {"op": "completion", "auto_drop": True}),
        ("keep_analysis_between_finals", d(user("What is 2 + 2?"), asst("thinking 2+2", "analysis"), asst("4", "final"),
                                           user("What is 3 + 5?"), asst("thinking 3+5", "analysis"), asst("8", "final")),
         {"op": "conversation"}),
        ("render_message_user_hello", d(user("Hello")), {"op": "message"}),
        ("render_conversation_user_hello", d(user("Hello")), {"op": "conversation"}),
        ("training_final_channel", d(user("hi"), asst("hello", "final")), {"op": "training"}),
        ("training_non_final", d(user("hi")), {"op": "training"}),
        ("tool_call_with_constrain", d(asst('{"location": "Tokyo"}', "commentary")
                                       .with_recipient("functions.get_weather").with_content_type("<|constrain|>json")),
         {"op": "conversation"}),
        ("tool_response", d(Message.from_author_and_content(Author.new(Role.TOOL, "browser.search"),
                                                            '{"result": "https://openai.com/"}')
                            .with_channel("commentary").with_recipient("assistant")), {"op": "message"}),
    ]
    return cases


def named_parse_cases(enc) -> list:
    def text(s: str) -> list:
        return enc.encode(s, allowed_special="all")

    start = text("<|start|>assistant<|message|>")
    end = text("<|end|>")
    calls = [
        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
        '{"location": "Tokyo"}<|call|>',
        "<|start|>assistant to=functions.get_weather<|channel|>commentary<|constrain|>json<|message|>"
        '{"location": "Tokyo"}<|call|>',
        "<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>"
        '{"latitude":48.8566,"longitude":2.3522}<|call|>',
    ]
    refusal_tail = ("<|start|>assistant<|channel|>analysis<|message|>We must refuse<|end|>"
                    "<|start|>assistant<|channel|>final<|message|>I'm sorry, but I can't help with that.<|return|>")
    emoji = enc.encode("💖")
    tricky = ("Hello Müller, Γειά σου, Привет, שלום, مرحبا, नमस्ते, こんにちは, 안녕하세요, 你好. Normalized (naïve) vs. "
              "decomposed (nai\u0308ve) characters. Some emojis: 😊👋🏾👨‍👩‍👧‍👦🇺🇸.")
    cases = [
        ("simple_reasoning_response", text("<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple "
                                           "arithmetic. Provide answer.<|return|><|start|>assistant<|channel|>final"
                                           "<|message|>2 + 2 = 4."), "assistant"),
        ("simple_tool_call", text("<|channel|>analysis<|message|>User asks: \"What is the weather in Tokyo?\" We "
                                  "need to use lookup_weather tool.<|return|><|start|>assistant to=lookup_weather"
                                  "<|channel|>analysis code<|message|>{\"location\": \"Tokyo\"}"), "assistant"),
        ("streaming_docs_example", text("<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple "
                                        "arithmetic. Provide answer.<|end|><|start|>assistant<|channel|>final"
                                        "<|message|>2 + 2 = 4.<|return|>"), "assistant"),
        ("browsing_turn", text("<|channel|>analysis<|message|>Need current info; search.<|end|><|start|>assistant"
                               "<|channel|>commentary to=browser.search code<|message|>{\"query\": \"news\", \"topn\""
                               ": 5}<|call|><|start|>browser.search to=assistant<|channel|>commentary<|message|>"
                               "{\"result\": \"https://openai.com/\"}<|end|>"), "assistant"),
        ("tool_response_no_end", text("<|start|>browser.search to=assistant<|channel|>commentary<|message|>"
                                      "{\"result\": \"https://openai.com/\"}"), None),
        ("missing_message_token", text("I must refuse<|end|>" + refusal_tail), "assistant"),
        ("missing_message_token_channel", text("<|channel|>analysis I must refuse<|end|>" + refusal_tail), "assistant"),
        ("missing_message_token_tool_call", text("... Let's use the tool.<|end|><|start|>assistant to=functions."
                                                 "get_weather<|channel|>commentary json<|message|>"
                                                 "{\"location\": \"Tokyo\"}<|call|>"), "assistant"),
        ("invalid_utf8_twice", start + [9552, 9552] + enc.encode("worked") + end, None),
        ("invalid_utf8_split", start + [9552] + enc.encode("XY") + end, None),
        ("invalid_utf8_multibyte", start + [9552] + enc.encode(" interesting") + end, None),
        ("invalid_utf8_no_eos", start + [9552] + enc.encode(" interesting") + enc.encode(" story") + enc.encode("Y"),
         None),
        ("no_leak_between_messages", start + [9552, 9552] + end + start + enc.encode("Hi") + end, None),
        ("flush_partial_bytes_on_eos", start + [9552] + enc.encode("Hi"), None),
        ("emoji_across_tokens", start + emoji + end, None),
        ("tricky_utf8", start + enc.encode(tricky) + end, None),
        ("invalid_token_then_eos", text("<|start|>assistant<|channel|>analysis<|message|>Practice invalid token "
                                        "handling.") + [2**32 - 1], None),
        ("empty", [], "assistant"),
        ("empty_no_role", [], None),
    ]
    cases += [(f"tool_call_constrain_{i}", text(c), None) for i, c in enumerate(calls)]
    return cases
