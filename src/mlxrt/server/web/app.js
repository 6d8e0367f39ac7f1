// The chat page of `mlxrt server`. Answers stream from /v1/chat/completions (the same endpoint and
// request body any OpenAI client sends); conversations and settings live in localStorage.
"use strict";

const $ = (id) => document.getElementById(id);
const STORE_KEY = "mlxrt.chat.v1";
const SETTINGS = { system: "system", temperature: "temperature", top_p: "top-p", max_tokens: "max-tokens",
                   seed: "seed", template_kwargs: "template-kwargs", model: "model" };

const state = loadState(); // { conversations: [{id, title, updated, messages}], current, settings }
let running = null;        // { controller, conversation } while an answer streams

function loadState() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE_KEY));
    if (saved && Array.isArray(saved.conversations)) return saved;
  } catch (e) { /* unreadable: start afresh */ }
  return { conversations: [], current: null, settings: {} };
}

function save() {
  localStorage.setItem(STORE_KEY, JSON.stringify(state));
}

const current = () => state.conversations.find((c) => c.id === state.current) || null;

// --- Settings -------------------------------------------------------------------------------------

function readSettings() {
  for (const [key, id] of Object.entries(SETTINGS)) state.settings[key] = $(id).value;
  save();
}

function showSettings() {
  // The model is chosen once /v1/models has listed them (loadModels).
  for (const [key, id] of Object.entries(SETTINGS)) {
    if (key in state.settings && key !== "model") $(id).value = state.settings[key];
  }
}

async function loadModels() {
  const select = $("model");
  try {
    const res = await fetch("/v1/models");
    const ids = (await res.json()).data.map((m) => m.id);
    select.replaceChildren(...ids.map((id) => new Option(id, id)));
    // The remembered model if it is still listed, else the server's start-up model (listed last).
    const pick = ids.find((id) => id === state.settings.model) || ids[ids.length - 1];
    if (pick) select.value = pick;
  } catch (e) {
    select.replaceChildren(new Option("(models unavailable)", ""));
  }
}

function requestBody(conversation) {
  const s = state.settings;
  const messages = [];
  if (s.system.trim()) messages.push({ role: "system", content: s.system });
  for (const m of conversation.messages) {
    if (m.role === "user" || m.content) messages.push({ role: m.role, content: m.content });
  }
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  // An empty field leaves the server's default (its --temp, --top-p, --max-tokens flags).
  if (s.temperature.trim()) body.temperature = Number(s.temperature);
  if (s.top_p.trim()) body.top_p = Number(s.top_p);
  if (s.max_tokens.trim()) body.max_tokens = parseInt(s.max_tokens, 10);
  if (s.seed.trim()) body.seed = parseInt(s.seed, 10);
  if (s.model) body.model = s.model;
  if (s.template_kwargs.trim()) body.chat_template_kwargs = JSON.parse(s.template_kwargs);
  return body;
}

// --- Conversations --------------------------------------------------------------------------------

