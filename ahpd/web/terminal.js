// The terminal pane: one terminal channel at a time, its output fed to the
// page's own emulator (vt.js) and drawn as spans (colours set through the
// CSSOM, which the Content-Security-Policy allows; no style attribute).
// Keys typed into the screen become `terminal/input` actions, sent only for
// a terminal this page holds (its claim names our clientId); anyone else's
// is watched read-only, as the host would refuse the input anyway.

import { el, replace } from "./dom.js";
import { Screen } from "./vt.js";

const $ = (id) => document.getElementById(id);

const KEYS = {
  Enter: "\r", Backspace: "\x7f", Tab: "\t", Escape: "\x1b",
  ArrowUp: "\x1b[A", ArrowDown: "\x1b[B", ArrowRight: "\x1b[C", ArrowLeft: "\x1b[D",
  Home: "\x1b[H", End: "\x1b[F", Delete: "\x1b[3~", PageUp: "\x1b[5~", PageDown: "\x1b[6~",
};

// What a key press sends to the pty, or null for a key that sends nothing.
export function keyBytes(e) {
  if (e.ctrlKey && !e.altKey && e.key.length === 1) {
    const c = e.key.toUpperCase().charCodeAt(0);
    if (c >= 64 && c <= 95) return String.fromCharCode(c - 64);
    return null;
  }
  if (KEYS[e.key]) return KEYS[e.key];
  if (e.key.length === 1 && !e.metaKey) return (e.altKey ? "\x1b" : "") + e.key;
  return null;
}

function contentText(state) {
  return (state.content || []).map((p) => (p.type === "command" ? p.output : p.value) || "").join("");
}

export class TerminalPane {
  constructor(app) {
    this.app = app;
    this.client = app.client;
    this.channel = null;
    this.screen = null;
    this.pending = false;
  }

  bind() {
    const view = $("terminal-screen");
    view.addEventListener("keydown", (e) => {
      const data = keyBytes(e);
      if (data === null) return;
      e.preventDefault();
      this.type(data);
    });
    view.addEventListener("paste", (e) => {
      e.preventDefault();
      this.type(e.clipboardData.getData("text").replace(/\r?\n/g, "\r"));
    });
  }

  mine(state) {
    const claim = (state && state.claim) || {};
    return claim.kind === "client" && claim.clientId === this.client.clientId;
  }

  type(data) {
    const state = this.channel && this.client.states.get(this.channel);
    if (!state || !this.mine(state)) return;
    this.client.dispatch(this.channel, { type: "terminal/input", data });
  }

  async create() {
    const uri = `ahp-terminal:/web-${crypto.randomUUID().slice(0, 12)}`;
    const params = { channel: uri, claim: { kind: "client", clientId: this.client.clientId }, name: "web console", cols: 100, rows: 30 };
    const session = this.app.sessionState;
    if (session && (session.workingDirectories || []).length) params.cwd = session.workingDirectories[0];
    try {
      await this.client.call("createTerminal", params);
    } catch (err) {
      replace($("terminal-head"), el("p", { class: "error", text: `Could not open a terminal: ${err.message}` }));
      this.app.showTab("terminal");
      return;
    }
    await this.open(uri);
    $("terminal-screen").focus();
  }

  async open(uri) {
    if (this.channel && this.channel !== uri) this.client.unsubscribe(this.channel);
    this.channel = uri;
    this.screen = null;
    this.app.showTab("terminal");
    $("terminal-empty").hidden = true;
    const state = await this.client.subscribe(uri);
    if (this.channel === uri) this.rebuild(state);
  }

  rebuild(state) {
    this.screen = new Screen(state.cols || 100, state.rows || 30);
    this.fed = contentText(state);
    this.screen.write(this.fed);
    this.draw(state);
  }

  onState(channel, state) {
    if (channel !== this.channel || !state) return;
    if (!this.screen) {
      this.rebuild(state);
      return;
    }
    const text = contentText(state);
    if (text.length >= this.fed.length && text.startsWith(this.fed)) {
      this.screen.write(text.slice(this.fed.length));
      this.fed = text;
    } else {
      this.rebuild(state); // cleared, or not what we drew: start again from the content
      return;
    }
    if (state.cols && state.rows && (state.cols !== this.screen.cols || state.rows !== this.screen.rows)) {
      this.rebuild(state);
      return;
    }
    this.draw(state);
  }

  draw(state) {
    const claim = state.claim || {};
    const holder = claim.kind === "client" ? `client ${claim.clientId}` : claim.kind === "session" ? `session ${claim.session}` : "nobody";
    const life = state.lifecycle && state.lifecycle.status === "exited" ? ` · exited ${state.lifecycle.exitCode ?? ""}` : "";
    replace(
      $("terminal-head"),
      el("strong", { id: "terminal-title", text: state.title || this.channel }),
      el("span", { class: "hint", text: ` · ${this.mine(state) ? "yours: click the screen and type" : `watching (held by ${holder})`}${life}` }),
    );
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.paint();
    });
  }

  paint() {
    const screen = this.screen;
    if (!screen) return;
    const view = $("terminal-screen");
    const b = screen.buf;
    const rows = screen.runs().map((runs, y) => {
      const line = el("div", { class: "row" });
      let x = 0;
      for (const run of runs) {
        const a = run.a;
        const pieces =
          screen.cursorVisible && y === b.y && b.x >= x && b.x < x + run.text.length
            ? [
                [run.text.slice(0, b.x - x), false],
                [run.text[b.x - x], true],
                [run.text.slice(b.x - x + 1), false],
              ]
            : [[run.text, false]];
        for (const [text, cursor] of pieces) {
          if (!text) continue;
          const span = el("span", { text });
          const classes = [];
          if (a.bold) classes.push("t-bold");
          if (a.dim) classes.push("t-dim");
          if (a.italic) classes.push("t-italic");
          if (a.underline) classes.push("t-underline");
          if (cursor) classes.push("cursor");
          if (classes.length) span.className = classes.join(" ");
          const fg = a.inverse ? a.bg || "#111" : a.fg;
          const bg = a.inverse ? a.fg || "#e5e5e5" : a.bg;
          if (fg && !cursor) span.style.color = fg;
          if (bg && !cursor) span.style.backgroundColor = bg;
          line.append(span);
        }
        x += run.text.length;
      }
      return line;
    });
    replace(view, rows);
    view.dataset.alternate = screen.alternate ? "yes" : "no";
  }
}
