"""Session reducer: catalogue, metadata, input-needed status, customizations."""

from __future__ import annotations

from typing import Any

import pytest

from state_helpers import run, same

IDLE, ERROR, IN_PROGRESS, INPUT_NEEDED, IS_READ, IS_ARCHIVED = 1, 2, 8, 24, 32, 64


def session(**extra: Any) -> dict[str, Any]:
    base = {
        "resource": "ahp-session:/s1",
        "provider": "p",
        "title": "S",
        "status": IDLE,
        "lifecycle": "creating",
        "chats": [],
        "activeClients": [],
    }
    return {**base, **extra}


def summary(uri: str, **extra: Any) -> dict[str, Any]:
    return {"resource": uri, "title": uri, "status": IDLE, "modifiedAt": "2026-01-01T00:00:00.000Z", **extra}


def test_ready_changes_only_the_lifecycle() -> None:
    state = run("session", session(status=IN_PROGRESS), {"type": "session/ready"})
    assert state["lifecycle"] == "ready" and state["status"] == IN_PROGRESS


def test_creation_failed_records_the_error() -> None:
    err = {"errorType": "spawn", "message": "no binary"}
    state = run("session", session(), {"type": "session/creationFailed", "error": err})
    assert state["lifecycle"] == "failed" and state["creationError"] == err


def test_chat_catalogue_add_upsert_update_remove() -> None:
    a, b = summary("ahp-chat:/a"), summary("ahp-chat:/b")
    state = run(
        "session", session(), {"type": "session/chatAdded", "summary": a}, {"type": "session/chatAdded", "summary": b}
    )
    assert state["chats"] == [a, b]
    a2 = {
        **a,
        "title": "renamed",
        "origin": {"kind": "sideChat", "chat": "ahp-chat:/b", "turnId": "t", "selection": {"text": "x"}},
    }
    state = run("session", state, {"type": "session/chatAdded", "summary": a2})
    assert state["chats"] == [a2, b]
    state = run(
        "session",
        state,
        {
            "type": "session/chatUpdated",
            "chat": "ahp-chat:/b",
            "changes": {"status": IN_PROGRESS, "resource": "ignored"},
        },
    )
    assert state["chats"][1] == {**b, "status": IN_PROGRESS}
    same("session", state, {"type": "session/chatUpdated", "chat": "ahp-chat:/zz", "changes": {"title": "x"}})
    state = run(
        "session", {**state, "defaultChat": "ahp-chat:/a"}, {"type": "session/chatRemoved", "chat": "ahp-chat:/a"}
    )
    assert state["chats"] == [{**b, "status": IN_PROGRESS}] and "defaultChat" not in state
    same("session", state, {"type": "session/chatRemoved", "chat": "ahp-chat:/a"})


def test_removing_another_chat_keeps_the_default() -> None:
    state = session(chats=[summary("ahp-chat:/a"), summary("ahp-chat:/b")], defaultChat="ahp-chat:/a")
    assert run("session", state, {"type": "session/chatRemoved", "chat": "ahp-chat:/b"})["defaultChat"] == "ahp-chat:/a"


def test_chats_reordered_applies_a_complete_permutation() -> None:
    chats = [summary("ahp-chat:/a"), summary("ahp-chat:/b"), summary("ahp-chat:/c")]
    state = run(
        "session",
        session(chats=chats),
        {"type": "session/chatsReordered", "chats": ["ahp-chat:/c", "ahp-chat:/a", "ahp-chat:/b"]},
    )
    assert state["chats"] == [chats[2], chats[0], chats[1]]
    assert state["chats"][0] is chats[2]


@pytest.mark.parametrize(
    "order",
    [
        ["ahp-chat:/a", "ahp-chat:/b"],
        ["ahp-chat:/a", "ahp-chat:/b", "ahp-chat:/b"],
        ["ahp-chat:/a", "ahp-chat:/b", "ahp-chat:/x"],
        ["ahp-chat:/a", "ahp-chat:/b", "ahp-chat:/c", "ahp-chat:/d"],
        ["ahp-chat:/a", "ahp-chat:/b", "ahp-chat:/c"],
    ],
)
def test_chats_reordered_ignores_invalid_or_identical_orders(order: list[str]) -> None:
    chats = [summary("ahp-chat:/a"), summary("ahp-chat:/b"), summary("ahp-chat:/c")]
    same("session", session(chats=chats), {"type": "session/chatsReordered", "chats": order})


