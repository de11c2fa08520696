// The chat channel's reducer: turns, streamed parts, the tool-call state
// machine, input requests, pending messages. Same rules as the host's
// (ahpd/state/chat.py and _chat_tool_calls.py): a transition that does not
// fit the call's status changes nothing and returns the same state, and the
// chat's status bits follow from its content.

const IDLE = 1, ERROR = 2, IN_PROGRESS = 8, INPUT_NEEDED = 24, IS_READ = 32, IS_ARCHIVED = 64;
const withFlag = (status, flag, on) => (on ? status | flag : status & ~flag);
const withActivity = (status, activity) => (status & ~31) | activity;
const BLOCKING = ["pending-confirmation", "pending-result-confirmation", "auth-required"];

const has = (o, k) => o !== null && o !== undefined && Object.hasOwn(o, k);
const get = (o, k) => (has(o, k) ? o[k] : undefined);
const present = (v) => v !== undefined && v !== null;
const coalesce = (...vs) => vs.find(present);
function compact(fields) {
  const out = {};
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) out[k] = v;
  return out;
}
function assign(obj, fields) {
  const out = { ...obj };
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) delete out[k];
    else out[k] = v;
  }
  return out;
}
const without = (obj, ...keys) => {
  const out = { ...obj };
  for (const k of keys) delete out[k];
  return out;
};
const optional = (key, value) => (present(value) ? { [key]: value } : {});

// -- status ------------------------------------------------------------------------

function openInput(state) {
  const t = state.activeTurn;
  return !!t && t.responseParts.some((p) => p.kind === "inputRequest" && !has(p, "response"));
}
function blockingTool(state) {
  const t = state.activeTurn;
  return !!t && t.responseParts.some((p) => p.kind === "toolCall" && BLOCKING.includes(p.toolCall.status));
}
function summaryStatus(state, terminal) {
  let activity;
  if (terminal !== undefined) activity = terminal;
  else if (openInput(state) || blockingTool(state)) activity = INPUT_NEEDED;
  else if (state.activeTurn) activity = IN_PROGRESS;
  else activity = IDLE;
  return withActivity(state.status, activity);
}
const refresh = (s) => {
  const status = summaryStatus(s);
  return status === s.status ? s : { ...s, status };
};
const unread = (s) => ({ ...s, status: withFlag(summaryStatus(s), IS_READ, false) });

// `startedAt + duration` milliseconds, written as `toISOString` writes it.
function after(startedAt, duration) {
  if (typeof startedAt !== "string" || typeof duration !== "number") return null;
  const zoned = /([zZ]|[+-]\d\d:?\d\d)$/.test(startedAt) ? startedAt : startedAt + "Z";
  const ms = Date.parse(zoned);
  if (Number.isNaN(ms)) return null;
  return new Date(ms + Math.trunc(duration)).toISOString();
}

const activeTurn = (s, id) => (s.activeTurn && s.activeTurn.id === id ? s.activeTurn : null);
const withParts = (s, turn, parts) => ({ ...s, activeTurn: { ...turn, responseParts: parts } });
const partId = (p) => (p.kind === "toolCall" ? p.toolCall.toolCallId : p.id);

function appendText(s, a, kind) {
  const turn = activeTurn(s, a.turnId);
  if (!turn) return s;
  const at = turn.responseParts.findIndex((p) => partId(p) === a.partId);
  if (at < 0 || turn.responseParts[at].kind !== kind) return s;
  const parts = turn.responseParts.slice();
  parts[at] = { ...parts[at], content: parts[at].content + a.content };
  return withParts(s, turn, parts);
}

// -- tool calls -----------------------------------------------------------------

function base(tc, meta) {
  return {
    toolCallId: tc.toolCallId,
    toolName: get(tc, "toolName"),
    displayName: get(tc, "displayName"),
    intention: get(tc, "intention"),
    contributor: get(tc, "contributor"),
    _meta: coalesce(meta, get(tc, "_meta")),
  };
}

function skipped(tc) {
  const streaming = tc.status === "streaming";
  return compact({
    status: "cancelled",
    ...base(tc),
    invocationMessage: streaming ? get(tc, "invocationMessage") ?? "" : get(tc, "invocationMessage"),
    toolInput: streaming ? undefined : get(tc, "toolInput"),
    reason: "skipped",
  });
}

