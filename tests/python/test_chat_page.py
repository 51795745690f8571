"""The built-in chat page (GET /) in headless Chromium (Debian's chromium and chromium-driver, driven by selenium):
it loads from the binary without the API key, streams an answer of the random-weight model in more than one update,
stops mid-stream (and the server sees the request end), shows scripted reasoning, tool calls and answers in their
own elements exactly as the openai SDK receives them, sends the whole history back (the prompt the page makes for a
second turn is the one the SDK makes for the same conversation), shows model output as text, never as HTML, and
says what went wrong (bad tools, the server's errors, a model still loading) without losing the message.
Checks are by DOM structure, not pixels; a screenshot is saved and checked to be a PNG of the window's size.

No browser on this machine: ORCHID_SKIP_BROWSER_TESTS=1 skips the browser tests (CI installs the packages through
scripts/setup.sh, so there a missing browser fails)."""
import http.client
import json
import os
import pathlib
import re
import struct
import time

import pytest

from conftest import ROOT
from orchid_server import OrchidServer, openai_client

CHROMIUM = os.environ.get("ORCHID_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ORCHID_CHROMEDRIVER", "/usr/bin/chromedriver")
SKIP_BROWSER = "ORCHID_SKIP_BROWSER_TESTS"
# Where to keep the screenshot of the scripted conversation (docs/chat-page.png is made this way).
SCREENSHOT_OUT = os.environ.get("ORCHID_CHAT_SCREENSHOT", "")
ASSETS = ROOT / "assets" / "chat"
API_KEY = "page-test-key"
WINDOW = (1280, 860)

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}}]
STORY_TOOLS = [{"type": "function", "function": {"name": "write_story", "description": "Write a story",
                                                 "parameters": {"type": "object",
                                                                "properties": {"text": {"type": "string"}}}}}]
QUESTION = "What is the weather in Paris?"
TOOL_OUTPUT = '{"temperature":20,"sky":"sunny"}'
HOSTILE = "Show me some markup"
MARKUP = '<img src=x onerror="window.__injected=1"><script>window.__injected=2</script><b>bold</b> & done'
SCRIPT = {
    "rules": [
        {"match": "weather in Paris?",
         "output": "<|channel|>analysis<|message|>The user wants the weather in Paris. I should call get_weather."
                   "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                   '<|message|>{"city":"Paris","unit":"celsius"}<|call|>'},
        {"match": "functions.get_weather to=assistant",
         "output": "<|channel|>analysis<|message|>The tool says 20 degrees and sunny.<|end|><|start|>assistant"
                   "<|channel|>final<|message|>It is 20 °C and sunny in Paris.<|return|>"},
        {"match": HOSTILE,
         "output": f"<|channel|>analysis<|message|>{MARKUP}<|end|><|start|>assistant<|channel|>final"
                   f"<|message|>{MARKUP}<|return|>"},
    ],
    "step_delay_ms": 2,
}


# ---- the page over plain HTTP ----

def fetch(server, path, method="GET", headers=None):
    """(status, headers as a lower-case dict, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def post_chat(server, body):
    """(status, headers, body bytes) of a chat completions request with the test's API key."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def replay_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("chat_page")
    script = dict(SCRIPT, prompt_log=str(d / "prompts.jsonl"))
    (d / "script.json").write_text(json.dumps(script), encoding="utf-8")
    with OrchidServer("synthetic:tiny", "--replay", d / "script.json", "--served-model-name", "gpt-oss-page",
                      "--api-key", API_KEY) as s:
        s.prompt_log = d / "prompts.jsonl"
        yield s


@pytest.fixture(scope="module")
def random_server():
    with OrchidServer("synthetic:tiny", "--served-model-name", "tiny-random") as s:
        yield s


def test_page_files_are_served_from_the_binary(replay_server):
    types = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
    for path, file in [("/", "index.html"), ("/chat", "index.html"), ("/chat/chat.js", "chat.js"),
                       ("/chat/chat.css", "chat.css")]:
        # No Authorization header: the page loads without the key the API needs.
        status, headers, body = fetch(replay_server, path)
        assert status == 200, (path, body)
        assert body == (ASSETS / file).read_bytes(), path
        assert headers["content-type"].split(";")[0] == types[pathlib.Path(file).suffix]
        assert headers["cache-control"] == "no-cache"
        assert headers["x-content-type-options"] == "nosniff"
        assert "script-src 'self'" in headers["content-security-policy"]
        etag = headers["etag"]
        status, again, body = fetch(replay_server, path, headers={"If-None-Match": f'W/"x", {etag}'})
        assert (status, body, again["etag"]) == (304, b"", etag), path
        status, _, _ = fetch(replay_server, path, headers={"If-None-Match": '"something-else"'})
        assert status == 200
    status, _, body = fetch(replay_server, "/", method="POST")
    assert status == 405 and json.loads(body)["error"]["message"]
    assert fetch(replay_server, "/chat/missing.js")[0] == 404
    assert fetch(replay_server, "/v1/models")[0] == 401  # the API itself still wants the key


def test_no_chat_page_flag():
    with OrchidServer("synthetic:tiny", "--no-chat-page") as s:
        for path in ("/", "/chat", "/chat/chat.js"):
            status, _, body = fetch(s, path)
            assert status == 404 and json.loads(body)["error"]["code"] == "not_found", path
        assert fetch(s, "/v1/models")[0] == 200


# ---- the page in a browser ----

@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if os.environ.get(SKIP_BROWSER) == "1":
        pytest.skip(f"{SKIP_BROWSER}=1: the chat page's browser tests are skipped on this machine")
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: install Debian's chromium and chromium-driver "
                    f"(scripts/setup.sh does), or set {SKIP_BROWSER}=1 to skip these tests")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never try to download a browser or driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--force-device-scale-factor=1", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                f"--user-data-dir={profile}"]:
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def wait_for(condition, timeout=15, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def by_css(driver, css):
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, css)