def test_default_chat_set_and_clear() -> None:
    state = run("session", session(), {"type": "session/defaultChatChanged", "defaultChat": "ahp-chat:/a"})
    assert state["defaultChat"] == "ahp-chat:/a"
    assert "defaultChat" not in run("session", state, {"type": "session/defaultChatChanged"})


def test_metadata_actions() -> None:
    state = run(
        "session",
        session(),
        {"type": "session/titleChanged", "title": "New"},
        {"type": "session/activityChanged", "activity": "Reading"},
        {"type": "session/metaChanged", "_meta": {"k": 1}},
        {"type": "session/serverToolsChanged", "tools": [{"name": "t"}]},
    )
    assert (state["title"], state["activity"], state["_meta"], state["serverTools"]) == (
        "New",
        "Reading",
        {"k": 1},
        [{"name": "t"}],
    )
    state = run("session", state, {"type": "session/activityChanged"}, {"type": "session/metaChanged"})
    assert "activity" not in state and "_meta" not in state


@pytest.mark.parametrize("activity", [IDLE, ERROR, IN_PROGRESS, INPUT_NEEDED])
def test_read_and_archived_flags_preserve_activity(activity: int) -> None:
    state = run("session", session(status=activity), {"type": "session/isReadChanged", "isRead": True})
    assert state["status"] == activity | IS_READ
    state = run("session", state, {"type": "session/isArchivedChanged", "isArchived": True})
    assert state["status"] == activity | IS_READ | IS_ARCHIVED
    state = run(
        "session",
        state,
        {"type": "session/isReadChanged", "isRead": False},
        {"type": "session/isArchivedChanged", "isArchived": False},
    )
    assert state["status"] == activity


def test_changesets_set_and_clear() -> None:
    cs = [{"uri": "ahp-changeset:/s1/branch", "label": "Branch"}]
    state = run("session", session(), {"type": "session/changesetsChanged", "changesets": cs})
    assert state["changesets"] == cs
    assert run("session", state, {"type": "session/changesetsChanged", "changesets": []})["changesets"] == []
    assert "changesets" not in run("session", state, {"type": "session/changesetsChanged"})


def test_config_merges_replaces_and_needs_a_config() -> None:
    state = session(config={"schema": {"type": "object"}, "values": {"a": 1, "b": 2}})
    merged = run("session", state, {"type": "session/configChanged", "config": {"b": 3, "c": 4}})
    assert merged["config"] == {"schema": {"type": "object"}, "values": {"a": 1, "b": 3, "c": 4}}
    replaced = run("session", state, {"type": "session/configChanged", "config": {"z": 0}, "replace": True})
    assert replaced["config"]["values"] == {"z": 0}
    same("session", session(), {"type": "session/configChanged", "config": {"a": 1}})


def test_active_clients_upsert_and_remove() -> None:
    c1, c2 = {"clientId": "c1", "tools": []}, {"clientId": "c2", "tools": []}
    state = run(
        "session",
        session(),
        {"type": "session/activeClientSet", "activeClient": c1},
        {"type": "session/activeClientSet", "activeClient": c2},
    )
    c1b = {"clientId": "c1", "tools": [{"name": "x"}]}
    state = run("session", state, {"type": "session/activeClientSet", "activeClient": c1b})
    assert state["activeClients"] == [c1b, c2]
    state = run("session", state, {"type": "session/activeClientRemoved", "clientId": "c1"})
    assert state["activeClients"] == [c2]
    same("session", state, {"type": "session/activeClientRemoved", "clientId": "c1"})


def test_working_directories_set_and_remove() -> None:
    state = run(
        "session",
        session(),
        {"type": "session/workingDirectorySet", "directory": "file:///a"},
        {"type": "session/workingDirectorySet", "directory": "file:///b"},
    )
    assert state["workingDirectories"] == ["file:///a", "file:///b"]
    same("session", state, {"type": "session/workingDirectorySet", "directory": "file:///b"})
    state = run("session", state, {"type": "session/workingDirectoryRemoved", "directory": "file:///a"})
    assert state["workingDirectories"] == ["file:///b"]
    same("session", state, {"type": "session/workingDirectoryRemoved", "directory": "file:///a"})
    same("session", session(), {"type": "session/workingDirectoryRemoved", "directory": "file:///a"})


@pytest.mark.parametrize(
    ("before", "target", "replacement", "after"),
    [
        (["A", "B", "C"], "B", "D", ["A", "D", "C"]),
        (["A", "B", "C"], "B", "C", ["A", "C"]),
        (["A", "B", "C"], "C", "A", ["A", "B"]),
        (["A", "B", "C"], "A", "Z", ["Z", "B", "C"]),
    ],
)
def test_working_directory_replaced(before: list[str], target: str, replacement: str, after: list[str]) -> None:
    state = run(
        "session",
        session(workingDirectories=before),
        {"type": "session/workingDirectoryReplaced", "directory": target, "replacement": replacement},
    )
    assert state["workingDirectories"] == after


