"""JSON-RPC 2.0 framing, without sockets or tasks.

One text frame is one message. A frame is classified here and every way it
can be wrong is answered with the error JSON-RPC defines for it, so the
connection loop only ever sees well-formed requests, notifications and
responses. Batches are refused: AHP sends one message per frame.

Values that are not JSON stay out, both ways. Python's ``json`` reads
``NaN``, ``Infinity``, a number that overflows to infinity and a lone UTF-16
surrogate, and writes the first three back out; a lone surrogate then fails
only when the frame is encoded to UTF-8, far from where it came in. So a
frame carrying one is refused here, naming where (``NaN`` is not JSON at all:
-32700; an infinite number or a broken string is JSON that no peer can use:
-32602), and every frame this side writes is checked the same way
(:class:`NotJson`), so a bug fails one frame rather than a connection.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from typing import Any, TypeGuard

import attrs
import orjson

from ahpd.host.kernel.frame import Utf8Frame

log = logging.getLogger("ahpd.host")

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


class NotJson(ValueError):
    """A value with no JSON form: NaN, an infinity, a lone surrogate, a
    Python object JSON has no type for. ``path`` names where it is."""

    def __init__(self, reason: str, path: str) -> None:
        super().__init__(f"{reason} at {path}")
        self.reason = reason
        self.path = path


def not_json(value: Any, path: str = "$") -> tuple[str, str] | None:
    """``(path, reason)`` of the first thing in ``value`` that is not JSON,
    or None. Walked only once something already failed (or may have); a
    value nested too deeply to walk is named as a whole."""
    try:
        return _walk(value, path, set())
    except RecursionError:
        return path, "nested too deeply to look into"


def _walk(node: Any, where: str, within: set[int]) -> tuple[str, str] | None:
    if isinstance(node, str):
        if not node.isascii():
            try:
                node.encode("utf-8")
            except UnicodeEncodeError as exc:
                return where, f"a lone UTF-16 surrogate (U+{ord(node[exc.start]):04X}) is not text"
        return None
    if isinstance(node, float):
        return None if math.isfinite(node) else (where, f"{node!r} is not a JSON number")
    if node is None or isinstance(node, (bool, int)):
        return None
    if isinstance(node, _Unreadable):
        return where, node.reason
    if not isinstance(node, (dict, list, tuple)):
        return where, f"a {type(node).__name__} has no JSON form"
    if id(node) in within:
        return where, "a value that contains itself has no JSON form"
    within.add(id(node))
    try:
        if isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    return where, f"the key {key!r} is not a string"
                found = _walk(key, f"{where} (key {key[:40]!r})", within) or _walk(item, f"{where}.{key}", within)
                if found:
                    return found
        else:
            for i, item in enumerate(node):
                found = _walk(item, f"{where}[{i}]", within)
                if found:
                    return found
        return None
    finally:
        within.discard(id(node))


#: Built once: ``json.dumps`` with options would build an encoder per frame.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps(value: Any) -> str:
    """One frame's text; :class:`NotJson` when ``value`` has no JSON form."""
    try:
        text = _ENCODER.encode(value)
        if not text.isascii():  # an ASCII string cannot hold a surrogate: O(1) for most frames
            text.encode("utf-8")
    except (ValueError, TypeError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        where, reason = not_json(value) or ("$", str(exc))
        raise NotJson(reason, where) from None
    return text


class Encoded:
    """A result already in its JSON form, as the pieces of its text.

    For an answer whose bulk is one large string whose shape is trivially
    right (a file's content): encoding it through the general path would
    walk, copy and check megabytes that cannot be wrong. ``parts`` are
    joined once, with the frame around them, and then let go of, so the
    content is held once as itself and once as the frame, never more.
    Whoever makes one vouches that the joined parts are one JSON value
    (``encoded_string`` makes the string parts)."""

    def __init__(self, parts: list[str]) -> None:
        self.parts = parts


class EncodedBytes:
    """A result already in its JSON form as UTF-8 bytes, in pieces, made off
    the event loop (a large file's content). Its frame is those pieces
    behind the frame's head (``frame.Utf8Frame``), never joined, unless it
    is small enough that joining costs nothing."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces


#: An answer made as bytes below this many is sent as text (joined once).
LARGE = 1 << 20


def encoded_string(text: str) -> str:
    """``text`` as a JSON string literal, quotes included, by orjson (SIMD;
    the stdlib's encoder takes tens of times longer on megabytes). A lone
    surrogate, which no UTF-8 decode produces, is refused (:class:`NotJson`)."""
    try:
        return orjson.dumps(text).decode()
    except orjson.JSONEncodeError as exc:
        raise NotJson(str(exc), "$") from None


def result_frame(id: int | str, result: Any) -> str | Utf8Frame:
    """The answer to one request; a result that cannot be encoded answers
    -32603 for that request alone."""
    if isinstance(result, EncodedBytes):
        pieces, result.pieces = result.pieces, []
        head = f'{{"jsonrpc":"2.0","id":{dumps(id)},"result":'.encode()
        made = Utf8Frame([head, *pieces, b"}"])
        return made if made.size >= LARGE else made.text()
    if isinstance(result, Encoded):
        parts, result.parts = result.parts, []
        return "".join([f'{{"jsonrpc":"2.0","id":{dumps(id)},"result":', *parts, "}"])
    try:
        return dumps({"jsonrpc": "2.0", "id": id, "result": result})
    except NotJson as err:
        log.error("the answer to request %r cannot be encoded: %s", id, err)
        return error_frame(
            id,
            RpcError(
                INTERNAL_ERROR,
                f"the result cannot be encoded: {err.reason}",
                {"path": err.path.replace("$.result", "$", 1)},
            ),
        )


def error_frame(id: int | str | None, error: RpcError) -> str:
    try:
        return dumps({"jsonrpc": "2.0", "id": id, "error": error.to_wire()})
    except NotJson:
        # An error that echoes what it refuses cannot carry a broken value back.
        message = error.message.encode("utf-8", "replace").decode("utf-8")
        return dumps({"jsonrpc": "2.0", "id": id, "error": {"code": error.code, "message": message}})


def notification_frame(method: str, params: Any) -> str:
    return dumps({"jsonrpc": "2.0", "method": method, "params": params})


#: Where orjson writes a float otherwise than the stdlib (``1e-7`` for
#: ``1e-07``, ``0.00001`` for ``1e-05``): a frame showing one is written by
#: the stdlib instead. Any other float is written alike (both are shortest
#: round-trip; tests/host/kernel/test_jsonrpc_values.py compares them).
_FLOAT_FORMS = re.compile(rb"\d[eE]|0\.0000")


def notification_frame_of_read(method: str, params: Any) -> str:
    """``notification_frame`` for params made of what a peer's frame was read
    as (``parse``): nothing there is NaN, an infinity, a lone surrogate or a
    key that is not a string, so orjson writes the same text as the stdlib
    at a fraction of the cost. An integer past 64 bits or a float orjson
    spells otherwise is written by the stdlib."""
    try:
        data = orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params})
    except (orjson.JSONEncodeError, TypeError):
        return notification_frame(method, params)
    # orjson writes every exponent with its sign: without "e+", "e-" or
    # "0.0000" anywhere (memchr-fast), no float is spelled otherwise.
    if (b"e+" in data or b"e-" in data or b"0.0000" in data) and _FLOAT_FORMS.search(data) is not None:
        return notification_frame(method, params)
    return data.decode()


def request_frame(id: int | str, method: str, params: Any) -> str:
    return dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params})


def _valid_id(value: Any) -> TypeGuard[int | str]:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _reply_id(frame: Any) -> int | str | None:
    """The id to answer a frame with: its own, when it is one JSON-RPC allows."""
    ident = frame.get("id") if isinstance(frame, dict) else None
    return ident if _valid_id(ident) and not_json(ident) is None else None


class _Unreadable(ValueError):
    """A value that is not JSON, raised while reading and then put in its
    place to find where it was. ``code`` is how it is answered: ``NaN`` and
    ``Infinity`` are not JSON at all (-32700); a number too large for any
    peer is JSON no peer can use (-32602)."""

    def __init__(self, reason: str, code: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


def _constant(name: str) -> Any:
    raise _Unreadable(f"{name} is not JSON", PARSE_ERROR)


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise _Unreadable(f"{text} is out of range for a JSON number (it overflows to infinity)", INVALID_PARAMS)
    return number


def _stand_in(hook: Callable[[str], Any]) -> Callable[[str], Any]:
    def read(text: str) -> Any:
        try:
            return hook(text)
        except _Unreadable as exc:
            return exc

    return read


#: Built once: ``json.loads`` with hooks would build a decoder per frame.
_STRICT = json.JSONDecoder(parse_constant=_constant, parse_float=_finite)
_LOCATING = json.JSONDecoder(parse_constant=_stand_in(_constant), parse_float=_stand_in(_finite))

#: ``\uD800``-``\uDFFF`` as written in JSON text: the only way a surrogate
#: gets into a frame (the transports decode UTF-8 strictly). A frame without
#: one is not walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _is_text(frame: Any) -> bool:
    """Whether every string in ``frame`` is text (no lone surrogate), at C
    speed: the path of one that is not is looked for only then."""
    try:
        _ENCODER.encode(frame).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse(text: str) -> Message:
    """Classify one frame."""
    try:
        frame = _STRICT.decode(text)
    except _Unreadable as first:
        # Read again with the refused values in place, to name where they are.
        try:
            frame = _LOCATING.decode(text)
        except (ValueError, RecursionError) as exc:  # broken after it, too: that is what to say
            return Invalid(error_frame(None, RpcError(PARSE_ERROR, f"parse error: {exc}")))
        where, reason = not_json(frame) or ("$", first.reason)
        if first.code == PARSE_ERROR:
            return Invalid(
                error_frame(None, RpcError(PARSE_ERROR, f"parse error: {reason} at {where}", {"path": where}))
            )
        return Invalid(error_frame(_reply_id(frame), RpcError(INVALID_PARAMS, f"{reason} at {where}", {"path": where})))
    except (ValueError, RecursionError) as exc:
        return Invalid(error_frame(None, RpcError(PARSE_ERROR, f"parse error: {exc}")))
    if _SURROGATE_ESCAPE.search(text) and not _is_text(frame):
        found = not_json(frame)
        if found is not None:
            where, reason = found
            return Invalid(
                error_frame(_reply_id(frame), RpcError(INVALID_PARAMS, f"{reason} at {where}", {"path": where}))
            )
    return _classify(frame)


def _classify(frame: Any) -> Message:
    """A frame read as JSON: a request, a notification, a response or invalid."""
    if isinstance(frame, list):
        return Invalid(
            error_frame(
                None, RpcError(INVALID_REQUEST, "batches are not supported: send one JSON-RPC message per frame")
            )
        )
    if not isinstance(frame, dict):
        return Invalid(
            error_frame(None, RpcError(INVALID_REQUEST, f"a JSON-RPC message is an object, not {type(frame).__name__}"))
        )
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
    return Invalid(
        error_frame(
            reply_id,
            RpcError(INVALID_REQUEST, "a message needs a method (request or notification) or a result or error"),
        )
    )


def string_param(params: Any, key: str, *, required: bool = True) -> str | None:
    """``params[key]`` for a method outside the protocol, which reads its own
    params: a non-empty string, or -32602 naming the key."""
    value = params.get(key) if isinstance(params, dict) else None
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise RpcError(INVALID_PARAMS, f"{key} must be a non-empty string", {"path": f"$.{key}"})
    return value
