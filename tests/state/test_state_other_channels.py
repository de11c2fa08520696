"""Root, terminal, changeset, annotations and automation reducers."""

from __future__ import annotations

from typing import Any

from state_helpers import run, same
from tests.schema import fits

# ── Root ─────────────────────────────────────────────────────────────────────


def root(**extra: Any) -> dict[str, Any]:
    return {"agents": [], **extra}


def test_root_replacements() -> None:
    agents = [{"provider": "copilot", "displayName": "Copilot", "models": []}]
    terminals = [{"resource": "ahp-terminal:/1", "title": "bash"}]
    state = run(
        "root",
        root(),
        {"type": "root/agentsChanged", "agents": agents},
        {"type": "root/activeSessionsChanged", "activeSessions": 3},
        {"type": "root/terminalsChanged", "terminals": terminals},
    )
    assert state == {"agents": agents, "activeSessions": 3, "terminals": terminals}


def test_root_config_merge_replace_and_absent() -> None:
    state = root(config={"schema": {}, "values": {"a": 1}})
    assert run("root", state, {"type": "root/configChanged", "config": {"b": 2}})["config"]["values"] == {
        "a": 1,
        "b": 2,
    }
    assert run("root", state, {"type": "root/configChanged", "config": {"b": 2}, "replace": True})["config"][
        "values"
    ] == {"b": 2}
    same("root", root(), {"type": "root/configChanged", "config": {"b": 2}})


# ── Terminal ─────────────────────────────────────────────────────────────────


def terminal(**extra: Any) -> dict[str, Any]:
    return {"title": "bash", "content": [], "claim": {"kind": "client", "clientId": "c1"}, **extra}


def test_terminal_data_appends_to_the_tail() -> None:
    state = run("terminal", terminal(), {"type": "terminal/data", "data": "a"}, {"type": "terminal/data", "data": "b"})
    assert state["content"] == [{"type": "unclassified", "value": "ab"}]


def test_terminal_metadata_actions() -> None:
    session_claim = {"kind": "session", "session": "ahp-session:/s", "turnId": "t", "toolCallId": "x"}
    state = run(
        "terminal",
        terminal(),
        {"type": "terminal/resized", "cols": 120, "rows": 40},
        {"type": "terminal/claimed", "claim": session_claim},
        {"type": "terminal/titleChanged", "title": "vim"},
        {"type": "terminal/cwdChanged", "cwd": "file:///tmp"},
        {"type": "terminal/exited", "exitCode": 0},
    )
    assert (state["cols"], state["rows"], state["claim"], state["title"], state["cwd"]) == (
        120,
        40,
        session_claim,
        "vim",
        "file:///tmp",
    )


def test_terminal_exited_sets_the_exited_lifecycle_with_its_code() -> None:
    running = terminal(lifecycle={"status": "running"})
    state = run("terminal", running, {"type": "terminal/exited", "exitCode": 3})
    assert state["lifecycle"] == {"status": "exited", "exitCode": 3}
    assert "exitCode" not in state  # TerminalState has no top-level exitCode
    killed = run("terminal", running, {"type": "terminal/exited"})
    assert killed["lifecycle"] == {"status": "exited"}
    fits("/$defs/TerminalState", state)


def test_terminal_command_lifecycle() -> None:
    state = run(
        "terminal",
        terminal(),
        {"type": "terminal/data", "data": "$ "},
        {"type": "terminal/commandExecuted", "commandId": "c1", "commandLine": "ls", "timestamp": 1000},
        {"type": "terminal/data", "data": "a\n"},
        {"type": "terminal/data", "data": "b\n"},
        {"type": "terminal/commandFinished", "commandId": "c1", "exitCode": 0, "durationMs": 12},
        {"type": "terminal/data", "data": "$ "},
    )
    assert state["supportsCommandDetection"] is True
    assert state["content"] == [
        {"type": "unclassified", "value": "$ "},
        {
            "type": "command",
            "commandId": "c1",
            "commandLine": "ls",
            "output": "a\nb\n",
            "timestamp": 1000,
            "isComplete": True,
            "exitCode": 0,
            "durationMs": 12,
        },
        {"type": "unclassified", "value": "$ "},
    ]
    state = run("terminal", state, {"type": "terminal/cleared"})
    assert state["content"] == []


def test_terminal_command_detection_available() -> None:
    assert (
        run("terminal", terminal(), {"type": "terminal/commandDetectionAvailable"})["supportsCommandDetection"] is True
    )


# ── Changeset ────────────────────────────────────────────────────────────────


def changeset(**extra: Any) -> dict[str, Any]:
    return {"status": "computing", "files": [], **extra}


def cfile(fid: str, **extra: Any) -> dict[str, Any]:
    return {"id": fid, "edit": {"after": {"uri": f"file:///{fid}"}}, **extra}


