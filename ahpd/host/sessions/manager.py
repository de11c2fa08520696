"""The sessions of a host: opening, waking, the catalogue, disposing.

A session read back from the store after a restart is *dormant*: its
channels open when a client names it, its turns are there, and no agent
runs until somebody starts a turn. What a composer needs before any turn
(models, slash commands) is what the backends' boot probes learned (see
:meth:`SessionManager.probe_soon`).

The catalogue also offers what a backend keeps and the store does not know:
a past Claude Code conversation is a row ``claude:/<id>``, listed from the
backend's transcripts (a file read, cached per backend and refreshed at
the first hello and after each turn, so listing never waits on anything).
Opening one rebuilds its turns from the transcript, again without an agent,
and the first new turn resumes it under its own id.

What features do when a session opens, is written down or goes is theirs,
registered in ``ahpd.host.table.SESSION_HOOKS`` (``ahpd.host.sessions.hooks``).
"""

from __future__ import annotations

import base64
import logging
import math
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

# trio.testing's own spelling would import trio.testing, and with it pytest wherever pytest is
# installed (~100 ms and several MB before the ready line): the same function, from trio's core.
from trio._core import wait_all_tasks_blocked

from ahpd.backends.port import Backend, StoredConversation
from ahpd.host.kernel.auth import USERS_RECORD
from ahpd.host.kernel.bus import ROOT, utc_now
from ahpd.host.kernel.supervise import spawn

# Aliased: ``annotations`` is also the name ``from __future__ import annotations`` binds.
from ahpd.host.sessions import annotations as session_annotations
from ahpd.host.sessions import aliases, session_config, summaries
from ahpd.host.sessions.catalogue import (
    catalogue_row,
    command_customizations,
    mcp_customizations,
    subagent_customizations,
)
from ahpd.host.sessions.chat import Chat
from ahpd.host.sessions.common import IDLE, IS_ARCHIVED, IS_READ, TURN_WINDOW, catalogue_uri, default_chat_uri
from ahpd.host.sessions.hooks import SessionHooks
from ahpd.host.sessions.session import Session
from ahpd.host.sessions.store import MemorySessionStore, SessionStore

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host

log = logging.getLogger("ahpd.host")

#: Seconds a new session waits for its agent's boot probe, if one is under way.
PROBE_WAIT = 60.0
#: The longest a client's change waits to be written down while the loop
#: stays busy (see :meth:`SessionManager.save_soon`).
SAVE_HOLD = 0.05


