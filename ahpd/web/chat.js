// The chat pane: the open session's default chat, reduced by the page
// (client.js), drawn turn by turn. Agent text goes through markdown.js
// (DOM nodes, never HTML). What a person can do here, all as dispatched
// actions: send a message (chat/turnStarted), queue one while a turn runs
// (chat/pendingMessageSet), cancel the turn, approve or deny a tool call,
// answer or decline a question (chat/inputCompleted).

import { el, replace, append } from "./dom.js";
import { render, inline } from "./markdown.js";
import { confirmDialog } from "./confirm.js";

const $ = (id) => document.getElementById(id);
const newId = (prefix) => `${prefix}-${crypto.randomUUID().slice(0, 12)}`;

// StringOrMarkdown: a plain string, or {markdown: "..."}.
function said(value, block = false) {
  if (value === undefined || value === null) return [];
  if (typeof value === "string") return [document.createTextNode(value)];
  if (typeof value.markdown === "string") return block ? render(value.markdown) : inline(value.markdown);
  return [document.createTextNode(JSON.stringify(value))];
}

export class ChatPane {
  constructor(app) {
    this.app = app;
    this.client = app.client;
    this.channel = null;
    this.nodes = new WeakMap(); // a turn or part object -> its node, while it is unchanged
    this.started = new Map(); // turn id -> when we started it (for the cancel's duration)
  }

