"""The ``resource*`` family: reading, listing, writing and watching
resources by URI, and passing on the ones a client publishes.

Where a URI goes is decided in one place, ``_route``, by its scheme and
authority, in this order:

- ``ahp-edit://pending/<toolCallId>``: the after side of an edit waiting for
  approval, content that exists nowhere yet (read-only);
- ``file:``: the filesystem port (``ahpd.ports.fs``), over the whole machine;
- ``<scheme>://<clientId>/...`` naming a connected client: forwarded to that
  client (``ahpd.host.kernel.forward``), whose answer comes back verbatim;
- anything else is a URI this host does not mediate: -32009.

The fence. An authenticated connection reaches the whole machine, as the
user's own editor does: whoever holds the connection token can already start
agents and terminals that run as the daemon's user anywhere, so a narrower
fence on ``resource*`` would hide nothing from them. What the fence does
guarantee is that a URI means what it says: a path is walked from ``/`` one
component at a time with ``openat``/``O_NOFOLLOW``, never compared as a
string, so ``..`` is a step back along folders actually opened, a link is
read and its target walked the same way, a link swapped in between a look
and a use is refused rather than followed, and delete, move and copy act on
a link itself, never on what it points to. A write is atomic (a temporary
file beside the target, fsync, rename).

Failures keep the protocol's codes: -32602 for a malformed URI or request,
-32008 for nothing there, -32009 for what this host will not do, -32010 for
something already there, -32011 when ``ifMatch`` no longer matches. Each
names the URI and the reason.
"""

from __future__ import annotations

import binascii
import codecs
import datetime as _dt
import errno
import logging
import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import orjson

from ahpd.backends.translate import PENDING_EDIT
from ahpd.host.kernel import forward, jsonrpc
from ahpd.host.kernel.frame import NoRoom
from ahpd.host.kernel.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from ahpd.ports import fs
from ahpd.protocol import codec, model
from ahpd.ports import threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")

NOT_FOUND = -32008
PERMISSION_DENIED = -32009
ALREADY_EXISTS = -32010
CONFLICT = -32011

#: The fence's root: the whole machine (see the module's docstring).
MACHINE = "/"


# -- where a URI goes -------------------------------------------------------------------


class Pending:
    """The after side of an edit waiting for approval."""

    def __init__(self, content: str) -> None:
        self.content = content


class File:
    """A ``file:`` URI, as the path it names."""

    def __init__(self, path: str) -> None:
        self.path = path


class Client:
    """A URI a connected client publishes."""

    def __init__(self, owner: Peer) -> None:
        self.owner = owner


def file_path(uri: str) -> str:
    """The absolute path a ``file:`` URI names; -32602 for one that names none."""
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise RpcError(
            INVALID_PARAMS, f"{uri}: a file: URI on another machine ({parts.netloc}) is not served", {"uri": uri}
        )
    if parts.query or parts.fragment:
        raise RpcError(INVALID_PARAMS, f"{uri}: a file: URI takes no query or fragment", {"uri": uri})
    path = unquote(parts.path, errors="strict")
    if not path.startswith("/"):
        raise RpcError(INVALID_PARAMS, f"{uri}: a file: URI needs an absolute path", {"uri": uri})
    if "\0" in path:
        raise RpcError(INVALID_PARAMS, f"{uri}: the path holds a NUL byte", {"uri": uri})
    return path


def _route(host: Host, peer: Peer, uri: str) -> Pending | File | Client:
    """Where ``uri`` is served: the one place a scheme or prefix is looked at."""
    scheme, colon, _ = uri.partition(":")
    if not colon or not scheme or not scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
        raise RpcError(INVALID_PARAMS, f"{uri!r} is not a URI: it needs a scheme", {"uri": uri})
    if uri.startswith(PENDING_EDIT):
        pending = host.sessions.pending_edits if host.sessions is not None else {}
        if uri not in pending:
            raise RpcError(NOT_FOUND, f"{uri} is no longer pending: its tool call was settled", {"uri": uri})
        return Pending(pending[uri][2])
    if scheme.lower() == "file":
        try:
            return File(file_path(uri))
        except UnicodeDecodeError:
            raise RpcError(INVALID_PARAMS, f"{uri}: the path is not UTF-8 once decoded", {"uri": uri}) from None
    owner = forward.publisher(host, uri, peer)
    if owner is not None:
        return Client(owner)
    client = forward.authority(uri)
    why = f"no connected client is {client}" if client else "it is neither a file: URI nor a client's resource"
    raise RpcError(PERMISSION_DENIED, f"{uri} is not a resource this host mediates: {why}", {"uri": uri})