def test_changeset_status_carries_error_only_while_in_error() -> None:
    err = {"errorType": "git", "message": "bad"}
    state = run("changeset", changeset(), {"type": "changeset/statusChanged", "status": "error", "error": err})
    assert state == changeset(status="error", error=err)
    state = run("changeset", state, {"type": "changeset/statusChanged", "status": "ready"})
    assert state == changeset(status="ready")


def test_changeset_files_upsert_remove_review_clear() -> None:
    state = run(
        "changeset",
        changeset(),
        {"type": "changeset/fileSet", "file": cfile("a")},
        {"type": "changeset/fileSet", "file": cfile("b")},
    )
    a2 = cfile("a", _meta={"x": 1})
    state = run("changeset", state, {"type": "changeset/fileSet", "file": a2})
    assert state["files"] == [a2, cfile("b")]
    state = run("changeset", state, {"type": "changeset/filesReviewChanged", "files": ["b", "zz"], "reviewed": True})
    assert state["files"][1]["reviewed"] is True and "reviewed" not in state["files"][0]
    same("changeset", state, {"type": "changeset/filesReviewChanged", "files": ["b"], "reviewed": True})
    same("changeset", state, {"type": "changeset/filesReviewChanged", "files": ["zz"], "reviewed": False})
    state = run("changeset", state, {"type": "changeset/filesReviewChanged", "files": ["b"], "reviewed": False})
    assert state["files"][1]["reviewed"] is False
    state = run("changeset", state, {"type": "changeset/fileRemoved", "fileId": "a"})
    assert [f["id"] for f in state["files"]] == ["b"]
    same("changeset", state, {"type": "changeset/fileRemoved", "fileId": "a"})
    state = run("changeset", state, {"type": "changeset/cleared"})
    assert state["files"] == []
    same("changeset", state, {"type": "changeset/cleared"})


def test_changeset_content_changed_replaces_files_and_error() -> None:
    ops = [{"id": "commit", "label": "Commit", "status": "idle"}]
    state = changeset(error={"message": "old"}, operations=ops)
    state = run("changeset", state, {"type": "changeset/contentChanged", "files": [cfile("a")]})
    assert state == changeset(files=[cfile("a")], operations=ops)
    err = {"message": "partial"}
    state = run("changeset", state, {"type": "changeset/contentChanged", "files": [], "operations": [], "error": err})
    assert state == changeset(operations=[], error=err)


def test_changeset_operations() -> None:
    ops = [{"id": "commit", "label": "Commit", "status": "idle"}, {"id": "push", "label": "Push", "status": "idle"}]
    state = run("changeset", changeset(), {"type": "changeset/operationsChanged", "operations": ops})
    err = {"message": "rejected"}
    state = run(
        "changeset",
        state,
        {"type": "changeset/operationStatusChanged", "operationId": "push", "status": "error", "error": err},
    )
    assert state["operations"][1] == {**ops[1], "status": "error", "error": err}
    state = run(
        "changeset", state, {"type": "changeset/operationStatusChanged", "operationId": "push", "status": "running"}
    )
    assert state["operations"][1] == {**ops[1], "status": "running"}
    same("changeset", state, {"type": "changeset/operationStatusChanged", "operationId": "nope", "status": "idle"})
    same(
        "changeset", changeset(), {"type": "changeset/operationStatusChanged", "operationId": "push", "status": "idle"}
    )
    assert "operations" not in run("changeset", state, {"type": "changeset/operationsChanged"})


# ── Annotations ──────────────────────────────────────────────────────────────


def annotation(aid: str, *entries: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": aid,
        "origin": {"kind": "workspace"},
        "resource": "file:///a.py",
        "resolved": False,
        "entries": [{"id": e, "body": e} for e in entries],
        **extra,
    }


def test_annotations_set_upserts() -> None:
    state = run(
        "annotations",
        {"annotations": []},
        {"type": "annotations/set", "annotation": annotation("a", "e1")},
        {"type": "annotations/set", "annotation": annotation("b", "e1")},
    )
    replaced = annotation("a", "e1", "e2")
    state = run("annotations", state, {"type": "annotations/set", "annotation": replaced})
    assert state["annotations"] == [replaced, annotation("b", "e1")]


def test_annotations_updated_touches_only_given_fields() -> None:
    rng = {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}}
    state = run(
        "annotations",
        {"annotations": [annotation("a", "e1", _meta={"k": 1})]},
        {"type": "annotations/updated", "annotationId": "a", "resolved": True, "range": rng},
    )
    assert state["annotations"][0] == annotation("a", "e1", _meta={"k": 1}, resolved=True, range=rng)
    moved = {"kind": "turn", "chat": "ahp-chat:/c", "turnId": "t"}
    state = run(
        "annotations",
        state,
        {"type": "annotations/updated", "annotationId": "a", "resource": "file:///b.py", "origin": moved},
    )
    assert state["annotations"][0]["resource"] == "file:///b.py" and state["annotations"][0]["origin"] == moved
    assert state["annotations"][0]["range"] == rng
    same("annotations", state, {"type": "annotations/updated", "annotationId": "zz", "resolved": True})