function refineContributor(current, proposed) {
  if (!present(proposed)) return current;
  if (present(current) && current.kind === "client") {
    return proposed.kind === "client" && proposed.clientId === current.clientId ? proposed : current;
  }
  return proposed.kind === "client" ? current : proposed;
}

function updateTool(s, a, update) {
  const turn = activeTurn(s, a.turnId);
  if (!turn) return s;
  let changed = false;
  const parts = turn.responseParts.map((p) => {
    if (p.kind === "toolCall" && p.toolCall.toolCallId === a.toolCallId) {
      const updated = update(p.toolCall);
      if (updated !== p.toolCall) {
        changed = true;
        return { ...p, toolCall: updated };
      }
    }
    return p;
  });
  return changed ? withParts(s, turn, parts) : s;
}

const selectedOption = (tc, id) => (!id || !tc.options ? undefined : tc.options.find((o) => o.id === id));

function toolCallReady(s, a) {
  return refresh(
    updateTool(s, a, (tc) => {
      const status = tc.status;
      if (!["streaming", "running", "pending-confirmation"].includes(status)) return tc;
      const b = {
        ...base(tc, get(a, "_meta")),
        contributor: refineContributor(get(tc, "contributor"), get(a, "contributor")),
        intention: coalesce(get(a, "intention"), get(tc, "intention")),
      };
      const toolInput = coalesce(get(a, "toolInput"), status === "streaming" ? undefined : get(tc, "toolInput"));
      if (a.confirmed) {
        return compact({ status: "running", ...b, invocationMessage: a.invocationMessage, toolInput, confirmed: a.confirmed });
      }
      const pending = status === "pending-confirmation" ? tc : {};
      const keep = {};
      for (const k of ["confirmationTitle", "riskAssessment", "edits", "editable", "options"]) {
        keep[k] = coalesce(get(a, k), get(pending, k));
      }
      return compact({ status: "pending-confirmation", ...b, invocationMessage: a.invocationMessage, toolInput, ...keep });
    }),
  );
}

function toolCallConfirmed(s, a) {
  return refresh(
    updateTool(s, a, (tc) => {
      if (tc.status !== "pending-confirmation") return tc;
      const b = base(tc, get(a, "_meta"));
      const selected = selectedOption(tc, a.selectedOptionId);
      if (a.approved) {
        let toolInput = get(tc, "toolInput");
        if (has(a, "editedToolInput") && typeof toolInput === "string") toolInput = a.editedToolInput;
        return compact({
          status: "running",
          ...b,
          invocationMessage: get(tc, "invocationMessage"),
          toolInput,
          confirmed: get(a, "confirmed"),
          selectedOption: selected,
        });
      }
      return compact({
        status: "cancelled",
        ...b,
        invocationMessage: get(tc, "invocationMessage"),
        toolInput: get(tc, "toolInput"),
        reason: get(a, "reason"),
        reasonMessage: get(a, "reasonMessage"),
        userSuggestion: get(a, "userSuggestion"),
        selectedOption: selected,
      });
    }),
  );
}

function toolCallComplete(s, a) {
  return refresh(
    updateTool(s, a, (tc) => {
      const status = tc.status;
      if (!["running", "pending-confirmation", "auth-required"].includes(status)) return tc;
      const result = a.result;
      if (status === "auth-required" && result.success) return tc;
      const wasConfirmed = status === "running" || status === "auth-required";
      const fields = {
        ...base(tc, get(a, "_meta")),
        invocationMessage: get(tc, "invocationMessage"),
        toolInput: get(tc, "toolInput"),
        confirmed: wasConfirmed ? get(tc, "confirmed") : "not-needed",
        ...optional("selectedOption", wasConfirmed ? tc.selectedOption : null),
        ...optional("content", status === "auth-required" ? tc.content : null),
      };
      const next = a.requiresResultConfirmation && status !== "auth-required" ? "pending-result-confirmation" : "completed";
      return { ...compact({ status: next, ...fields }), ...result };
    }),
  );
}

