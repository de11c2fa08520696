"""ACP's messages as plain dicts, in the form the ``agent-client-protocol`` library writes them.

The demo agent does not import the library (see :mod:`ahpd.demo_agent.rpc`
for why), so what its models did is spelt out here: camelCase field names,
fields in the models' order, ``sessionUpdate`` and ``type`` discriminators
last, and no ``null`` where the library leaves a field out. The library
writes what an agent *sends* (updates, requests) without ``None`` values and
without values equal to a field's default (``serialize_params``), and its
answers without ``None`` values. The demo-agent tests check every message
the agent writes against the library's own writing of it
(``tests/demo_agent/harness.py``, ``assert_library_form``).

Reading: what the client sends is checked as far as the agent reads it
(:func:`required`, :func:`optional`); a request missing a field, or with one
of the wrong type, is refused with ``-32602 Invalid params`` and the field
named, as the library's validation would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ahpd.demo_agent.rpc import RequestError

PROTOCOL_VERSION = 1

Json = dict[str, Any]

_TYPE_NAMES = {str: "string", list: "list", dict: "object", bool: "boolean", int: "integer"}


# -- reading what the client sends ------------------------------------------------------------


def params_of(params: Any) -> Json:
    if not isinstance(params, dict):
        raise RequestError.invalid_params(
            {"errors": [{"type": "model_type", "loc": [], "msg": "Input should be an object", "input": params}]}
        )
    return params


def required(params: Json, name: str, kind: type = str) -> Any:
    """``params[name]``, which must be there and be a ``kind``."""
    if name not in params:
        raise RequestError.invalid_params(
            {"errors": [{"type": "missing", "loc": [name], "msg": "Field required", "input": params}]}
        )
    return _typed(params, name, kind)


def optional(params: Json, name: str, kind: type = str) -> Any:
    """``params[name]`` if given and not null, else ``None``; a ``kind`` if given."""
    if params.get(name) is None:
        return None
    return _typed(params, name, kind)


def _typed(params: Json, name: str, kind: type) -> Any:
    value = params[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        type_name = _TYPE_NAMES.get(kind, kind.__name__)
        raise RequestError.invalid_params(
            {
                "errors": [
                    {
                        "type": f"{type_name}_type",
                        "loc": [name],
                        "msg": f"Input should be a valid {type_name}",
                        "input": value,
                    }
                ]
            }
        )
    return value


def prompt_text(blocks: list[Any]) -> str:
    """The prompt as one string: text as is, other content blocks as short markers."""
    parts: list[str] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource_link":
            parts.append(f" [{block.get('name')}]({block.get('uri')}) ")
        elif kind == "resource":
            parts.append(f" [{(block.get('resource') or {}).get('uri')}] ")
        else:
            parts.append(f" [{kind or 'content'}] ")
    return "".join(parts).strip()


class Capabilities:
    """What the client offered at ``initialize`` (``clientCapabilities``), as the agent asks it."""

    def __init__(self, offered: Any = None) -> None:
        offered = offered if isinstance(offered, dict) else {}
        fs = offered.get("fs") if isinstance(offered.get("fs"), dict) else {}
        self.read_text_file = fs.get("readTextFile") is True
        self.write_text_file = fs.get("writeTextFile") is True
        self.terminal = offered.get("terminal") is True
        elicitation = offered.get("elicitation")
        self.elicitation_form = isinstance(elicitation, dict) and elicitation.get("form") is not None


# -- content and tool calls ------------------------------------------------------------------


def text_block(text: str) -> Json:
    return {"text": text, "type": "text"}


def tool_content(block: Json) -> Json:
    return {"content": block, "type": "content"}


def tool_diff_content(path: str, new_text: str, old_text: str | None = None) -> Json:
    diff: Json = {"path": path}
    if old_text is not None:
        diff["oldText"] = old_text
    diff["newText"] = new_text
    diff["type"] = "diff"
    return diff


def tool_terminal_ref(terminal_id: str) -> Json:
    return {"terminalId": terminal_id, "type": "terminal"}


def _tool_fields(
    kind: str | None,
    status: str | None,
    content: list[Json] | None,
    locations: list[str] | None,
    raw_input: Any,
    raw_output: Any,
) -> Json:
    fields: Json = {}
    for key, value in (
        ("kind", kind),
        ("status", status),
        ("content", content),
        ("locations", None if locations is None else [{"path": path} for path in locations]),
        ("rawInput", raw_input),
        ("rawOutput", raw_output),
    ):
        if value is not None:
            fields[key] = value
    return fields


def start_tool_call(
    tool_call_id: str,
    title: str,
    *,
    kind: str | None = None,
    status: str | None = None,
    content: list[Json] | None = None,
    locations: list[str] | None = None,
    raw_input: Any = None,
    raw_output: Any = None,
) -> Json:
    """A ``tool_call`` update; ``locations`` are paths."""
    start: Json = {"toolCallId": tool_call_id, "title": title}
    start.update(_tool_fields(kind, status, content, locations, raw_input, raw_output))
    start["sessionUpdate"] = "tool_call"
    return start


def update_tool_call(
    tool_call_id: str,
    *,
    status: str | None = None,
    content: list[Json] | None = None,
    raw_output: Any = None,
) -> Json:
    """A ``tool_call_update``."""
    update: Json = {"toolCallId": tool_call_id}
    update.update(_tool_fields(None, status, content, None, None, raw_output))
    update["sessionUpdate"] = "tool_call_update"
    return update


def permission_tool_call(
    tool_call_id: str,
    title: str,
    kind: str,
    *,
    content: list[Json] | None = None,
    locations: list[str] | None = None,
    raw_input: Any = None,
) -> Json:
    """The ``toolCall`` (a ``ToolCallUpdate``, ``pending``) of a permission request."""
    call: Json = {"toolCallId": tool_call_id, "kind": kind, "status": "pending", "title": title}
    call.update(_tool_fields(None, None, content, locations, raw_input, None))
    return call


def permission_option(option_id: str, name: str, kind: str) -> Json:
    return {"optionId": option_id, "name": name, "kind": kind}


# -- session updates -------------------------------------------------------------------------


def message_chunk(session_update: str, text: str, message_id: str) -> Json:
    """An ``agent_message_chunk``, ``agent_thought_chunk`` or ``user_message_chunk`` of text."""
    return {"content": text_block(text), "messageId": message_id, "sessionUpdate": session_update}


def current_mode_update(mode_id: str) -> Json:
    return {"currentModeId": mode_id, "sessionUpdate": "current_mode_update"}


def session_info_update(title: str | None, updated_at: str | None) -> Json:
    update: Json = {}
    if title is not None:
        update["title"] = title
    if updated_at is not None:
        update["updatedAt"] = updated_at
    update["sessionUpdate"] = "session_info_update"
    return update


def plan_update(entries: Sequence[tuple[str, str, str]]) -> Json:
    """A ``plan`` update from (content, priority, status) entries."""
    return {
        "entries": [{"content": c, "priority": p, "status": s} for c, p, s in entries],
        "sessionUpdate": "plan",
    }


def available_commands_update(commands: tuple[tuple[str, str, str | None], ...]) -> Json:
    """From (name, description, input hint or ``None``)."""
    listed: list[Json] = []
    for name, description, hint in commands:
        command: Json = {"name": name, "description": description}
        if hint is not None:
            command["input"] = {"hint": hint}
        listed.append(command)
    return {"availableCommands": listed, "sessionUpdate": "available_commands_update"}


# -- answers ---------------------------------------------------------------------------------


def modes(current: str, available: tuple[tuple[str, str, str], ...]) -> Json:
    """A ``SessionModeState`` from (id, name, description)."""
    return {
        "currentModeId": current,
        "availableModes": [{"id": i, "name": n, "description": d} for i, n, d in available],
    }


def select_option(option_id: str, name: str, category: str, current: str, choices: list[tuple[str, str]]) -> Json:
    """A ``select`` session config option from (value, name) choices."""
    return {
        "currentValue": current,
        "options": [{"value": v, "name": n} for v, n in choices],
        "id": option_id,
        "name": name,
        "category": category,
        "type": "select",
    }


def usage(input_tokens: int, output_tokens: int, thought_tokens: int, total_tokens: int) -> Json:
    return {
        "totalTokens": total_tokens,
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "thoughtTokens": thought_tokens,
    }


def session_info(session_id: str, cwd: str, title: str | None, updated_at: str | None) -> Json:
    info: Json = {"sessionId": session_id, "cwd": cwd}
    if title is not None:
        info["title"] = title
    if updated_at is not None:
        info["updatedAt"] = updated_at
    return info
