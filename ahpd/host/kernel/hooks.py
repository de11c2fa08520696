"""The moments at which the kernel lets a feature act.

The kernel knows connections, channels and the bus; it knows no feature.
Where a feature must act on a moment only the kernel sees (a client says
hello, names a channel that is not open, stops watching one, goes away),
the kernel declares the moment here and calls whatever is registered for
it. Registration happens in one place, ``ahpd.host.table.KERNEL_HOOKS``:
nothing registers itself by being imported, so what runs at each moment is
read in that table.

Each hook is a tuple of plain functions taking the host first. They run on
the event loop and must not block; a hook that raises fails the request or
connection step that called it, as the code it replaced did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer


@dataclass(frozen=True)
class KernelHooks:
    #: A client said ``initialize`` or ``reconnect`` (the agents' boot
    #: probes wait for the first one).
    hello: tuple[Callable[[Host], None], ...] = ()
    #: What ``initialize`` answers beyond the kernel's own fields: each
    #: returns the fields it adds (``automations``, ``terminalCommandPrefix``...).
    capabilities: tuple[Callable[[Host], dict[str, Any]], ...] = ()
    #: Channels served without a snapshot (telemetry): each returns the
    #: ``subscribe`` result when it serves ``uri``, else None.
    stateless: tuple[Callable[[Host, Peer, str], dict[str, Any] | None], ...] = ()
    #: A client names ``uri`` and no channel is open by that name: each may
    #: open it (a stored session woken, a changeset read) and says whether
    #: it did; the first that does wins.
    openers: tuple[Callable[[Host, str], Awaitable[bool]], ...] = ()
    #: ``uri`` names no open channel: each may say it is another spelling of
    #: one (a session's alias), as (the channel's spelling, ``uri``'s
    #: spelling) pairs of URI prefixes (``ahpd.host.kernel.alias``), or None.
    aliases: tuple[Callable[[Host, str], tuple[tuple[str, str], ...] | None], ...] = ()
    #: ``peer`` stopped watching ``uri`` (unsubscribed or went away).
    left: tuple[Callable[[Host, Peer, str], None], ...] = ()
    #: ``peer``'s connection ended, after it left every channel.
    peer_gone: tuple[Callable[[Host, Peer], None], ...] = ()
    #: A client has no connection left (its last one ended).
    client_gone: tuple[Callable[[Host, str], None], ...] = ()
    #: A client's action moved ``channel``: what must survive is written down.
    state_changed: tuple[Callable[[Host, str], None], ...] = ()
    #: Before a client action's own rule: a reason to refuse ``action_type``
    #: on ``channel`` (a read-only chat), or None.
    refusals: tuple[Callable[[Host, str, str], str | None], ...] = ()
    #: Files under ``folder`` may have changed behind the watchers' backs (a
    #: client wrote one, a terminal's command ended): what is read from
    #: them (a changeset) is read again.
    files_touched: tuple[Callable[[Host, Path], None], ...] = ()
    #: Resources only a feature can read (a changeset's before side), asked
    #: before the file system on ``resourceRead``: each returns the answer,
    #: or None when ``params`` names nothing of its own.
    readers: tuple[Callable[[Host, Any], Awaitable[dict[str, Any] | None]], ...] = ()
    #: A client lent a token for ``resource`` (``authenticate``): what was
    #: not found out without one (the pull request beside a branch) is asked again.
    token_lent: tuple[Callable[[Host, str], None], ...] = ()
