// orchid's built-in chat page: a client of the server's own OpenAI API (/v1/models, /v1/chat/completions with
// stream: true). Plain JS, no dependencies. Model output only ever enters the page as text nodes (never as
// HTML), so whatever a model writes is shown, not run.
'use strict';

const $ = (id) => document.getElementById(id);
const SETTINGS_KEY = 'orchid.chat.settings';
const API_KEY_KEY = 'orchid.chat.api-key';  // per tab (sessionStorage): a key should not outlive the tab
const PERSISTED = ['effort', 'system', 'temperature', 'top-p', 'max-tokens', 'seed', 'tools', 'tool-choice'];

const chat = {
  history: [],        // the OpenAI messages of the conversation so far (without the system prompt)
  controller: null,   // AbortController of the request in flight
};

function setStatus(text, isError = false) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('error', isError);
}

function authHeaders() {
  const key = $('api-key').value.trim();
  const h = {'Content-Type': 'application/json'};
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// The message of an OpenAI error body, or the status line when the body is something else.
async function errorMessage(response) {
  const text = await response.text();
  try {
    const e = JSON.parse(text).error;
    if (e && e.message) return `${response.status}: ${e.message}`;
  } catch (_) { /* not JSON */ }
  return `${response.status} ${response.statusText}`;
}

// ---- settings ----

function loadSettings() {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem(SETTINGS_KEY) || '{}'); } catch (_) { saved = {}; }
  for (const id of PERSISTED) if (typeof saved[id] === 'string') $(id).value = saved[id];
  $('api-key').value = sessionStorage.getItem(API_KEY_KEY) || '';
}

function saveSettings() {
  const values = {};
  for (const id of PERSISTED) values[id] = $(id).value;
  try {
    localStorage.setItem(SETTINGS_KEY, JSON.stringify(values));
    sessionStorage.setItem(API_KEY_KEY, $('api-key').value);
  } catch (_) { /* storage may be off; settings then last for the page */ }
}

// The request's optional fields from the settings; throws Error with a message naming the bad field.
function requestSettings() {
  const body = {reasoning_effort: $('effort').value};
  const number = (id, field, integer) => {
    const raw = $(id).value.trim();
    if (raw === '') return;
    const v = Number(raw);
    if (!Number.isFinite(v) || (integer && !Number.isInteger(v))) throw new Error(`${field}: not a number`);
    body[field] = v;
  };
  number('temperature', 'temperature', false);
  number('top-p', 'top_p', false);
  number('max-tokens', 'max_tokens', true);
  number('seed', 'seed', true);
  const tools = $('tools').value.trim();
  $('tools-error').textContent = '';
  if (tools) {
    let parsed;
    try { parsed = JSON.parse(tools); } catch (e) {
      $('tools-error').textContent = `Tools: ${e.message}`;
      throw new Error('tools: not valid JSON');
    }
    if (!Array.isArray(parsed)) {
      $('tools-error').textContent = 'Tools: expected a JSON array';
      throw new Error('tools: expected a JSON array');
    }
    if (parsed.length) body.tools = parsed;
  }
  // auto (or empty), none, required, or the name of one of the tools (that call is then forced).
  const choice = $('tool-choice').value.trim();
  if (choice === 'none' || choice === 'required') body.tool_choice = choice;
  else if (choice && choice !== 'auto') body.tool_choice = {type: 'function', function: {name: choice}};
  return body;
}

// The tool choice box offers auto, none, required and the function names of the tools box.
function offerToolChoices() {
  let names = [];
  try {
    const tools = JSON.parse($('tools').value || '[]');
    if (Array.isArray(tools)) names = tools.map((t) => t && t.function && t.function.name).filter(Boolean);
  } catch (_) { /* shown when sending */ }
  $('tool-choices').replaceChildren(...['auto', 'none', 'required', ...names].map((v) => {
    const o = document.createElement('option');
    o.value = v;
    return o;
  }));
}

// ---- models ----

let modelsRetry = null;

async function loadModels() {
  clearTimeout(modelsRetry);
  let response;
  try {
    response = await fetch('/v1/models', {headers: authHeaders()});
  } catch (e) {
    setStatus(`Cannot reach the server: ${e.message}`, true);
    modelsRetry = setTimeout(loadModels, 2000);
    return;
  }
  if (response.status === 503) {  // the model is still loading
    setStatus('The model is loading…');
    modelsRetry = setTimeout(loadModels, 1000);
    return;
  }
  if (!response.ok) {
    const hint = response.status === 401 ? ' Enter the API key in Settings.' : '';
    setStatus(`Models: ${await errorMessage(response)}.${hint}`, true);
    return;
  }
  const list = (await response.json()).data || [];
  const select = $('model');
  const previous = select.value;
  select.replaceChildren(...list.map((m) => {
    const o = document.createElement('option');
    o.value = m.id;
    o.textContent = m.max_model_len ? `${m.id} (context ${m.max_model_len})` : m.id;
    return o;
  }));
  if (list.some((m) => m.id === previous)) select.value = previous;
  setStatus(list.length ? 'Ready.' : 'The server lists no model.', !list.length);
}