class SessionManager:
    def __init__(
        self,
        host: Host,
        backends: dict[str, Backend],
        store: SessionStore | None = None,
        hooks: SessionHooks | None = None,
    ) -> None:
        self.host = host
        #: What features do at a session's moments (``ahpd.host.table.SESSION_HOOKS``).
        self.hooks = hooks or SessionHooks()
        self.backends = backends
        self.store = store or MemorySessionStore()
        self.sessions: dict[str, Session] = {}
        self.chat_owner: dict[str, Chat] = {}
        self.nursery: trio.Nursery | None = None
        #: Rows of sessions that are stored but not open, by URI (``<provider>:/<id>``:
        #: one an older ahpd kept under another spelling is renamed as it is read).
        self.dormant: dict[str, dict[str, Any]] = {
            r["uri"]: r for r in aliases.upgraded(self.store, self.store.load_all(), backends)
        }
        #: What each browsable backend keeps, by provider then backend id:
        #: the last answer of its ``list_conversations``.
        self.catalogue: dict[str, dict[str, StoredConversation]] = {}
        self._refreshing: dict[str, bool] = {}  # provider -> asked again meanwhile
        #: Backend ids this host has deleted from their backend's keeping, by
        #: provider: a listing read before the delete finished must not bring
        #: the disposed conversation back as a row.
        self.deleted: dict[str, set[str]] = {}
        self._listed_at: dict[str, float] = {}  # provider -> when its catalogue was last read
        self._waking: dict[str, trio.Event] = {}
        #: Whether the agents' boot probes were started (once, at the first hello).
        self._probes_started = False
        #: Set when that provider's boot probe has ended, by provider, while it runs.
        self._probing: dict[str, trio.Event] = {}
        #: What an edit waiting for approval would write, by the
        #: ``ahp-edit://pending/...`` URI its after side is served under:
        #: (tool call id, file path, new content). Gone once the call is settled.
        self.pending_edits: dict[str, tuple[str, str, str]] = {}
        #: Sessions a client's action moved, written once the burst is over.
        self._unsaved: dict[str, Session] = {}

    @property
    def default_provider(self) -> str | None:
        return next(iter(self.backends), None)

    def agents(self) -> list[dict[str, Any]]:
        """``RootState.agents``: each backend's own description, with the
        harness-wide commands and skills it reported at start-up as its
        customizations, so a composer can offer them before any session."""
        agents = []
        for provider, backend in self.backends.items():
            info = backend.agent_info()
            commands = self.harness_commands(provider)
            subagents = getattr(backend, "subagents", None) or []
            servers = getattr(backend, "mcp_servers", None) or []
            if (commands or subagents or servers) and "customizations" not in info:
                dirs = getattr(backend, "customization_dirs", None) or {}
                customizations = command_customizations(provider, commands, Path.home(), dirs)
                folder = Path.home() / dirs.get("agent", ".")
                customizations += subagent_customizations(provider, list(subagents), folder)
                customizations += mcp_customizations(provider, list(servers), Path.home() / ".claude.json")
                info = {**info, "customizations": customizations}
            for extend in self.hooks.agent_info:
                info = extend(self.host, info)
            if self.host.users is not None:
                info = {**info, "protectedResources": [*(info.get("protectedResources") or []), USERS_RECORD]}
            agents.append(info)
        return agents

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The host's nursery for sessions; cancelled, it ends every agent."""
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.nursery = None
            self.save_unsaved()

    def save_soon(self, session: Session) -> None:
        """Write ``session`` down once the burst of actions that moved it is
        over: when the loop has nothing else to run, or ``SAVE_HOLD``
        seconds on. A client typing a draft, or pasting a burst of
        changes, costs one record per burst, not one per keystroke; a lone
        change is written as soon as it is reduced and sent. What is
        waiting is written when the host stops."""
        if self.nursery is None:
            session.save()
            return
        if not self._unsaved:
            spawn(self.nursery, "writing down the sessions a burst moved", self._save_after_burst)
        self._unsaved[session.uri] = session

    async def _save_after_burst(self) -> None:
        try:
            with trio.move_on_after(SAVE_HOLD):
                await wait_all_tasks_blocked()
        finally:
            self.save_unsaved()

    def save_unsaved(self) -> None:
        unsaved, self._unsaved = self._unsaved, {}
        for session in unsaved.values():
            session.save()

    def probe_soon(self) -> None:
        """Start the agents' boot probes, and the first reading of what each
        backend keeps (the catalogue), once, when the first client says
        hello: a daemon nobody talks to starts no agent CLI, imports no agent
        library and sends nothing anywhere, and the answers still reach that
        client as ``root/agentsChanged`` and ``root/sessionAdded``."""
        if self.nursery is None or self._probes_started:
            return
        self._probes_started = True
        for provider, backend in self.backends.items():
            if hasattr(backend, "probe"):
                self._probing[provider] = trio.Event()
                spawn(self.nursery, f"probing {backend.provider}", self._probe, backend)
            else:
                self.refresh_catalogue_soon(provider)

    async def probed(self, provider: str) -> None:
        """Wait (at most ``PROBE_WAIT`` seconds) for ``provider``'s boot probe
        if it is under way, so that a session opens with what it learned."""
        probing = self._probing.get(provider)
        if probing is not None:
            with trio.move_on_after(PROBE_WAIT):
                await probing.wait()

    async def _probe(self, backend: Any) -> None:
        """Ask an agent what it offers before any session needs it, and tell
        clients when the answer changed what they were shown.

        The first reading of the catalogue is started here, before the probe:
        it runs once this task first waits, and the probe has taken its
        backend's ``probe_listing`` lock by then, so a probe that lists what the
        agent keeps (it runs the agent, or loads its SDK, anyway) answers that
        reading too, and no second child is started for it."""
        self.refresh_catalogue_soon(backend.provider)
        try:
            changed = await backend.probe()
        except Exception:  # noqa: BLE001 - an agent that cannot be probed is still offered
            log.exception("probing %s failed", backend.provider)
            return
        finally:
            self._probing.pop(backend.provider, trio.Event()).set()
        if changed:
            self.host.bus.emit(ROOT, {"type": "root/agentsChanged", "agents": self.agents()})
        commands = self.harness_commands(backend.provider)
        for session in list(self.sessions.values()):
            if session.provider == backend.provider and commands and not session.state().get("customizations"):
                session.publish_commands(commands)

    def harness_commands(self, provider: str) -> list[dict[str, Any]]:
        """The harness-wide slash commands a backend reported before any
        session (Claude Code's boot probe), as ACP ``AvailableCommand``s."""
        commands = getattr(self.backends.get(provider), "commands", None)
        return list(commands) if isinstance(commands, list) else []

    # -- the catalogue of what backends keep ----------------------------------

    def _browsable(self, provider: str) -> bool:
        """Only a backend that can read its conversations back is catalogued:
        Claude Code's transcripts are files, and an ACP agent that lists them
        replays one in a short-lived process. Listing never waits on either
        (the answer is cached); opening waits only on that replay."""
        backend = self.backends.get(provider)
        return backend is not None and hasattr(backend, "read_history") and hasattr(backend, "list_conversations")

    def _fresh(self, provider: str) -> bool:
        """Whether ``provider``'s last listing still stands: a backend whose
        listing starts its agent says for how long (``relist_after``), and is
        not asked again after every turn or for every name it does not hold."""
        fresh_for = getattr(self.backends[provider], "relist_after", 0.0)
        return bool(fresh_for) and trio.current_time() < self._listed_at.get(provider, -math.inf) + fresh_for

    def refresh_catalogue_soon(self, provider: str) -> None:
        if self.nursery is None or not self._browsable(provider) or self._fresh(provider):
            return
        if provider in self._refreshing:
            self._refreshing[provider] = True  # once more when this one is done
            return
        self._refreshing[provider] = False
        spawn(self.nursery, f"refreshing the {provider} catalogue", self._refresh_loop, provider)

    async def _refresh_loop(self, provider: str) -> None:
        try:
            while True:
                await self.refresh_catalogue(provider)
                if not self._refreshing.get(provider):
                    return
                self._refreshing[provider] = False
        finally:
            self._refreshing.pop(provider, None)

    async def refresh_catalogue(self, provider: str) -> None:
        """Read what ``provider`` keeps again, and tell root subscribers about
        rows that came or went."""
        if not self._browsable(provider):
            return
        before = set(self._unknown(provider))
        try:
            listed = await self.backends[provider].list_conversations()
        except Exception:  # noqa: BLE001 - a catalogue that cannot be read is the one we had
            log.exception("%s: listing its conversations failed", provider)
            return
        self.catalogue[provider] = {c.backend_id: c for c in listed}
        self._listed_at[provider] = trio.current_time()
        after = self._unknown(provider)
        if ROOT not in self.host.bus.channels:
            return
        subscribers = self.host.bus.channels[ROOT].subscribers
        for backend_id, conversation in after.items():
            if backend_id not in before:
                self.host.bus.notify(
                    subscribers,
                    "root/sessionAdded",
                    {
                        "channel": ROOT,
                        "summary": catalogue_row(provider, conversation),
                    },
                )
        for backend_id in before - set(after):
            self.host.bus.notify(
                subscribers,
                "root/sessionRemoved",
                {
                    "channel": ROOT,
                    "session": catalogue_uri(provider, backend_id),
                },
            )

    def forget_conversation(self, provider: str, backend_id: str, deleted: bool = True) -> None:
        """``backend_id`` is being deleted from ``provider``'s keeping: no row
        for it, whatever a listing read before the delete says. When the
        agent kept its copy after all (``deleted=False``), its row may come back."""
        if deleted:
            self.deleted.setdefault(provider, set()).add(backend_id)
        else:
            self.deleted.get(provider, set()).discard(backend_id)

    def _known_ids(self) -> set[str]:
        known = {chat.backend_id for chat in self.chat_owner.values() if chat.backend_id}
        for record in self.dormant.values():
            known.update(c["backendId"] for c in record.get("chats") or [] if c.get("backendId"))
        return known

    def _unknown(self, provider: str) -> dict[str, StoredConversation]:
        """The conversations ``provider`` keeps that no session here names."""
        known = self._known_ids() | self.deleted.get(provider, set())
        return {
            i: c
            for i, c in self.catalogue.get(provider, {}).items()
            if i not in known and catalogue_uri(provider, i) not in self.sessions
        }

    def catalogue_rows(self) -> list[dict[str, Any]]:
        return [
            catalogue_row(provider, conversation)
            for provider in self.catalogue
            for conversation in self._unknown(provider).values()
        ]

    async def catalogue_entry(self, uri: str) -> tuple[str, StoredConversation] | None:
        """The stored conversation ``uri`` names - its row's URI or its default
        chat's - when no session here names it yet. A URI of a browsable
        provider that the cache does not hold reads the catalogue once more."""
        if uri.startswith("ahp-chat://default/"):
            encoded = uri.removeprefix("ahp-chat://default/")
            try:
                uri = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (ValueError, UnicodeDecodeError):
                return None
        provider, sep, rest = uri.partition(":/")
        backend_id = rest.strip("/")
        if not sep or not backend_id or "/" in backend_id or not self._browsable(provider):
            return None
        if backend_id not in self.catalogue.get(provider, {}) and not self._fresh(provider):
            await self.refresh_catalogue(provider)
        conversation = self._unknown(provider).get(backend_id)
        return (provider, conversation) if conversation is not None else None

    async def _open_from_catalogue(self, provider: str, conversation: StoredConversation) -> None:
        """Open a stored conversation dormant: its turns rebuilt from what the
        backend recorded (``SessionHooks.stored_record``), no agent started,
        the backend id its own."""
        if self.hooks.stored_record is None:
            raise RuntimeError("this host cannot read a backend's conversations back")
        await self.open(await self.hooks.stored_record(self, provider, conversation), lifecycle="ready")

    # -- opening -------------------------------------------------------------

    async def open(self, record: dict[str, Any], *, lifecycle: str) -> Session:
        """Open the channels of a session and start its nursery."""
        if self.nursery is None:
            raise RuntimeError("the session manager is not running")
        session = Session(self, record)
        # Its nursery is open before anything can reach the session: a turn
        # started the moment its chat's channel opens has somewhere to run.
        await self.nursery.start(session.run)
        try:
            self._open_channels(session, record, lifecycle)
        except BaseException:
            if session.scope is not None:
                session.scope.cancel()  # nothing reached it: its nursery goes with it
            raise
        for opened in self.hooks.session_opened:  # the host's tools, the changesets
            opened(session, record)
        return session

    def _open_channels(self, session: Session, record: dict[str, Any], lifecycle: str) -> None:
        """The session's channels (its chats', its own, its annotations'),
        each chat known by its URI, and the session by its."""
        for created in self.hooks.session_created:
            created(session, record)
        chats = record.get("chats") or [{"uri": default_chat_uri(session.uri)}]
        now = utc_now()
        summaries = []
        for chat_record in chats:
            chat = Chat(session, chat_record["uri"], chat_record.get("backendId"))
            chat.folder = Path(chat_record["cwd"]) if chat_record.get("cwd") else None
            for chat_created in self.hooks.chat_created:
                chat_created(chat, chat_record)
            chat_state = chat_record.get("state") or {
                "resource": chat.uri,
                "title": record.get("title", ""),
                "status": IDLE,
                "modifiedAt": now,
                "turns": [],
            }
            turns = chat_state.get("turns", [])
            if len(turns) > TURN_WINDOW:
                # The newest turns are in the snapshot; older ones wait for fetchTurns.
                session.older_turns[chat.uri] = turns[:-TURN_WINDOW]
                chat_state = {
                    **chat_state,
                    "turns": turns[-TURN_WINDOW:],
                    "turnsNextCursor": f"older:{len(turns) - TURN_WINDOW}",
                }
            self.host.bus.open(chat.uri, "chat", chat_state)
            session.chats[chat.uri] = chat
            self.chat_owner[chat.uri] = chat
            summaries.append(
                {
                    "resource": chat.uri,
                    "title": chat_state["title"],
                    "status": chat_state["status"],
                    "modifiedAt": chat_state["modifiedAt"],
                    **({"movable": True} if chat_state.get("movable") else {}),
                    **{k: chat_state[k] for k in ("origin", "interactivity") if k in chat_state},
                }
            )
        state: dict[str, Any] = {
            "provider": session.provider,
            "title": record.get("title", ""),
            "status": IDLE | (record.get("status", 0) & (IS_READ | IS_ARCHIVED)),
            "lifecycle": lifecycle,
            "activeClients": [],
            "chats": summaries,
            "defaultChat": record.get("defaultChat") or summaries[0]["resource"],
            "workingDirectories": record.get("workingDirectories") or [session.cwd.as_uri()],
            "project": {"uri": session.cwd.as_uri(), "displayName": session.cwd.name or str(session.cwd)},
        }
        if record.get("config"):
            state["config"] = record["config"]
        elif session.provider in self.backends:
            state["config"] = session_config.initial(self.backends[session.provider], None)
        if record.get("_meta"):
            state["_meta"] = record["_meta"]  # ahpd.owner: the store's, not the transcript's
        if record.get("origin"):
            state["origin"] = record["origin"]  # an automation's run made it
        # What the harness said at start-up (commands, MCP servers), before any agent of this session runs.
        listed = session.customizations_of(self.harness_commands(session.provider))
        if listed:
            state["customizations"] = listed
        self.host.bus.open(session.uri, "session", state)
        self.host.bus.open(
            session_annotations.channel_of(session.uri), "annotations", {"annotations": record.get("annotations") or []}
        )
        self.sessions[session.uri] = session
        session.announced = lifecycle != "creating"

    async def wake(self, uri: str) -> bool:
        """Open a stored session, or a conversation its backend keeps, when a
        client names it; True if it now exists. Two clients naming it at once
        open it once."""
        waking = self._waking.get(uri)
        if waking is not None:
            await waking.wait()
            return uri in self.host.bus.channels
        self._waking[uri] = waking = trio.Event()
        try:
            if await self._wake_stored(uri):
                return True
            entry = await self.catalogue_entry(uri)
            if entry is None:
                return False
            # Its row's URI and its chat's are two names for one conversation.
            row_uri = catalogue_uri(entry[0], entry[1].backend_id)
            if row_uri != uri and row_uri in self._waking:
                await self._waking[row_uri].wait()
            elif row_uri not in self.sessions:
                self._waking[row_uri] = row_waking = waking if row_uri == uri else trio.Event()
                try:
                    await self._open_from_catalogue(*entry)
                finally:
                    if row_waking is not waking:
                        del self._waking[row_uri]
                        row_waking.set()
            return uri in self.host.bus.channels
        finally:
            del self._waking[uri]
            waking.set()

    async def _wake_stored(self, uri: str) -> bool:
        record = self.dormant.get(uri) or self.dormant.get(uri.removesuffix(session_annotations.SUFFIX))
        if record is None:
            owner = next(
                (r for r in self.dormant.values() if any(c.get("uri") == uri for c in r.get("chats") or [])), None
            )
            if owner is None:
                return False
            record = owner
        del self.dormant[record["uri"]]
        if record["provider"] not in self.backends:
            log.warning(
                "stored session %s names provider %s, which is not configured", record["uri"], record["provider"]
            )
        await self.open(record, lifecycle="ready")
        return True

    # -- closing -------------------------------------------------------------

    def dispose(self, session: Session) -> None:
        for disposed in self.hooks.session_disposed:  # its changesets, terminals, automation runs
            disposed(session)
        session.disposed = True
        for chat in session.chats.values():
            chat.close()
            self.host.bus.close(chat.uri)
            self.chat_owner.pop(chat.uri, None)
        if session.scope is not None:
            session.scope.cancel()
        self.host.bus.close(session.uri)
        self.host.bus.close(session_annotations.channel_of(session.uri))
        self.sessions.pop(session.uri, None)
        self.store.delete(session.uri)

    def named(self, uri: str) -> Session | None:
        """The open session ``uri`` names: by its own name, or by another
        spelling of it a client holds (``ahpd.host.sessions.aliases``)."""
        session = self.sessions.get(uri)
        if session is None and (alias := self.host.bus.aliases.get(uri) or self.host.alias_of(uri)) is not None:
            session = self.sessions.get(alias.target)
        return session

    def sync_summary(self, chat: Chat) -> None:
        """Keep the catalogue rows of ``chat`` and its session in step with
        the chat's own state (``ahpd.host.sessions.summaries``)."""
        summaries.sync_chat(chat)

    def notify_summary(self, session: Session, changes: dict[str, Any]) -> None:
        self.host.bus.notify(
            self.host.bus.channels[ROOT].subscribers,
            "root/sessionSummaryChanged",
            {
                "channel": ROOT,
                "session": session.uri,
                "changes": changes,
            },
        )

    def settle_edits(self, call_id: str) -> None:
        """A call was answered or its turn ended: its pending edits are no longer served."""
        for uri in [u for u, (c, _, _) in self.pending_edits.items() if c == call_id]:
            del self.pending_edits[uri]

    def count(self) -> int:
        return len(self.sessions) + len(self.dormant)

    def announce_count(self) -> None:
        self.host.bus.emit(ROOT, {"type": "root/activeSessionsChanged", "activeSessions": self.count()})

    def new_turn_id(self) -> str:
        return f"turn-{uuid.uuid4().hex[:12]}"


