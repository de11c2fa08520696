// The page's own reducers: pure functions of (state, action) for the
// channels the console shows. They follow the protocol's reducers as the
// host applies them (ahpd/state/), so the tests can compare what the page
// reduced with a fresh snapshot from the host. An unknown action type
// returns the very same state.

import { reduceChat } from "./reducers_chat.js";

export const IDLE = 1, ERROR = 2, IN_PROGRESS = 8, INPUT_NEEDED = 24, IS_READ = 32, IS_ARCHIVED = 64;
const ACTIVITY_MASK = 31;

export const withFlag = (status, flag, on) => (on ? status | flag : status & ~flag);
export const withActivity = (status, activity) => (status & ~ACTIVITY_MASK) | activity;

// `{...obj, ...fields}` where an `undefined` field removes the key (an absent field on the wire).
export function assign(obj, fields) {
  const out = { ...obj };
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined) delete out[key];
    else out[key] = value;
  }
  return out;
}

// A copy without the keys whose value is `undefined`.
export function compact(fields) {
  const out = {};
  for (const [key, value] of Object.entries(fields)) if (value !== undefined) out[key] = value;
  return out;
}

export const without = (obj, ...keys) => {
  const out = { ...obj };
  for (const key of keys) delete out[key];
  return out;
};

// The action's value for `key`, `undefined` when it does not carry one.
export const field = (action, key) => (Object.hasOwn(action, key) ? action[key] : undefined);

// The first value that is neither absent nor null, as the reducers' `??`.
export function coalesce(...values) {
  for (const value of values) if (value !== undefined && value !== null) return value;
  return undefined;
}

export function upsert(items, item, key) {
  const at = items.findIndex((x) => x[key] === item[key]);
  if (at < 0) return [...items, item];
  const out = items.slice();
  out[at] = item;
  return out;
}

export const indexOf = (items, key, value) => items.findIndex((x) => x[key] === value);

export function mergeConfig(state, action) {
  const config = state.config;
  if (!config) return state;
  const values = action.replace ? { ...action.config } : { ...(config.values || {}), ...action.config };
  return { ...state, config: { ...config, values } };
}

export function addDirectory(state, dir) {
  const dirs = state.workingDirectories || [];
  return dirs.includes(dir) ? state : { ...state, workingDirectories: [...dirs, dir] };
}

export function removeDirectory(state, dir) {
  const dirs = state.workingDirectories;
  if (!dirs || !dirs.includes(dir)) return state;
  return { ...state, workingDirectories: dirs.filter((d) => d !== dir) };
}

// -- root ------------------------------------------------------------------------

const root = {
  "root/agentsChanged": (s, a) => ({ ...s, agents: a.agents }),
  "root/activeSessionsChanged": (s, a) => ({ ...s, activeSessions: a.activeSessions }),
  "root/terminalsChanged": (s, a) => ({ ...s, terminals: a.terminals }),
  "root/configChanged": mergeConfig,
};

// -- session ---------------------------------------------------------------------

const awaitsUser = (r) => r.kind !== "toolClientExecution";
function inputNeededStatus(status, requests) {
  if (requests.some(awaitsUser)) return withActivity(status, INPUT_NEEDED);
  return status & ~(INPUT_NEEDED & ~IN_PROGRESS);
}

function findCustomization(state, id) {
  const items = state.customizations;
  if (!items || !items.length) return null;
  const top = indexOf(items, "id", id);
  if (top >= 0) return [top, null, items[top]];
  for (let i = 0; i < items.length; i++) {
    const c = items[i];
    if (c.type === "mcpServer" || !c.children || !c.children.length) continue;
    const child = indexOf(c.children, "id", id);
    if (child >= 0) return [i, child, c.children[child]];
  }
  return null;
}

function replaceCustomization(state, top, child, entry) {
  const items = state.customizations.slice();
  if (child === null) items[top] = entry;
  else {
    const children = items[top].children.slice();
    children[child] = entry;
    items[top] = { ...items[top], children };
  }
  return { ...state, customizations: items };
}

function updateMcp(state, id, update) {
  const found = findCustomization(state, id);
  if (!found || found[2].type !== "mcpServer") return state;
  const updated = update(found[2]);
  return updated === found[2] ? state : replaceCustomization(state, found[0], found[1], updated);
}