def open_page(driver, server):
    driver.get(server.url("/"))
    js(driver, "localStorage.clear(); sessionStorage.clear();")
    driver.get(server.url("/"))
    wait_for(lambda: js(driver, "return document.readyState") == "complete", what="the page to load")


def active_id(driver):
    return js(driver, "return document.activeElement && document.activeElement.id")


def model_options(driver):
    return [o.get_attribute("value") for o in by_css(driver, "#model option")]


def served_models(server, **headers):
    status, _, body = fetch(server, "/v1/models", headers=headers)
    assert status == 200, body
    return json.loads(body)["data"]


def turn_view(element):
    """What an assistant message shows, element by element."""
    from selenium.webdriver.common.by import By
    one = lambda css: element.find_element(By.CSS_SELECTOR, css)
    calls = [{"name": c.find_element(By.CSS_SELECTOR, ".tool-name").get_attribute("textContent"),
              "arguments": c.find_element(By.CSS_SELECTOR, ".tool-arguments").get_attribute("textContent")}
             for c in element.find_elements(By.CSS_SELECTOR, ".tool-calls > .tool-call")]
    return {"state": element.get_attribute("data-state"),
            "reasoning": one(".reasoning-text").get_attribute("textContent"),
            "reasoning_shown": one(".reasoning").is_displayed(),
            "answer": one(".answer").get_attribute("textContent"),
            "tool_calls": calls}


def assistant_turns(driver):
    return by_css(driver, "#messages > li.message.assistant")