# -- what the kernel asks (ahpd.host.table.KERNEL_HOOKS) ------------------------------------


def hello(host: Host) -> None:
    """A client said hello: the agents' boot probes may start (:meth:`SessionManager.probe_soon`)."""
    if host.sessions is not None:
        host.sessions.probe_soon()


async def open_channel(host: Host, uri: str) -> bool:
    """A stored session, or a conversation a backend keeps, is opened when a client names it."""
    return host.sessions is not None and await host.sessions.wake(uri)


def state_changed(host: Host, channel: str) -> None:
    """A client's action moved a session's or a chat's state: write the
    session down, once for the burst it came in (a draft typed key by key)."""
    if host.sessions is None:
        return
    owner = host.sessions.sessions.get(channel) or getattr(host.sessions.chat_owner.get(channel), "session", None)
    if owner is not None:
        host.sessions.save_soon(owner)


def left(host: Host, peer: Any, uri: str) -> None:
    """A client that no longer watches a session in any window is taken out
    of its active clients."""
    channel = host.bus.channels.get(uri)
    if channel is None or channel.kind != "session" or peer.client_id is None:
        return
    if any(p.client_id == peer.client_id and uri in p.subscriptions for p in host.peers if p is not peer):
        return
    if any(c.get("clientId") == peer.client_id for c in channel.state.get("activeClients", [])):
        host.bus.emit(uri, {"type": "session/activeClientRemoved", "clientId": peer.client_id})