const session = {
  "session/ready": (s) => ({ ...s, lifecycle: "ready" }),
  "session/creationFailed": (s, a) => ({ ...s, lifecycle: "failed", creationError: a.error }),
  "session/chatAdded": (s, a) => ({ ...s, chats: upsert(s.chats, a.summary, "resource") }),
  "session/chatRemoved": (s, a) => {
    const at = indexOf(s.chats, "resource", a.chat);
    if (at < 0) return s;
    const next = { ...s, chats: s.chats.filter((_, i) => i !== at) };
    if (s.defaultChat === a.chat) delete next.defaultChat;
    return next;
  },
  "session/chatUpdated": (s, a) => {
    const at = indexOf(s.chats, "resource", a.chat);
    if (at < 0) return s;
    const chats = s.chats.slice();
    chats[at] = { ...chats[at], ...without(a.changes, "resource") };
    return { ...s, chats };
  },
  "session/chatsReordered": (s, a) => {
    const byUri = new Map(s.chats.map((c) => [c.resource, c]));
    const order = a.chats;
    if (order.length !== s.chats.length || new Set(order).size !== order.length) return s;
    if (!order.every((u) => byUri.has(u))) return s;
    if (order.every((u, i) => s.chats[i].resource === u)) return s;
    return { ...s, chats: order.map((u) => byUri.get(u)) };
  },
  "session/defaultChatChanged": (s, a) => assign(s, { defaultChat: field(a, "defaultChat") }),
  "session/titleChanged": (s, a) => ({ ...s, title: a.title }),
  "session/isReadChanged": (s, a) => ({ ...s, status: withFlag(s.status, IS_READ, a.isRead) }),
  "session/isArchivedChanged": (s, a) => ({ ...s, status: withFlag(s.status, IS_ARCHIVED, a.isArchived) }),
  "session/activityChanged": (s, a) => assign(s, { activity: field(a, "activity") }),
  "session/changesetsChanged": (s, a) => assign(s, { changesets: a.changesets ?? undefined }),
  "session/configChanged": mergeConfig,
  "session/metaChanged": (s, a) => assign(s, { _meta: field(a, "_meta") }),
  "session/serverToolsChanged": (s, a) => ({ ...s, serverTools: a.tools }),
  "session/activeClientSet": (s, a) => ({ ...s, activeClients: upsert(s.activeClients, a.activeClient, "clientId") }),
  "session/activeClientRemoved": (s, a) => {
    const at = indexOf(s.activeClients, "clientId", a.clientId);
    return at < 0 ? s : { ...s, activeClients: s.activeClients.filter((_, i) => i !== at) };
  },
  "session/workingDirectorySet": (s, a) => addDirectory(s, a.directory),
  "session/workingDirectoryRemoved": (s, a) => removeDirectory(s, a.directory),
  "session/workingDirectoryReplaced": (s, a) => {
    const dirs = s.workingDirectories;
    if (!dirs || !dirs.includes(a.directory)) return s;
    const result = [];
    for (const d of dirs.map((d) => (d === a.directory ? a.replacement : d))) if (!result.includes(d)) result.push(d);
    if (result.length === dirs.length && result.every((d, i) => d === dirs[i])) return s;
    return { ...s, workingDirectories: result };
  },
  "session/inputNeededSet": (s, a) => {
    const requests = upsert(s.inputNeeded || [], a.request, "id");
    return { ...s, inputNeeded: requests, status: inputNeededStatus(s.status, requests) };
  },
  "session/inputNeededRemoved": (s, a) => {
    const requests = s.inputNeeded;
    if (!requests) return s;
    const at = indexOf(requests, "id", a.id);
    if (at < 0) return s;
    const rest = requests.filter((_, i) => i !== at);
    return assign(s, { status: inputNeededStatus(s.status, rest), inputNeeded: rest.length ? rest : undefined });
  },
  "session/customizationsChanged": (s, a) => ({ ...s, customizations: a.customizations }),
  "session/customizationToggled": (s, a) => {
    const found = findCustomization(s, a.id);
    if (!found) return s;
    const [top, child, entry] = found;
    const e = a.enablement;
    const updated =
      entry.type === "plugin" || entry.type === "mcpServer"
        ? { ...entry, enablement: e }
        : { ...entry, enabled: e.length ? e[0].enabled : true };
    return replaceCustomization(s, top, child, updated);
  },
  "session/customizationUpdated": (s, a) => ({
    ...s,
    customizations: upsert(s.customizations || [], a.customization, "id"),
  }),
  "session/customizationRemoved": (s, a) => {
    const found = findCustomization(s, a.id);
    if (!found) return s;
    const [top, child] = found;
    const items = s.customizations.slice();
    if (child === null) items.splice(top, 1);
    else items[top] = { ...items[top], children: items[top].children.filter((_, i) => i !== child) };
    return { ...s, customizations: items };
  },
  "session/mcpServerStateChanged": (s, a) =>
    updateMcp(s, a.id, (e) => assign(e, { state: a.state, channel: field(a, "channel") })),
  "session/mcpServerStartRequested": (s, a) =>
    updateMcp(s, a.id, (e) => assign(e, { state: { kind: "starting" }, channel: undefined })),
  "session/mcpServerStopRequested": (s, a) =>
    updateMcp(s, a.id, (e) => assign(e, { state: { kind: "stopped" }, channel: undefined })),
  "session/mcpServerBackgroundRequested": (s, a) =>
    updateMcp(s, a.id, (e) => {
      const st = e.state || {};
      return st.kind === "starting" && st.blocking === true ? { ...e, state: { ...st, blocking: false } } : e;
    }),
};