def check_png(driver, png, path):
    """A PNG of the page's viewport (its header's size is the window's inner size in device pixels)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    size = struct.unpack(">II", png[16:24])
    inner = js(driver, "return [innerWidth * devicePixelRatio, innerHeight * devicePixelRatio].map(Math.round)")
    assert list(size) == inner, (size, inner)
    path.write_bytes(png)


def set_field(driver, field, value):
    """Types a short value; a long one (JSON) is set at once, typing it key by key would only take time."""
    box = by_css(driver, f"#{field}")[0]
    box.clear()
    if len(value) > 40:
        js(driver, "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))", box, value)
    elif value:
        box.send_keys(value)
    js(driver, "arguments[0].dispatchEvent(new Event('change'))", box)


def test_streams_the_random_model_and_stops_mid_stream(browser, random_server, tmp_path):
    """Random weights rarely write a Harmony header, so a plain answer arrives as one piece at its end (the header
    is text until <|message|>); a forced tool call starts the model after <|message|>, where each token is a
    streamed delta of the call's arguments."""
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, random_server)
    models = served_models(random_server)
    wait_for(lambda: model_options(d) == [m["id"] for m in models], what="the model list from /v1/models")
    max_tokens = models[0]["max_model_len"] - 512
    # Long enough that the stop lands mid-stream; the seed keeps the random text the same on every run.
    for field, value in (("max-tokens", str(max_tokens)), ("seed", "7"), ("temperature", "1"),
                         ("tools", json.dumps(STORY_TOOLS)), ("tool-choice", "write_story")):
        set_field(d, field, value)
    # Every change of the length of what the assistant's turn shows.
    js(d, """
      window.__lengths = [];
      new MutationObserver(() => {
        const turn = document.querySelector('#messages > li.assistant:last-child');
        if (!turn) return;
        const n = [...turn.querySelectorAll('.answer, .reasoning-text, .tool-arguments')]
            .reduce((sum, e) => sum + e.textContent.length, 0);
        if (window.__lengths[window.__lengths.length - 1] !== n) window.__lengths.push(n);
      }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
    """)
    before = random_server.metrics()
    prompt = by_css(d, "#prompt")[0]
    prompt.send_keys("Tell me a long story.", Keys.ENTER)  # Enter sends
    stop = by_css(d, "#stop")[0]
    send = by_css(d, "#send")[0]
    wait_for(lambda: stop.is_enabled() and not send.is_enabled(), what="the stop button to be enabled")
    lengths = wait_for(lambda: (lambda v: v if len(v) >= 4 else None)(js(d, "return window.__lengths")),
                       what="several streamed updates")
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1], lengths
    stop.click()
    wait_for(lambda: assistant_turns(d)[-1].get_attribute("data-state") != "streaming", what="the stream to end")
    turn = assistant_turns(d)[-1]
    view = turn_view(turn)
    assert view["state"] == "stopped", view
    assert not stop.is_enabled() and send.is_enabled()
    assert active_id(d) == "prompt"  # the keyboard user can type on at once
    assert [c["name"] for c in view["tool_calls"]] == ["write_story"] and view["tool_calls"][0]["arguments"]
    time.sleep(0.3)
    assert turn_view(turn) == view  # nothing arrives after the stop
    assert "stopped" in turn.find_element("css selector", ".meta").get_attribute("textContent")

    # The server saw the client go: the response was cancelled and the engine dropped the sequence.
    after = wait_for(lambda: (lambda m: m if m["orchid_requests_aborted_total"] > before[
        "orchid_requests_aborted_total"] and m["orchid_num_requests_running"] == 0 else None)(
            random_server.metrics()), timeout=5, what="the server to see the abort")
    assert after["orchid_http_responses_cancelled_total"] == before["orchid_http_responses_cancelled_total"] + 1
    generated = after["orchid_generation_tokens_total"] - before["orchid_generation_tokens_total"]
    assert 0 < generated < max_tokens
    check_png(d, d.get_screenshot_as_png(), tmp_path / "chat-page-stopped.png")

    # Esc stops too (from the message box, where the focus is).
    prompt.send_keys("Another long one.", Keys.ENTER)
    wait_for(lambda: len(assistant_turns(d)) == 2 and any(c["arguments"] for c in turn_view(
        assistant_turns(d)[1])["tool_calls"]), what="the second stream")
    prompt.send_keys(Keys.ESCAPE)
    wait_for(lambda: assistant_turns(d)[1].get_attribute("data-state") == "stopped", what="Esc to stop")

    # The conversation goes on after a stop; a plain answer of random weights ends well too.
    set_field(d, "tool-choice", "")
    set_field(d, "tools", "")
    set_field(d, "max-tokens", "24")
    prompt.send_keys("And now a short one.", Keys.ENTER)
    wait_for(lambda: len(assistant_turns(d)) == 3 and assistant_turns(d)[2].get_attribute("data-state") == "done",
             what="the third answer")
    # Random weights rarely close a Harmony header, and text cut inside a header is never shown (the server
    # drops an unfinished header), so the answer may be empty; the turn must still end with its reason.
    meta = assistant_turns(d)[2].find_element("css selector", ".meta").get_attribute("textContent")
    assert re.match(r"(length|stop) · \d+ tokens", meta), meta
    roles = [li.get_attribute("data-role") for li in by_css(d, "#messages > li")]
    assert roles == ["user", "assistant"] * 3
    # Reasoning, answer and tool calls are separate elements, none inside another.
    for outer in (".answer", ".reasoning", ".tool-calls"):
        for inner in (".answer", ".reasoning", ".tool-calls"):
            if outer != inner:
                assert by_css(d, f"#messages {outer} {inner}") == []
    by_css(d, "#new-chat")[0].click()
    assert by_css(d, "#messages > li") == [] and active_id(d) == "prompt"