def test_working_directory_replaced_without_target_is_a_no_op() -> None:
    same(
        "session",
        session(workingDirectories=["A"]),
        {"type": "session/workingDirectoryReplaced", "directory": "B", "replacement": "C"},
    )
    same("session", session(), {"type": "session/workingDirectoryReplaced", "directory": "B", "replacement": "C"})
    same(
        "session",
        session(workingDirectories=["A"]),
        {"type": "session/workingDirectoryReplaced", "directory": "A", "replacement": "A"},
    )


def chat_input(rid: str) -> dict[str, Any]:
    return {"kind": "chatInput", "id": rid, "chat": "ahp-chat:/a", "request": {"id": rid, "questions": []}}


def test_input_needed_drives_the_status_bits() -> None:
    state = run(
        "session",
        session(status=IN_PROGRESS | IS_READ),
        {"type": "session/inputNeededSet", "request": chat_input("r1")},
    )
    assert state["inputNeeded"] == [chat_input("r1")]
    assert state["status"] == INPUT_NEEDED | IS_READ
    confirm = {
        "kind": "toolConfirmation",
        "id": "r2",
        "chat": "ahp-chat:/a",
        "turnId": "t",
        "toolCall": {"toolCallId": "x"},
    }
    state = run("session", state, {"type": "session/inputNeededSet", "request": confirm})
    replaced = {**chat_input("r1"), "chat": "ahp-chat:/b"}
    state = run("session", state, {"type": "session/inputNeededSet", "request": replaced})
    assert state["inputNeeded"] == [replaced, confirm]
    state = run("session", state, {"type": "session/inputNeededRemoved", "id": "r1"})
    assert state["status"] == INPUT_NEEDED | IS_READ
    state = run("session", state, {"type": "session/inputNeededRemoved", "id": "r2"})
    assert "inputNeeded" not in state
    assert state["status"] == IN_PROGRESS | IS_READ


def test_clearing_input_needed_leaves_an_idle_session_idle() -> None:
    state = session(status=IDLE | IS_ARCHIVED, inputNeeded=[chat_input("r1")])
    state = run("session", state, {"type": "session/inputNeededRemoved", "id": "r1"})
    assert state["status"] == IDLE | IS_ARCHIVED


def test_client_tool_execution_does_not_count_as_input_needed() -> None:
    execution = {
        "kind": "toolClientExecution",
        "id": "x",
        "chat": "ahp-chat:/a",
        "turnId": "t",
        "toolCall": {"toolCallId": "x"},
    }
    state = run("session", session(status=IN_PROGRESS), {"type": "session/inputNeededSet", "request": execution})
    assert state["status"] == IN_PROGRESS and state["inputNeeded"] == [execution]


def test_input_needed_removed_no_ops() -> None:
    same("session", session(), {"type": "session/inputNeededRemoved", "id": "r1"})
    same("session", session(inputNeeded=[chat_input("r1")]), {"type": "session/inputNeededRemoved", "id": "r9"})


# ── Customizations ───────────────────────────────────────────────────────────


def mcp(cid: str, **extra: Any) -> dict[str, Any]:
    return {"type": "mcpServer", "id": cid, "uri": f"file:///{cid}", "name": cid, "state": {"kind": "stopped"}, **extra}


def plugin(cid: str, children: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "plugin", "id": cid, "uri": f"https://p/{cid}", "name": cid, "children": children, **extra}


def skill(cid: str, **extra: Any) -> dict[str, Any]:
    return {"type": "skill", "id": cid, "uri": f"file:///{cid}", "name": cid, **extra}


def customized() -> dict[str, Any]:
    directory = {"type": "directory", "id": "dir", "uri": "file:///d", "name": "d", "children": [skill("s2")]}
    return session(customizations=[plugin("p", [skill("s1"), mcp("m1")]), mcp("m0", channel="mcp://m0"), directory])


def test_customizations_changed_replaces_the_list() -> None:
    state = run("session", customized(), {"type": "session/customizationsChanged", "customizations": [mcp("only")]})
    assert state["customizations"] == [mcp("only")]


