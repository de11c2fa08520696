"""A real daemon on a disk that fills up, goes read-only, or loses the process.

The data folder is a small tmpfs the test mounts (skipped where it cannot);
the demo agent's own folder is bound in from the ordinary disk, so what
fails is the host's stores and nothing else.
"""

from __future__ import annotations

import hashlib
import os
import resource
import json
import signal
from pathlib import Path

import trio

from ahpd.ports import journal

from ..smalldisk import SmallDisk, small_disk
from .helpers import (
    listed_as,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    eventually,
    is_action,
    rpc,
    running_daemon,
    start_turn,
    until,
)

ROOT = "ahp-root://"


def stored(data: Path, uri: str) -> dict | None:
    """The session as its folder holds it: its head, and each chat's journal
    tail. It is kept under the name the host lists it by, ``demo:/<id>``."""
    folder = data / "sessions" / hashlib.sha256(listed_as(uri).encode()).hexdigest()[:32]
    try:
        record = json.loads((folder / "session.json").read_text())
    except FileNotFoundError:
        return None
    for chat in record["chats"]:
        path = folder / (hashlib.sha256(chat["uri"].encode()).hexdigest()[:32] + ".jsonl")
        if path.exists():
            tail = journal.read_tail(path, 1000)
            chat["state"] = {**(tail.chat or {}), "turns": tail.turns}
    return record


def stored_config(data: Path) -> dict:
    try:
        return json.loads((data / "root-config.json").read_text())
    except FileNotFoundError:
        return {}


def mount_data(tmp_path: Path, disk: SmallDisk) -> Path:
    agent_home = tmp_path / "demo-agent"
    agent_home.mkdir()
    disk.bind(agent_home, disk.path / "demo-agent")
    return disk.path


