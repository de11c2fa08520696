"""ACP <-> AHP shapes for the ACP backend: pure functions, no I/O.

Everything here takes and returns wire JSON (camelCase dicts) or the
library's pydantic models, so it is tested without a process: usage, prompt
content from AHP attachments, elicitation forms as AHP input questions and
back, the agent's error in its own words, models offered by the agent, and
the session catalogue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from acp.exceptions import RequestError
from acp.schema import (
    ElicitationSchema,
    PromptCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectGroup,
    SessionInfo,
    Usage,
)
from pydantic import BaseModel

from ahpd.backends.port import StoredConversation
from ahpd.backends.translate import repair


def wire(model: BaseModel) -> dict[str, Any]:
    """A pydantic model of the library as ACP wire JSON."""
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def usage_info(usage: Usage | None) -> dict[str, Any] | None:
    """ACP ``Usage`` -> AHP ``UsageInfo``."""
    if usage is None:
        return None
    info: dict[str, Any] = {"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens}
    if usage.cached_read_tokens is not None:
        info["cacheReadTokens"] = usage.cached_read_tokens
    return info


def rpc_error_message(exc: RequestError) -> str:
    """The agent's own words for a JSON-RPC error.

    Agents built on the Python library answer an uncaught exception as
    ``Internal error`` with the exception text in ``data.details``; that text
    is what the user needs, so it follows the generic message.
    """
    message = str(exc) or "error"
    data = exc.data
    detail = None
    if isinstance(data, str):
        detail = data
    elif isinstance(data, Mapping):
        for key in ("details", "message", "error"):
            if isinstance(data.get(key), str):
                detail = data[key]
                break
    if detail and detail not in message:
        return f"{message}: {detail}"
    return message


# -- prompt ------------------------------------------------------------------


def prompt_blocks(
    text: str, attachments: Sequence[Mapping[str, Any]], caps: PromptCapabilities | None
) -> list[dict[str, Any]]:
    """The ACP prompt for one user message: its text, then one block per
    AHP ``MessageAttachment``, kept within what the agent said it accepts
    (text and resource links are always allowed)."""
    caps = caps or PromptCapabilities()
    blocks: list[dict[str, Any]] = []
    if text:
        blocks.append({"type": "text", "text": text})
    for attachment in attachments:
        block = _attachment_block(attachment, caps)
        if block is not None:
            blocks.append(block)
    if not blocks:
        blocks.append({"type": "text", "text": ""})
    return blocks


def _attachment_block(att: Mapping[str, Any], caps: PromptCapabilities) -> dict[str, Any] | None:
    kind = att.get("type")
    label = str(att.get("label") or "attachment")
    if kind == "simple":
        return {"type": "text", "text": str(att.get("modelRepresentation") or label)}
    if kind == "embeddedResource":
        data = str(att.get("data", ""))
        mime = str(att.get("contentType") or "application/octet-stream")
        if mime.startswith("image/") and caps.image:
            return {"type": "image", "data": data, "mimeType": mime}
        if mime.startswith("audio/") and caps.audio:
            return {"type": "audio", "data": data, "mimeType": mime}
        if caps.embedded_context:
            resource = {"uri": f"attachment:{label}", "mimeType": mime, "blob": data}
            return {"type": "resource", "resource": resource}
        return {"type": "text", "text": f"[attachment {label} ({mime}) omitted: the agent does not accept it]"}
    if kind in ("resource", "annotations", "chat"):
        uri = att.get("uri") if kind == "resource" else att.get("resource")
        if not uri:
            return None
        link: dict[str, Any] = {"type": "resource_link", "uri": str(uri), "name": label}
        if att.get("contentType"):
            link["mimeType"] = att["contentType"]
        if isinstance(att.get("sizeHint"), int | float):
            link["size"] = int(att["sizeHint"])
        return link
    if kind in ("text", "image", "audio", "resource_link"):  # already an ACP content block
        return dict(att)
    return None


# -- elicitation ---------------------------------------------------------------


def elicitation_questions(schema: ElicitationSchema) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """An ACP form as AHP ``ChatInputQuestion``s, and each question's kind
    (to turn the answers back into the form's values)."""
    required = set(schema.required or ())
    questions: list[dict[str, Any]] = []
    kinds: dict[str, str] = {}
    for name, prop in (schema.properties or {}).items():
        p = wire(prop)
        q: dict[str, Any] = {"id": name, "message": str(p.get("description") or p.get("title") or name)}
        if p.get("title"):
            q["title"] = str(p["title"])
        if name in required:
            q["required"] = True
        ptype = p.get("type")
        if ptype == "string" and (p.get("enum") or p.get("oneOf")):
            q["kind"] = "single-select"
            q["options"] = _options(p)
        elif ptype == "string" or ptype not in ("number", "integer", "boolean", "array"):
            q["kind"] = "text"
            for src, dst in (("format", "format"), ("minLength", "min"), ("maxLength", "max")):
                if src in p:
                    q[dst] = p[src]
            if isinstance(p.get("default"), str):
                q["defaultValue"] = p["default"]
        elif ptype in ("number", "integer"):
            q["kind"] = ptype
            for src, dst in (("minimum", "min"), ("maximum", "max"), ("default", "defaultValue")):
                if isinstance(p.get(src), int | float) and not isinstance(p.get(src), bool):
                    q[dst] = p[src]
        elif ptype == "boolean":
            q["kind"] = "boolean"
            if isinstance(p.get("default"), bool):
                q["defaultValue"] = p["default"]
        else:  # array: multi-select
            q["kind"] = "multi-select"
            q["options"] = _options(p.get("items") or {})
            for src, dst in (("minItems", "min"), ("maxItems", "max")):
                if src in p:
                    q[dst] = p[src]
        kinds[name] = q["kind"]
        questions.append(q)
    return questions, kinds


def _options(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    titled = p.get("oneOf") or p.get("anyOf")
    if titled:
        out = []
        for opt in titled:
            o = {"id": str(opt.get("const")), "label": str(opt.get("title") or opt.get("const"))}
            if opt.get("description"):
                o["description"] = str(opt["description"])
            out.append(o)
        return out
    return [{"id": str(v), "label": str(v)} for v in p.get("enum") or ()]


def elicitation_content(kinds: Mapping[str, str], answers: Mapping[str, Any] | None) -> dict[str, Any]:
    """AHP ``ChatInputAnswer``s (by question id) -> the ACP form's content.
    Skipped and unknown questions are left out."""
    content: dict[str, Any] = {}
    for qid, answer in (answers or {}).items():
        if qid not in kinds or not isinstance(answer, Mapping) or answer.get("state") == "skipped":
            continue
        value = answer.get("value")
        if not isinstance(value, Mapping) or "value" not in value:
            continue
        v = value["value"]
        kind = kinds[qid]
        if kind == "integer" and isinstance(v, int | float) and not isinstance(v, bool):
            v = int(v)
        elif kind == "multi-select":
            v = list(v) if isinstance(v, list | tuple) else [v]
            v += [str(x) for x in value.get("freeformValues") or ()]
        elif kind == "single-select" and value.get("freeformValues") and not v:
            v = str(value["freeformValues"][0])
        content[qid] = v
    return content


# -- models and the catalogue ------------------------------------------------------


def models_from_config(provider: str, options: Iterable[Any] | None) -> list[dict[str, Any]]:
    """AHP ``SessionModelInfo``s from the agent's ``model`` config option."""
    models: list[dict[str, Any]] = []
    for option in options or ():
        if not isinstance(option, SessionConfigOptionSelect) or option.category != "model":
            continue
        for choice in option.options:
            group = choice.options if isinstance(choice, SessionConfigSelectGroup) else [choice]
            for item in group:
                models.append({"id": item.value, "provider": provider, "name": item.name})
    return models


def stored_conversations(sessions: Iterable[SessionInfo]) -> list[StoredConversation]:
    """ACP ``SessionInfo``s, newest first (undated ones last)."""
    items = [
        StoredConversation(
            backend_id=s.session_id,
            title=repair(s.title or ""),
            cwd=s.cwd,
            modified_at=s.updated_at,
        )
        for s in sessions
    ]
    dated = sorted((c for c in items if c.modified_at), key=lambda c: c.modified_at or "", reverse=True)
    return dated + [c for c in items if not c.modified_at]
