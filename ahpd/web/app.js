// The console's entry point: the token (from ?tkn= once, then
// sessionStorage; never a cookie, never left in the URL), the connection,
// the session list and the creation form, and the tabs. Each pane lives in
// a module of its own: chat.js, terminal.js, changes.js, inspector.js.

import { Client, ROOT } from "./client.js";
import { el, replace, shortPath, statusWord } from "./dom.js";
import { ChatPane } from "./chat.js";
import { TerminalPane } from "./terminal.js";
import { ChangesPane } from "./changes.js";
import { Inspector } from "./inspector.js";

const TOKEN_KEY = "ahpd-token";
const $ = (id) => document.getElementById(id);

function takeToken() {
  const url = new URL(location.href);
  const given = url.searchParams.get("tkn") ?? url.searchParams.get("token");
  if (given !== null) {
    sessionStorage.setItem(TOKEN_KEY, given);
    url.searchParams.delete("tkn");
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function meta(name) {
  const node = document.querySelector(`meta[name="${name}"]`);
  return node ? node.getAttribute("content") : "";
}

function socketUrl(token) {
  const port = meta("ahpd-ws-port");
  const host = location.hostname.includes(":") && !location.hostname.startsWith("[") ? `[${location.hostname}]` : location.hostname;
  return `ws://${host}:${port}/` + (token ? `?tkn=${encodeURIComponent(token)}` : "");
}

function showSignIn(message) {
  $("console").hidden = true;
  $("signin").hidden = false;
  if (message) $("signin-line").textContent = message;
  $("signin-form").onsubmit = (event) => {
    event.preventDefault();
    const token = $("signin-token").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    start(token);
  };
}

class App {
  constructor(client) {
    this.client = client;
    this.session = null; // open session URI
    this.sessionState = null;
    this.chat = new ChatPane(this);
    this.terminal = new TerminalPane(this);
    this.changes = new ChangesPane(this);
    this.inspector = new Inspector(this);
    client.addEventListener("sessions", () => this.renderSessions());
    client.addEventListener("state", (e) => this.onState(e.detail));
    client.addEventListener("status", (e) => this.onStatus(e.detail));
  }

  // The page's own controls, bound once the connection is up (a failed sign-in binds nothing).
  bind() {
    for (const pane of [this.chat, this.terminal, this.changes, this.inspector]) pane.bind();
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => this.showTab(tab.dataset.tab));
    $("create-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.create();
    });
    $("create-provider").addEventListener("change", () => this.renderModels());
    $("new-terminal").addEventListener("click", () => this.terminal.create());
  }

  showTab(name) {
    for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.tab === name);
    for (const pane of document.querySelectorAll(".pane")) pane.hidden = pane.id !== `pane-${name}`;
    document.body.dataset.tab = name;
    if (name === "inspector" && this.inspector.channel) this.inspector.drawTree();
  }

  onStatus(detail) {
    const line = $("connection");
    if (detail.connected) {
      line.textContent = "connected";
      line.className = "connection up";
    } else if (detail.retrying !== undefined) {
      line.textContent = "connection lost; reconnecting…";
      line.className = "connection down";
    } else {
      line.textContent = "disconnected";
      line.className = "connection down";
    }
    document.body.dataset.connected = detail.connected ? "yes" : "no";
  }

  onState({ channel, state }) {
    if (channel === ROOT) {
      this.renderAgents(state);
      this.renderTerminals(state);
    } else if (channel === this.session) {
      this.sessionState = state;
      this.renderSessions();
      this.chat.onSession(state);
      this.changes.onSession(state);
    }
    this.chat.onState(channel, state);
    if (channel === this.chat.channel) this.renderSessions();
    this.terminal.onState(channel, state);
    this.changes.onState(channel, state);
    this.inspector.onState(channel, state);
  }

  renderSessions() {
    const rows = [...this.client.sessions.values()].sort((a, b) => String(b.modifiedAt).localeCompare(String(a.modifiedAt)));
    replace(
      $("sessions"),
      rows.map((row) => {
        // the open session's chat, reduced here, is the fresher word: the catalogue's
        // root/sessionSummaryChanged does not always say InputNeeded while a tool call waits
        const chat = row.resource === this.session && this.chat.channel ? this.client.states.get(this.chat.channel) : null;
        const own = chat ? (row.status & ~31) | (chat.status & 31) : row.status;
        const word = statusWord(own || 0);
        const kind = word === "input needed" ? "input" : word === "in progress" ? "busy" : word;
        return el(
          "li",
          { class: "session" + (row.resource === this.session ? " open" : ""), dataset: { uri: row.resource }, onclick: () => this.open(row.resource) },
          el("span", { class: "title", text: row.title || "(untitled)" }),
          el("span", { class: `status ${kind}`, text: word }),
          row.activity ? el("span", { class: "activity", text: row.activity }) : null,
          el("span", { class: "activity", text: `${row.provider} · ${(row.workingDirectories || []).map(shortPath).join(", ")}` }),
        );
      }),
    );
  }

  renderAgents(root) {
    const select = $("create-provider");
    const chosen = select.value;
    replace(select, (root.agents || []).map((a) => el("option", { value: a.provider, text: a.displayName || a.provider })));
    if (chosen) select.value = chosen;
    this.renderModels();
  }

  renderModels() {
    const root = this.client.states.get(ROOT) || {};
    const agent = (root.agents || []).find((a) => a.provider === $("create-provider").value);
    replace($("create-model"), el("option", { value: "", text: "(default)" }), ((agent && agent.models) || []).map((m) => el("option", { value: m.id, text: m.name || m.id })));
  }

  renderTerminals(root) {
    replace(
      $("terminals"),
      (root.terminals || []).map((t) =>
        el("li", { class: "terminal-row", dataset: { uri: t.resource }, onclick: () => this.terminal.open(t.resource) }, t.title || t.resource),
      ),
    );
  }

  async create() {
    const error = $("create-error");
    error.textContent = "";
    const folder = $("create-folder").value.trim();
    // Named as the host lists it, <provider>:/<uuid> (the first agent the host
    // describes is its default), so the row that appears is the one opened.
    const provider = $("create-provider").value;
    const runs = provider || ((this.client.states.get(ROOT) || {}).agents || []).map((a) => a.provider)[0] || "";
    const uri = `${/^[A-Za-z][A-Za-z0-9+.-]*$/.test(runs) ? runs : "ahp-session"}:/${crypto.randomUUID()}`;
    const params = { channel: uri };
    if (provider) params.provider = provider;
    if (folder) params.workingDirectories = [folder.startsWith("file:") ? folder : "file://" + encodeURI(folder)];
    const model = $("create-model").value;
    if (model) params.config = { model };
    $("create-button").disabled = true;
    try {
      await this.client.call("createSession", params);
      $("new-session").open = false;
      await this.open(uri);
    } catch (err) {
      error.textContent = `Could not create the session: ${err.message}`;
    } finally {
      $("create-button").disabled = false;
    }
  }

  // Nothing open any more (the session was disposed of).
  closeSession() {
    this.chat.close();
    this.changes.close();
    if (this.session) this.client.forget(this.session);
    this.session = null;
    this.sessionState = null;
    replace($("chat-head"));
    $("chat-empty").hidden = false;
    this.renderSessions();
  }

  async open(uri) {
    if (this.session && this.session !== uri) {
      this.chat.close();
      this.changes.close();
      this.client.unsubscribe(this.session);
    }
    this.session = uri;
    this.renderSessions();
    this.showTab("chat");
    const state = await this.client.subscribe(uri);
    this.onState({ channel: uri, state });
  }
}

async function start(token) {
  const clientId = sessionStorage.getItem("ahpd-client") || `ahpd-web-${crypto.randomUUID().slice(0, 8)}`;
  sessionStorage.setItem("ahpd-client", clientId);
  const client = new Client(socketUrl(token), clientId);
  window.ahpd = client; // for the tests and the curious: the page's own reduced states
  const app = new App(client);
  window.ahpdApp = app;
  try {
    await client.connect();
  } catch (err) {
    client.close();
    showSignIn(`Could not connect: ${err.message}. Sign in with the URL ahpd run printed, or paste its token.`);
    return;
  }
  app.bind();
  $("signin").hidden = true;
  $("console").hidden = false;
  app.showTab("chat");
  document.body.dataset.ready = "yes";
}

const token = takeToken();
if (!token && meta("ahpd-token-required") !== "no") showSignIn();
else start(token);
