// The inspector pane: for any channel the page is subscribed to, the action
// envelopes as they arrive (the last few hundred, refusals included) and
// the state the page reduced from them, as a collapsible tree. The tree is
// built from text nodes only, like everything else the host says.

import { el, replace } from "./dom.js";

const $ = (id) => document.getElementById(id);
const KEEP = 300;

export function tree(value, key) {
  const label = key === undefined ? [] : [el("span", { class: "key", text: `${key}: ` })];
  if (value !== null && typeof value === "object") {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    const node = el("details", { class: "branch" }, el("summary", {}, ...label, Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`));
    let built = false;
    const build = () => {
      if (built) return;
      built = true;
      for (const [k, v] of entries) node.append(tree(v, k));
    };
    node.addEventListener("toggle", build);
    return node;
  }
  return el("span", { class: "leaf" }, ...label, JSON.stringify(value));
}

export class Inspector {
  constructor(app) {
    this.app = app;
    this.client = app.client;
    this.logs = new Map(); // channel -> envelopes, newest last
    this.channel = null;
    this.client.addEventListener("envelope", (e) => this.onEnvelope(e.detail.envelope));
  }

  bind() {
    $("inspector-channel").addEventListener("change", (e) => this.pick(e.target.value));
  }

  onEnvelope(envelope) {
    const log = this.logs.get(envelope.channel) || [];
    log.push(envelope);
    if (log.length > KEEP) log.shift();
    this.logs.set(envelope.channel, log);
    if (envelope.channel === this.channel) {
      const list = $("inspector-log");
      list.append(this.line(envelope));
      while (list.children.length > KEEP) list.removeChild(list.firstChild);
    }
  }

  line(envelope) {
    const head = `#${envelope.serverSeq ?? "-"} ${envelope.action.type}` + (envelope.rejectionReason ? ` REFUSED: ${envelope.rejectionReason}` : "");
    return el("li", { class: "envelope" }, el("details", {}, el("summary", { text: head }), el("pre", { text: JSON.stringify(envelope, null, 1) })));
  }

  pick(channel) {
    this.channel = channel;
    replace($("inspector-log"), (this.logs.get(channel) || []).map((e) => this.line(e)));
    this.drawTree();
  }

  drawTree() {
    const state = this.client.states.get(this.channel);
    const root = tree(state);
    if (root.tagName === "DETAILS") root.open = true;
    root.dispatchEvent(new Event("toggle"));
    replace($("inspector-tree"), el("div", { class: "tree" }, root));
  }

  onState(channel) {
    const select = $("inspector-channel");
    const channels = [...this.client.states.keys()];
    if (select.options.length !== channels.length || [...select.options].some((o, i) => o.value !== channels[i])) {
      replace(select, channels.map((c) => el("option", { value: c, text: c })));
      if (this.channel && channels.includes(this.channel)) select.value = this.channel;
      else if (channels.length) this.pick(channels[0]);
    }
    if (channel === this.channel && document.body.dataset.tab === "inspector") this.drawTree();
  }
}