async def test_what_a_user_sets_on_a_full_disk_is_written_once_it_has_room(tmp_path) -> None:
    with small_disk(tmp_path / "d", size="1m") as disk:
        data = mount_data(tmp_path, disk)
        async with daemon_in_process(data) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("ann")
                uri, chat = await create(client, tmp_path)
                await eventually(lambda: stored(data, uri) is not None)  # written off the event loop
                assert stored(data, uri)["title"] == ""
                disk.fill()
                await dispatch(client, uri, {"type": "session/titleChanged", "title": "kept in memory"}, 1)
                await dispatch(client, uri, {"type": "session/isReadChanged", "isRead": True}, 2)
                await dispatch(client, uri, {"type": "session/isArchivedChanged", "isArchived": True}, 3)
                await dispatch(client, ROOT, {"type": "root/configChanged", "config": {"autoReplyEnabled": True}}, 4)
                await until(client, is_action("root/configChanged", ROOT))
                # The daemon keeps serving: a turn runs, a second client sees what was set.
                await dispatch(client, chat, start_turn("still here?"), 5)
                notes = await until(
                    client, lambda n: (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
                )
                assert action_of(notes[-1])["type"] == "chat/turnComplete"
                async with rpc(daemon.url) as other:
                    await other.initialize("bob")
                    row = (await other.call("listSessions", {}))["result"]["items"][0]
                    assert row["title"] == "kept in memory" and row["status"] & (32 | 64) == 96
                # Nothing of it reached the disk...
                assert stored(data, uri)["title"] == ""
                assert stored_config(data).get("autoReplyEnabled") is None
                disk.free()
                # ...until it had room again.
                await eventually(lambda: (stored(data, uri) or {}).get("title") == "kept in memory")
                await eventually(lambda: stored_config(data).get("autoReplyEnabled") is True)
                assert len(stored(data, uri)["chats"][0]["state"]["turns"]) == 1
            daemon.terminate()
            assert await daemon.wait() == 0
        async with daemon_in_process(data) as daemon:
            async with rpc(daemon.url) as client:
                result = await client.initialize("ann")
                assert result["snapshots"][0]["state"]["config"]["values"]["autoReplyEnabled"] is True
                row = (await client.call("listSessions", {}))["result"]["items"][0]
                assert row["title"] == "kept in memory" and row["status"] & (32 | 64) == 96
            daemon.terminate()
            assert await daemon.wait() == 0


async def test_a_read_only_disk_keeps_the_daemon_serving_and_stopping_writes_what_was_set(tmp_path) -> None:
    with small_disk(tmp_path / "d", size="1m") as disk:
        data = mount_data(tmp_path, disk)
        async with daemon_in_process(data) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("cy")
                uri, chat = await create(client, tmp_path)
                disk.read_only()
                await dispatch(client, uri, {"type": "session/titleChanged", "title": "set while read-only"}, 1)
                await dispatch(client, chat, start_turn("still here?"), 2)
                notes = await until(
                    client, lambda n: (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
                )
                assert action_of(notes[-1])["type"] == "chat/turnComplete"
                assert stored(data, uri)["title"] == ""
            disk.writable()
            # Stopping flushes what is pending, whatever the retry loop was waiting for.
            daemon.terminate()
            assert await daemon.wait() == 0
        assert stored(data, uri)["title"] == "set while read-only"
        async with daemon_in_process(data) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("cy")
                row = (await client.call("listSessions", {}))["result"]["items"][0]
                assert row["title"] == "set while read-only"
            daemon.terminate()
            assert await daemon.wait() == 0


async def toggle(client, times: int, start: int = 1) -> int:
    """Move the root config ``times`` times; the highest serverSeq seen."""
    for n in range(times):
        await dispatch(
            client, ROOT, {"type": "root/configChanged", "config": {"autoReplyEnabled": n % 2 == 0}}, start + n
        )
    seen = 0
    with trio.fail_after(60):
        while True:
            note = await client.next_note()
            if note.get("method") == "action":
                seen = max(seen, note["params"]["serverSeq"])
                if note["params"].get("origin", {}).get("clientSeq") == start + times - 1:
                    return seen


async def test_server_seq_never_repeats_after_a_crash(tmp_path) -> None:
    """SIGKILL, twice: on a healthy disk past a renewal of the reservation,
    and while the disk is read-only so the renewal cannot be written."""
    with small_disk(tmp_path / "d", size="1m") as disk:
        data = mount_data(tmp_path, disk)
        highest = 0
        for round_ in range(3):
            async with running_daemon(data) as daemon:
                async with rpc(daemon.url) as client:
                    result = await client.initialize("dee")
                    assert result["serverSeq"] > highest or highest == 0
                    if round_ == 1:
                        disk.read_only()
                    if round_ < 2:
                        highest = max(highest, await toggle(client, 700))
                        daemon.process.send_signal(signal.SIGKILL)
                        await daemon.wait()
                        if round_ == 1:
                            disk.writable()
                        continue
                    # After both crashes, a new action is numbered above all of them.
                    assert await toggle(client, 1) > highest
                daemon.terminate()
                assert await daemon.wait() == 0


async def test_a_damaged_session_file_is_set_aside_and_the_others_still_open(tmp_path) -> None:
    from ahpd.host.sessions.store import FileSessionStore

    data = tmp_path / "d"
    uri, chat = "ahp-session:/kept", "ahp-chat:/kept"
    FileSessionStore(data / "sessions").save(
        {
            "uri": uri,
            "provider": "demo",
            "cwd": str(tmp_path),
            "createdAt": "2026-12-01T00:00:00Z",
            "title": "kept",
            "status": 32,
            "chats": [
                {
                    "uri": chat,
                    "backendId": None,
                    "state": {
                        "resource": chat,
                        "title": "kept",
                        "status": 1,
                        "modifiedAt": "2026-12-01T00:00:00Z",
                        "turns": [],
                    },
                }
            ],
        }
    )
    (data / "sessions" / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    (data / "sessions" / "no-uri.json").write_text(json.dumps({"provider": "demo", "cwd": "/", "createdAt": "x"}))
    data.chmod(0o700)
    async with daemon_in_process(data) as daemon:
        async with rpc(daemon.url) as client:
            await client.initialize("eve")
            rows = (await client.call("listSessions", {}))["result"]["items"]
            assert [r["resource"] for r in rows] == [listed_as(uri)]  # an older ahpd's name, moved over
            state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            assert state["title"] == "kept"
        daemon.terminate()
        assert await daemon.wait() == 0
    assert sorted(p.name for p in (data / "sessions").iterdir() if "damaged" in p.name) == [
        "nested.json.damaged",
        "no-uri.json.damaged",
    ]


async def logged(capfd, text: str, said: str = "") -> str:
    """The daemon's log (its stderr is the test's) up to ``text``."""
    seen = [said]

    def arrived() -> bool:
        seen[0] += capfd.readouterr().err
        return text in seen[0]

    await eventually(arrived)
    return seen[0]


async def settled(pid: int) -> None:
    """Until the daemon has no child (a boot probe started at the first
    hello holds pipes while it runs) and its descriptors stay put: a limit
    set below its next file must not be undone by a probe ending."""

    def children() -> str:
        return "".join(Path(f"/proc/{pid}/task/{t}/children").read_text() for t in os.listdir(f"/proc/{pid}/task"))

    seen: list[list[str]] = []

    def still() -> bool:
        seen.append(sorted(os.listdir(f"/proc/{pid}/fd")))
        return not children().strip() and len(seen) > 1 and seen[-1] == seen[-2]

    await eventually(still, interval=0.3)


def lowest_free_fd(pid: int) -> int:
    used = {int(name) for name in os.listdir(f"/proc/{pid}/fd")}
    return next(n for n in range(len(used) + 1) if n not in used)


async def test_out_of_file_descriptors_is_retried_and_said(tmp_path, capfd) -> None:
    """A real shortage: the daemon's own limit lowered below its next file."""
    data = tmp_path / "d"
    async with running_daemon(data) as daemon:
        pid = daemon.process.pid
        async with rpc(daemon.url) as client:
            await client.initialize("fay")
            uri, _ = await create(client, tmp_path)
            await settled(pid)
            soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest_free_fd(pid), hard))
            try:
                await dispatch(client, uri, {"type": "session/titleChanged", "title": "no files left"}, 1)
                await until(client, is_action("session/titleChanged", uri))
                said = await logged(capfd, "Too many open files")
                assert said.count("a write failed") == 1
                assert stored(data, uri)["title"] == ""
                assert "result" in await client.call("ping", {})  # still serving
            finally:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
            await eventually(lambda: stored(data, uri)["title"] == "no files left")
            await logged(capfd, "takes writes again", said)
        daemon.terminate()
        assert await daemon.wait() == 0


async def test_no_server_seq_is_handed_out_past_a_reservation_the_disk_refused(tmp_path) -> None:
    """Issue 25, attack 11: on a read-only disk the host numbers actions up to
    its reservation and then refuses them, saying why; killed there, the
    restarted host numbers above everything it handed out."""
    with small_disk(tmp_path / "d", size="1m") as disk:
        data = mount_data(tmp_path, disk)
        async with running_daemon(data) as daemon:
            async with rpc(daemon.url) as client:
                await client.initialize("eli")
                disk.read_only()
                count = 1500  # more than a block of the reservation (1024)
                for n in range(count):
                    await dispatch(
                        client, ROOT, {"type": "root/configChanged", "config": {"autoReplyEnabled": n % 2 == 0}}, n + 1
                    )
                numbered: list[int] = []
                refused: list[str] = []
                while True:
                    params = (await client.next_note()).get("params") or {}
                    seq = (params.get("origin") or {}).get("clientSeq")
                    if seq is None:
                        continue
                    if "rejectionReason" in params:
                        refused.append(params["rejectionReason"])
                    else:
                        numbered.append(params["serverSeq"])
                    if seq == count:
                        break
                assert refused, "every action was numbered, past the reservation on disk"
                assert "serverSeq reservation cannot be written" in refused[-1], refused[-1]
                assert len(set(numbered)) == len(numbered)
                highest = max(numbered)
                daemon.process.send_signal(signal.SIGKILL)
                await daemon.wait()
        disk.writable()
        async with running_daemon(data) as daemon:
            async with rpc(daemon.url) as client:
                result = await client.initialize("eli")
                assert result["serverSeq"] >= highest
                assert await toggle(client, 1) > highest
            daemon.terminate()
            assert await daemon.wait() == 0
