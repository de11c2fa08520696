"""Claude Code's messages -> the port's ACP-shaped updates: pure functions.

The SDK hands us typed messages (``StreamEvent`` for each raw Messages API
event when partial messages are on, then one ``AssistantMessage`` per
finished content block, ``UserMessage`` carrying tool results,
``SystemMessage`` and one ``ResultMessage`` per turn). :class:`StreamMapper`
turns them into ``session/update`` payloads the translator understands,
remembering only what it must:

* text and thinking stream as deltas; the finished block that repeats a
  streamed one says nothing, and a block that did not stream is said whole;
* a tool call is announced once, under the agent's own ``tool_use`` id, by
  whichever comes first - the stream naming the tool, the finished block, or
  the CLI asking permission for it (the SDK hands the permission question to
  another task, so it may overtake the stream); everything after is an update;
* a tool result completes (or fails) the call with its text;
* a subagent's messages (``parent_tool_use_id`` set: the Task or Agent call
  that runs it) go through a mapper of their own, one per spawning call, and
  come out tagged with that call's id (``_meta["ahpd.parentToolCallId"]``),
  so the host can draw them in the subagent's own chat rather than the
  spawning one. Its final report, which the CLI hands back only as the
  task's summary when the subagent ran in the foreground, is said as its
  last words.

Everything here is a function of its input, so it is tested without a CLI.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ahpd.backends.port import PARENT_CALL_META
from ahpd.backends.translate import CONTRIBUTOR_META

#: The in-process MCP server of this host (a client's or the host's own
#: tools): never a customization of the session, so never a contributor.
OWN_SERVER = "ahp"
#: A background task the session's ``backgroundWork`` lists, by its
#: ``task_type``: the shells a Bash call left running.
SHELL_TASK = "local_bash"
#: ... and the subagents a Task or Agent call left running.
AGENT_TASK = "local_agent"

#: The harness's tool names -> ACP tool kinds (the translator maps those on).
TOOL_KINDS = {
    "Bash": "execute",
    "BashOutput": "execute",
    "KillShell": "execute",
    "Read": "read",
    "NotebookRead": "read",
    "Grep": "search",
    "Glob": "search",
    "WebSearch": "search",
    "WebFetch": "fetch",
    "Edit": "edit",
    "MultiEdit": "edit",
    "Write": "edit",
    "NotebookEdit": "edit",
    "Task": "think",
    "Agent": "think",
    "TodoWrite": "think",
}
EDIT_TOOLS = ("Edit", "MultiEdit", "Write")


def tool_kind(name: str) -> str:
    return TOOL_KINDS.get(name, "other")


def tool_title(name: str, tool_input: Mapping[str, Any] | None) -> str:
    """One line saying what the call does, in the tool's own terms."""
    args = tool_input or {}

    def arg(*keys: str) -> str | None:
        for key in keys:
            value = args.get(key)
            if isinstance(value, str) and value.strip():
                return " ".join(value.split())
        return None

    if name == "Bash":
        command = arg("command")
        return f"Run {command}" if command else "Run a command"
    if name in ("Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "NotebookRead"):
        verb = {"Read": "Read", "NotebookRead": "Read", "Write": "Write"}.get(name, "Edit")
        path = arg("file_path", "notebook_path", "path")
        return f"{verb} {path}" if path else name
    if name in ("Grep", "Glob"):
        pattern = arg("pattern")
        return f"Search for {pattern}" if pattern else name
    if name in ("WebFetch", "WebSearch"):
        what = arg("url", "query")
        return f"{'Fetch' if name == 'WebFetch' else 'Search the web for'} {what}" if what else name
    if name in ("Task", "Agent"):
        what = arg("description")
        return what or name
    if name.startswith("mcp__"):
        return name.split("__", 2)[-1]
    return name


def mcp_contributor(name: str, provider: str = "claude") -> dict[str, Any] | None:
    """``mcp__<server>__<tool>`` -> the AHP ``ToolCallMcpContributor`` naming
    that server's customization (``<provider>.mcp:<server>``, the id the
    session's customizations give it); None for any other name."""
    parts = name.split("__", 2)
    if len(parts) != 3 or parts[0] != "mcp" or not parts[1] or not parts[2] or parts[1] == OWN_SERVER:
        return None
    return {"kind": "mcp", "customizationId": f"{provider}.mcp:{parts[1]}"}


def tool_call(
    call_id: str, name: str, tool_input: Mapping[str, Any] | None, status: str = "pending", provider: str = "claude"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"claudeCode": {"toolName": name}}
    contributor = mcp_contributor(name, provider)
    if contributor is not None:
        meta[CONTRIBUTOR_META] = contributor
    update: dict[str, Any] = {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": tool_title(name, tool_input),
        "kind": tool_kind(name),
        "status": status,
        "_meta": meta,
    }
    if tool_input:
        update["rawInput"] = dict(tool_input)
    return update


def _chunk(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def result_text(content: Any) -> str:
    """A tool result's content (a string or a list of blocks) as text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, Mapping):
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                elif block.get("type") == "image":
                    parts.append("[image]")
            elif isinstance(block, str):
                parts.append(block)
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


class StreamMapper:
    """The SDK's message stream -> ACP ``session/update`` payloads."""

    def __init__(self, provider: str = "claude", parent: str | None = None) -> None:
        self.provider = provider
        #: The spawning call of the subagent this mapper follows (None: the
        #: conversation itself).
        self.parent = parent
        #: spawning call id -> the mapper of the subagent that call runs.
        self.workers: dict[str, StreamMapper] = {}
        #: The text said last (a subagent's report is not said twice).
        self.last_text: str | None = None
        #: tool_use ids announced with ``tool_call``: the next word is an update.
        self.announced: set[str] = set()
        #: tool_use id -> tool name, for the result and for diffs.
        self.tool_names: dict[str, str] = {}
        #: (message id, block kind) pairs that streamed as deltas.
        self._streamed: set[tuple[str, str]] = set()
        #: content-block index -> (kind, tool id) of the message streaming now.
        self._blocks: dict[int, tuple[str, str | None]] = {}
        self._message_id: str | None = None
        #: The model of the latest assistant message, for usage.
        self.model: str | None = None
        #: tool_use id -> its input, once the finished block said it (a
        #: background shell's command).
        self.tool_inputs: dict[str, Mapping[str, Any]] = {}
        #: task id -> its ``task_started`` (what the task is).
        self._tasks: dict[str, Mapping[str, Any]] = {}
        #: The task ids the latest ``background_tasks_changed`` listed.
        self._live: set[str] = set()
        #: id -> the ``BackgroundWork`` entry last said, for each one listed now.
        self.background: dict[str, dict[str, Any]] = {}
        #: The uuid of the latest entry of the main chain (an assistant frame
        #: or a tool result of this conversation, not of a subagent): where
        #: a resume that drops what came after starts.
        self.point: str | None = None

    def announce(self, call_id: str, name: str, tool_input: Mapping[str, Any] | None) -> dict[str, Any]:
        """``tool_call`` the first time a call is named, ``tool_call_update`` after."""
        self.tool_names[call_id] = name
        if tool_input:
            self.tool_inputs[call_id] = tool_input
        if call_id in self.announced:
            update = tool_call(call_id, name, tool_input, provider=self.provider)
            update["sessionUpdate"] = "tool_call_update"
            del update["status"]
            return update
        self.announced.add(call_id)
        return tool_call(call_id, name, tool_input, provider=self.provider)

    def announce_for(
        self, agent_id: str | None, call_id: str, name: str, tool_input: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """:meth:`announce` a call the CLI asks permission for: in the mapper
        of the subagent ``agent_id`` names (its task id), tagged with the
        call that runs it, when it is a subagent's."""
        started = self._tasks.get(agent_id) if agent_id else None
        spawner = started.get("tool_use_id") if started and started.get("task_type") == AGENT_TASK else None
        if self.parent is not None or not isinstance(spawner, str):
            return self.announce(call_id, name, tool_input)
        return self._worker_said(spawner, [self._worker(spawner).announce(call_id, name, tool_input)])[0]

    # -- the SDK's messages (as the SDK parses them, duck-typed) -------------------

    def feed(self, message: Any) -> list[dict[str, Any]]:
        kind = type(message).__name__
        parent = getattr(message, "parent_tool_use_id", None)
        if parent is not None and self.parent is None and kind in ("StreamEvent", "AssistantMessage", "UserMessage"):
            return self._worker_said(parent, self._worker(parent).feed(message))
        if kind == "StreamEvent":
            return self._stream_event(message.event or {})
        if kind == "AssistantMessage":
            return self._assistant(message)
        if kind == "UserMessage":
            return self._user(message)
        if kind == "SystemMessage" and getattr(message, "subtype", None) == "compact_boundary":
            return [compact_notification(getattr(message, "data", {}) or {})]
        if hasattr(message, "subtype") and hasattr(message, "data"):  # SystemMessage and its task kinds
            return self._system(message.subtype, message.data or {})
        return []

    # -- subagents: their own words, tagged with the call that runs them -------------

    def _worker(self, call_id: str) -> StreamMapper:
        worker = self.workers.get(call_id)
        if worker is None:
            worker = self.workers[call_id] = StreamMapper(self.provider, parent=call_id)
        return worker

    @staticmethod
    def _worker_said(call_id: str, updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for update in updates:
            update["_meta"] = {**(update.get("_meta") or {}), PARENT_CALL_META: call_id}
        return updates

    def _report(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A subagent's task ended: its summary is its final report, said in
        its own chat unless its last words already said it (the CLI streams
        a background subagent's report, and not a foreground one's)."""
        call_id, summary = data.get("tool_use_id"), data.get("summary")
        started = self._tasks.get(str(data.get("task_id")))
        if (
            not isinstance(call_id, str)
            or not isinstance(summary, str)
            or not summary.strip()
            or started is None
            or started.get("task_type") != AGENT_TASK
        ):
            return []
        worker = self._worker(call_id)
        if worker.last_text is not None and worker.last_text.strip() == summary.strip():
            return []
        worker.last_text = summary
        return self._worker_said(call_id, [_chunk("agent_message_chunk", summary)])

    # -- tasks: a subagent's progress, the shells left running ----------------------

    def _system(self, subtype: str, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        task_id = data.get("task_id")
        call_id = data.get("tool_use_id")
        updates: list[dict[str, Any]] = []
        if subtype == "task_started" and isinstance(task_id, str):
            self._tasks[task_id] = dict(data)
            if isinstance(call_id, str) and call_id in self.announced:
                # The call that started the task is running now (the SDK says
                # no other word for a call no one was asked about).
                updates.append({"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"})
            updates += self._background_level()
        elif subtype == "task_progress" and isinstance(call_id, str) and call_id in self.announced:
            line = data.get("description")
            if isinstance(line, str) and line.strip():
                updates.append({"sessionUpdate": "tool_call_progress", "toolCallId": call_id, "message": line})
        elif subtype == "background_tasks_changed" and isinstance(data.get("tasks"), list):
            self._live = {
                t["task_id"]
                for t in data["tasks"]
                if isinstance(t, Mapping) and isinstance(t.get("task_id"), str) and not t.get("ambient")
            }
            updates += self._background_level()
        elif subtype in ("task_notification", "task_updated") and isinstance(task_id, str):
            if subtype == "task_notification":
                updates += self._report(data)
            status = data.get("status") or (data.get("patch") or {}).get("status")
            if status in ("completed", "failed", "stopped", "killed"):
                self._live.discard(task_id)  # a terminal word ends one whatever the level says
                updates += self._background_level()
        return updates

    def _background_level(self) -> list[dict[str, Any]]:
        """The shells and subagents running now against the ones last said:
        each new or changed one set whole, each gone one removed."""
        updates: list[dict[str, Any]] = []
        now: dict[str, dict[str, Any]] = {}
        for task_id in sorted(self._live):
            work = self._shell(task_id) or self._subagent(task_id)
            if work is not None:
                now[work["id"]] = work
        for work_id in [w for w in self.background if w not in now]:
            del self.background[work_id]
            updates.append({"sessionUpdate": "background_work_removed", "id": work_id})
        for work_id, work in now.items():
            said = self.background.get(work_id)
            if said is not None:
                work["startedAt"] = said["startedAt"]
            if work != said:
                update: dict[str, Any] = {"sessionUpdate": "background_work_set", "work": work}
                if work["kind"] == "subagent":
                    # Its chat is the host's to name, after the call that runs it.
                    update["toolCallId"] = self._tasks[work_id.removeprefix("subagent:")]["tool_use_id"]
                self.background[work_id] = work
                updates.append(update)
        return updates

    def _subagent(self, task_id: str) -> dict[str, Any] | None:
        """A backgrounded subagent as an AHP ``BackgroundSubagentWork``, but
        for its ``chat``, which the host adds: the worker chat of the call
        that started it."""
        started = self._tasks.get(task_id)
        if (
            started is None
            or started.get("task_type") != AGENT_TASK
            or not started.get("is_backgrounded")
            or not isinstance(started.get("tool_use_id"), str)
        ):
            return None
        label = started.get("description") or started.get("subagent_type") or "Subagent"
        return {"id": f"subagent:{task_id}", "kind": "subagent", "label": str(label), "startedAt": _now()}

    def _shell(self, task_id: str) -> dict[str, Any] | None:
        """A shell task as an AHP ``BackgroundShellWork``, once its
        ``task_started`` said which Bash call started it (whose command it is)."""
        started = self._tasks.get(task_id)
        if started is None or started.get("task_type") != SHELL_TASK:
            return None
        command = (self.tool_inputs.get(str(started.get("tool_use_id"))) or {}).get("command")
        if not isinstance(command, str):
            return None
        label = started.get("description")
        if not (isinstance(label, str) and label):
            label = command
        return {"id": f"shell:{task_id}", "kind": "shell", "label": label, "startedAt": _now(), "command": command}

    def _stream_event(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        etype = event.get("type")
        if etype == "message_start":
            message = event.get("message") or {}
            self._message_id = message.get("id")
            self._blocks = {}
            if message.get("model"):
                self.model = message["model"]
            return []
        if etype == "content_block_start":
            block = event.get("content_block") or {}
            index = int(event.get("index", 0))
            btype = block.get("type")
            if btype == "tool_use" and block.get("id"):
                self._blocks[index] = ("tool_use", block["id"])
                return [self.announce(block["id"], block.get("name") or "tool", block.get("input") or None)]
            self._blocks[index] = (str(btype), None)
            return []
        if etype == "content_block_delta":
            delta = event.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta" and delta.get("text"):
                self._mark("text")
                return [_chunk("agent_message_chunk", delta["text"])]
            if dtype == "thinking_delta" and delta.get("thinking"):
                self._mark("thinking")
                return [_chunk("agent_thought_chunk", delta["thinking"])]
            if dtype == "input_json_delta" and delta.get("partial_json"):
                # A call's arguments as the model writes them (not ACP, which
                # has no such moment): drawn while the call is still being written.
                block = self._blocks.get(int(event.get("index", 0)))
                if block is not None and block[0] == "tool_use" and block[1]:
                    return [
                        {
                            "sessionUpdate": "tool_call_input_delta",
                            "toolCallId": block[1],
                            "content": delta["partial_json"],
                        }
                    ]
        return []

    def _mark(self, kind: str) -> None:
        if self._message_id:
            self._streamed.add((self._message_id, kind))

    def _assistant(self, message: Any) -> list[dict[str, Any]]:
        if getattr(message, "model", None) and message.model != "<synthetic>":
            self.model = message.model
        if self.parent is None:
            self.point = getattr(message, "uuid", None) or self.point
        message_id = getattr(message, "message_id", None)
        updates: list[dict[str, Any]] = []
        for block in message.content or []:
            btype = type(block).__name__
            if btype == "TextBlock":
                if (message_id, "text") not in self._streamed and block.text:
                    updates.append(_chunk("agent_message_chunk", block.text))
                self.last_text = block.text or self.last_text
            elif btype == "ThinkingBlock":
                if (message_id, "thinking") not in self._streamed and block.thinking:
                    updates.append(_chunk("agent_thought_chunk", block.thinking))
            elif btype == "ToolUseBlock":
                updates.append(self.announce(block.id, block.name, block.input))
        return updates

    def _user(self, message: Any) -> list[dict[str, Any]]:
        if self.parent is None:
            self.point = getattr(message, "uuid", None) or self.point
        content = message.content
        if isinstance(content, str):
            return []
        updates = []
        for block in content or []:
            if type(block).__name__ != "ToolResultBlock":
                continue
            call_id = block.tool_use_id
            update: dict[str, Any] = {
                "sessionUpdate": "tool_call_update" if call_id in self.announced else "tool_call",
                "toolCallId": call_id,
                "status": "failed" if block.is_error else "completed",
            }
            if call_id not in self.announced:
                self.announced.add(call_id)
                name = self.tool_names.get(call_id, "tool")
                update.update(title=tool_title(name, None), kind=tool_kind(name))
            text = result_text(block.content)
            if text:
                update["content"] = [{"type": "content", "content": {"type": "text", "text": text}}]
            updates.append(update)
        return updates


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def compact_notification(data: Mapping[str, Any]) -> dict[str, Any]:
    """``compact_boundary`` -> an update the translator may draw as a system
    notification (``systemNotification`` response part)."""
    meta = data.get("compact_metadata") or {}
    before = meta.get("pre_tokens")
    trigger = meta.get("trigger")
    text = "The conversation was compacted"
    if trigger:
        text += f" ({trigger})"
    if isinstance(before, int):
        text += f": {before} tokens of context were summarised"
    return {
        "sessionUpdate": "system_notification",
        "content": {"type": "text", "text": text},
        "_meta": {"ahpd.compact": dict(meta)},
    }


# -- usage ------------------------------------------------------------------------


def usage_info(
    usage: Mapping[str, Any] | None,
    *,
    model: str | None = None,
    cost_usd: float | None = None,
    model_usage: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """A ``ResultMessage``'s usage -> AHP ``UsageInfo``: tokens and the model
    as fields, what the protocol names no field for under ``ahpd.*``."""
    if not usage and cost_usd is None:
        return None
    usage = usage or {}
    info: dict[str, Any] = {
        "inputTokens": int(usage.get("input_tokens") or 0),
        "outputTokens": int(usage.get("output_tokens") or 0),
    }
    if usage.get("cache_read_input_tokens") is not None:
        info["cacheReadTokens"] = int(usage["cache_read_input_tokens"])
    if model_usage and not model:
        model = max(model_usage, key=lambda m: int(model_usage[m].get("outputTokens") or 0), default=None)
    if model and model != "<synthetic>":
        info["model"] = model
    meta: dict[str, Any] = {}
    if usage.get("cache_creation_input_tokens") is not None:
        meta["ahpd.cacheWriteTokens"] = int(usage["cache_creation_input_tokens"])
    details = usage.get("output_tokens_details") or {}
    if isinstance(details, Mapping) and details.get("thinking_tokens"):
        meta["ahpd.reasoningTokens"] = int(details["thinking_tokens"])
    if model is not None and model_usage and model in model_usage and model_usage[model].get("contextWindow"):
        used = info["inputTokens"] + info.get("cacheReadTokens", 0) + meta.get("ahpd.cacheWriteTokens", 0)
        meta["ahpd.context"] = {"used": used, "size": int(model_usage[model]["contextWindow"])}
    if cost_usd is not None:
        meta["ahpd.cost"] = {"amount": float(cost_usd), "currency": "USD"}
    if meta:
        info["_meta"] = meta
    return info


# -- edits waiting for approval ---------------------------------------------------------


def pending_edit(name: str, tool_input: Mapping[str, Any], cwd: Path) -> dict[str, Any] | None:
    """The file a Write, Edit or MultiEdit waiting for approval would change,
    as ACP ``diff`` content: the file as it is and as it would be. None when
    it cannot be said (not an edit tool, an unreadable file, an old string
    that is not there)."""
    if name not in EDIT_TOOLS:
        return None
    path_arg = tool_input.get("file_path")
    if not isinstance(path_arg, str) or not path_arg:
        return None
    path = Path(path_arg) if os.path.isabs(path_arg) else cwd / path_arg
    try:
        before: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = None
    except (OSError, UnicodeDecodeError):
        return None
    if name == "Write":
        after = tool_input.get("content")
        if not isinstance(after, str):
            return None
    else:
        edits = tool_input.get("edits") if name == "MultiEdit" else [tool_input]
        after = before or ""
        for edit in edits or []:
            old, new = edit.get("old_string"), edit.get("new_string")
            if not isinstance(old, str) or not isinstance(new, str):
                return None
            if old == "" and not after:
                after = new
            elif old in after:
                after = after.replace(old, new) if edit.get("replace_all") else after.replace(old, new, 1)
            else:
                return None
    return {"type": "diff", "path": str(path), "oldText": before, "newText": after}
