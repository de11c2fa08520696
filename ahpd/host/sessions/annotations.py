"""A session's annotations channel: review marks a client pins to files.

The channel is ``<session>/annotations``, opened with its session and kept
by the session store beside it, so a mark outlives a daemon restart. Every
annotations action is the client's to dispatch and is reduced with the
package's reducer (``ahpd.state.annotations``). The rules here refuse what
that reducer would quietly answer with the state it was given: an action
naming an annotation or entry the session does not hold would otherwise be
echoed, and the client left holding a mark this host never kept. The
protocol's own rules are held too: an annotation has at least one entry,
ids are unique within what holds them, and the last entry is removed by
removing the annotation.

A ``MessageAnnotationsAttachment`` in a prompt names marks by id on this
channel, which no agent can read; the agent is handed them as text instead
(``resolve``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ahpd.host.kernel.dispatch import Apply, Refuse

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer
    from ahpd.host.sessions.session import Session

SUFFIX = "/annotations"


def channel_of(session_uri: str) -> str:
    return session_uri + SUFFIX


def summary(session_uri: str, state: dict[str, Any]) -> dict[str, Any]:
    """``AnnotationsSummary``: the counts a catalogue row's badge shows."""
    marks = state.get("annotations") or []
    return {
        "resource": channel_of(session_uri),
        "annotationCount": len(marks),
        "entryCount": sum(len(m.get("entries") or []) for m in marks),
    }


def _session(host: Host, channel: str) -> Session | None:
    if host.sessions is None or not channel.endswith(SUFFIX):
        return None
    return host.sessions.sessions.get(channel.removesuffix(SUFFIX))


def _held(host: Host, channel: str, annotation_id: str) -> dict[str, Any] | None:
    marks = host.bus.channels[channel].state.get("annotations") or []
    return next((m for m in marks if m.get("id") == annotation_id), None)


def _kept(host: Host, channel: str, action: dict[str, Any]) -> Apply:
    """Apply, then write the session down and tell the catalogue the counts."""
    session = _session(host, channel)

    def after() -> None:
        if session is not None:
            session.save()
            row = summary(session.uri, host.bus.channels[channel].state)
            host.sessions.notify_summary(session, {"annotations": row})

    return Apply(action, after=after)


def set_(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    mark = action["annotation"]
    entries = mark.get("entries") or []
    if not entries:
        return Refuse(f"annotation {mark['id']} has no entries: an annotation is created with its first entry")
    ids = [e["id"] for e in entries]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        return Refuse(f"annotation {mark['id']} holds entry id {', '.join(twice)} more than once")
    session = _session(host, channel)
    origin = (mark.get("origin") or {}).get("session")
    if session is not None and origin is not None and origin != session.uri:
        return Refuse(f"annotation {mark['id']} names session {origin}, and this channel is {session.uri}'s")
    return _kept(host, channel, action)


def _existing(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    if _held(host, channel, action["annotationId"]) is None:
        return Refuse(f"no annotation {action['annotationId']} in {channel}")
    return _kept(host, channel, action)


def entry_set(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    mark = _held(host, channel, action["annotationId"])
    if mark is None:
        return Refuse(f"no annotation {action['annotationId']} in {channel}")
    return _kept(host, channel, action)


def entry_removed(host: Host, peer: Peer, channel: str, action: dict[str, Any]) -> Refuse | Apply:
    mark = _held(host, channel, action["annotationId"])
    if mark is None:
        return Refuse(f"no annotation {action['annotationId']} in {channel}")
    entries = [e["id"] for e in mark.get("entries") or []]
    if action["entryId"] not in entries:
        return Refuse(f"annotation {action['annotationId']} has no entry {action['entryId']}")
    if entries == [action["entryId"]]:
        return Refuse(
            f"{action['entryId']} is the last entry of annotation {action['annotationId']}: "
            "an annotation is never empty; dispatch annotations/removed instead"
        )
    return _kept(host, channel, action)


# -- in a prompt -----------------------------------------------------------------


def _text(value: Any) -> str:
    return value.get("markdown", "") if isinstance(value, dict) else str(value)


def render(marks: list[dict[str, Any]]) -> str:
    """Marks as an agent reads them: where each is, and what was said."""
    lines = []
    for mark in marks:
        where = mark.get("resource", "")
        span = mark.get("range")
        if span:
            where += f" lines {int(span['start']['line']) + 1}-{int(span['end']['line']) + 1}"
        state = "resolved" if mark.get("resolved") else "open"
        lines.append(f"- annotation {mark['id']} on {where} ({state}):")
        lines += [f"  - {_text(entry.get('text'))}" for entry in mark.get("entries") or []]
    return "\n".join(lines)


def resolve(host: Host, attachments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``attachments`` with each annotations attachment replaced by the marks
    it names, as text (every mark when it names none). A channel this host
    does not hold, or ids it does not have, are said rather than dropped."""
    out = []
    for attachment in attachments:
        if attachment.get("type") != "annotations":
            out.append(attachment)
            continue
        channel = host.bus.channels.get(attachment.get("resource", ""))
        marks = channel.state.get("annotations") or [] if channel is not None and channel.kind == "annotations" else []
        wanted = attachment.get("annotationIds")
        if wanted is not None:
            marks = [m for m in marks if m.get("id") in wanted]
        missing = sorted(set(wanted or []) - {m.get("id") for m in marks})
        text = f"Review annotations ({attachment.get('label') or attachment.get('resource')}):\n" + render(marks)
        if missing:
            text += f"\n(not found on this host: {', '.join(missing)})"
        out.append({"type": "text", "text": text})
    return out


CLIENT_ACTIONS = {
    "annotations/set": set_,
    "annotations/updated": _existing,
    "annotations/removed": _existing,
    "annotations/entrySet": entry_set,
    "annotations/entryRemoved": entry_removed,
}
