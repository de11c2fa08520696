"""Changesets over git, end to end: a real daemon, real WebSocket clients,
real repositories made with the ``git`` command, and the demo agent editing
files in a turn. Every changeset action a client receives is reduced with
the package's reducer and compared with a fresh snapshot."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import trio

from ahpd import state as reducers
from ahpd.host.changesets import changesets

from ..gitrepo import git, git_env, make_repo, mixed_repo, porcelain
from .helpers import (
    Rpc,
    listed_as,
    action_of,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    rpc,
    snapshot_until,
    start_turn,
    until,
    wire_clean,
)


def _env(tmp_path: Path) -> dict[str, str]:
    env = git_env(tmp_path / "git-home")
    return {k: env[k] for k in ("HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM", "XDG_CONFIG_HOME")}


async def _session(client: Rpc, folder: Path) -> tuple[str, str, dict[str, Any]]:
    uri = f"ahp-session:/{uuid.uuid4()}"
    reply = await client.call("createSession", {"channel": uri, "workingDirectories": [folder.as_uri()]}, timeout=60)
    assert reply.get("result", "missing") is None, reply
    state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
    if not state.get("changesets") and folder.joinpath(".git").exists():
        await until(client, is_action("session/changesetsChanged", uri))
        state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
    await client.call("subscribe", {"channel": state["defaultChat"]})
    return uri, state["defaultChat"], state


class Watched:
    """A changeset as a client holds it: the snapshot, then every action reduced."""

    def __init__(self, client: Rpc, uri: str) -> None:
        self.client = client
        self.uri = uri
        self.state: dict[str, Any] = {}
        self.actions: list[dict[str, Any]] = []

    async def subscribe(self) -> Watched:
        reply = await self.client.call("subscribe", {"channel": self.uri})
        assert "result" in reply, reply
        self.state = reply["result"]["snapshot"]["state"]
        fits("/$defs/ChangesetState", self.state)
        return self

    def take(self) -> None:
        keep = []
        for note in self.client.notes:
            if note.get("method") == "action" and note["params"]["channel"] == self.uri:
                fits("/notifications/action", note["params"])
                self.actions.append(note["params"]["action"])
                self.state = reducers.reduce("changeset", self.state, note["params"]["action"])
            else:
                keep.append(note)
        self.client.notes[:] = keep

    async def until(self, check) -> dict[str, Any]:
        """The changeset once ``check(state)`` holds, judged again after each frame the client receives."""
        while True:
            self.take()
            if check(self.state):
                return self.state
            await self.client.read_more()

    async def fresh(self) -> dict[str, Any]:
        """A new snapshot, and every action sent before it taken in."""
        snapshot = (await self.client.call("subscribe", {"channel": self.uri}))["result"]["snapshot"]["state"]
        self.take()
        return snapshot


def _names(state: dict[str, Any], root: Path) -> dict[str, Any]:
    out = {}
    for f in state["files"]:
        side = f["edit"].get("after") or f["edit"]["before"]
        name = Path(side["uri"].removeprefix("file://")).relative_to(root.resolve()).as_posix()
        out[name] = f
    return out


def _ready(state: dict[str, Any]) -> bool:
    return state.get("status") == "ready" and state.get("operations") is not None


async def test_the_uncommitted_changeset_is_git_status(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "repo")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("alice")
            uri, _, state = await _session(client, repo)
            kinds = {c["changeKind"]: c["uriTemplate"] for c in state["changesets"]}
            assert kinds["uncommitted"] == f"{uri}/changeset/uncommitted"
            assert kinds["session"] == f"{uri}/changeset/session"
            assert kinds["turn"] == f"{uri}/changeset/turn/{{turnId}}"
            cs = await Watched(client, kinds["uncommitted"]).subscribe()
            await cs.until(_ready)
            rows = _names(cs.state, repo)
            assert sorted(rows) == [
                "both.txt",
                "fresh.txt",
                "gone.txt",
                "new.txt",
                "src/pkg/added.py",
                "src/pkg/mod.py",
            ]
            assert rows["both.txt"]["_meta"] == {"ahpd.staged": True, "ahpd.unstaged": True}
            assert rows["new.txt"]["_meta"] == {"ahpd.staged": True, "ahpd.unstaged": False}
            assert rows["fresh.txt"]["_meta"] == {"ahpd.staged": False, "ahpd.unstaged": True}
            assert "before" not in rows["fresh.txt"]["edit"] and "after" not in rows["gone.txt"]["edit"]
            rename = rows["new.txt"]["edit"]
            assert rename["before"]["uri"] == (repo.resolve() / "old.txt").as_uri()
            assert rename["after"]["uri"] == (repo.resolve() / "new.txt").as_uri()
            # The before side is read from HEAD through resourceRead.
            before = rows["both.txt"]["edit"]["before"]["content"]["uri"]
            read = await client.call("resourceRead", {"channel": "ahp-root://", "uri": before})
            assert read["result"]["data"] == "one\n"
            moved = await client.call(
                "resourceRead", {"channel": "ahp-root://", "uri": rename["before"]["content"]["uri"]}
            )
            assert moved["result"]["data"] == "a file that moves\n" * 5
            unknown = await client.call(
                "resourceRead", {"channel": "ahp-root://", "uri": before.replace(before[12:20], "00000000")}
            )
            assert unknown["error"]["code"] == -32008
            assert await cs.fresh() == cs.state  # the actions and the snapshot agree

            # The tree moves outside the host: git add in a terminal, an editor's write.
            git(repo, "add", "fresh.txt")
            await cs.until(lambda s: _names(s, repo)["fresh.txt"]["_meta"]["ahpd.staged"])
            sent = len(cs.actions)
            (repo / "keep.txt").write_text("edited\n")
            git(repo, "add", "keep.txt")
            await cs.until(lambda s: "keep.txt" in _names(s, repo))
            moved_now = [a["type"] for a in cs.actions[sent:]]
            assert "changeset/fileSet" in moved_now and "changeset/contentChanged" not in moved_now
            assert await cs.fresh() == cs.state

            # _meta.git on the session and its catalogue row, kept up as the tree moves
            def git_meta(state: dict[str, Any]) -> dict[str, Any]:
                return (state.get("_meta") or {}).get("git") or {}

            await snapshot_until(
                client, uri, lambda state: git_meta(state) == {"branchName": "main", "uncommittedChanges": 7}
            )
            [row] = (await client.call("listSessions", {}))["result"]["items"]
            assert row["_meta"]["git"] == {"branchName": "main", "uncommittedChanges": 7}
            fits("/$defs/SessionSummary", row)
        daemon.terminate()
        await daemon.wait()


class _Events(dict):
    """A trio.Event by key, made when first asked for."""

    def __missing__(self, key: str) -> trio.Event:
        event = self[key] = trio.Event()
        return event


async def test_a_folder_outside_git_has_no_changesets(tmp_path, monkeypatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    bare = tmp_path / "bare.git"
    bare.mkdir()
    git(bare, "init", "-q", "--bare")
    # Nothing is said for a folder outside git: what is waited for is the
    # host having looked (its advertise() for the session has returned).
    looked = _Events()
    advertise = changesets.advertise

    async def advertise_and_say_so(session) -> None:
        try:
            await advertise(session)
        finally:
            looked[session.uri].set()

    monkeypatch.setattr(changesets, "advertise", advertise_and_say_so)
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("bob")
            for folder in (plain, bare):
                uri, _, state = await _session(client, folder)
                await looked[listed_as(uri)].wait()  # the host names it as it lists it
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert "changesets" not in state
                reply = await client.call("subscribe", {"channel": f"{uri}/changeset/uncommitted"})
                assert reply["error"]["code"] == -32008
        daemon.terminate()
        await daemon.wait()


async def _confirm_and_finish(
    client: Rpc, session: str, chat: str, turn: dict, seq: int, seen: list[dict[str, Any]] | None = None
) -> int:
    """Answer every permission the demo agent asks for until its turn ends
    (what was read on the way is added to ``seen``)."""
    while True:
        notes = await until(
            client,
            lambda n: (
                is_action("session/inputNeededSet", session)(n)
                or (is_action("chat/turnComplete", chat)(n) or is_action("chat/error", chat)(n))
            ),
        )
        if seen is not None:
            seen.extend(notes)
        last = action_of(notes[-1])
        if last["type"] != "session/inputNeededSet":
            assert last["type"] == "chat/turnComplete", last
            return seq
        seq += 1
        await dispatch(
            client,
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": turn["turnId"],
                "toolCallId": last["request"]["toolCall"]["toolCallId"],
                "approved": True,
                "confirmed": "user-action",
            },
            seq,
        )


async def test_a_turn_scope_lists_exactly_what_the_turn_changed_and_operations_change_the_repo(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "repo")
    capture = tmp_path / "changesets.jsonl"
    async with daemon_in_process(
        tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=_env(tmp_path)
    ) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("carol")
            uri, chat, _ = await _session(client, repo)
            turn = start_turn(
                f"write {repo / 'notes.txt'} hello from the agent\nwrite {repo / 'keep.txt'} kept no more"
            )
            await dispatch(client, chat, turn, 1)
            await _confirm_and_finish(client, uri, chat, turn, 1)
            assert (repo / "notes.txt").read_text().startswith("hello from the agent")
            client.notes.clear()

            scope = await Watched(client, f"{uri}/changeset/turn/{turn['turnId']}").subscribe()
            await scope.until(_ready)
            assert sorted(_names(scope.state, repo)) == ["keep.txt", "notes.txt"]  # its edits, nothing else
            keep = _names(scope.state, repo)["keep.txt"]["edit"]
            read = await client.call(
                "resourceRead", {"channel": "ahp-root://", "uri": keep["before"]["content"]["uri"]}
            )
            assert read["result"]["data"] == "kept\n"
            assert [o["id"] for o in scope.state["operations"]] == ["revert"]

            session_cs = await Watched(client, f"{uri}/changeset/session").subscribe()
            await session_cs.until(_ready)
            assert sorted(_names(session_cs.state, repo)) == ["keep.txt", "notes.txt"]

            # revert puts a file back as the agent found it
            reply = await client.call(
                "invokeChangesetOperation",
                {
                    "channel": scope.uri,
                    "operationId": "revert",
                    "target": {"kind": "resource", "resource": (repo / "keep.txt").as_uri()},
                },
            )
            assert "result" in reply, reply
            assert (repo / "keep.txt").read_text() == "kept\n"
            await session_cs.until(lambda s: sorted(_names(s, repo)) == ["notes.txt"])

            cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
            await cs.until(_ready)
            ops = {o["id"]: o for o in cs.state["operations"]}
            assert set(ops) == {"commit", "stage", "unstage", "discard"}
            title = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]["title"]
            assert (
                ops["commit"]["confirmation"]
                == f"Commit as '{title.splitlines()[0]}'? The whole changeset takes 2 staged files."
            )
            assert "cannot be undone" in ops["discard"]["confirmation"]

            # stage a folder, unstage one file of it
            reply = await client.call(
                "invokeChangesetOperation",
                {
                    "channel": cs.uri,
                    "operationId": "stage",
                    "target": {"kind": "resource", "resource": (repo / "src").as_uri()},
                },
            )
            assert "result" in reply, reply
            assert {"A  src/pkg/added.py", "M  src/pkg/mod.py"} <= set(porcelain(repo))
            reply = await client.call(
                "invokeChangesetOperation",
                {
                    "channel": cs.uri,
                    "operationId": "unstage",
                    "target": {"kind": "resource", "resource": (repo / "src/pkg/mod.py").as_uri()},
                },
            )
            assert " M src/pkg/mod.py" in porcelain(repo)
            await cs.until(
                lambda s: (
                    _names(s, repo)["src/pkg/added.py"]["_meta"]["ahpd.staged"]
                    and not _names(s, repo)["src/pkg/mod.py"]["_meta"]["ahpd.staged"]
                )
            )
            await cs.until(
                lambda s: "3 staged files" in {o["id"]: o for o in s["operations"]}["commit"]["confirmation"]
            )

            # commit one file with the person's words; the rest stays staged
            reply = await client.call(
                "invokeChangesetOperation",
                {
                    "channel": cs.uri,
                    "operationId": "commit",
                    "_meta": {"ahpd.commit": {"message": "Add notes"}},
                    "target": {"kind": "resource", "resource": (repo / "notes.txt").as_uri()},
                },
            )
            assert "result" in reply, reply
            assert git(repo, "log", "-1", "--format=%s").strip() == "Add notes"
            assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["notes.txt"]
            assert "A  src/pkg/added.py" in porcelain(repo)

            # commit the whole changeset: the index, with the session title
            reply = await client.call("invokeChangesetOperation", {"channel": cs.uri, "operationId": "commit"})
            assert "result" in reply, reply
            assert git(repo, "log", "-1", "--format=%s").strip() == title.splitlines()[0]
            assert "src/pkg/added.py" in git(repo, "show", "--name-only", "--format=", "HEAD").split()

            # discard everything else: back to HEAD, untracked files gone
            reply = await client.call("invokeChangesetOperation", {"channel": cs.uri, "operationId": "discard"})
            assert "result" in reply, reply
            assert porcelain(repo) == []
            await cs.until(lambda s: s["files"] == [])
            assert cs.actions[-1]["type"] in (
                "changeset/cleared",
                "changeset/operationsChanged",
                "changeset/operationStatusChanged",
            )
            assert git(repo, "stash", "list") == ""

            # nothing to commit, an operation not offered, a target outside the session
            nothing = await client.call("invokeChangesetOperation", {"channel": cs.uri, "operationId": "commit"})
            assert nothing["error"]["code"] == -32602 and "nothing to commit" in nothing["error"]["message"]
            unknown = await client.call("invokeChangesetOperation", {"channel": cs.uri, "operationId": "push"})
            assert unknown["error"]["code"] == -32602 and "'push' is not an operation" in unknown["error"]["message"]
            outside = await client.call(
                "invokeChangesetOperation",
                {
                    "channel": cs.uri,
                    "operationId": "stage",
                    "target": {"kind": "resource", "resource": (tmp_path / "elsewhere.txt").as_uri()},
                },
            )
            assert outside["error"]["code"] == -32602 and "outside the session's folder" in outside["error"]["message"]
            failed = await cs.until(lambda s: {o["id"]: o for o in s["operations"]}["commit"]["status"] == "error")
            assert "nothing to commit" in {o["id"]: o for o in failed["operations"]}["commit"]["error"]["message"]
            assert await cs.fresh() == cs.state

            # changeWords forced: no commit without the person's own words
            (repo / "later.txt").write_text("later\n")
            git(repo, "add", "later.txt")  # the index moves: a re-read
            await dispatch(
                client, "ahp-root://", {"type": "root/configChanged", "config": {"changeWords": {"mode": "forced"}}}, 90
            )
            await cs.until(lambda s: "later.txt" in _names(s, repo))
            forced = await client.call("invokeChangesetOperation", {"channel": cs.uri, "operationId": "commit"})
            assert forced["error"]["code"] == -32602 and "forced" in forced["error"]["message"]
            assert git(repo, "log", "-1", "--format=%s").strip() == title.splitlines()[0]

            await client.call("disposeSession", {"channel": uri})
            assert (
                cs.uri
                not in [
                    n["params"].get("channel")
                    for n in client.notes
                    if n.get("method") == "action" and n["params"]["action"]["type"] != "changeset/cleared"
                ][-1:]
            )
        daemon.terminate()
        await daemon.wait()
    wire_clean(capture)


async def test_reviews_are_kept_across_a_restart_until_the_file_moves(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "repo")
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "file", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("frank")
            uri, _, _ = await _session(client, repo)
            cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
            await cs.until(_ready)
            rows = _names(cs.state, repo)
            marked = [rows["both.txt"]["id"], rows["src/pkg/mod.py"]["id"]]
            await dispatch(
                client, cs.uri, {"type": "changeset/filesReviewChanged", "files": marked, "reviewed": True}, 1
            )
            await cs.until(lambda s: all(f.get("reviewed") for f in s["files"] if f["id"] in marked))
        daemon.terminate()
        assert await daemon.wait() == 0
    async with daemon_in_process(data, "--sessions", "file", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("frank")
            cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
            await cs.until(_ready)
            reviewed = sorted(f["id"] for f in cs.state["files"] if f.get("reviewed"))
            assert reviewed == sorted(marked)
            # A reviewed file that moves is to be reviewed again.
            (repo / "src/pkg/mod.py").write_text("x = 3\n")
            git(repo, "add", "src/pkg/mod.py")
            await cs.until(lambda s: [f["id"] for f in s["files"] if f.get("reviewed")] == [marked[0]])
            assert await cs.fresh() == cs.state
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_operations_are_disabled_while_a_turn_runs_and_a_merge_is_refused(tmp_path) -> None:
    repo = make_repo(tmp_path / "repo", {"f.txt": "base\n"})
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "f.txt").write_text("other\n")
    git(repo, "commit", "-qam", "other")
    git(repo, "checkout", "-q", "main")
    (repo / "f.txt").write_text("main\n")
    git(repo, "commit", "-qam", "main")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("gina")
            uri, chat, _ = await _session(client, repo)
            (repo / "new.txt").write_text("new\n")
            cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
            await cs.until(_ready)
            turn = start_turn("be slow please")
            await dispatch(client, chat, turn, 1)
            await cs.until(lambda s: {o["status"] for o in s["operations"]} == {"disabled"})
            refused = await client.call("invokeChangesetOperation", {"channel": cs.uri, "operationId": "stage"})
            assert refused["error"]["code"] == -32602 and "turn is running" in refused["error"]["message"]
            assert porcelain(repo) == ["?? new.txt"]
            await dispatch(client, chat, {"type": "chat/turnCancelled", "turnId": turn["turnId"], "duration": 1}, 2)
            await cs.until(lambda s: {o["status"] for o in s["operations"]} == {"idle"})

            try:
                git(repo, "merge", "other")
            except Exception:  # noqa: BLE001 - a conflict is the point
                pass
            await cs.until(lambda s: "f.txt" in _names(s, repo))
            for op in ("commit", "stage", "discard"):
                reply = await client.call("invokeChangesetOperation", {"channel": cs.uri, "operationId": op})
                assert reply["error"]["code"] == -32602 and "middle of a merge" in reply["error"]["message"], reply
            assert "UU f.txt" in porcelain(repo) and (repo / "new.txt").exists()
        daemon.terminate()
        await daemon.wait()


async def test_the_uncommitted_changeset_follows_the_agent_s_edits(tmp_path) -> None:
    repo = mixed_repo(tmp_path / "repo")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("hal")
            uri, chat, _ = await _session(client, repo)
            cs = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
            await cs.until(_ready)
            before = len(cs.actions)
            turn = start_turn(f"write {repo / 'notes.txt'} from the agent")
            await dispatch(client, chat, turn, 1)
            seen: list[dict[str, Any]] = []
            await _confirm_and_finish(client, uri, chat, turn, 1, seen)
            client.notes[:0] = seen  # the changeset's actions among them
            state = await cs.until(lambda s: "notes.txt" in _names(s, repo) and _ready(s))
            assert _names(state, repo)["notes.txt"]["_meta"] == {"ahpd.staged": False, "ahpd.unstaged": True}
            # one new row: said as one fileSet, not the whole set again
            assert [a["type"] for a in cs.actions[before:] if a["type"].startswith("changeset/file")] == [
                "changeset/fileSet"
            ]
            assert not [a for a in cs.actions[before:] if a["type"] == "changeset/contentChanged"]
            assert await cs.fresh() == cs.state

            # a second turn; compare/{first}/{second} is what the second changed
            client.notes.clear()  # the first turn's notes are read
            second = start_turn(f"write {repo / 'second.txt'} y = 2")
            await dispatch(client, chat, second, 10)
            await _confirm_and_finish(client, uri, chat, second, 10)
            compare = await Watched(client, f"{uri}/changeset/compare/{turn['turnId']}/{second['turnId']}").subscribe()
            await compare.until(lambda s: s["status"] == "ready")
            assert (repo / "second.txt").exists(), "the agent did not write"
            assert sorted(_names(compare.state, repo)) == ["second.txt"], compare.state
            whole = await Watched(client, f"{uri}/changeset/session").subscribe()
            await whole.until(lambda s: s["status"] == "ready")
            assert sorted(_names(whole.state, repo)) == ["notes.txt", "second.txt"]
            unknown = await client.call("subscribe", {"channel": f"{uri}/changeset/turn/no-such-turn"})
            assert unknown["error"]["code"] == -32008
        daemon.terminate()
        await daemon.wait()


async def test_a_client_s_write_and_a_terminal_s_exit_are_seen_by_the_uncommitted_changeset(tmp_path) -> None:
    """Neither moves the index or HEAD, so only the host saying so makes the
    changeset re-read: a write through ``resourceWrite``, a terminal in the
    folder that exits."""
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(tmp_path)) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("ann")
            uri, _, _ = await _session(client, repo)
            watched = await Watched(client, f"{uri}/changeset/uncommitted").subscribe()
            await watched.until(_ready)
            assert _names(watched.state, repo) == {}

            reply = await client.call(
                "resourceWrite",
                {
                    "channel": "ahp-root://",
                    "uri": (repo / "written.txt").as_uri(),
                    "data": "by a client\n",
                    "encoding": "utf-8",
                },
            )
            assert reply.get("result") == {}, reply
            await watched.until(lambda s: "written.txt" in _names(s, repo))

            reply = await client.call(
                "createTerminal",
                {"channel": "ahp-terminal:/made", "claim": {"kind": "client", "clientId": "ann"}, "cwd": repo.as_uri()},
            )
            assert reply.get("result", "missing") is None, reply
            await dispatch(
                client, "ahp-terminal:/made", {"type": "terminal/input", "data": "echo made > made.txt; exit\r"}, 1
            )
            state = await watched.until(lambda s: "made.txt" in _names(s, repo))
            assert set(_names(state, repo)) == {"written.txt", "made.txt"} == {line[3:] for line in porcelain(repo)}
        daemon.terminate()
        await daemon.wait()
