// One AHP connection over the daemon's WebSocket: requests and their
// answers, dispatched actions, subscriptions whose state the page reduces
// itself (reducers.js), and coming back after the connection drops
// (`reconnect` with the last serverSeq seen, else `initialize` and fresh
// snapshots). Listeners hear "envelope", "state", "sessions", "status".

import { reduce } from "./reducers.js";

export const ROOT = "ahp-root://";
const VERSIONS = ["1.0.0"];

export class Client extends EventTarget {
  constructor(url, clientId) {
    super();
    this.url = url;
    this.clientId = clientId;
    this.ws = null;
    this.nextId = 1;
    this.seq = 0;
    this.waiting = new Map(); // request id -> {resolve, reject, method}
    this.states = new Map(); // channel -> reduced state
    this.fromSeq = new Map(); // channel -> serverSeq of its snapshot
    this.sessions = new Map(); // session URI -> summary (root/session* keep it live)
    this.lastSeq = 0;
    this.initialized = false;
    this.connected = false;
    this.closedByUs = false;
    this.attempts = 0;
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  // Open the socket and say hello; resolves once the host answered.
  connect() {
    return new Promise((resolve, reject) => {
      let ws;
      try {
        ws = new WebSocket(this.url);
      } catch (err) {
        reject(err);
        return;
      }
      this.ws = ws;
      ws.onopen = async () => {
        this.connected = true;
        this.attempts = 0;
        try {
          await this.hello();
          this.emit("status", { connected: true });
          resolve();
        } catch (err) {
          reject(err);
        }
      };
      ws.onmessage = (event) => this.receive(event.data);
      ws.onclose = (event) => {
        const was = this.connected;
        this.connected = false;
        this.ws = null;
        for (const { reject: fail, method } of this.waiting.values()) fail(new Error(`${method}: the connection closed`));
        this.waiting.clear();
        this.emit("status", { connected: false, code: event.code, reason: event.reason, was });
        if (!was) reject(new Error("could not connect (is the daemon running, and the token right?)"));
        else if (!this.closedByUs) this.retry();
      };
    });
  }

  // Come back after the daemon went away (a restart): try again and again, a little slower each time.
  retry() {
    const delay = Math.min(5000, 250 * 2 ** this.attempts++);
    this.emit("status", { connected: false, retrying: delay });
    setTimeout(() => {
      this.connect().catch(() => this.retry());
    }, delay);
  }

  async hello() {
    const channels = [...this.states.keys()];
    if (this.initialized && channels.length) {
      try {
        const answer = await this.call("reconnect", {
          channel: ROOT,
          clientId: this.clientId,
          lastSeenServerSeq: this.lastSeq,
          subscriptions: channels,
        });
        if (answer.type === "replay") {
          for (const uri of answer.missing || []) this.forget(uri);
          for (const envelope of answer.actions || []) this.apply(envelope);
        } else {
          for (const snapshot of answer.snapshots || []) this.take(snapshot);
        }
        for (const uri of channels) this.emit("state", { channel: uri, state: this.states.get(uri) });
        await this.loadSessions();
        return;
      } catch (err) {
        console.warn("reconnect refused; starting afresh", err);
        if (!this.connected) throw err;
      }
    }
    const answer = await this.call("initialize", {
      channel: ROOT,
      protocolVersions: VERSIONS,
      clientId: this.clientId,
      initialSubscriptions: this.initialized ? channels : [ROOT],
    });
    this.initialized = true;
    this.lastSeq = answer.serverSeq || 0;
    for (const snapshot of answer.snapshots || []) this.take(snapshot);
    for (const uri of channels) {
      if (!(answer.snapshots || []).some((s) => s.resource === uri)) this.forget(uri);
    }
    for (const uri of this.states.keys()) this.emit("state", { channel: uri, state: this.states.get(uri) });
    await this.loadSessions();
  }

  close() {
    this.closedByUs = true;
    if (this.ws) this.ws.close(1000, "page closed");
  }

  send(message) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) throw new Error("not connected");
    this.ws.send(JSON.stringify(message));
  }

  call(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, method });
      try {
        this.send({ jsonrpc: "2.0", id, method, params });
      } catch (err) {
        this.waiting.delete(id);
        reject(err);
      }
    });
  }

  dispatch(channel, action) {
    this.seq += 1;
    this.send({ jsonrpc: "2.0", method: "dispatchAction", params: { channel, clientSeq: this.seq, action } });
    return this.seq;
  }

  async subscribe(channel) {
    if (this.states.has(channel)) return this.states.get(channel);
    const answer = await this.call("subscribe", { channel });
    if (answer.snapshot) this.take(answer.snapshot);
    return this.states.get(channel);
  }

  unsubscribe(channel) {
    if (!this.states.has(channel)) return;
    this.forget(channel);
    try {
      this.send({ jsonrpc: "2.0", method: "unsubscribe", params: { channel } });
    } catch {
      // not connected: nothing to say
    }
  }

  forget(channel) {
    this.states.delete(channel);
    this.fromSeq.delete(channel);
  }

  take(snapshot) {
    this.states.set(snapshot.resource, snapshot.state);
    this.fromSeq.set(snapshot.resource, snapshot.fromSeq || 0);
    if (typeof snapshot.fromSeq === "number") this.lastSeq = Math.max(this.lastSeq, snapshot.fromSeq);
    this.emit("state", { channel: snapshot.resource, state: snapshot.state, snapshot: true });
  }

  async loadSessions() {
    const rows = new Map();
    let params = { channel: ROOT };
    for (;;) {
      const page = await this.call("listSessions", params);
      for (const row of page.items || []) rows.set(row.resource, row);
      if (!page.nextCursor) break;
      params = { channel: ROOT, cursor: page.nextCursor };
    }
    this.sessions = rows;
    this.emit("sessions", { sessions: this.sessions });
  }

  receive(data) {
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      console.warn("a frame that is not JSON", data);
      return;
    }
    if (frame.id !== undefined && frame.method === undefined) {
      const waiter = this.waiting.get(frame.id);
      if (!waiter) return;
      this.waiting.delete(frame.id);
      if (frame.error) waiter.reject(Object.assign(new Error(frame.error.message || "error"), { rpc: frame.error }));
      else waiter.resolve(frame.result);
      return;
    }
    const params = frame.params || {};
    if (frame.method === "action") this.apply(params);
    else if (frame.method === "root/sessionAdded") this.patchSession(params.summary.resource, params.summary, true);
    else if (frame.method === "root/sessionRemoved") {
      this.sessions.delete(params.session);
      this.emit("sessions", { sessions: this.sessions });
    } else if (frame.method === "root/sessionSummaryChanged") this.patchSession(params.session, params.changes, false);
    if (frame.id !== undefined && frame.method !== undefined) {
      // a request from the host that the page does not serve
      this.send({ jsonrpc: "2.0", id: frame.id, error: { code: -32601, message: `the web console does not serve ${frame.method}` } });
    }
    this.emit("frame", { frame });
  }

  patchSession(uri, changes, whole) {
    const old = whole ? {} : this.sessions.get(uri);
    if (!old && !whole) return;
    this.sessions.set(uri, { ...old, ...changes });
    this.emit("sessions", { sessions: this.sessions });
  }

  // One action envelope: reduced into its channel's state unless the host refused it.
  apply(envelope) {
    if (typeof envelope.serverSeq === "number") this.lastSeq = Math.max(this.lastSeq, envelope.serverSeq);
    const channel = envelope.channel;
    this.emit("envelope", { envelope });
    if (envelope.rejectionReason) return;
    if (!this.states.has(channel)) return;
    if (typeof envelope.serverSeq === "number" && envelope.serverSeq <= (this.fromSeq.get(channel) || 0)) return;
    const next = reduce(this.states.get(channel), envelope.action);
    if (next === this.states.get(channel)) return;
    this.states.set(channel, next);
    this.emit("state", { channel, state: next, action: envelope.action });
  }
}
