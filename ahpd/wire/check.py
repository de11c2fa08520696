"""The wire checker: frames in, problems out. No I/O.

Per connection it pairs requests with their answers by id and method and
validates every frame against the strict schema, rebuilds every subscribed
channel from its actions and compares each snapshot with it
(``ahpd.wire.replay``), and checks what the protocol promises about the
order of things. The rules, by the name a problem reports:

``schema``          a frame does not fit the strict schema (an undeclared key, a missing one...)
``jsonrpc``         not JSON-RPC 2.0: no ``jsonrpc``, an answer to nothing, a request never answered
``server-seq``      serverSeq does not strictly increase on a connection (an unchanged
                    action's answer to its own sender, at the current serverSeq, excepted)
``notification-seq`` a notification other than ``action`` carries a serverSeq
``snapshot``        a snapshot differs from the state reduced from the actions before it, on
                    its own connection or, for a connection's first, on any other connection
                    watching the channel at the snapshot's serverSeq
``subscription``    an action on a channel this connection never subscribed to
``turn-ending``     a turn ended twice (``chat/turnResume`` reopens one), ended while not running, or
                    never ended (seen by no connection, on one that did not close); an ending without
                    a duration
``part-order``      a ``chat/delta``/``chat/reasoning``/tool call action before its part was opened,
                    or aimed at a part of another kind
``tool-ready``      ``chat/toolCallReady`` without ``confirmed`` where nobody was asked
``refusal``         a refusal sent to a connection that did not dispatch the action, or replayed
``reducer``         a schema-valid action the reducer cannot apply

A frame that breaks the schema is still followed (its serverSeq, its turn),
so one defect is reported once rather than again by everything after it.
A connection's close (a capture line of its own, see ``ahpd.wire.capture``)
ends what it watched: a turn still running or a request still unanswered
then is the client's leaving, not a defect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ahpd.wire import schema
from ahpd.wire.check_state import (
    ANY_ACTION,
    APPENDS,
    ENDINGS,
    TOOL_ACTIONS,
    Connection,
    Problem,
    Turn,
    clears_activity,
    excerpt,
    identifiable,
    join_path,
    part_key,
    requested,
)
from ahpd.wire.reader import Frame
from ahpd.wire.replay import History


class Checker:
    """Feed it frames in capture order; ``finish()`` returns every problem found."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.connections: dict[str, Connection] = {}
        self._frame: Frame | None = None
        self.frames = 0
        self.histories: dict[str, History] = {}  # channel -> what its watchers reduced
        self.ended: set[tuple[str, Any]] = set()  # (chat, turn id) seen ending on any connection
        # A difference from what other connections reduced, reported once one of
        # them is seen still there after it: (problem, frame count, who).
        self.against_others: list[tuple[Problem, int, frozenset[str]]] = []
        # A notification's schema target and its generated yes-or-no function, by method.
        self._notifications: dict[str, tuple[schema.Target | None, Callable[[Any], bool] | None]] = {}

    @property
    def compared(self) -> int:
        """How many snapshots were held against a state reduced from actions."""
        return sum(chan.compared for conn in self.connections.values() for chan in conn.channels.values())

    # -- reporting -------------------------------------------------------------

    def report(self, rule: str, message: str, json_path: str = "$", value: Any = None, line: int | None = None) -> None:
        f = self._frame
        assert f is not None
        self.problems.append(
            Problem(
                f.path,
                line if line is not None else f.line,
                json_path,
                excerpt(value) if value is not None else "",
                rule,
                message,
                f.connection,
            )
        )

    def fits(self, where: schema.Target | None, value: Any, prefix: str, what: str) -> bool:
        if where is None:
            return True
        for sub, reason in schema.problems(where, value):
            node = value
            keys = [k for k in sub.lstrip("$").replace("[", ".[").split(".") if k]
            if "undeclared" in reason:
                keys = keys[:-1]  # the object that holds it says more than its value
            for key in keys:
                if isinstance(node, dict):
                    node = node.get(key, node)
                elif isinstance(node, list) and key.startswith("["):
                    node = node[int(key[1:-1])] if key[1:-1].isdigit() and int(key[1:-1]) < len(node) else node
            self.report("schema", f"{what}: {reason}", join_path(prefix, sub), node)
            return False
        return True

    # -- frames ----------------------------------------------------------------

    def feed(self, frame: Frame) -> None:
        self._frame = frame
        self.frames += 1
        _, line, direction, name, client_id, _, msg, unparsed, closed = frame
        conn = self.connections.get(name)
        if conn is None:
            conn = self.connections[name] = Connection(name, frame.path, self.histories)
        conn.last_frame = self.frames
        if client_id and not conn.client_id:
            conn.client_id = client_id
        if closed:
            conn.closed = True
            for chan in conn.channels.values():
                chan.drop()
            return
        if not isinstance(msg, dict):
            if direction == "s2c":
                self.report(
                    "jsonrpc",
                    "the host sent a frame that is not a JSON object",
                    "$",
                    unparsed if unparsed is not None else msg,
                )
            return
        if msg.get("jsonrpc") != "2.0":
            self.report("jsonrpc", 'no "jsonrpc": "2.0"', "$.jsonrpc", msg.get("jsonrpc", "<absent>"))
        if "id" in msg and isinstance(msg["id"], (bool, dict, list)):  # nothing it could be matched by
            return self.report("jsonrpc", "an id is a string, a number or null", "$.id", msg["id"])
        method = msg.get("method")
        if direction == "c2s":
            if isinstance(method, str):
                self.client_frame(conn, msg, method)
            elif "id" in msg:
                self.client_answer(conn, msg)
        elif isinstance(method, str):
            if "id" in msg:
                conn.server_requests[msg["id"]] = (method, line)
                self.fits(
                    schema.target("serverCommands", method, "params"),
                    msg.get("params", {}),
                    "$.params",
                    f"{method} params",
                )
            else:
                self.notification(conn, method, msg.get("params"))
        elif "id" in msg:
            self.host_answer(conn, msg)
        else:
            self.report("jsonrpc", "neither a request, a notification nor a response", "$", msg)

    def client_frame(self, conn: Connection, msg: dict[str, Any], method: str) -> None:
        params = msg.get("params")
        if "id" in msg:
            assert self._frame is not None
            conn.requests[msg["id"]] = (method, self._frame.line, params)
            self.fits(
                schema.target("commands", method, "params"),
                params if params is not None else {},
                "$.params",
                f"{method} params",
            )
            if not isinstance(params, dict):
                return
            if method in ("initialize", "reconnect") and isinstance(params.get("clientId"), str):
                conn.client_id = params["clientId"]
            for uri in requested(method, params):
                conn.dropped.discard(uri)
                conn.channel(uri).expect()
            return
        self.fits(schema.target("clientNotifications", method), params, "$.params", method)
        if not isinstance(params, dict):
            return
        if method == "unsubscribe" and isinstance(params.get("channel"), str):
            conn.channel(params["channel"]).drop()
            conn.dropped.add(params["channel"])
        elif method == "dispatchAction" and isinstance(params.get("action"), dict) and identifiable(params["action"]):
            action = params["action"]
            if isinstance(params.get("clientSeq"), int):  # else the schema check says so
                conn.dispatched[params["clientSeq"]] = action
            if action.get("type") == "chat/toolCallConfirmed":
                conn.answerable.add(action.get("toolCallId"))

    def client_answer(self, conn: Connection, msg: dict[str, Any]) -> None:
        asked = conn.server_requests.pop(msg["id"], None)
        if asked is None:
            self.report("jsonrpc", "the client answered a request the host never made", "$.id", msg["id"])
        elif "result" in msg:
            self.fits(
                schema.target("serverCommands", asked[0], "result"), msg["result"], "$.result", f"{asked[0]} result"
            )

    def host_answer(self, conn: Connection, msg: dict[str, Any]) -> None:
        asked = conn.requests.pop(msg["id"], None)
        if asked is None:
            self.report("jsonrpc", "a response to no request this connection made", "$.id", msg["id"])
            return
        method, _, params = asked
        if ("result" in msg) == ("error" in msg):
            self.report("jsonrpc", "a response carries exactly one of result and error", "$", msg)
            return
        if "error" in msg:
            error = msg["error"]
            if not (
                isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
            ):
                self.report("jsonrpc", "an error is {code: integer, message: string}", "$.error", error)
            for uri in requested(method, params):
                conn.channel(uri).settle()
            return
        result = msg["result"]
        if not self.fits(schema.target("commands", method, "result"), result, "$.result", f"{method} result"):
            return
        if method in ("initialize", "reconnect") and isinstance(result, dict):
            for i, snap in enumerate(result.get("snapshots") or []):
                self.snapshot(conn, snap, f"$.result.snapshots[{i}]")
            replay = result.get("type") == "replay"
            if replay:
                for uri in requested(method, params):
                    conn.channel(uri).subscribed = True  # resumed, though this capture never saw its state
                for i, env in enumerate(result.get("actions") or []):
                    self.envelope(conn, env, f"$.result.actions[{i}]", replayed=True)
            taken = {s.get("resource") for s in result.get("snapshots") or [] if isinstance(s, dict)}
            for uri in requested(method, params):
                if uri not in taken:
                    conn.channel(uri).settle()
        elif method == "subscribe" and isinstance(result, dict) and isinstance(result.get("snapshot"), dict):
            self.snapshot(conn, result["snapshot"], "$.result.snapshot")

    # -- what the host says ----------------------------------------------------

    def _notification_target(self, method: str) -> tuple[schema.Target | None, Callable[[Any], bool] | None]:
        where = schema.target("notifications", method)
        return self._notifications.setdefault(method, (where, None if where is None else schema.quick(where)))

    def notification(self, conn: Connection, method: str, params: Any) -> None:
        where, quick = self._notifications.get(method) or self._notification_target(method)
        if where is None and not method.startswith("vscode/"):
            self.report("schema", f"{method} is not a notification the protocol declares", "$.method", method)
        checked = params
        if (
            method == "action"
            and isinstance(params, dict)
            and "rejectionReason" in params
            and self._echoes_its_dispatch(conn, params)
        ):
            # A refusal hands the sender its own action back as sent, however
            # wrong: that was judged on the dispatch; the envelope is judged here.
            checked = {**params, "action": ANY_ACTION}
        elif method == "root/sessionSummaryChanged" and clears_activity(params):
            # Served outside the protocol, whose type says string: a row that
            # went idle says so with null, the way the reference host does.
            checked = {**params, "changes": {k: v for k, v in params["changes"].items() if k != "activity"}}
        # The generated function passes nearly every frame; only one it refuses is looked into.
        valid = (quick is not None and quick(checked)) or self.fits(where, checked, "$.params", method)
        if method != "action":
            if isinstance(params, dict) and "serverSeq" in params:
                self.report(
                    "notification-seq",
                    f"{method} carries a serverSeq: only actions move with state",
                    "$.params.serverSeq",
                    params["serverSeq"],
                )
            return
        if isinstance(params, dict):
            self.envelope(conn, params, "$.params", valid=valid)

    @staticmethod
    def _echoes_its_dispatch(conn: Connection, params: dict[str, Any]) -> bool:
        origin = params.get("origin")
        if not isinstance(origin, dict) or conn.client_id is None:
            return False
        seq = origin.get("clientSeq")
        return (
            origin.get("clientId") == conn.client_id
            and isinstance(seq, int)
            and seq in conn.dispatched
            and conn.dispatched[seq] == params.get("action")
        )

    def snapshot(self, conn: Connection, snap: Any, at: str) -> None:
        if not isinstance(snap, dict):
            return
        uri, state = snap.get("resource"), snap.get("state")
        # Only a result that fits the schema gets here, so the resource is a string.
        if not isinstance(uri, str) or not isinstance(state, dict):
            return
        chan = conn.channel(uri)
        from_seq = snap.get("fromSeq", 0)
        _, others = chan.others(from_seq)
        difference, own = chan.snapshot(state, from_seq)
        if difference is not None:
            path, expected, actual = difference
            if own:
                self.report(
                    "snapshot",
                    f"the snapshot of {uri} differs from the state its actions reduce to: "
                    f"reduced {excerpt(expected, 60)}, snapshot",
                    join_path(f"{at}.state", path),
                    actual,
                )
            else:
                f = self._frame
                assert f is not None
                self.against_others.append(
                    (
                        Problem(
                            f.path,
                            f.line,
                            join_path(f"{at}.state", path),
                            excerpt(actual),
                            "snapshot",
                            f"the snapshot of {uri} at serverSeq {from_seq} differs from the state the actions "
                            f"another connection watching it received reduce to: reduced {excerpt(expected, 60)}, "
                            "snapshot",
                            f.connection,
                        ),
                        self.frames,
                        others,
                    )
                )
        active = state.get("activeTurn") if chan.kind == "chat" else None
        if isinstance(active, dict) and isinstance(active.get("id"), str):
            # What the snapshot knows is added to what the actions said, never put before it.
            turn = conn.turns.setdefault((uri, active["id"]), Turn(self._line()))
            for key, kind in map(part_key, active.get("responseParts") or []):
                turn.parts.setdefault(key, kind)
            if uri not in conn.running and turn.ended is None:
                conn.running[uri] = active["id"]
        for seq, action, at, line in conn.deferred.pop(uri, []):
            if seq > snap.get("fromSeq", 0):
                self.invariants(conn, uri, action, at, line)

    def envelope(
        self, conn: Connection, env: dict[str, Any], at: str, replayed: bool = False, valid: bool = True
    ) -> None:
        action, uri, seq = env.get("action"), env.get("channel"), env.get("serverSeq")
        if not isinstance(action, dict) or not isinstance(uri, str) or not isinstance(seq, (int, float)):
            return
        origin = env.get("origin")
        if isinstance(origin, dict):
            own = (
                conn.client_id is not None
                and origin.get("clientId") == conn.client_id
                and isinstance(origin.get("clientSeq"), int)
                and origin["clientSeq"] in conn.dispatched
            )
        else:  # most actions: one the host made, not an answer to a dispatch
            origin, own = {}, False
        if "rejectionReason" in env:
            if not own:
                self.report(
                    "refusal",
                    f"a refusal of client {origin.get('clientId')}'s action reached "
                    f"client {conn.client_id}: a refusal goes only to its sender",
                    f"{at}.origin",
                    origin or None,
                )
            if replayed:
                self.report("refusal", "a refusal was replayed: it moves no state and is never buffered", at, env)
            return
        chan = conn.channels.get(uri)
        if own and (
            (conn.last_seq is not None and seq <= conn.last_seq)
            or (chan is not None and chan.would_change(action) is False)
        ):
            # The sender answered at the serverSeq the host is already at: nothing moved
            # (an unchanged action, or a key kept on the connection rather than the host).
            return
        last = conn.last_seq
        if last is None or seq > last:
            conn.last_seq = seq
        elif seq <= last:  # not for a NaN, which compares false both ways
            self.report(
                "server-seq",
                f"serverSeq {seq} after {last}: it must strictly increase on a connection",
                f"{at}.serverSeq",
                seq,
            )
        if chan is None or not (chan.subscribed or chan.pending):
            if uri not in conn.dropped:
                self.report(
                    "subscription",
                    f"an action on {uri}, which this connection did not subscribe to",
                    f"{at}.channel",
                    uri,
                )
            return
        frame = self._frame
        assert frame is not None
        line = frame.line
        if chan.state is None and chan.pending:  # judged once the snapshot says what was running
            conn.deferred.setdefault(uri, []).append((seq, action, at, line))
        else:
            self.invariants(conn, uri, action, at, line)
        failure = chan.apply(seq if seq.__class__ is int else int(seq), action)
        if failure is not None and valid:
            self.report("reducer", f"the reducer failed on {action.get('type')}: {failure!r}", f"{at}.action", action)

    def invariants(self, conn: Connection, uri: str, action: dict[str, Any], at: str, line: int) -> None:
        """The ordering rules for one action at ``at`` (its envelope's path)."""
        kind = action.get("type")
        if not isinstance(kind, str) or not identifiable(action):
            return  # the schema check said what is wrong with it; it names nothing to follow
        need = APPENDS.get(kind)
        if need is not None:  # chat/delta and chat/reasoning: most of a conversation's actions
            turn = conn.turns.get((uri, action.get("turnId")))
            if turn is None or turn.ended is not None or turn.parts.get(action.get("partId")) != need:
                self._appends(turn, action, kind, "partId", need, at, line)
            return
        if kind == "session/inputNeededSet":
            request = action.get("request") or {}
            if request.get("kind") == "toolConfirmation":
                conn.answerable.add((request.get("toolCall") or {}).get("toolCallId"))
            return
        if not kind.startswith("chat/"):
            return
        turn_id = action.get("turnId")
        if kind == "chat/turnStarted":
            running = conn.running.get(uri)
            if running is not None and running != turn_id:
                first = conn.turns.get((uri, running))
                self.report(
                    "turn-ending",
                    f"turn {running} has no ending: turn {turn_id} started after it",
                    f"{at}.action.turnId",
                    turn_id,
                    line=line,
                )
                if first is not None:
                    first.ended = line
            conn.turns[(uri, turn_id)] = Turn(line)
            conn.running[uri] = turn_id
            return
        turn = conn.turns.get((uri, turn_id))
        if kind == "chat/turnResume":
            # The errored turn reopened (the host validated it): it runs, and ends, again.
            if turn is None:
                turn = conn.turns[(uri, turn_id)] = Turn(line)
            turn.ended = None
            conn.running[uri] = turn_id
            self.ended.discard((uri, turn_id))
            return
        if kind in ENDINGS:
            if turn is not None and turn.ended is not None:
                self.report(
                    "turn-ending",
                    f"turn {turn_id} ended twice (first at line {turn.ended})",
                    f"{at}.action.type",
                    kind,
                    line=line,
                )
            elif turn is None or conn.running.get(uri) != turn_id:
                self.report(
                    "turn-ending",
                    f"{kind} ends turn {turn_id}, which is not running",
                    f"{at}.action.turnId",
                    turn_id,
                    line=line,
                )
            if not isinstance(action.get("duration"), (int, float)):
                self.report(
                    "turn-ending",
                    f"{kind} carries no duration",
                    f"{at}.action.duration",
                    action.get("duration", "<absent>"),
                    line=line,
                )
            if turn is not None:
                turn.ended = turn.ended or line
            self.ended.add((uri, turn_id))
            if conn.running.get(uri) == turn_id:
                del conn.running[uri]
            return
        if kind == "chat/responsePart":
            if turn is not None:
                key, part_kind = part_key(action.get("part") or {})
                turn.parts[key] = part_kind
            return
        if kind == "chat/toolCallStart":
            if turn is not None:
                turn.parts[action.get("toolCallId")] = "toolCall"
            return
        if kind in TOOL_ACTIONS:
            self._appends(turn, action, kind, "toolCallId", "toolCall", at, line)
        if kind == "chat/toolCallReady" and "confirmed" not in action:
            conn.asked[action.get("toolCallId")] = (line, f"{at}.action.confirmed")
        elif kind == "chat/toolCallConfirmed":
            conn.answerable.add(action.get("toolCallId"))

    def _appends(
        self, turn: Turn | None, action: dict[str, Any], kind: str, field: str, need: str, at: str, line: int
    ) -> None:
        """An action that adds to a part (named by ``field``) comes while its turn
        runs, after its part was opened, and to a part of the kind it needs."""
        key = action.get(field)
        if turn is None or turn.ended is not None:
            turn_id = action.get("turnId")
            self.report(
                "part-order",
                f"{kind} names turn {turn_id}, which is not running",
                f"{at}.action.turnId",
                turn_id,
                line=line,
            )
        elif key not in turn.parts:
            opener = "chat/toolCallStart" if need == "toolCall" else "chat/responsePart"
            self.report(
                "part-order",
                f"{kind} before its part: no {opener} opened {key}",
                f"{at}.action.{field}",
                key,
                line=line,
            )
        elif turn.parts[key] != need:
            self.report(
                "part-order",
                f"{kind} appends to a {turn.parts[key]} part; it needs a {need} one",
                f"{at}.action.partId",
                key,
                line=line,
            )

    def _line(self) -> int:
        assert self._frame is not None
        return self._frame.line

    # -- the end ---------------------------------------------------------------

    def finish(self) -> list[Problem]:
        """What could only be judged once every frame was seen; then every problem, in order."""
        for conn in self.connections.values():
            self._frame = Frame(conn.path, 0, "s2c", conn.name, conn.client_id, None, None)
            for call_id, (line, at) in conn.asked.items():
                if call_id not in conn.answerable:
                    self.report(
                        "tool-ready",
                        f"chat/toolCallReady for {call_id} has no confirmed, but nobody "
                        "was asked (no session/inputNeededSet, no chat/toolCallConfirmed): "
                        "a tool that is not asking says confirmed",
                        at,
                        "<absent>",
                        line=line,
                    )
            if conn.closed:
                continue  # the client left: what it was waiting for is nobody's defect
            for uri, turn_id in conn.running.items():
                if (uri, turn_id) in self.ended:
                    continue  # it ended; this connection just did not hear it
                turn = conn.turns.get((uri, turn_id))
                self.report(
                    "turn-ending",
                    f"turn {turn_id} of {uri} never ended",
                    "$.params.action.turnId",
                    turn_id,
                    line=turn.started if turn else None,
                )
            for ident, (method, line, _) in conn.requests.items():
                self.report("jsonrpc", f"{method} (id {ident}) was never answered", "$.id", ident, line=line)
        for problem, seen, others in self.against_others:
            # Only a connection seen after the snapshot surely watched up to it.
            if any(self.connections[name].last_frame > seen for name in others if name in self.connections):
                self.problems.append(problem)
        self.problems.sort(key=lambda p: (p.path, p.line))
        return self.problems


def check_frames(frames: Iterable[Frame]) -> list[Problem]:
    """Every problem in ``frames`` (see the module docstring for the rules)."""
    checker = Checker()
    for frame in frames:
        checker.feed(frame)
    return checker.finish()