// -- terminal --------------------------------------------------------------------

const terminal = {
  "terminal/data": (s, a) => {
    const content = s.content.slice();
    const tail = content[content.length - 1];
    if (tail && tail.type === "command" && !tail.isComplete) content[content.length - 1] = { ...tail, output: tail.output + a.data };
    else if (tail && tail.type === "unclassified") content[content.length - 1] = { ...tail, value: tail.value + a.data };
    else content.push({ type: "unclassified", value: a.data });
    return { ...s, content };
  },
  "terminal/input": (s) => s,
  "terminal/resized": (s, a) => ({ ...s, cols: a.cols, rows: a.rows }),
  "terminal/claimed": (s, a) => ({ ...s, claim: a.claim }),
  "terminal/titleChanged": (s, a) => ({ ...s, title: a.title }),
  "terminal/cwdChanged": (s, a) => ({ ...s, cwd: a.cwd }),
  "terminal/exited": (s, a) => ({ ...s, lifecycle: compact({ status: "exited", exitCode: field(a, "exitCode") }) }),
  "terminal/cleared": (s) => ({ ...s, content: [] }),
  "terminal/commandDetectionAvailable": (s) => ({ ...s, supportsCommandDetection: true }),
  "terminal/commandExecuted": (s, a) => ({
    ...s,
    content: [
      ...s.content,
      { type: "command", commandId: a.commandId, commandLine: a.commandLine, output: "", timestamp: a.timestamp, isComplete: false },
    ],
    supportsCommandDetection: true,
  }),
  "terminal/commandFinished": (s, a) => ({
    ...s,
    content: s.content.map((p) =>
      p.type === "command" && p.commandId === a.commandId
        ? assign(p, { isComplete: true, exitCode: field(a, "exitCode"), durationMs: field(a, "durationMs") })
        : p,
    ),
  }),
};

// -- changeset -------------------------------------------------------------------

const changeset = {
  "changeset/statusChanged": (s, a) =>
    a.status === "error" ? assign(s, { status: a.status, error: field(a, "error") }) : { ...without(s, "error"), status: a.status },
  "changeset/fileSet": (s, a) => ({ ...s, files: upsert(s.files, a.file, "id") }),
  "changeset/fileRemoved": (s, a) => {
    const at = indexOf(s.files, "id", a.fileId);
    return at < 0 ? s : { ...s, files: s.files.filter((_, i) => i !== at) };
  },
  "changeset/filesReviewChanged": (s, a) => {
    const ids = new Set(a.files);
    let changed = false;
    const files = s.files.map((f) => {
      if (ids.has(f.id) && f.reviewed !== a.reviewed) {
        changed = true;
        return { ...f, reviewed: a.reviewed };
      }
      return f;
    });
    return changed ? { ...s, files } : s;
  },
  "changeset/contentChanged": (s, a) => {
    const next = { ...s, files: a.files };
    if (Object.hasOwn(a, "operations")) next.operations = a.operations;
    if (Object.hasOwn(a, "error")) next.error = a.error;
    else delete next.error;
    return next;
  },
  "changeset/operationsChanged": (s, a) =>
    Object.hasOwn(a, "operations") ? { ...s, operations: a.operations } : without(s, "operations"),
  "changeset/operationStatusChanged": (s, a) => {
    const ops = s.operations;
    if (!ops) return s;
    const at = indexOf(ops, "id", a.operationId);
    if (at < 0) return s;
    let updated;
    if (a.status === "error") {
      updated = { ...ops[at], status: a.status };
      if (Object.hasOwn(a, "error")) updated.error = a.error;
      else delete updated.error;
    } else updated = { ...without(ops[at], "error"), status: a.status };
    const operations = ops.slice();
    operations[at] = updated;
    return { ...s, operations };
  },
  "changeset/cleared": (s) => (s.files.length ? { ...s, files: [] } : s),
};

const tables = { root, session, terminal, changeset };

// Apply one action to a channel's state; the action's type prefix picks the reducer.
export function reduce(state, action) {
  const family = String(action.type || "").split("/", 1)[0];
  if (family === "chat") return reduceChat(state, action);
  const handler = (tables[family] || {})[action.type];
  return handler ? handler(state, action) : state;
}