function toolCallResultConfirmed(s, a) {
  return refresh(
    updateTool(s, a, (tc) => {
      if (tc.status !== "pending-result-confirmation") return tc;
      const common = { ...base(tc, get(a, "_meta")), invocationMessage: get(tc, "invocationMessage"), toolInput: get(tc, "toolInput") };
      if (a.approved) {
        const kept = {};
        for (const k of ["success", "pastTenseMessage", "content", "structuredContent", "error"]) kept[k] = get(tc, k);
        return compact({
          status: "completed",
          ...common,
          confirmed: get(tc, "confirmed"),
          ...optional("selectedOption", tc.selectedOption),
          ...kept,
        });
      }
      return compact({ status: "cancelled", ...common, reason: "result-denied", ...optional("selectedOption", tc.selectedOption) });
    }),
  );
}

function paused(tc, a, extra) {
  return compact({
    status: extra.status,
    ...base(tc, get(a, "_meta")),
    invocationMessage: get(tc, "invocationMessage"),
    toolInput: get(tc, "toolInput"),
    confirmed: get(tc, "confirmed"),
    ...optional("selectedOption", tc.selectedOption),
    ...optional("content", tc.content),
    ...(extra.auth ? { auth: extra.auth } : {}),
  });
}

// -- turns ---------------------------------------------------------------------------

function endTurn(s, a, turnState, errorPart) {
  const active = activeTurn(s, a.turnId);
  if (!active) return s;
  const parts = active.responseParts.map((p) => {
    const tc = p.kind === "toolCall" ? p.toolCall : null;
    if (!tc || tc.status === "completed" || tc.status === "cancelled") return p;
    return { kind: "toolCall", toolCall: skipped(tc) };
  });
  if (errorPart) parts.push(errorPart);
  const turn = compact({
    id: active.id,
    startedAt: get(active, "startedAt"),
    duration: Math.max(0, a.duration),
    message: active.message,
    responseParts: parts,
    usage: get(active, "usage"),
    state: turnState,
  });
  let next = { ...without(s, "activeTurn"), turns: [...s.turns, turn] };
  const at = after(active.startedAt, turn.duration);
  if (at !== null) next = { ...next, modifiedAt: at };
  return { ...next, status: summaryStatus(next, turnState === "error" ? ERROR : undefined) };
}

function openRequest(turn, id) {
  return turn.responseParts.findIndex((p) => p.kind === "inputRequest" && !has(p, "response") && p.request.id === id);
}