// ---- the conversation view ----

const messages = $('messages');

function nearBottom() {
  return messages.scrollHeight - messages.scrollTop - messages.clientHeight < 48;
}

function keepInView(wasNearBottom) {
  if (wasNearBottom) messages.scrollTop = messages.scrollHeight;
}

function addUserMessage(text) {
  const li = document.createElement('li');
  li.className = 'message user';
  li.dataset.role = 'user';
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = 'you';
  const body = document.createElement('div');
  body.className = 'text';
  body.textContent = text;
  li.append(who, body);
  messages.append(li);
  messages.scrollTop = messages.scrollHeight;
  return li;
}

// One assistant turn as it streams: reasoning, answer and tool calls each in their own element.
class AssistantTurn {
  constructor() {
    this.el = $('assistant-template').content.firstElementChild.cloneNode(true);
    this.reasoningBox = this.el.querySelector('.reasoning');
    this.reasoningText = this.el.querySelector('.reasoning-text').appendChild(document.createTextNode(''));
    this.answerText = this.el.querySelector('.answer').appendChild(document.createTextNode(''));
    this.callList = this.el.querySelector('.tool-calls');
    this.calls = [];  // by the delta's index: {id, name, arguments, el, nameEl, argsText, output}
    this.finishReason = null;
    this.usage = null;
    this.deltas = 0;
    this.started = performance.now();
    this.userToggledReasoning = false;
    this.reasoningBox.querySelector('summary').addEventListener('click', () => {
      this.userToggledReasoning = true;
    });
    this.el.querySelector('.meta').textContent = 'waiting for the model…';
    messages.append(this.el);
    messages.scrollTop = messages.scrollHeight;
  }

  get answer() { return this.answerText.data; }
  get reasoning() { return this.reasoningText.data; }

  // One parsed SSE chunk of /v1/chat/completions.
  apply(chunk) {
    if (chunk.usage) this.usage = chunk.usage;
    const choice = (chunk.choices || [])[0];
    if (!choice) return;
    const follow = nearBottom();
    const delta = choice.delta || {};
    // orchid sends both names of the analysis channel; other servers one of them.
    const reasoning = delta.reasoning_content ?? delta.reasoning;
    if (typeof reasoning === 'string' && reasoning) this.addReasoning(reasoning);
    if (typeof delta.content === 'string' && delta.content) this.addAnswer(delta.content);
    for (const call of delta.tool_calls || []) this.addCallDelta(call);
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
    this.showMeta();
    keepInView(follow);
  }

  addReasoning(text) {
    if (this.reasoningBox.hidden) {
      this.reasoningBox.hidden = false;
      this.reasoningBox.open = true;  // open while it streams; closed once the answer starts
    }
    this.reasoningText.appendData(text);
    this.deltas++;
  }

  collapseReasoning() {
    if (!this.userToggledReasoning) this.reasoningBox.open = false;
  }

  addAnswer(text) {
    if (!this.answerText.data) this.collapseReasoning();
    this.answerText.appendData(text);
    this.deltas++;
  }

  addCallDelta(delta) {
    const index = Number.isInteger(delta.index) ? delta.index : this.calls.length;
    let call = this.calls[index];
    if (!call) {
      this.collapseReasoning();
      const el = $('tool-call-template').content.firstElementChild.cloneNode(true);
      call = {id: '', name: '', arguments: '', el,
              nameEl: el.querySelector('.tool-name'), idEl: el.querySelector('.tool-id'),
              argsText: el.querySelector('.tool-arguments').appendChild(document.createTextNode('')),
              output: el.querySelector('.tool-output')};
      el.dataset.index = String(index);
      this.calls[index] = call;
      this.callList.hidden = false;
      this.callList.append(el);
    }
    // Pieces are joined as the OpenAI SDK's stream helpers join them.
    if (delta.id) call.id = delta.id;
    const fn = delta.function || {};
    if (typeof fn.name === 'string') call.name += fn.name;
    if (typeof fn.arguments === 'string' && fn.arguments) {
      call.arguments += fn.arguments;
      call.argsText.appendData(fn.arguments);
    }
    call.nameEl.textContent = call.name;
    call.idEl.textContent = call.id;
    this.deltas++;
  }

  showMeta(note) {
    const parts = [];
    if (note) parts.push(note);
    else if (this.finishReason) parts.push(this.finishReason);
    const tokens = this.usage ? this.usage.completion_tokens : this.deltas;
    const seconds = (performance.now() - this.started) / 1000;
    parts.push(`${tokens} ${this.usage ? 'tokens' : 'chunks'}`);
    parts.push(`${seconds.toFixed(1)} s`);
    if (this.usage && seconds > 0) parts.push(`${(tokens / seconds).toFixed(1)} tok/s`);
    this.el.querySelector('.meta').textContent = parts.join(' · ');
  }

  end(state, note) {
    this.el.dataset.state = state;
    if (this.reasoningBox.open && this.answer) this.collapseReasoning();
    this.showMeta(note);
  }