def _file(host: Host, peer: Peer, uri: str, method: str) -> File | Client:
    """``uri`` routed, for a command a pending edit cannot serve."""
    where = _route(host, peer, uri)
    if isinstance(where, Pending):
        raise RpcError(
            PERMISSION_DENIED,
            f"{uri} is the proposed side of an edit waiting for approval: it can be read, not {method}",
            {"uri": uri},
        )
    return where


# -- the port, from a trio task --------------------------------------------------------


def _refusal(uri: str, exc: fs.FsError) -> RpcError:
    reason = str(exc)
    data = {"uri": uri}
    if isinstance(exc, fs.NotFound):
        return RpcError(NOT_FOUND, f"{uri} not found: {reason}", data)
    if isinstance(exc, fs.Exists):
        return RpcError(ALREADY_EXISTS, f"{uri} already exists: {reason}", data)
    if isinstance(exc, fs.Conflict):
        return RpcError(CONFLICT, f"{uri} no longer matches ifMatch: {reason}", data)
    if isinstance(exc, fs.Refused):
        return RpcError(PERMISSION_DENIED, f"{uri} refused: {reason}", data)
    if isinstance(exc, fs.NotEmpty):
        return RpcError(
            INVALID_PARAMS,
            f"{uri} is a folder with entries: {reason}; pass recursive to delete it with everything in it",
            data,
        )
    if isinstance(exc, (fs.IsADirectory, fs.NotADirectory, fs.TooLarge, fs.Invalid)):
        return RpcError(INVALID_PARAMS, f"{uri}: {reason}", data)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return RpcError(PERMISSION_DENIED, f"{uri} refused by the system: {reason}", data)
    return RpcError(INTERNAL_ERROR, f"{uri} failed: {reason}", data)


async def _on_port(uri: str, work: Callable[[fs.Fence], Any]) -> Any:
    """``work`` on a fence over the machine, in a thread; its failures as refusals."""

    def run() -> Any:
        with fs.Fence(MACHINE) as fence:
            return work(fence)

    try:
        return await threads.run("files", run)
    except fs.FsError as exc:
        raise _refusal(uri, exc) from None


