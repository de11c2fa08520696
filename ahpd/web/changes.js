// The changes pane: a changeset of the open session (the uncommitted one
// where the host offers it), its files with their diffs, and its
// operations. Both sides of a diff are read through `resourceRead` (the
// before side from the host's ContentRef, e.g. git's HEAD). An operation
// with a `confirmation` is asked about first; `invokeChangesetOperation`
// runs it, and what it changed comes back as changeset actions.

import { el, replace, shortPath } from "./dom.js";
import { confirmDialog } from "./confirm.js";
import { lineDiff } from "./diff.js";

const $ = (id) => document.getElementById(id);
const ROOT = "ahp-root://";

function decode(result) {
  if (result.encoding === "base64") {
    const bytes = Uint8Array.from(atob(result.data), (c) => c.charCodeAt(0));
    return new TextDecoder().decode(bytes);
  }
  return result.data;
}

export class ChangesPane {
  constructor(app) {
    this.app = app;
    this.client = app.client;
    this.channel = null;
    this.texts = new Map(); // content URI -> text read (or a promise of it)
  }

  bind() {}

  close() {
    if (this.channel) this.client.unsubscribe(this.channel);
    this.channel = null;
    replace($("changes-head"));
    replace($("changes-ops"));
    replace($("changes-files"));
    $("changes-empty").hidden = false;
  }

  // The catalogue entries a client can open without filling a template.
  choices(session) {
    return (session.changesets || []).filter((c) => c.uriTemplate && !c.uriTemplate.includes("{"));
  }

  async onSession(session) {
    const choices = this.choices(session);
    if (!choices.length) return;
    $("changes-empty").hidden = true;
    const preferred = choices.find((c) => c.changeKind === "uncommitted") || choices[0];
    const uri = this.channel && choices.some((c) => c.uriTemplate === this.channel) ? this.channel : preferred.uriTemplate;
    const select = el(
      "select",
      { id: "changes-which", onchange: (e) => this.show(e.target.value) },
      choices.map((c) => el("option", { value: c.uriTemplate, text: c.label || c.changeKind || c.uriTemplate })),
    );
    select.value = uri;
    replace($("changes-head"), el("label", {}, "Changeset ", select), el("p", { id: "changes-message", class: "hint" }));
    if (uri !== this.channel) await this.show(uri);
  }

  async show(uri) {
    if (this.channel && this.channel !== uri) this.client.unsubscribe(this.channel);
    this.channel = uri;
    try {
      const state = await this.client.subscribe(uri);
      if (this.channel === uri) this.draw(state);
    } catch (err) {
      replace($("changes-files"), el("p", { class: "error", text: `Could not open ${uri}: ${err.message}` }));
    }
  }

  onState(channel, state) {
    if (channel === this.channel && state) this.draw(state);
  }

  draw(state) {
    const ops = state.operations || [];
    const commitBox = el("input", { id: "commit-message", placeholder: "commit message (default: the session's title)" });
    replace(
      $("changes-ops"),
      el("p", { class: "hint", id: "changes-status", text: `${state.status} · ${state.files.length} file(s)` }),
      state.error ? el("p", { class: "error", text: state.error.message || "" }) : null,
      ops.some((o) => o.id === "commit") ? commitBox : null,
      el(
        "div",
        { class: "buttons" },
        ops
          .filter((o) => (o.scopes || []).includes("changeset"))
          .map((o) =>
            el("button", {
              type: "button",
              class: `op op-${o.id}`,
              dataset: { op: o.id },
              disabled: o.status === "running" || o.status === "disabled",
              title: o.description || "",
              text: o.status === "running" ? `${o.label}…` : o.label,
              onclick: () => this.invoke(o, null, commitBox.value),
            }),
          ),
      ),
      ops.filter((o) => o.status === "error" && o.error).map((o) => el("p", { class: "error", text: `${o.label}: ${o.error.message}` })),
    );
    const fileOps = ops.filter((o) => (o.scopes || []).includes("resource"));
    replace(
      $("changes-files"),
      state.files.map((f) => {
        const side = f.edit.after || f.edit.before || {};
        const kind = !f.edit.before ? "added" : !f.edit.after ? "deleted" : f.edit.before.uri !== f.edit.after.uri ? "moved" : "modified";
        const body = el("pre", { class: "diff", text: "…" });
        const node = el(
          "details",
          { class: "file", dataset: { file: side.uri || f.id } },
          el(
            "summary",
            {},
            el("span", { class: "path", text: this.relative(side.uri) }),
            ` (${kind}) `,
            fileOps.map((o) =>
              el("button", {
                type: "button",
                class: `op op-${o.id}`,
                dataset: { op: o.id },
                text: o.label,
                onclick: (e) => {
                  e.preventDefault();
                  this.invoke(o, side.uri, "");
                },
              }),
            ),
          ),
          body,
        );
        node.addEventListener("toggle", () => node.open && this.diff(f, body));
        return node;
      }),
    );
  }

  // A file's path as the person knows it: under the session's folder when it is in one.
  relative(uri) {
    const path = shortPath(uri);
    const session = this.app.sessionState || {};
    for (const dir of session.workingDirectories || []) {
      const root = shortPath(dir).replace(/\/$/, "") + "/";
      if (path.startsWith(root)) return path.slice(root.length);
    }
    return path;
  }

  read(ref) {
    if (!ref) return Promise.resolve("");
    if (!this.texts.has(ref.uri)) {
      this.texts.set(
        ref.uri,
        this.client.call("resourceRead", { channel: ROOT, uri: ref.uri }).then(decode, (err) => `(could not read: ${err.message})`),
      );
    }
    return this.texts.get(ref.uri);
  }

  async diff(file, body) {
    const before = file.edit.before ? await this.read(file.edit.before.content) : "";
    // the after side is the file as it is now: read afresh each time
    const after = file.edit.after
      ? await this.client.call("resourceRead", { channel: ROOT, uri: file.edit.after.content.uri }).then(decode, (e) => `(could not read: ${e.message})`)
      : "";
    replace(
      body,
      lineDiff(before, after).map(([op, line]) => el("span", { class: op === "+" ? "add" : op === "-" ? "del" : "ctx", text: `${op} ${line}` })),
    );
  }

  async invoke(op, resource, message) {
    let text = op.confirmation ? (typeof op.confirmation === "string" ? op.confirmation : op.confirmation.markdown) : null;
    if (text && op.id === "commit" && message.trim()) text += ` It is committed with your message: “${message.trim()}”.`;
    if (text && !(await confirmDialog(text))) return;
    const params = { channel: this.channel, operationId: op.id };
    if (resource) params.target = { kind: "resource", resource };
    if (op.id === "commit" && message.trim()) params._meta = { "ahpd.commit": { message: message.trim() } };
    const said = $("changes-message");
    try {
      const result = await this.client.call("invokeChangesetOperation", params);
      if (said) said.textContent = result && result.message ? (typeof result.message === "string" ? result.message : result.message.markdown) : `${op.label}: done`;
    } catch (err) {
      if (said) said.textContent = `${op.label} failed: ${err.message}`;
    }
  }
}