function newConversation() {
  const conversation = { id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`,
                         title: "New chat", updated: Date.now(), messages: [] };
  state.conversations.unshift(conversation);
  state.current = conversation.id;
  save();
  return conversation;
}

function deleteConversation(id) {
  if (running && running.conversation.id === id) running.controller.abort();
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.current === id) state.current = state.conversations[0]?.id ?? null;
  save();
  render();
}

function renderList() {
  const items = [...state.conversations].sort((a, b) => b.updated - a.updated).map((c) => {
    const li = document.createElement("li");
    li.className = c.id === state.current ? "active" : "";
    li.dataset.id = c.id;
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open";
    open.textContent = c.title;
    open.onclick = () => { state.current = c.id; save(); render(); };
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "delete";
    remove.title = "Delete this conversation";
    remove.textContent = "×";
    remove.onclick = () => deleteConversation(c.id);
    li.append(open, remove);
    return li;
  });
  $("conversations").replaceChildren(...items);
}

// --- Messages -------------------------------------------------------------------------------------

function messageNode(message) {
  const node = document.createElement("div");
  node.className = `msg ${message.role}`;
  node.message = message;
  if (message.role === "user") {
    node.textContent = message.content;
    return node;
  }
  const reasoning = document.createElement("details");
  reasoning.className = "reasoning";
  reasoning.append(document.createElement("summary"), document.createElement("div"));
  const content = document.createElement("div");
  content.className = "content";
  const stats = document.createElement("div");
  stats.className = "stats";
  node.append(reasoning, content, stats);
  updateAnswer(node, message);
  return node;
}

function updateAnswer(node, message) {
  const [reasoning, content, stats] = node.children;
  reasoning.hidden = !message.reasoning;
  reasoning.firstChild.textContent = message.streaming && !message.content ? "Thinking…" : "Reasoning";
  reasoning.lastChild.textContent = message.reasoning || "";
  content.innerHTML = renderMarkdown(message.content || "");
  node.classList.toggle("streaming", Boolean(message.streaming));
  const parts = [];
  if (message.stats) {
    const { ttft_ms, tokens, tokens_per_s } = message.stats;
    if (ttft_ms != null) parts.push(`TTFT ${Math.round(ttft_ms)} ms`);
    if (tokens_per_s != null) parts.push(`${tokens_per_s.toFixed(1)} tokens/s`);
    parts.push(`${tokens} tokens`);
  }
  if (message.truncated) parts.push("max tokens reached");
  if (message.stopped) parts.push("stopped");
  if (message.error) parts.push(`error: ${message.error}`);
  stats.textContent = parts.join(" · ");
  stats.classList.toggle("error", Boolean(message.error));
}

function render() {
  renderList();
  const conversation = current();
  $("messages").replaceChildren(...(conversation ? conversation.messages.map(messageNode) : []));
  $("messages").scrollTop = $("messages").scrollHeight;
}

// --- Streaming ------------------------------------------------------------------------------------

/** The parsed `data:` events of a server-sent event stream, up to "[DONE]". */
async function* sseEvents(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue; // ": keepalive" comments while the prompt is read
        if (line === "data: [DONE]") return;
        yield JSON.parse(line.slice(6));
      }
    }
  }
}

async function errorMessage(res) {
  try {
    return (await res.json()).error.message;
  } catch (e) {
    return `HTTP ${res.status}`;
  }
}

async function send(text) {
  readSettings();
  const conversation = current() || newConversation();
  conversation.messages.push({ role: "user", content: text });
  let body;
  try {
    body = requestBody(conversation);
  } catch (e) {
    conversation.messages.pop();
    alert(`Chat template arguments: ${e.message}`);
    return;
  }
  if (conversation.title === "New chat") conversation.title = text.slice(0, 60);
  const answer = { role: "assistant", content: "", reasoning: "", streaming: true };
  conversation.messages.push(answer);
  conversation.updated = Date.now();
  save();
  render();
  // The answer's node, while its conversation is the one shown.
  const shown = () => ($("messages").lastChild?.message === answer ? $("messages").lastChild : null);

  const controller = new AbortController();
  running = { controller, conversation };
  setBusy(true);
  const started = performance.now();
  let first = null, last = null, saved = started, deltas = 0, usage = null;
  try {
    const res = await fetch("/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
                                                      body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) throw new Error(await errorMessage(res));
    for await (const event of sseEvents(res.body)) {
      if (event.error) throw new Error(event.error.message);
      if (event.usage) usage = event.usage;
      if (event.choices?.[0]?.finish_reason === "length") answer.truncated = true;
      const delta = event.choices?.[0]?.delta;
      const piece = delta?.content || "";
      const thought = delta?.reasoning || delta?.reasoning_content || "";
      const calls = delta?.tool_calls ? "\n```json\n" + JSON.stringify(delta.tool_calls, null, 2) + "\n```\n" : "";
      if (!piece && !thought && !calls) continue;
      last = performance.now();
      first ??= last;
      deltas++;
      answer.content += piece + calls;
      answer.reasoning += thought;
      if (shown()) {
        updateAnswer(shown(), answer);
        $("messages").scrollTop = $("messages").scrollHeight;
      }
      if (last - saved > 1000) { // a reload mid-answer keeps what had arrived
        save();
        saved = last;
      }
    }
  } catch (e) {
    if (e.name === "AbortError") answer.stopped = true;
    else answer.error = e.message;
  }
  // Tokens per second of decoding: the tokens after the first over the time after the first.
  const tokens = usage ? usage.completion_tokens : deltas;
  answer.stats = { ttft_ms: first == null ? null : first - started, tokens,
                   tokens_per_s: tokens > 1 && last > first ? ((tokens - 1) * 1000) / (last - first) : null };
  delete answer.streaming;
  conversation.updated = Date.now();
  running = null;
  setBusy(false);
  save();
  if (shown()) updateAnswer(shown(), answer);
  renderList();
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
}

// --- Wiring ---------------------------------------------------------------------------------------

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || running) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => running?.controller.abort());
$("new-chat").addEventListener("click", () => {
  if (!current() || current().messages.length) newConversation();
  render();
  $("input").focus();
});
$("toggle-settings").addEventListener("click", () => {
  const panel = $("settings");
  panel.hidden = !panel.hidden;
  $("toggle-settings").setAttribute("aria-expanded", String(!panel.hidden));
});
for (const id of Object.values(SETTINGS)) $(id).addEventListener("change", readSettings);
$("messages").addEventListener("click", (e) => {
  if (!e.target.classList.contains("copy")) return;
  const code = e.target.closest(".code").querySelector("code").textContent;
  navigator.clipboard?.writeText(code).then(() => { e.target.textContent = "Copied"; });
});

// An answer that was streaming when the page closed is kept as it was, marked stopped.
for (const c of state.conversations) {
  for (const m of c.messages) if (m.streaming) { delete m.streaming; m.stopped = true; }
}
showSettings();
loadModels().then(readSettings);
render();
