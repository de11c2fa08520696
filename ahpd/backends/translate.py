"""From a backend's events to AHP chat actions: a pure function of the stream.

One ``TurnTranslator`` per turn. It is fed the backend's events in arrival
order and answers the chat actions that say the same thing, keeping only
what it must to say it right:

* a part exists before it streams: the first chunk of a reply opens a
  markdown part (``chat/responsePart``) and the next ones are ``chat/delta``;
  thought opens a *reasoning* part and continues with ``chat/reasoning``,
  never ``chat/delta``, which the reducer ignores on a reasoning part;
* a tool call is created by ``chat/toolCallStart`` (never a response part as
  well), is ``chat/toolCallReady`` with ``confirmed: "not-needed"`` when it
  simply runs and without ``confirmed`` only when the agent actually asked,
  and ends with ``chat/toolCallComplete`` carrying one ``result`` object; a
  failed tool is completed with ``success: false``, since AHP has no failed;
* the id of a tool call is the agent's own;
* a call whose update carries ``_meta["ahpd.contributor"]`` (an AHP
  ``ToolCallContributor``: a tool an active client runs) says so on its
  ``chat/toolCallStart`` and ``chat/toolCallReady``;
* a Task or Agent call (a subagent) carries the reference's
  ``_meta.toolKind: "subagent"`` with ``subagentDescription`` and
  ``subagentAgentName`` from its input, and, where the host names worker
  chats (``worker_chat``), ``subagentChatUri`` on every action that carries
  the call's ``_meta`` and a ``ToolResultSubagentContent`` in its result;
  an update a subagent produced (``_meta["ahpd.parentToolCallId"]``) is its
  worker chat's, and says nothing here;
* an agent's text is UTF-16 cut where the agent cut it: a string with a
  lone surrogate (half an emoji, from an agent that truncates by code unit)
  has no JSON form, so each is repaired to U+FFFD on the way in rather than
  losing the action that carries it.

Part ids are derived from the turn id and a counter, so the same stream
always gives the same actions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs

from ahpd.backends.port import PARENT_CALL_META, PermissionRequest

#: The ``_meta`` key of an ACP tool call update that names the call's AHP
#: ``ToolCallContributor``.
CONTRIBUTOR_META = "ahpd.contributor"

# ACP tool kinds -> the reference client's ``_meta.toolKind`` renderer hint.
_TOOL_KIND = {"execute": "terminal", "read": "read", "search": "search", "fetch": "search"}
#: The harness's tools that run a subagent.
SUBAGENT_TOOLS = ("Task", "Agent")


@attrs.define
class _Tool:
    name: str
    title: str
    raw_input: Any = None
    status: str = "streaming"  # streaming | pending-confirmation | running | done | denied
    content: list[dict[str, Any]] = attrs.Factory(list)
    contributor: dict[str, Any] | None = None
    #: The ``_meta`` the call started with: an action carrying ``_meta``
    #: replaces the call's, so a progress line is said beside it.
    meta: dict[str, Any] = attrs.Factory(dict)
    #: The progress line said last (``_meta.progressMessage``), if any.
    progress: str | None = None


def tool_name(update: dict[str, Any]) -> str:
    """The harness's own name for a tool: Claude Code's (``Bash``, ``Read``,
    ``mcp__<server>__<tool>``), which an ACP agent wrapping it also puts in
    ``_meta.claudeCode.toolName``; otherwise the agent's own words for the
    call (ACP carries no tool name, only a title and a ``kind``)."""
    meta = update.get("_meta")
    named = (meta.get("claudeCode") or {}).get("toolName") if isinstance(meta, dict) else None
    if isinstance(named, str) and named:
        return named
    return update.get("title") or update.get("kind") or "tool"


def repair(value: Any) -> Any:
    """``value`` with every lone UTF-16 surrogate in its strings (keys too)
    replaced by U+FFFD; the very same object when there is none, which an
    ASCII string answers without a scan."""
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # Through UTF-16: a pair split over two code points is joined
            # again, and each lone half becomes one U+FFFD.
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return value
    if isinstance(value, dict):
        pairs = [(repair(k), repair(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    if isinstance(value, list):
        items = [repair(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def subagent_meta(raw_input: Any, chat_uri: str | None) -> dict[str, Any]:
    """A Task or Agent call's ``_meta``: the reference client's subagent row
    hints, from the call's input as far as it is known yet."""
    meta: dict[str, Any] = {"toolKind": "subagent"}
    args = raw_input if isinstance(raw_input, dict) else {}
    for key, arg in (("subagentDescription", "description"), ("subagentAgentName", "subagent_type")):
        if isinstance(args.get(arg), str) and args[arg]:
            meta[key] = args[arg]
    if chat_uri is not None:
        meta["subagentChatUri"] = chat_uri
    return meta