def _iso(timestamp: float) -> str:
    moment = _dt.datetime.fromtimestamp(timestamp, _dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _content_type(path: str, data: bytes | None = None) -> str:
    guessed, _ = mimetypes.guess_type(path, strict=False)
    if guessed:
        return guessed
    if data is None:
        return "application/octet-stream"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    return "text/plain"


def _encoded(held: list[bytes], encoding: str | None, content_type: str) -> jsonrpc.Encoded:
    """The read's answer, already in its JSON form: UTF-8 when asked for (or
    not asked) and the bytes are UTF-8, otherwise base64, the fallback the
    protocol requires.

    A file's content is most of the frame and its shape cannot be wrong, so
    it is not passed through the general encoder (which walks, checks and
    copies it again): the text is escaped by orjson, base64 needs no escaping
    at all, and the parts are joined once into the frame. The bytes are
    handed over in a list and let go of as soon as they are turned into
    text, so a large file is held at most twice over (its bytes and its
    text, or its text and the frame), never more."""
    tail = f',"contentType":{jsonrpc.dumps(content_type)}}}'
    if encoding != "base64":
        try:
            text = held[0].decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            held.clear()
            return jsonrpc.Encoded(['{"data":', jsonrpc.encoded_string(text), ',"encoding":"utf-8"', tail])
    coded = binascii.b2a_base64(held.pop(), newline=False).decode("ascii")  # the alphabet needs no escaping
    return jsonrpc.Encoded(['{"data":"', coded, '","encoding":"base64"', tail])


#: Bytes of a file read and encoded at a time: the C calls on each (read,
#: decode, escape, base64) are short, so the worker thread gives the GIL
#: back to the event loop between them; a multiple of 3, so the base64 of
#: the pieces is the base64 of the whole.
CHUNK = 3 * 2**18
#: Seconds a large read waits for room in the send queues before it is refused.
ROOM_PATIENCE = 30.0


def _utf8_pieces(fence: fs.Fence, path: str) -> list[bytes] | None:
    """The file as the inside of a JSON string, a chunk at a time; None
    when it is not UTF-8 (seen as soon as the first bad byte is)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    pieces = []
    try:
        for data in fence.read_chunks(path, CHUNK):
            text = decoder.decode(data)
            if text:
                pieces.append(orjson.dumps(text)[1:-1])  # escaped by orjson; the quotes left off
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return None
    return pieces


def _base64_pieces(fence: fs.Fence, path: str, check: bool) -> tuple[list[bytes], bool]:
    """The file in base64, a chunk at a time, and (when ``check``) whether it is UTF-8 text."""
    decoder = codecs.getincrementaldecoder("utf-8")() if check else None
    pieces = []
    for data in fence.read_chunks(path, CHUNK):
        pieces.append(binascii.b2a_base64(data, newline=False))
        if decoder is not None:
            try:
                decoder.decode(data)
            except UnicodeDecodeError:
                decoder = None
    if decoder is not None:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            decoder = None
    return pieces, check and decoder is not None


def _file_answer(fence: fs.Fence, path: str, encoding: str | None) -> jsonrpc.EncodedBytes:
    """A file's ``resourceRead`` answer, made as UTF-8 bytes a chunk at a
    time in the worker thread: the file is never held whole, nor its text,
    nor the frame as one string; what is held is the answer's pieces, about
    the file's size (its base64: a third more)."""
    guessed, _ = mimetypes.guess_type(path, strict=False)
    if encoding != "base64" and (pieces := _utf8_pieces(fence, path)) is not None:
        coding, content_type = "utf-8", guessed or "text/plain"
    else:
        pieces, text = _base64_pieces(fence, path, check=guessed is None)
        coding = "base64"
        content_type = guessed or ("text/plain" if text else "application/octet-stream")
    tail = f'","encoding":"{coding}","contentType":{jsonrpc.dumps(content_type)}}}'.encode()
    return jsonrpc.EncodedBytes([b'{"data":"', *pieces, tail])


async def _room(peer: Peer, size: int, uri: str) -> Callable[[], None]:
    """Room in the send queues promised for an answer of about ``size``
    bytes, before it is made (a small one needs none); the function that
    lets go of the promise, called just before the answer is sent. -32009
    naming why when there is none."""
    room_for = getattr(peer.conn, "room_for", None)
    if room_for is None or size < jsonrpc.LARGE:
        return lambda: None
    try:
        release: Callable[[], None] = await room_for(size, ROOM_PATIENCE)
    except NoRoom as exc:
        raise RpcError(PERMISSION_DENIED, f"{uri} is not read now: {exc}", {"uri": uri}) from None
    return release


def _forwarded(params: Any) -> dict[str, Any]:
    return codec.encode(params)


# -- the commands -------------------------------------------------------------------------


def _touched(host: Host, *paths: str) -> None:
    """A client wrote through the host: a changeset over that folder re-reads."""
    for path in paths:
        for touched in host.hooks.files_touched:
            touched(host, Path(path).parent)


async def resource_read(host: Host, peer: Peer, params: model.ResourceReadParams) -> dict[str, Any] | jsonrpc.Encoded:
    for reader in host.hooks.readers:  # a changeset's before side first: it is not a file on disk
        if (side := await reader(host, params)) is not None:
            return side
    where = _route(host, peer, params.uri)
    if isinstance(where, Pending):
        return _encoded([where.content.encode()], params.encoding, "text/plain")
    if isinstance(where, Client):
        return await forward.forward(host, peer, where.owner, "resourceRead", _forwarded(params), params.uri)

    size = await _on_port(params.uri, lambda fence: fence.stat(where.path).size)
    release = await _room(peer, size * 4 // 3 + 1024, params.uri)  # base64's size: the most it is, for text too
    try:
        return await _on_port(params.uri, lambda fence: _file_answer(fence, where.path, params.encoding))
    finally:
        release()  # nothing runs between this and the answer's being queued


async def resource_list(host: Host, peer: Peer, params: model.ResourceListParams) -> dict[str, Any]:
    where = _file(host, peer, params.uri, "listed")
    if isinstance(where, Client):
        return await forward.forward(host, peer, where.owner, "resourceList", _forwarded(params), params.uri)

    def listing(fence: fs.Fence) -> dict[str, Any]:
        entries = []
        for entry in fence.list_dir(where.path):
            kind = entry.kind
            if kind == "symlink":  # listed as what it leads to; a broken link as a file
                try:
                    kind = fence.stat(f"{where.path.rstrip('/')}/{entry.name}").kind
                except fs.FsError:
                    kind = "file"
            entries.append({"name": entry.name, "type": "directory" if kind == "directory" else "file"})
        return {"entries": entries}

    return await _on_port(params.uri, listing)


async def resource_resolve(host: Host, peer: Peer, params: model.ResourceResolveParams) -> dict[str, Any]:
    where = _route(host, peer, params.uri)
    if isinstance(where, Pending):
        return {"uri": params.uri, "type": "file", "size": len(where.content.encode()), "contentType": "text/plain"}
    if isinstance(where, Client):
        return await forward.forward(host, peer, where.owner, "resourceResolve", _forwarded(params), params.uri)
    follow = params.followSymlinks is not False

    def resolve(fence: fs.Fence) -> dict[str, Any]:
        info = fence.stat(where.path, follow=follow)
        uri = fence.resolve(where.path).as_uri() if follow else params.uri
        answer: dict[str, Any] = {
            "uri": uri,
            "type": {"directory": "directory", "symlink": "symlink"}.get(info.kind, "file"),
            "mtime": _iso(info.mtime),
            "ctime": _iso(info.ctime),
        }
        if info.kind != "directory":
            answer["size"] = info.size
        if info.kind == "file":
            answer["contentType"] = _content_type(where.path)
            answer["etag"] = info.etag
        return answer

    return await _on_port(params.uri, resolve)


#: How a write places its bytes, in the filesystem port's words.
_MODES: dict[model.ResourceWriteMode, fs.WriteMode] = {
    model.ResourceWriteMode.TRUNCATE: "truncate",
    model.ResourceWriteMode.APPEND: "append",
    model.ResourceWriteMode.INSERT: "insert",
}


def _decoded(params: model.ResourceWriteParams) -> bytes:
    """The bytes a write carries; -32602 for base64 that is not."""
    if params.encoding != "base64":
        return params.data.encode("utf-8")
    try:  # straight from the text (no ASCII copy first), checked in the same pass
        return binascii.a2b_base64(params.data, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise RpcError(
            INVALID_PARAMS, f"{params.uri}: data is not base64: {exc}", {"uri": params.uri, "path": "$.data"}
        ) from None


async def resource_write(host: Host, peer: Peer, params: model.ResourceWriteParams) -> dict[str, Any]:
    where = _file(host, peer, params.uri, "written")
    if isinstance(where, Client):
        return await forward.forward(host, peer, where.owner, "resourceWrite", _forwarded(params), params.uri)
    position = params.position if params.position is not None else 0
    if isinstance(position, float):
        if not position.is_integer():
            raise RpcError(
                INVALID_PARAMS,
                f"{params.uri}: position must be a whole number of bytes, not {position}",
                {"uri": params.uri, "path": "$.position"},
            )
        position = int(position)
    mode = _MODES[params.mode] if params.mode is not None else "truncate"

    def write(fence: fs.Fence) -> None:
        # Decoded here, in the worker thread: the frame the content came in
        # has been let go of by now, and megabytes of base64 do not hold up
        # the event loop.
        fence.place(
            where.path,
            _decoded(params),
            mode=mode,
            position=position,
            create_only=bool(params.createOnly),
            if_match=params.ifMatch,
        )

    await _on_port(params.uri, write)
    _touched(host, where.path)
    return {}


async def resource_delete(host: Host, peer: Peer, params: model.ResourceDeleteParams) -> dict[str, Any]:
    where = _file(host, peer, params.uri, "deleted")
    if isinstance(where, Client):
        return await forward.forward(host, peer, where.owner, "resourceDelete", _forwarded(params), params.uri)
    await _on_port(params.uri, lambda fence: fence.delete(where.path, recursive=bool(params.recursive)))
    _touched(host, where.path)
    return {}


async def resource_mkdir(host: Host, peer: Peer, params: model.ResourceMkdirParams) -> dict[str, Any]:
    where = _file(host, peer, params.uri, "made a folder")
    if isinstance(where, Client):
        return await forward.forward(host, peer, where.owner, "resourceMkdir", _forwarded(params), params.uri)
    await _on_port(params.uri, lambda fence: fence.mkdir(where.path, parents=True, exist_ok=True))
    return {}


async def _two_ends(
    host: Host, peer: Peer, method: str, params: Any, work: Callable[[fs.Fence, str, str], None]
) -> dict[str, Any]:
    """A move or copy: both ends checked, and both on the same peer."""
    source = _file(host, peer, params.source, "moved or copied")
    target = _file(host, peer, params.destination, "moved or copied")
    if isinstance(source, Client) or isinstance(target, Client):
        if not (
            isinstance(source, Client)
            and isinstance(target, Client)
            and source.owner.client_id == target.owner.client_id
        ):
            raise RpcError(
                INVALID_PARAMS,
                f"{method} from {params.source} to {params.destination} crosses two "
                "different peers, and neither could carry it out",
                {"source": params.source, "destination": params.destination},
            )
        return await forward.forward(host, peer, source.owner, method, _forwarded(params), params.source)
    assert isinstance(source, File) and isinstance(target, File)
    try:
        await threads.run("files", _both, source.path, target.path, work)
    except fs.FsError as exc:
        raise _refusal(params.destination if exc.path == target.path else params.source, exc) from None
    _touched(host, source.path, target.path)
    return {}


def _both(source: str, target: str, work: Callable[[fs.Fence, str, str], None]) -> None:
    with fs.Fence(MACHINE) as fence:
        work(fence, source, target)


async def resource_move(host: Host, peer: Peer, params: model.ResourceMoveParams) -> dict[str, Any]:
    overwrite = not params.failIfExists
    return await _two_ends(
        host, peer, "resourceMove", params, lambda fence, s, t: fence.move(s, t, overwrite=overwrite)
    )


async def resource_copy(host: Host, peer: Peer, params: model.ResourceCopyParams) -> dict[str, Any]:
    overwrite = not params.failIfExists
    return await _two_ends(
        host, peer, "resourceCopy", params, lambda fence, s, t: fence.copy(s, t, overwrite=overwrite)
    )


async def resource_request(host: Host, peer: Peer, params: model.ResourceRequestParams) -> dict[str, Any]:
    """Granted for any ``file:`` URI, and logged: the read and write halves are
    served without it, so withholding it would protect nothing."""
    where = _route(host, peer, params.uri)
    if isinstance(where, Client):
        return await forward.forward(host, peer, where.owner, "resourceRequest", _forwarded(params), params.uri)
    if isinstance(where, Pending):
        if params.write:
            raise RpcError(
                PERMISSION_DENIED,
                f"{params.uri} is the proposed side of an edit: it is read-only",
                {"uri": params.uri, "request": {"channel": "ahp-root://", "uri": params.uri, "read": True}},
            )
        return {}
    access = "+".join(k for k in ("read", "write") if getattr(params, k)) or "read"
    log.info("%s: resourceRequest %s for %s: granted", peer.name, access, params.uri)
    return {}


async def create_resource_watch(host: Host, peer: Peer, params: model.CreateResourceWatchParams) -> dict[str, Any]:
    where = _file(host, peer, params.uri, "watched")
    if isinstance(where, Client):
        channel = await host.watches.relay(peer, where.owner, _forwarded(params), params.uri)
        return {"channel": channel}

    def check(fence: fs.Fence) -> None:
        fence.stat(where.path)

    await _on_port(params.uri, check)
    try:
        channel = await host.watches.create(
            peer,
            params.uri,
            where.path,
            bool(params.recursive),
            params.includes.items if params.includes is not None else None,
            params.excludes.items if params.excludes is not None else None,
        )
    except fs.FsError as exc:
        raise _refusal(params.uri, exc) from None
    return {"channel": channel}


COMMANDS = {
    "resourceRead": resource_read,
    "resourceList": resource_list,
    "resourceResolve": resource_resolve,
    "resourceWrite": resource_write,
    "resourceDelete": resource_delete,
    "resourceMkdir": resource_mkdir,
    "resourceMove": resource_move,
    "resourceCopy": resource_copy,
    "resourceRequest": resource_request,
    "createResourceWatch": create_resource_watch,
}