def test_annotations_removed_and_entries() -> None:
    state = {"annotations": [annotation("a", "e1"), annotation("b", "e1")]}
    state = run(
        "annotations",
        state,
        {"type": "annotations/entrySet", "annotationId": "a", "entry": {"id": "e2", "body": "more"}},
    )
    state = run(
        "annotations",
        state,
        {"type": "annotations/entrySet", "annotationId": "a", "entry": {"id": "e1", "body": "edited"}},
    )
    assert state["annotations"][0]["entries"] == [{"id": "e1", "body": "edited"}, {"id": "e2", "body": "more"}]
    same(
        "annotations", state, {"type": "annotations/entrySet", "annotationId": "zz", "entry": {"id": "e1", "body": "x"}}
    )
    state = run("annotations", state, {"type": "annotations/entryRemoved", "annotationId": "a", "entryId": "e1"})
    assert state["annotations"][0]["entries"] == [{"id": "e2", "body": "more"}]
    same("annotations", state, {"type": "annotations/entryRemoved", "annotationId": "a", "entryId": "e1"})
    same("annotations", state, {"type": "annotations/entryRemoved", "annotationId": "zz", "entryId": "e2"})
    state = run("annotations", state, {"type": "annotations/removed", "annotationId": "b"})
    assert [a["id"] for a in state["annotations"]] == ["a"]
    same("annotations", state, {"type": "annotations/removed", "annotationId": "b"})


# ── Automation ───────────────────────────────────────────────────────────────


def entry(uri: str, name: str = "n") -> dict[str, Any]:
    return {"resource": uri, "definition": {"name": name}, "operations": []}


def test_automation_catalogue() -> None:
    state = run(
        "automation",
        {"entries": []},
        {"type": "automation/set", "automation": entry("ahp-automation:/a")},
        {"type": "automation/set", "automation": entry("ahp-automation:/b")},
    )
    state = run("automation", state, {"type": "automation/set", "automation": entry("ahp-automation:/a", "renamed")})
    assert state["entries"] == [entry("ahp-automation:/a", "renamed"), entry("ahp-automation:/b")]
    state = run("automation", state, {"type": "automation/removed", "resource": "ahp-automation:/a"})
    assert state["entries"] == [entry("ahp-automation:/b")]
    same("automation", state, {"type": "automation/removed", "resource": "ahp-automation:/a"})


def test_automation_requests_leave_the_catalogue_to_the_host() -> None:
    state = {"entries": [entry("ahp-automation:/a")]}
    same(
        "automation",
        state,
        {"type": "automation/createRequested", "resource": "ahp-automation:/n", "definition": {"name": "x"}},
    )
    same(
        "automation",
        state,
        {"type": "automation/updateRequested", "resource": "ahp-automation:/a", "changes": {"name": "y"}},
    )


def run_state(**extra: Any) -> dict[str, Any]:
    return {
        "resource": "ahp-automation-run:/r",
        "automation": "ahp-automation:/a",
        "origin": {"kind": "manual"},
        "lifecycle": {"kind": "pending"},
        "sessions": [],
        **extra,
    }


def test_automation_run_sessions_and_primary() -> None:
    state = run(
        "automationRun",
        run_state(),
        {"type": "automationRun/lifecycleChanged", "lifecycle": {"kind": "running"}},
        {"type": "automationRun/sessionSet", "session": "ahp-session:/1"},
        {"type": "automationRun/sessionSet", "session": "ahp-session:/2"},
        {"type": "automationRun/primarySessionChanged", "primarySession": "ahp-session:/1"},
    )
    assert state["lifecycle"] == {"kind": "running"}
    assert state["sessions"] == ["ahp-session:/1", "ahp-session:/2"] and state["primarySession"] == "ahp-session:/1"
    same("automationRun", state, {"type": "automationRun/sessionSet", "session": "ahp-session:/1"})
    after = run("automationRun", state, {"type": "automationRun/sessionRemoved", "session": "ahp-session:/1"})
    assert after["sessions"] == ["ahp-session:/2"] and "primarySession" not in after
    kept = run("automationRun", state, {"type": "automationRun/sessionRemoved", "session": "ahp-session:/2"})
    assert kept["primarySession"] == "ahp-session:/1"
    same("automationRun", after, {"type": "automationRun/sessionRemoved", "session": "ahp-session:/9"})
    assert "primarySession" not in run("automationRun", state, {"type": "automationRun/primarySessionChanged"})


def test_automation_run_cancel_request_is_side_effect_only() -> None:
    same("automationRun", run_state(), {"type": "automationRun/cancelRequested"})