def test_reasoning_tool_calls_and_answer_apart_keyboard_only(browser, replay_server, tmp_path, tik):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, replay_server)
    keys = lambda *k: ActionChains(d).send_keys(*k).perform()
    # Without the key the page says what is missing.
    wait_for(lambda: "API key" in by_css(d, "#status")[0].text, what="the API key hint")
    assert model_options(d) == []

    # Keyboard only from here: the page starts in the message box; Tab reaches the settings.
    assert active_id(d) == "prompt"
    for _ in range(10):
        if active_id(d) == "api-key":
            break
        keys(Keys.TAB)
    assert active_id(d) == "api-key"
    keys(API_KEY, Keys.TAB)  # leaving the field applies it
    models = served_models(replay_server, Authorization=f"Bearer {API_KEY}")
    wait_for(lambda: model_options(d) == [m["id"] for m in models], what="the models after the key")
    js(d, "document.getElementById('tools').focus()")
    by_css(d, "#tools")[0].send_keys(json.dumps(TOOLS))
    js(d, "document.getElementById('prompt').focus()")
    prompts_before = len(replay_server.prompt_log.read_text().splitlines()) if replay_server.prompt_log.exists() else 0
    keys(QUESTION, Keys.ENTER)
    wait_for(lambda: len(assistant_turns(d)) == 1 and assistant_turns(d)[0].get_attribute("data-state") == "done",
             what="the first turn")
    first = turn_view(assistant_turns(d)[0])

    # The oracle: the official SDK's view of the same request.
    client = openai_client(replay_server, api_key=API_KEY)
    messages = [{"role": "user", "content": QUESTION}]
    sdk = client.chat.completions.create(model=models[0]["id"], messages=messages, tools=TOOLS,
                                         reasoning_effort="medium").choices[0].message
    assert first["reasoning"] == sdk.model_extra["reasoning_content"] and first["reasoning_shown"]
    assert first["answer"] == (sdk.content or "")
    assert first["tool_calls"] == [{"name": c.function.name, "arguments": c.function.arguments}
                                   for c in sdk.tool_calls]
    assert json.loads(first["tool_calls"][0]["arguments"])  # arguments shown whole

    # The tool's result goes back through the box the call shows, then the button after it.
    assert js(d, "return document.activeElement.classList.contains('tool-output')")
    keys(TOOL_OUTPUT, Keys.TAB, Keys.ENTER)
    wait_for(lambda: len(assistant_turns(d)) == 2 and assistant_turns(d)[1].get_attribute("data-state") == "done",
             what="the second turn")
    second = turn_view(assistant_turns(d)[1])
    call = sdk.tool_calls[0]
    messages += [{"role": "assistant", "content": None, "reasoning_content": sdk.model_extra["reasoning_content"],
                  "tool_calls": [{"id": call.id, "type": "function",
                                  "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                 {"role": "tool", "tool_call_id": call.id, "content": TOOL_OUTPUT}]
    sdk2 = client.chat.completions.create(model=models[0]["id"], messages=messages, tools=TOOLS,
                                          reasoning_effort="medium").choices[0].message
    assert second["reasoning"] == sdk2.model_extra["reasoning_content"]
    assert second["answer"] == sdk2.content and second["tool_calls"] == []
    assert not by_css(d, "#messages > li.assistant:last-child .reasoning")[0].get_attribute("open")  # collapsed
    # The page sent the whole history: its second prompt is the SDK's second prompt, token for token.
    prompts = [json.loads(line)["prompt"]
               for line in replay_server.prompt_log.read_text().splitlines()[prompts_before:]]
    assert len(prompts) == 4  # page, SDK (first turn), page, SDK (second turn)
    text = [tik.decode(p) for p in prompts]
    assert (text[0], text[2]) == (text[1], text[3])  # readable first
    assert (prompts[0], prompts[2]) == (prompts[1], prompts[3])
    assert sdk.model_extra["reasoning_content"] in text[2] and TOOL_OUTPUT in text[2]

    # A collapsed reasoning block opens from the keyboard.
    js(d, "document.querySelector('#messages > li.assistant summary').focus()")
    keys(Keys.ENTER)
    assert by_css(d, "#messages > li.assistant .reasoning")[0].get_attribute("open")
    js(d, "document.getElementById('prompt').focus()")

    png = d.get_screenshot_as_png()
    check_png(d, png, tmp_path / "chat-page.png")
    if SCREENSHOT_OUT:
        pathlib.Path(SCREENSHOT_OUT).write_bytes(png)


def test_model_output_is_text_not_markup(browser, replay_server):
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, replay_server)
    box = by_css(d, "#api-key")[0]
    box.send_keys(API_KEY, Keys.TAB)
    wait_for(lambda: model_options(d), what="the models")
    prompt = by_css(d, "#prompt")[0]
    prompt.send_keys(HOSTILE, Keys.ENTER)
    wait_for(lambda: assistant_turns(d) and assistant_turns(d)[-1].get_attribute("data-state") == "done",
             what="the answer")
    sdk = openai_client(replay_server, api_key=API_KEY).chat.completions.create(
        model="gpt-oss-page", messages=[{"role": "user", "content": HOSTILE}]).choices[0].message
    view = turn_view(assistant_turns(d)[-1])
    assert view["answer"] == sdk.content and view["reasoning"] == sdk.model_extra["reasoning_content"]
    assert "<img" in view["answer"]  # shown as the text it is
    assert by_css(d, "#messages .answer *, #messages .reasoning-text *") == []
    assert js(d, "return window.__injected === undefined")


def test_errors_are_shown_and_lose_nothing(browser, replay_server):
    from selenium.webdriver.common.keys import Keys
    d = browser
    open_page(d, replay_server)
    by_css(d, "#api-key")[0].send_keys(API_KEY, Keys.TAB)
    wait_for(lambda: model_options(d), what="the models")
    prompt = by_css(d, "#prompt")[0]

    # Tools that are not JSON: said next to the box, nothing is sent, the message stays in the composer.
    set_field(d, "tools", "[{not json")
    prompt.send_keys(QUESTION, Keys.ENTER)
    assert by_css(d, "#tools-error")[0].text.startswith("Tools:")
    assert "tools" in by_css(d, "#status")[0].text
    assert by_css(d, "#messages > li") == [] and prompt.get_attribute("value") == QUESTION

    # Tools the server refuses: its OpenAI error message is shown and the message comes back into the box.
    bad_tools = [{"type": "function", "function": {"parameters": {}}}]
    set_field(d, "tools", json.dumps(bad_tools))
    wait_for(lambda: not by_css(d, "#send")[0].get_attribute("disabled"), what="the send button")
    prompt.clear()
    prompt.send_keys(QUESTION, Keys.ENTER)
    wait_for(lambda: assistant_turns(d) and assistant_turns(d)[-1].get_attribute("data-state") == "error",
             what="the error")
    status, _, body = post_chat(replay_server, {"messages": [{"role": "user", "content": QUESTION}],
                                                         "tools": bad_tools, "stream": True})
    message = json.loads(body)["error"]["message"]
    assert status == 400 and message in by_css(d, "#status")[0].text
    assert message in assistant_turns(d)[-1].find_element("css selector", ".meta").text
    assert prompt.get_attribute("value") == QUESTION
    assert "failed" in by_css(d, "#messages > li.user")[-1].get_attribute("class")

    # Fixed, the same message goes through, and the failed attempt is not part of the history sent.
    set_field(d, "tools", json.dumps(TOOLS))
    before = len(replay_server.prompt_log.read_text().splitlines()) if replay_server.prompt_log.exists() else 0
    prompt.send_keys(Keys.ENTER)
    wait_for(lambda: assistant_turns(d)[-1].get_attribute("data-state") == "done", what="the answer")
    assert [c["name"] for c in turn_view(assistant_turns(d)[-1])["tool_calls"]] == ["get_weather"]
    sent = json.loads(replay_server.prompt_log.read_text().splitlines()[before])["prompt"]
    status, _, body = post_chat(replay_server, {"messages": [{"role": "user", "content": QUESTION}],
                                                         "tools": TOOLS, "reasoning_effort": "medium"})
    assert status == 200
    assert json.loads(replay_server.prompt_log.read_text().splitlines()[before + 1])["prompt"] == sent


def test_event_stream_parsing_survives_any_split(browser, replay_server):
    """The page's SSE reader against a body cut into pieces of 1..7 bytes (inside UTF-8 characters and line ends
    too), with LF and CRLF line ends and multi-line data: it must hand over exactly the events that were sent."""
    d = browser
    open_page(d, replay_server)
    events = [{"index": k, "delta": {"content": "é💖 <b>\n" * k}} for k in range(12)]
    for newline in ("\n", "\r\n"):
        text = "".join(f"data: {json.dumps(e, ensure_ascii=False)}{newline}{newline}" for e in events[:6])
        # A data field may span lines: the lines are joined with \n (JSON does not mind the break).
        text += "".join(f"data: {json.dumps(e, ensure_ascii=False, indent=1).replace(chr(10), newline + 'data: ')}"
                        f"{newline}{newline}" for e in events[6:])
        text += f": a comment{newline}{newline}data: [DONE]{newline}{newline}data: {{\"after\": 1}}{newline}{newline}"
        raw = text.encode()
        pieces, at, size = [], 0, 1
        while at < len(raw):
            pieces.append(list(raw[at:at + size]))
            at, size = at + size, size % 7 + 1
        got = d.execute_async_script("""
          const [pieces, done] = [arguments[0], arguments[arguments.length - 1]];
          const body = new ReadableStream({start(c) { for (const p of pieces) c.enqueue(new Uint8Array(p)); c.close(); }});
          const seen = [];
          readEvents(body, (e) => seen.push(e)).then(() => done(seen), (e) => done(String(e)));
        """, pieces)
        assert got == events, newline


def test_page_loads_while_the_model_loads(browser, tmp_path):
    """The page is there at once; a message sent before the model is ready gets the server's 503 message and stays
    in the box, and goes through once the model is loaded."""
    from selenium.webdriver.common.keys import Keys
    script = {"rules": [{"match": "", "output": "<|channel|>final<|message|>ready now<|return|>"}],
              "load_delay_ms": 4000}
    (tmp_path / "script.json").write_text(json.dumps(script), encoding="utf-8")
    with OrchidServer("synthetic:tiny", "--replay", tmp_path / "script.json", wait_ready=False) as s:
        d = browser
        open_page(d, s)
        wait_for(lambda: model_options(d), what="the model list")
        prompt = by_css(d, "#prompt")[0]
        prompt.send_keys("Hello", Keys.ENTER)
        wait_for(lambda: assistant_turns(d) and assistant_turns(d)[-1].get_attribute("data-state") != "streaming",
                 what="the first attempt")
        status, _, body = post_chat(s, {"messages": [{"role": "user", "content": "Hello"}], "stream": True})
        assert status == 503, "the model loaded too soon for this test"
        message = json.loads(body)["error"]["message"]
        assert assistant_turns(d)[-1].get_attribute("data-state") == "error"
        assert message in by_css(d, "#status")[0].text and prompt.get_attribute("value") == "Hello"
        s.wait_ready()
        prompt.send_keys(Keys.ENTER)
        wait_for(lambda: assistant_turns(d)[-1].get_attribute("data-state") == "done", what="the answer")
        sdk = openai_client(s).chat.completions.create(model=served_models(s)[0]["id"],
                                                       messages=[{"role": "user", "content": "Hello"}])
        assert turn_view(assistant_turns(d)[-1])["answer"] == sdk.choices[0].message.content
