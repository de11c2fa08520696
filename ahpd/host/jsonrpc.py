"""JSON-RPC 2.0 framing, without sockets or tasks.

One text frame is one message. A frame is classified here and every way it
can be wrong is answered with the error JSON-RPC defines for it, so the
connection loop only ever sees well-formed requests, notifications and
responses. Batches are refused: AHP sends one message per frame.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class RpcError(Exception):
    """An error to answer a request with: ``code``, ``message`` and optional ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@attrs.frozen
class Request:
    id: int | str
    method: str
    params: Any


@attrs.frozen
class Notification:
    method: str
    params: Any


@attrs.frozen
class Response:
    """A peer's answer to a request this side made."""

    id: int | str | None
    result: Any = None
    error: dict[str, Any] | None = None


@attrs.frozen
class Invalid:
    """A frame that cannot be handled; ``reply`` is the error frame to send."""

    reply: str


Message = Request | Notification | Response | Invalid


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def result_frame(id: int | str, result: Any) -> str:
    return dumps({"jsonrpc": "2.0", "id": id, "result": result})


def error_frame(id: int | str | None, error: RpcError) -> str:
    return dumps({"jsonrpc": "2.0", "id": id, "error": error.to_wire()})


def notification_frame(method: str, params: Any) -> str:
    return dumps({"jsonrpc": "2.0", "method": method, "params": params})


def request_frame(id: int | str, method: str, params: Any) -> str:
    return dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params})


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse(text: str) -> Message:
    """Classify one frame."""
    try:
        frame = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return Invalid(error_frame(None, RpcError(PARSE_ERROR, f"parse error: {exc}")))
    if isinstance(frame, list):
        return Invalid(error_frame(None, RpcError(
            INVALID_REQUEST, "batches are not supported: send one JSON-RPC message per frame"
        )))
    if not isinstance(frame, dict):
        return Invalid(error_frame(None, RpcError(
            INVALID_REQUEST, f"a JSON-RPC message is an object, not {type(frame).__name__}"
        )))
    ident = frame.get("id")
    reply_id = ident if _valid_id(ident) else None
    if frame.get("jsonrpc") != "2.0":
        return Invalid(error_frame(reply_id, RpcError(INVALID_REQUEST, 'jsonrpc must be "2.0"')))
    if "method" in frame:
        method = frame["method"]
        if not isinstance(method, str) or not method:
            return Invalid(error_frame(reply_id, RpcError(INVALID_REQUEST, "method must be a non-empty string")))
        params = frame.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return Invalid(error_frame(reply_id, RpcError(INVALID_REQUEST, "params must be an object")))
        if "id" not in frame:
            return Notification(method, params)
        if not _valid_id(ident):
            return Invalid(error_frame(None, RpcError(INVALID_REQUEST, "id must be a string or an integer")))
        return Request(ident, method, params)
    if "result" in frame or "error" in frame:
        error = frame.get("error")
        if error is not None and not isinstance(error, dict):
            return Invalid(error_frame(None, RpcError(INVALID_REQUEST, "error must be an object")))
        return Response(reply_id, frame.get("result"), error)
    return Invalid(error_frame(reply_id, RpcError(
        INVALID_REQUEST, "a message needs a method (request or notification) or a result or error"
    )))