  // The turn as a message of the history sent back with the next request.
  message(complete) {
    const calls = complete ? this.calls.filter(Boolean) : [];
    if (!calls.length) return this.answer ? {role: 'assistant', content: this.answer} : null;
    const m = {role: 'assistant', content: this.answer || null,
               tool_calls: calls.map((c) => ({id: c.id, type: 'function',
                                              function: {name: c.name, arguments: c.arguments}}))};
    // Harmony keeps the reasoning that led to a tool call in the prompt of the turn that continues it.
    if (this.reasoning) m.reasoning_content = this.reasoning;
    return m;
  }

  // After a turn that ended in tool calls: a box per call for its result, and a button to send them.
  askForResults(onSend) {
    const calls = this.calls.filter(Boolean);
    for (const c of calls) c.el.querySelector('.tool-result').hidden = false;
    const button = this.el.querySelector('.send-results');
    button.hidden = false;
    button.addEventListener('click', () => {
      button.disabled = true;
      for (const c of calls) c.output.readOnly = true;
      onSend(calls.map((c) => ({role: 'tool', tool_call_id: c.id, content: c.output.value})));
    }, {once: true});
    calls[0].output.focus();
  }
}

// ---- streaming ----

// Calls onData with each event's data of a text/event-stream body until [DONE] or the end of the body.
async function readEvents(body, onData) {
  const reader = body.getReader();
  try {
    await readEventsFrom(reader, onData);
  } catch (e) {
    reader.cancel().catch(() => {});  // closes the connection, so the server stops generating
    throw e;
  }
}

async function readEventsFrom(reader, onData) {
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), {stream: !done});
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
      const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      onData(JSON.parse(data));
    }
    if (done) return;
  }
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  document.body.classList.toggle('busy', busy);
}

// Sends the history and streams the answer into a new assistant turn. Resolves when the turn has ended.
async function runTurn() {
  const history = chat.history;  // a new chat while this turn streams starts a new array
  let settings;
  try {
    settings = requestSettings();
  } catch (e) {
    setStatus(e.message, true);
    return false;
  }
  saveSettings();
  const system = $('system').value.trim();
  const body = {
    model: $('model').value || undefined,
    messages: [...(system ? [{role: 'system', content: system}] : []), ...history],
    stream: true,
    stream_options: {include_usage: true},
    ...settings,
  };
  const turn = new AssistantTurn();
  const controller = new AbortController();
  chat.controller = controller;
  setBusy(true);
  setStatus('Streaming…');
  try {
    const response = await fetch('/v1/chat/completions', {
      method: 'POST', headers: authHeaders(), body: JSON.stringify(body), signal: controller.signal});
    if (!response.ok) throw new Error(await errorMessage(response));
    await readEvents(response.body, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message || 'the server reported an error');
      turn.apply(chunk);
    });
    if (!turn.finishReason) throw new Error('the stream ended before the answer did');
    turn.end('done');
    const m = turn.message(true);
    if (m) history.push(m);
    setStatus('Ready.');
    if (turn.finishReason === 'tool_calls' && turn.calls.some(Boolean))
      turn.askForResults((results) => { history.push(...results); runTurn(); });
    else $('prompt').focus();
    return true;
  } catch (e) {
    if (controller.signal.aborted) {
      turn.end('stopped', 'stopped');
      const m = turn.message(false);  // what was shown stays in the conversation; cut-off tool calls do not
      if (m) history.push(m);
      setStatus('Stopped.');
      $('prompt').focus();
      return true;
    }
    turn.end('error', `error: ${e.message}`);
    setStatus(e.message, true);
    return false;
  } finally {
    if (chat.controller === controller) chat.controller = null;
    setBusy(false);
  }
}

function stop() {
  if (chat.controller) chat.controller.abort();
}

async function send() {
  const prompt = $('prompt');
  const text = prompt.value;
  if (!text.trim() || chat.controller) return;
  try {
    requestSettings();  // a mistake in the settings is said before anything is sent or shown
  } catch (e) {
    setStatus(e.message, true);
    return;
  }
  const userEl = addUserMessage(text);
  const history = chat.history;
  history.push({role: 'user', content: text});
  prompt.value = '';
  if (!(await runTurn())) {
    // Failed before the model answered: the message goes back into the box, nothing is lost.
    history.pop();
    userEl.classList.add('failed');
    if (!prompt.value) prompt.value = text;
    prompt.focus();
  }
}

function newChat() {
  stop();
  chat.history = [];
  messages.replaceChildren();
  setStatus('New conversation.');
  $('prompt').focus();
}

// ---- wiring ----

loadSettings();
offerToolChoices();
$('tools').addEventListener('input', offerToolChoices);
$('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && chat.controller) {
    e.preventDefault();
    stop();
  }
});
$('stop').addEventListener('click', () => { stop(); $('prompt').focus(); });
$('new-chat').addEventListener('click', newChat);
$('api-key').addEventListener('change', () => { saveSettings(); loadModels(); });
for (const id of PERSISTED) $(id).addEventListener('change', saveSettings);
loadModels();
$('prompt').focus();