def subagent_content(meta: dict[str, Any], title: str) -> dict[str, Any] | None:
    """The spawning call's forward link to its worker chat (an AHP
    ``ToolResultSubagentContent``), from the call's subagent ``_meta``."""
    if not meta.get("subagentChatUri"):
        return None
    block: dict[str, Any] = {
        "type": "subagent",
        "resource": meta["subagentChatUri"],
        "title": meta.get("subagentDescription") or title,
    }
    if meta.get("subagentAgentName"):
        block["agentName"] = meta["subagentAgentName"]
    if meta.get("subagentDescription"):
        block["description"] = meta["subagentDescription"]
    return block


def _text_of(content: Any) -> str | None:
    if isinstance(content, dict) and content.get("type") == "text":
        return content.get("text", "")
    return None


def _tool_input(raw: Any) -> str | None:
    if raw is None:
        return None
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, sort_keys=True)


def _result_content(blocks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """ACP tool call content -> AHP tool result content (text only, for now)."""
    out: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "content":
            text = _text_of(block.get("content"))
            if text is not None:
                out.append({"type": "text", "text": text})
        elif kind == "diff":
            out.append({"type": "text", "text": f"edited {block.get('path', '')}"})
        elif kind == "terminal":
            terminal_id = str(block.get("terminalId", ""))
            if terminal_id.startswith(HOST_TERMINAL):
                # One of the host's terminals: a reference a client can subscribe to.
                out.append(
                    {
                        "type": "terminal",
                        "resource": terminal_id,
                        "title": block.get("title") or terminal_id,
                        "isPty": True,
                    }
                )
            else:
                out.append({"type": "text", "text": f"terminal {terminal_id}"})
    return out


PENDING_EDIT = "ahp-edit://pending/"
#: The scheme of a terminal the host runs for an agent (its ACP terminalId is its URI).
HOST_TERMINAL = "ahp-terminal:"


def _contributor(update: dict[str, Any]) -> dict[str, Any] | None:
    meta = update.get("_meta")
    found = meta.get(CONTRIBUTOR_META) if isinstance(meta, dict) else None
    return dict(found) if isinstance(found, dict) and found.get("kind") in ("client", "mcp") else None


def pending_edits(call_id: str, content: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The ACP ``diff`` blocks of a call waiting for approval, each with the
    AHP ``FileEdit`` that draws it: the before side is the file as it is,
    the after side's content is served by the host under
    ``ahp-edit://pending/<toolCallId>`` (``/<n>`` after the first) until the
    call is settled. A new file has no before side."""
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for block in content:
        if block.get("type") != "diff" or not isinstance(block.get("path"), str):
            continue
        file_uri = Path(block["path"]).as_uri()
        after_uri = PENDING_EDIT + quote(call_id, safe="") + (f"/{len(out)}" if out else "")
        edit: dict[str, Any] = {"after": {"uri": file_uri, "content": {"uri": after_uri, "contentType": "text/plain"}}}
        if block.get("oldText") is not None:
            edit["before"] = {"uri": file_uri, "content": {"uri": file_uri}}
        out.append((block, edit))
    return out


class TurnTranslator:
    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self._parts = 0
        self._open: tuple[str, str] | None = None  # (kind, part id) that text appends to
        self.tools: dict[str, _Tool] = {}
        self.commands: list[dict[str, Any]] | None = None  # the agent's latest slash commands
        self.activity: str | None = None  # what the chat is doing, in the tool's own words
        #: tool call id -> its subagent's worker chat URI, where the host names one.
        self.worker_chat: Callable[[str], str | None] | None = None

    def continue_after(self, parts: int) -> None:
        """The turn already holds ``parts`` response parts (a resumed turn):
        new ones are numbered after them."""
        self._parts = max(self._parts, parts)

    # -- helpers -------------------------------------------------------------

    def _action(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "turnId": self.turn_id, **fields}

    def _text(self, part_kind: str, append: str, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        if self._open and self._open[0] == part_kind:
            return [self._action(append, partId=self._open[1], content=text)]
        self._parts += 1
        part_id = f"{self.turn_id}.{self._parts}"
        self._open = (part_kind, part_id)
        return [self._action("chat/responsePart", part={"kind": part_kind, "id": part_id, "content": text})]

    def _start(self, call_id: str, update: dict[str, Any]) -> list[dict[str, Any]]:
        title = update.get("title") or call_id
        name = tool_name(update)
        contributor = _contributor(update)
        hint = _TOOL_KIND.get(update.get("kind") or "")
        tool = self.tools[call_id] = _Tool(
            name=name,
            title=title,
            raw_input=update.get("rawInput"),
            contributor=contributor,
            meta={"toolKind": hint} if hint else {},
        )
        self._subagent(call_id)
        self._open = None
        start = self._action("chat/toolCallStart", toolCallId=call_id, toolName=name, displayName=title)
        if contributor is not None:
            start["contributor"] = contributor
        if tool.meta:
            start["_meta"] = dict(tool.meta)
        return [start]

    def _subagent(self, call_id: str) -> bool:
        """Keep a subagent call's hints up with its input; True for one."""
        tool = self.tools[call_id]
        if tool.name not in SUBAGENT_TOOLS:
            return False
        tool.meta = subagent_meta(tool.raw_input, self.worker_chat(call_id) if self.worker_chat else None)
        return True

    def _ready(self, call_id: str, *, confirmed: str | None, options: list[dict] | None = None) -> dict[str, Any]:
        tool = self.tools[call_id]
        ready = self._action("chat/toolCallReady", toolCallId=call_id, invocationMessage=tool.title)
        if self._subagent(call_id):
            ready["_meta"] = dict(tool.meta)  # the input is whole now: the hints are too
        if tool.contributor is not None:
            ready["contributor"] = tool.contributor
        tool_input = _tool_input(tool.raw_input)
        if tool_input is not None:
            ready["toolInput"] = tool_input
        if confirmed is not None:
            ready["confirmed"] = confirmed
            tool.status = "running"
        else:
            tool.status = "pending-confirmation"
            if options:
                ready["options"] = options
        return ready

    # -- events --------------------------------------------------------------

    def feed(self, update: dict[str, Any]) -> list[dict[str, Any]]:
        """One ACP ``session/update`` payload -> the chat actions it means."""
        update = repair(update)
        if PARENT_CALL_META in (update.get("_meta") or {}):
            return []  # a subagent's: its worker chat's to draw
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            return self._text("markdown", "chat/delta", _text_of(update.get("content")) or "")
        if kind == "agent_thought_chunk":
            return self._text("reasoning", "chat/reasoning", _text_of(update.get("content")) or "")
        if kind == "tool_call":
            return self._tool_call(update)
        if kind == "tool_call_update":
            return self._tool_call_update(update)
        if kind == "tool_call_input_delta":
            return self._input_delta(update)
        if kind == "tool_call_progress":
            return self._progress(update)
        if kind == "available_commands_update":
            self.commands = list(update.get("availableCommands") or [])
        if kind == "system_notification":
            # Something the harness did on its own (a compaction): said once,
            # as a part of its own, never appended to.
            self._open = None
            text = _text_of(update.get("content")) or ""
            if not text:
                return []
            return [self._action("chat/responsePart", part={"kind": "systemNotification", "content": text})]
        if kind == "plan":
            entries = update.get("entries") or []
            doing = next((e.get("content") for e in entries if e.get("status") == "in_progress"), None)
            return self._activity(doing)
        return []  # modes, user chunks: nothing on the chat channel

    def _activity(self, text: str | None) -> list[dict[str, Any]]:
        """``chat/activityChanged`` when what the chat is doing changed; no
        activity at all clears it."""
        if text == self.activity:
            return []
        self.activity = text
        return [{"type": "chat/activityChanged", "activity": text} if text else {"type": "chat/activityChanged"}]

    def _tool_activity(self) -> list[dict[str, Any]]:
        running = [t.title for t in self.tools.values() if t.status == "running"]
        return self._activity(running[-1] if running else None)

    def _input_delta(self, update: dict[str, Any]) -> list[dict[str, Any]]:
        """The call's arguments as they are written, appended to its
        ``partialInput`` until the call is ready."""
        tool = self.tools.get(update.get("toolCallId", ""))
        content = update.get("content")
        if tool is None or tool.status != "streaming" or not isinstance(content, str) or not content:
            return []
        return [self._action("chat/toolCallDelta", toolCallId=update["toolCallId"], content=content)]

    def _progress(self, update: dict[str, Any]) -> list[dict[str, Any]]:
        """A running call's line of progress (a subagent's): the reference
        client's ``_meta.progressMessage``, never its content, which is what
        the tool answers. The same line twice is said once."""
        call_id = update.get("toolCallId", "")
        tool = self.tools.get(call_id)
        line = update.get("message")
        if tool is None or tool.status != "running" or not isinstance(line, str) or line == tool.progress:
            return []
        tool.progress = line
        return [
            self._action(
                "chat/toolCallContentChanged",
                toolCallId=call_id,
                content=_result_content(tool.content),
                _meta={**tool.meta, "progressMessage": line},
            )
        ]

    def _tool_call(self, update: dict[str, Any]) -> list[dict[str, Any]]:
        call_id = update["toolCallId"]
        if call_id in self.tools:
            return self._tool_call_update(update)
        actions = self._start(call_id, update)
        status = update.get("status")
        if status in ("in_progress", "completed", "failed"):
            actions.append(self._ready(call_id, confirmed="not-needed"))
        if status in ("completed", "failed"):
            actions += self._complete(call_id, update)
        return actions + self._tool_activity()

    def _tool_call_update(self, update: dict[str, Any]) -> list[dict[str, Any]]:
        call_id = update["toolCallId"]
        actions: list[dict[str, Any]] = []
        if call_id not in self.tools:
            actions += self._start(call_id, update)
        tool = self.tools[call_id]
        if update.get("title"):
            tool.title = update["title"]
        if update.get("rawInput") is not None:
            tool.raw_input = update["rawInput"]
        if update.get("content"):
            tool.content = list(update["content"])
        status = update.get("status")
        if tool.status in ("done", "denied"):
            return actions
        if status == "in_progress" and tool.status == "streaming":
            actions.append(self._ready(call_id, confirmed="not-needed"))
        if update.get("content") and tool.status == "running" and status not in ("completed", "failed"):
            live = [c for c in _result_content(tool.content) if c["type"] == "terminal"]
            if live:  # a terminal to watch while the call runs
                actions.append(self._action("chat/toolCallContentChanged", toolCallId=call_id, content=live))
        if status in ("completed", "failed"):
            if tool.status == "streaming":
                actions.append(self._ready(call_id, confirmed="not-needed"))
            if tool.status == "pending-confirmation":
                return actions  # the host answers the confirmation first
            actions += self._complete(call_id, update)
        return actions + self._tool_activity()

    def _complete(self, call_id: str, update: dict[str, Any]) -> list[dict[str, Any]]:
        tool = self.tools[call_id]
        tool.status = "done"
        success = update.get("status") == "completed"
        result: dict[str, Any] = {"success": success, "pastTenseMessage": tool.title}
        content = _result_content(update.get("content") or tool.content)
        if not success:
            # Only text says why: a failed command's terminal is a reference, not a reason.
            message = " ".join(c["text"] for c in content if c.get("type") == "text") or f"{tool.title} failed"
            result["error"] = {"message": message}
        link = subagent_content(tool.meta, tool.title) if self._subagent(call_id) else None
        if link is not None:
            content.append(link)  # the worker chat, whose origin names this call back
        if content:
            result["content"] = content
        complete = self._action("chat/toolCallComplete", toolCallId=call_id, result=result)
        if tool.progress is not None:
            complete["_meta"] = dict(tool.meta)  # the progress line comes off with the completion
        return [complete]

    def permission(self, request: PermissionRequest, *, confirmed: str | None = None) -> list[dict[str, Any]]:
        """The agent asks before running a tool: a confirmation somebody must
        give, or (``confirmed``: ``"setting"``) one a standing setting gave."""
        call = repair(request.tool_call)
        call_id = call["toolCallId"]
        actions: list[dict[str, Any]] = []
        if call_id not in self.tools:
            actions += self._start(call_id, call)
        tool = self.tools[call_id]
        if call.get("title"):
            tool.title = call["title"]
        if call.get("rawInput") is not None:
            tool.raw_input = call["rawInput"]
        options = [
            {"id": o.option_id, "label": o.name, "kind": "approve" if o.kind.startswith("allow") else "deny"}
            for o in request.options
        ]
        if confirmed is not None:
            return [*actions, self._ready(call_id, confirmed=confirmed)]
        ready = self._ready(call_id, confirmed=None, options=options)
        edits = [edit for _, edit in pending_edits(call_id, call.get("content") or [])]
        if edits:
            ready["edits"] = {"items": edits}
        actions.append(ready)
        return actions

    def confirmed(self, call_id: str, approved: bool) -> list[dict[str, Any]]:
        """The host applied a ``chat/toolCallConfirmed``: follow the call's
        state, and say what the chat is now doing."""
        tool = self.tools.get(call_id)
        if tool is not None and tool.status == "pending-confirmation":
            tool.status = "running" if approved else "denied"
        return self._tool_activity()

    def finish(self) -> list[dict[str, Any]]:
        """The turn ended: the chat is doing nothing any more."""
        return self._activity(None)

    def in_flight(self) -> list[str]:
        return [cid for cid, t in self.tools.items() if t.status in ("streaming", "pending-confirmation", "running")]