const chat = {
  "chat/turnStarted": (s, a) => {
    const active = compact({ id: a.turnId, startedAt: get(a, "startedAt"), message: a.message, responseParts: [] });
    let next = unread({ ...s, activeTurn: active });
    if (typeof a.startedAt === "string") next.modifiedAt = a.startedAt;
    const queuedId = a.queuedMessageId;
    if (queuedId) {
      if (next.steeringMessage && next.steeringMessage.id === queuedId) next = without(next, "steeringMessage");
      if (next.queuedMessages !== undefined) {
        const rest = next.queuedMessages.filter((m) => m.id !== queuedId);
        next = assign(next, { queuedMessages: rest.length ? rest : undefined });
      }
    }
    return next;
  },
  "chat/delta": (s, a) => appendText(s, a, "markdown"),
  "chat/reasoning": (s, a) => appendText(s, a, "reasoning"),
  "chat/responsePart": (s, a) => {
    const turn = activeTurn(s, a.turnId);
    if (!turn || a.part.kind === "error") return s;
    return withParts(s, turn, [...turn.responseParts, a.part]);
  },
  "chat/turnComplete": (s, a) => endTurn(s, a, "complete"),
  "chat/turnCancelled": (s, a) => endTurn(s, a, "cancelled"),
  "chat/error": (s, a) => endTurn(s, a, "error", a.part),
  "chat/turnResume": (s, a) => {
    if (s.activeTurn) return s;
    const last = s.turns[s.turns.length - 1];
    if (!last || last.id !== a.turnId || last.state !== "error") return s;
    const parts = last.responseParts;
    const tail = parts[parts.length - 1];
    if (!tail || tail.kind !== "error" || tail.resumable !== true) return s;
    const active = compact({ id: last.id, startedAt: get(last, "startedAt"), message: last.message, responseParts: parts, usage: get(last, "usage") });
    return unread({ ...s, turns: s.turns.slice(0, -1), activeTurn: active });
  },
  "chat/usage": (s, a) => {
    const turn = activeTurn(s, a.turnId);
    return turn ? { ...s, activeTurn: { ...turn, usage: a.usage } } : s;
  },
  "chat/truncated": (s, a) => {
    let next;
    if (has(a, "turnId")) {
      const at = s.turns.findIndex((t) => t.id === a.turnId);
      if (at < 0) return s;
      next = { ...without(s, "activeTurn"), turns: s.turns.slice(0, at + 1) };
    } else next = { ...without(s, "activeTurn", "turnsNextCursor"), turns: [] };
    return { ...next, status: summaryStatus(next) };
  },
  "chat/turnsLoaded": (s, a) => {
    const known = new Set(s.turns.map((t) => t.id));
    const older = a.turns.filter((t) => !known.has(t.id));
    return assign(s, { turns: [...older, ...s.turns], turnsNextCursor: get(a, "turnsNextCursor") });
  },
  "chat/inputRequested": (s, a) => {
    const turn = s.activeTurn;
    if (!turn) return s;
    const parts = turn.responseParts.slice();
    const at = openRequest(turn, a.request.id);
    if (at >= 0) {
      const answers = coalesce(get(a.request, "answers"), get(parts[at].request, "answers"));
      parts[at] = { kind: "inputRequest", request: assign(a.request, { answers }) };
    } else parts.push({ kind: "inputRequest", request: a.request });
    return unread(withParts(s, turn, parts));
  },
  "chat/inputAnswerChanged": (s, a) => {
    const turn = s.activeTurn;
    if (!turn) return s;
    const at = openRequest(turn, a.requestId);
    if (at < 0) return s;
    const part = turn.responseParts[at];
    const answers = { ...(part.request.answers || {}) };
    if (has(a, "answer")) answers[a.questionId] = a.answer;
    else delete answers[a.questionId];
    const parts = turn.responseParts.slice();
    parts[at] = { ...part, request: assign(part.request, { answers: Object.keys(answers).length ? answers : undefined }) };
    return withParts(s, turn, parts);
  },
  "chat/inputCompleted": (s, a) => {
    const turn = s.activeTurn;
    if (!turn) return s;
    const at = openRequest(turn, a.requestId);
    if (at < 0) return s;
    const part = turn.responseParts[at];
    const answers = { ...(part.request.answers || {}), ...(a.answers || {}) };
    const parts = turn.responseParts.slice();
    parts[at] = {
      ...part,
      request: assign(part.request, { answers: Object.keys(answers).length ? answers : undefined }),
      response: a.response,
    };
    const next = withParts(s, turn, parts);
    return { ...next, status: summaryStatus(next) };
  },
  "chat/pendingMessageSet": (s, a) => {
    const entry = { id: a.id, message: a.message };
    if (a.kind === "steering") return { ...s, steeringMessage: entry };
    const queued = s.queuedMessages || [];
    const at = queued.findIndex((m) => m.id === entry.id);
    const out = queued.slice();
    if (at < 0) out.push(entry);
    else out[at] = entry;
    return { ...s, queuedMessages: out };
  },
  "chat/pendingMessageRemoved": (s, a) => {
    if (a.kind === "steering") {
      return s.steeringMessage && s.steeringMessage.id === a.id ? without(s, "steeringMessage") : s;
    }
    const queued = s.queuedMessages;
    if (queued === undefined) return s;
    const rest = queued.filter((m) => m.id !== a.id);
    if (rest.length === queued.length) return s;
    return assign(s, { queuedMessages: rest.length ? rest : undefined });
  },
  "chat/queuedMessagesReordered": (s, a) => {
    const queued = s.queuedMessages;
    if (queued === undefined) return s;
    const byId = new Map(queued.map((m) => [m.id, m]));
    const ordered = [];
    for (const id of a.order) if (byId.has(id) && !ordered.includes(id)) ordered.push(id);
    const rest = queued.filter((m) => !ordered.includes(m.id));
    return { ...s, queuedMessages: [...ordered.map((id) => byId.get(id)), ...rest] };
  },
  "chat/activityChanged": (s, a) => assign(s, { activity: get(a, "activity") }),
  "chat/draftChanged": (s, a) => assign(s, { draft: get(a, "draft") }),
  "chat/workingDirectorySet": (s, a) => {
    const dirs = s.workingDirectories || [];
    return dirs.includes(a.directory) ? s : { ...s, workingDirectories: [...dirs, a.directory] };
  },
  "chat/workingDirectoryRemoved": (s, a) => {
    const dirs = s.workingDirectories;
    if (!dirs || !dirs.includes(a.directory)) return s;
    return { ...s, workingDirectories: dirs.filter((d) => d !== a.directory) };
  },
  "chat/isReadChanged": (s, a) => ({ ...s, status: withFlag(s.status, IS_READ, a.isRead) }),
  "chat/isArchivedChanged": (s, a) => ({ ...s, status: withFlag(s.status, IS_ARCHIVED, a.isArchived) }),
  "chat/movableChanged": (s, a) => ({ ...s, movable: a.movable }),
  "chat/changesetsChanged": (s, a) => assign(s, { changesets: a.changesets ?? undefined }),
  "chat/canvasesChanged": (s, a) => assign(s, { canvases: a.canvases ?? undefined }),
  "chat/backgroundWorkSet": (s, a) => {
    const work = s.backgroundWork || [];
    const at = work.findIndex((w) => w.id === a.work.id);
    const out = work.slice();
    if (at < 0) out.push(a.work);
    else out[at] = a.work;
    return { ...s, backgroundWork: out };
  },
  "chat/backgroundWorkRemoved": (s, a) => {
    const work = s.backgroundWork;
    if (!work || !work.length) return s;
    const rest = work.filter((w) => w.id !== a.id);
    if (rest.length === work.length) return s;
    return assign(s, { backgroundWork: rest.length ? rest : undefined });
  },
  "chat/toolCallStart": (s, a) => {
    const turn = activeTurn(s, a.turnId);
    if (!turn) return s;
    const toolCall = compact({
      toolCallId: a.toolCallId,
      toolName: get(a, "toolName"),
      displayName: get(a, "displayName"),
      intention: get(a, "intention"),
      contributor: get(a, "contributor"),
      _meta: get(a, "_meta"),
      status: "streaming",
    });
    return withParts(s, turn, [...turn.responseParts, { kind: "toolCall", toolCall }]);
  },
  "chat/toolCallDelta": (s, a) =>
    updateTool(s, a, (tc) => {
      if (tc.status !== "streaming") return tc;
      const out = { ...tc };
      if (has(a, "_meta")) out._meta = a._meta;
      if (has(a, "content")) out.partialInput = (tc.partialInput || "") + a.content;
      return assign(out, { invocationMessage: coalesce(get(a, "invocationMessage"), get(tc, "invocationMessage")) });
    }),
  "chat/toolCallReady": toolCallReady,
  "chat/toolCallConfirmed": toolCallConfirmed,
  "chat/toolCallComplete": toolCallComplete,
  "chat/toolCallResultConfirmed": toolCallResultConfirmed,
  "chat/toolCallContentChanged": (s, a) =>
    updateTool(s, a, (tc) => {
      if (tc.status !== "running") return tc;
      const out = { ...tc, content: a.content };
      if (has(a, "_meta")) out._meta = a._meta;
      return out;
    }),
  "chat/toolCallAuthRequired": (s, a) =>
    refresh(
      updateTool(s, a, (tc) => {
        if (tc.status !== "running" || !tc.contributor || tc.contributor.kind !== "mcp") return tc;
        return paused(tc, a, { status: "auth-required", auth: a.auth });
      }),
    ),
  "chat/toolCallAuthResolved": (s, a) =>
    refresh(updateTool(s, a, (tc) => (tc.status !== "auth-required" ? tc : paused(tc, a, { status: "running" })))),
};

export function reduceChat(state, action) {
  const handler = chat[action.type];
  return handler ? handler(state, action) : state;
}

export { IN_PROGRESS, INPUT_NEEDED, IDLE, ERROR };