def test_customization_toggled_stores_decisions_or_the_effective_flag() -> None:
    off = [{"kind": "session", "enabled": False}, {"kind": "global", "enabled": True}]
    state = run("session", customized(), {"type": "session/customizationToggled", "id": "p", "enablement": off})
    assert state["customizations"][0]["enablement"] == off
    state = run("session", state, {"type": "session/customizationToggled", "id": "m1", "enablement": off})
    assert state["customizations"][0]["children"][1]["enablement"] == off
    state = run("session", state, {"type": "session/customizationToggled", "id": "s1", "enablement": off})
    assert state["customizations"][0]["children"][0]["enabled"] is False
    state = run("session", state, {"type": "session/customizationToggled", "id": "dir", "enablement": []})
    assert state["customizations"][2]["enabled"] is True
    state = run(
        "session",
        state,
        {"type": "session/customizationToggled", "id": "s2", "enablement": [{"kind": "global", "enabled": False}]},
    )
    assert state["customizations"][2]["children"][0]["enabled"] is False


def test_customization_toggled_no_ops() -> None:
    same("session", customized(), {"type": "session/customizationToggled", "id": "nope", "enablement": []})
    same("session", session(), {"type": "session/customizationToggled", "id": "p", "enablement": []})


def test_customization_updated_upserts_top_level_entries() -> None:
    state = run("session", session(), {"type": "session/customizationUpdated", "customization": mcp("a")})
    assert state["customizations"] == [mcp("a")]
    new_plugin = plugin("p", [])
    state = run("session", customized(), {"type": "session/customizationUpdated", "customization": new_plugin})
    assert state["customizations"][0] == new_plugin
    state = run("session", state, {"type": "session/customizationUpdated", "customization": mcp("z")})
    assert state["customizations"][-1] == mcp("z")


def test_customization_removed_top_level_and_child() -> None:
    state = run("session", customized(), {"type": "session/customizationRemoved", "id": "p"})
    assert [c["id"] for c in state["customizations"]] == ["m0", "dir"]
    state = run("session", customized(), {"type": "session/customizationRemoved", "id": "s2"})
    assert state["customizations"][2]["children"] == []
    same("session", customized(), {"type": "session/customizationRemoved", "id": "nope"})


def test_mcp_server_state_changed_top_level_and_child() -> None:
    ready = {"kind": "ready"}
    state = run(
        "session",
        customized(),
        {"type": "session/mcpServerStateChanged", "id": "m1", "state": ready, "channel": "mcp://m1"},
    )
    assert state["customizations"][0]["children"][1] == mcp("m1", state=ready, channel="mcp://m1")
    state = run(
        "session",
        state,
        {"type": "session/mcpServerStateChanged", "id": "m0", "state": {"kind": "error", "error": {"message": "x"}}},
    )
    assert "channel" not in state["customizations"][1]


@pytest.mark.parametrize("cid", ["nope", "s1", "p"])
def test_mcp_server_actions_ignore_unknown_or_non_mcp_ids(cid: str) -> None:
    for kind in (
        "mcpServerStateChanged",
        "mcpServerStartRequested",
        "mcpServerStopRequested",
        "mcpServerBackgroundRequested",
    ):
        same("session", customized(), {"type": f"session/{kind}", "id": cid, "state": {"kind": "ready"}})
    same("session", session(), {"type": "session/mcpServerStartRequested", "id": cid})


def test_mcp_server_start_and_stop_requests_are_optimistic() -> None:
    state = run("session", customized(), {"type": "session/mcpServerStartRequested", "id": "m0"})
    assert state["customizations"][1] == mcp("m0", state={"kind": "starting"})
    auth = session(
        customizations=[plugin("p", [mcp("m1", state={"kind": "authRequired", "auth": {}}, channel="mcp://x")])]
    )
    state = run("session", auth, {"type": "session/mcpServerStopRequested", "id": "m1"})
    assert state["customizations"][0]["children"][0] == mcp("m1", state={"kind": "stopped"})


def test_mcp_server_background_request_only_unblocks_a_blocking_start() -> None:
    blocking = session(customizations=[mcp("m", state={"kind": "starting", "blocking": True}, channel="mcp://m")])
    state = run("session", blocking, {"type": "session/mcpServerBackgroundRequested", "id": "m"})
    assert state["customizations"][0] == mcp("m", state={"kind": "starting", "blocking": False}, channel="mcp://m")
    same("session", state, {"type": "session/mcpServerBackgroundRequested", "id": "m"})
    ready = session(customizations=[mcp("m", state={"kind": "ready"})])
    same("session", ready, {"type": "session/mcpServerBackgroundRequested", "id": "m"})