  bind() {
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      this.send();
    });
    $("composer-text").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.send();
      }
    });
    $("cancel").addEventListener("click", () => this.cancel());
  }

  close() {
    if (this.channel) this.client.unsubscribe(this.channel);
    this.channel = null;
    replace($("chat-log"));
    replace($("chat-head"));
    replace($("chat-queue"));
    $("composer").hidden = true;
  }

  async onSession(session) {
    const chats = session.chats || [];
    const known = chats.some((c) => c.resource === this.channel);
    const chat = known ? this.channel : session.defaultChat || (chats[0] || {}).resource;
    const picker =
      chats.length > 1
        ? el(
            "select",
            { id: "chat-picker", onchange: (e) => this.switchTo(e.target.value) },
            chats.map((c) => el("option", { value: c.resource, text: c.title || (c.resource === session.defaultChat ? "main chat" : c.resource) })),
          )
        : null;
    if (picker) picker.value = chat;
    replace(
      $("chat-head"),
      el("h2", { id: "chat-title", text: session.title || "(untitled)" }),
      el("p", { class: "hint", text: `${session.provider || ""} · ${session.lifecycle || ""}${session.activity ? " · " + session.activity : ""}` }),
      session.creationError ? el("p", { class: "error", text: `Could not start: ${session.creationError.message || ""}` }) : null,
      el(
        "div",
        { class: "buttons" },
        picker ? el("label", {}, "Chat ", picker) : null,
        el("button", { type: "button", id: "new-chat", text: "New chat", onclick: () => this.newChat() }),
        el("button", {
          type: "button",
          id: "archive",
          text: session.status & 64 ? "Unarchive" : "Archive",
          onclick: () => this.client.dispatch(this.app.session, { type: "session/isArchivedChanged", isArchived: !(session.status & 64) }),
        }),
        el("button", { type: "button", id: "dispose", text: "Dispose…", onclick: () => this.dispose() }),
      ),
    );
    $("chat-empty").hidden = true;
    if (!chat || chat === this.channel) return;
    this.channel = chat;
    $("composer").hidden = false;
    const state = await this.client.subscribe(chat);
    if (this.channel === chat) this.draw(state);
  }

  onState(channel, state) {
    if (channel === this.channel) this.draw(state);
  }

  // Dispose of the open session (its chats, its agent), once the person said so.
  async dispose() {
    const uri = this.app.session;
    if (!uri || !(await confirmDialog("Dispose of this session? Its chats are gone for good."))) return;
    try {
      await this.client.call("disposeSession", { channel: uri });
    } catch (err) {
      $("chat-head").append(el("p", { class: "error", text: `Could not dispose of it: ${err.message}` }));
      return;
    }
    this.app.closeSession();
  }

  // A second conversation in the open session (`createChat`), opened at once.
  async newChat() {
    const session = this.app.session;
    const chat = `ahp-chat:/${crypto.randomUUID()}`;
    try {
      await this.client.call("createChat", { channel: session, chat });
    } catch (err) {
      $("chat-head").append(el("p", { class: "error", text: `Could not open a chat: ${err.message}` }));
      return;
    }
    await this.switchTo(chat);
  }

  // Another chat of the open session (a session may hold several).
  async switchTo(chat) {
    if (chat === this.channel) return;
    if (this.channel) this.client.unsubscribe(this.channel);
    this.channel = chat;
    replace($("chat-log"));
    const state = await this.client.subscribe(chat);
    if (this.channel === chat) this.draw(state);
  }

  state() {
    return this.channel ? this.client.states.get(this.channel) : null;
  }

  draw(state) {
    if (!state) return;
    const log = $("chat-log");
    const turns = [...(state.turns || []), ...(state.activeTurn ? [state.activeTurn] : [])];
    const wanted = turns.map((turn) => this.turnNode(turn, turn === state.activeTurn));
    // keep nodes in place where they did not change, so an answer being typed survives
    for (let i = 0; i < wanted.length; i++) {
      if (log.children[i] !== wanted[i]) log.insertBefore(wanted[i], log.children[i] || null);
    }
    while (log.children.length > wanted.length) log.removeChild(log.lastChild);
    replace(
      $("chat-queue"),
      (state.queuedMessages || []).map((m) => el("div", { class: "queued", text: `queued: ${m.message.text}` })),
      state.steeringMessage ? el("div", { class: "queued", text: `steering: ${state.steeringMessage.message.text}` }) : null,
    );
    const busy = !!state.activeTurn;
    $("send").textContent = busy ? "Queue" : "Send";
    $("cancel").hidden = !busy;
    document.body.dataset.turn = busy ? "active" : "idle";
    if (state.activity) $("cancel").title = state.activity;
  }

  turnNode(turn, active) {
    const cached = this.nodes.get(turn);
    if (cached) return cached;
    const node = el("article", { class: "turn" + (active ? " active" : ""), dataset: { turn: turn.id } });
    append(node, [el("div", { class: "user", text: (turn.message && turn.message.text) || "" })]);
    const reply = el("div", { class: "reply" });
    for (const part of turn.responseParts || []) reply.append(this.partNode(turn, part, active));
    node.append(reply);
    if (!active) node.append(el("div", { class: `turn-state ${turn.state}`, text: turn.state }));
    this.nodes.set(turn, node);
    return node;
  }

  partNode(turn, part, active) {
    const cached = this.nodes.get(part);
    if (cached) return cached;
    let node;
    if (part.kind === "markdown") node = el("div", { class: "markdown" }, ...render(part.content));
    else if (part.kind === "reasoning") node = el("details", { class: "reasoning" }, el("summary", { text: "reasoning" }), ...render(part.content));
    else if (part.kind === "toolCall") node = this.toolNode(turn, part.toolCall, active);
    else if (part.kind === "inputRequest") node = this.questionNode(part, active);
    else if (part.kind === "error") node = el("p", { class: "error" }, ...said((part.error && part.error.message) || part.message || "the turn failed"));
    else if (part.kind === "systemNotification") node = el("p", { class: "hint" }, ...said(part.content));
    else if (part.kind === "resource") node = el("p", { class: "hint", text: `resource: ${part.uri || ""}` });
    else node = el("p", { class: "hint", text: `(${part.kind})` });
    this.nodes.set(part, node);
    return node;
  }

  toolNode(turn, tc, active) {
    const name = tc.displayName || tc.toolName || "tool";
    const node = el(
      "div",
      { class: "tool", dataset: { tool: tc.toolCallId, status: tc.status } },
      el("strong", { text: name }),
      el("span", { class: `state ${tc.status}`, text: tc.reason ? `${tc.status} (${tc.reason})` : tc.status }),
      el("div", { class: "invocation" }, ...said(tc.status === "completed" && tc.pastTenseMessage ? tc.pastTenseMessage : tc.invocationMessage)),
    );
    if (tc.status === "pending-confirmation" && active) {
      if (tc.confirmationTitle) node.append(el("p", {}, ...said(tc.confirmationTitle)));
      if (typeof tc.toolInput === "string" && tc.toolInput) node.append(el("pre", { class: "code", text: tc.toolInput.slice(0, 2000) }));
      node.append(
        el(
          "div",
          { class: "buttons" },
          el("button", { type: "button", class: "primary approve", text: "Approve", onclick: () => this.confirm(turn, tc, true) }),
          el("button", { type: "button", class: "deny", text: "Deny", onclick: () => this.confirm(turn, tc, false) }),
        ),
      );
    }
    if (tc.error && tc.error.message) node.append(el("p", { class: "error", text: tc.error.message }));
    for (const content of tc.content || []) {
      if (content.type === "terminal" && content.resource) {
        node.append(
          el("button", { type: "button", class: "watch-terminal", text: "Watch its terminal", onclick: () => this.app.terminal.open(content.resource) }),
        );
        if (content.result && content.result.preview) node.append(el("pre", { class: "code", text: content.result.preview }));
      } else if (content.type === "text" && content.text) node.append(el("pre", { class: "code", text: content.text.slice(0, 4000) }));
    }
    return node;
  }

  questionNode(part, active) {
    const request = part.request;
    const node = el("form", { class: "question", dataset: { request: request.id } });
    node.append(el("p", {}, ...said(request.message || "The agent asks:")));
    if (part.response) {
      node.append(el("p", { class: "hint", text: `answered: ${part.response}` }));
      return node;
    }
    if (!active) return node;
    const fields = [];
    for (const q of request.questions || []) {
      const label = el("fieldset", { class: "q", dataset: { question: q.id } }, el("legend", {}, ...said(q.title || q.message || q.id)));
      if (q.title && q.message && q.title !== q.message) label.append(el("p", {}, ...said(q.message)));
      const radios = (options) =>
        options.map(([value, text]) => el("label", {}, el("input", { type: "radio", name: `${request.id}-${q.id}`, value }), ` ${text}`));
      if (q.kind === "single-select") append(label, radios((q.options || []).map((o) => [o.id, o.label])));
      else if (q.kind === "multi-select") append(label, (q.options || []).map((o) => el("label", {}, el("input", { type: "checkbox", value: o.id }), ` ${o.label}`)));
      else if (q.kind === "boolean") append(label, radios([["true", "yes"], ["false", "no"]]));
      else label.append(el("input", { type: q.kind === "number" || q.kind === "integer" ? "number" : "text", class: "answer" }));
      fields.push([q, label]);
      node.append(label);
    }
    node.append(
      el(
        "div",
        { class: "buttons" },
        el("button", { type: "submit", class: "primary answer-submit", text: "Answer" }),
        el("button", { type: "button", class: "decline", text: "Decline", onclick: () => this.complete(request.id, "decline") }),
      ),
    );
    node.addEventListener("submit", (e) => {
      e.preventDefault();
      const answers = {};
      for (const [q, label] of fields) {
        const value = readAnswer(q, label);
        answers[q.id] = value === null ? { state: "skipped" } : { state: "submitted", value };
      }
      this.complete(request.id, "accept", answers);
    });
    return node;
  }

  complete(requestId, response, answers) {
    const action = { type: "chat/inputCompleted", requestId, response };
    if (answers && Object.keys(answers).length) action.answers = answers;
    this.client.dispatch(this.channel, action);
  }

  confirm(turn, tc, approved) {
    const action = { type: "chat/toolCallConfirmed", turnId: turn.id, toolCallId: tc.toolCallId, approved };
    if (approved) action.confirmed = "user-action";
    else action.reason = "denied";
    this.client.dispatch(this.channel, action);
  }

  send() {
    const box = $("composer-text");
    const text = box.value.trim();
    if (!text || !this.channel) return;
    const state = this.state();
    const message = { text, origin: { kind: "user" } };
    if (state && state.activeTurn) {
      this.client.dispatch(this.channel, { type: "chat/pendingMessageSet", kind: "queued", id: newId("queued"), message });
    } else {
      const turnId = newId("turn");
      this.started.set(turnId, Date.now());
      this.client.dispatch(this.channel, { type: "chat/turnStarted", turnId, startedAt: new Date().toISOString(), message });
    }
    box.value = "";
  }

  cancel() {
    const state = this.state();
    if (!state || !state.activeTurn) return;
    const id = state.activeTurn.id;
    const began = this.started.get(id) ?? Date.parse(state.activeTurn.startedAt || "") ?? Date.now();
    const duration = Math.max(0, Date.now() - (Number.isNaN(began) ? Date.now() : began));
    this.client.dispatch(this.channel, { type: "chat/turnCancelled", turnId: id, duration });
  }
}

function readAnswer(q, label) {
  if (q.kind === "single-select") {
    const picked = label.querySelector("input[type=radio]:checked");
    return picked ? { kind: "selected", value: picked.value } : null;
  }
  if (q.kind === "multi-select") {
    const picked = [...label.querySelectorAll("input[type=checkbox]:checked")].map((i) => i.value);
    return picked.length ? { kind: "selected-many", value: picked } : null;
  }
  if (q.kind === "boolean") {
    const picked = label.querySelector("input[type=radio]:checked");
    return picked ? { kind: "boolean", value: picked.value === "true" } : null;
  }
  const input = label.querySelector("input.answer");
  if (!input || input.value === "") return null;
  if (q.kind === "number" || q.kind === "integer") return { kind: "number", value: Number(input.value) };
  return { kind: "text", value: input.value };
}
