"""wire-check over captures with one known defect each: each is reported with
its line and rule, and the clean capture passes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ahpd.wire.check import Problem
from ahpd.wire.cli import wire_check

from .captures import (
    CHAT,
    COMPLETE,
    DELTA,
    PART,
    STARTED,
    action,
    closed,
    conversation,
    hello,
    join,
    mutate,
    reduced,
    render,
    rpc,
    with_snapshot,
)


def check(tmp_path: Path, text: str) -> tuple[int, list[Problem]]:
    path = tmp_path / "capture.jsonl"
    path.write_text(text)
    out = io.StringIO()
    code = wire_check([str(path)], as_json=True, out=out)
    return code, [Problem(**p) for p in json.loads(out.getvalue())["problems"]]


def found(problems: list[Problem], rule: str) -> list[tuple[int, str]]:
    return [(p.line, p.json_path) for p in problems if p.rule == rule]


@pytest.mark.parametrize("shape", ["ahpLog", "frame"])
def test_a_clean_capture_passes_in_either_shape(tmp_path: Path, shape: str) -> None:
    assert check(tmp_path, render(with_snapshot(conversation()), shape)) == (0, [])


def test_an_undeclared_key(tmp_path: Path) -> None:
    lines = mutate(conversation(), DELTA, lambda m: m["params"]["action"].update(bogus=1))
    code, problems = check(tmp_path, render(with_snapshot(lines)))
    assert code == 1
    assert found(problems, "schema") == [(DELTA, "$.params.action.bogus")]
    assert "undeclared" in problems[0].message and '"bogus":1' in problems[0].excerpt


def test_a_missing_required_field(tmp_path: Path) -> None:
    lines = mutate(conversation(), COMPLETE, lambda m: m["params"]["action"].pop("duration"))
    code, problems = check(tmp_path, render(with_snapshot(lines)))
    assert code == 1
    assert found(problems, "schema") == [(COMPLETE, "$.params.action.duration")]
    assert "missing required" in problems[0].message


def test_a_delta_before_its_part(tmp_path: Path) -> None:
    lines = mutate(conversation(), DELTA, lambda m: m["params"]["action"].update(partId="p2"))
    code, problems = check(tmp_path, render(with_snapshot(lines)))
    assert code == 1
    assert found(problems, "part-order") == [(DELTA, "$.params.action.partId")]
    assert [p.rule for p in problems] == ["part-order"]


def test_a_delta_aimed_at_a_part_of_another_kind(tmp_path: Path) -> None:
    lines = mutate(conversation(), PART, lambda m: m["params"]["action"]["part"].update(kind="reasoning"))
    code, problems = check(tmp_path, render(with_snapshot(lines)))
    assert found(problems, "part-order") == [(DELTA, "$.params.action.partId")]


def test_a_delta_naming_a_turn_that_is_not_running(tmp_path: Path) -> None:
    # The append rules' own path (most of a capture's actions), each outcome with its path and words.
    lines = mutate(conversation(), DELTA, lambda m: m["params"]["action"].update(turnId="t9"))
    code, problems = check(tmp_path, render(with_snapshot(lines)))
    assert code == 1
    assert found(problems, "part-order") == [(DELTA, "$.params.action.turnId")]
    assert problems[0].message == "chat/delta names turn t9, which is not running"
    late = conversation()
    late.append(("s2c", "1", action(5, {"type": "chat/delta", "turnId": "t1", "partId": "p1", "content": "x"})))
    code, problems = check(tmp_path, render(late))
    assert found(problems, "part-order") == [(len(late), "$.params.action.turnId")]


def test_a_turn_with_no_ending(tmp_path: Path) -> None:
    lines = conversation()[: COMPLETE - 1]
    code, problems = check(tmp_path, render(with_snapshot(lines)))
    assert code == 1
    assert found(problems, "turn-ending") == [(STARTED, "$.params.action.turnId")]
    assert "never ended" in problems[0].message


def test_a_turn_ended_twice(tmp_path: Path) -> None:
    lines = conversation()
    lines.append(("s2c", "1", action(5, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 1})))
    code, problems = check(tmp_path, render(lines))
    assert found(problems, "turn-ending") == [(COMPLETE + 1, "$.params.action.type")]


def test_a_resumed_turn_runs_and_ends_again(tmp_path: Path) -> None:
    error = {
        "type": "chat/error",
        "turnId": "t1",
        "duration": 1,
        "part": {"kind": "error", "error": {"errorType": "AgentSilent", "message": "quiet"}, "resumable": True},
    }
    resume = {"type": "chat/turnResume", "turnId": "t1"}
    lines = conversation()[:-1] + [
        ("s2c", "1", action(4, error)),
        ("c2s", "1", rpc(method="dispatchAction", params={"channel": CHAT, "clientSeq": 2, "action": resume})),
        ("s2c", "1", action(5, resume, {"clientId": "alice", "clientSeq": 2})),
        (
            "s2c",
            "1",
            action(
                6,
                {
                    "type": "chat/responsePart",
                    "turnId": "t1",
                    "part": {"kind": "markdown", "id": "p2", "content": "again"},
                },
            ),
        ),
        ("s2c", "1", action(7, {"type": "chat/turnComplete", "turnId": "t1", "duration": 2})),
    ]
    assert check(tmp_path, render(lines)) == (0, [])
    # Without the resume, the same frames end one turn twice.
    code, problems = check(tmp_path, render(lines[:-4] + lines[-2:]))
    assert code == 1 and "ended twice" in " ".join(p.message for p in problems if p.rule == "turn-ending")


def test_a_duplicated_server_seq(tmp_path: Path) -> None:
    lines = mutate(conversation(), DELTA, lambda m: m["params"].update(serverSeq=2))
    code, problems = check(tmp_path, render(with_snapshot(lines)))
    assert code == 1
    assert found(problems, "server-seq") == [(DELTA, "$.params.serverSeq")]
    assert [p.rule for p in problems] == ["server-seq"]


def test_a_refusal_broadcast(tmp_path: Path) -> None:
    bad = {"type": "chat/turnCancelled", "turnId": "nope", "duration": 1}
    refusal = action(4, bad, {"clientId": "alice", "clientSeq": 2}, rejectionReason="no such turn")
    lines = [
        *conversation(),
        *hello("2", "bob"),
        (
            "c2s",
            "1",
            {
                "jsonrpc": "2.0",
                "method": "dispatchAction",
                "params": {"channel": action(0, {})["params"]["channel"], "clientSeq": 2, "action": bad},
            },
        ),
        ("s2c", "1", refusal),
        ("s2c", "2", refusal),
    ]
    code, problems = check(tmp_path, render(lines))
    assert code == 1
    assert found(problems, "refusal") == [(len(lines), "$.params.origin")]
    assert problems[0].connection.endswith("/2") and "bob" in problems[0].message


def test_a_refusal_in_a_replay(tmp_path: Path) -> None:
    refusal = action(
        4,
        {"type": "chat/turnCancelled", "turnId": "x", "duration": 1},
        {"clientId": "carol", "clientSeq": 1},
        rejectionReason="no",
    )["params"]
    lines = [
        (
            "c2s",
            "3",
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "reconnect",
                "params": {"channel": "ahp-root://", "clientId": "carol", "lastSeenServerSeq": 3, "subscriptions": []},
            },
        ),
        ("s2c", "3", {"jsonrpc": "2.0", "id": 1, "result": {"type": "replay", "actions": [refusal], "missing": []}}),
    ]
    code, problems = check(tmp_path, render(lines))
    assert ("refusal", "$.result.actions[0]") in [(p.rule, p.json_path) for p in problems]


def test_a_notification_carrying_a_server_seq(tmp_path: Path) -> None:
    lines = [
        *conversation(),
        (
            "s2c",
            "1",
            {
                "jsonrpc": "2.0",
                "method": "root/sessionRemoved",
                "params": {"channel": "ahp-root://", "session": "s:/1", "serverSeq": 9},
            },
        ),
    ]
    code, problems = check(tmp_path, render(lines))
    assert code == 1
    assert found(problems, "notification-seq") == [(len(lines), "$.params.serverSeq")]
    assert found(problems, "schema") == [(len(lines), "$.params.serverSeq")]  # undeclared there too


def test_a_tool_ready_without_confirmed_where_nobody_was_asked(tmp_path: Path) -> None:
    lines = conversation()[: COMPLETE - 1]
    lines += [
        (
            "s2c",
            "1",
            action(
                5,
                {
                    "type": "chat/toolCallStart",
                    "turnId": "t1",
                    "toolCallId": "c1",
                    "toolName": "read",
                    "displayName": "Read",
                },
            ),
        ),
        (
            "s2c",
            "1",
            action(
                6, {"type": "chat/toolCallReady", "turnId": "t1", "toolCallId": "c1", "invocationMessage": "Reading"}
            ),
        ),
        ("s2c", "1", action(7, {"type": "chat/turnComplete", "turnId": "t1", "duration": 5})),
    ]
    code, problems = check(tmp_path, render(with_snapshot(lines)))
    assert found(problems, "tool-ready") == [(len(lines) - 1, "$.params.action.confirmed")]


def test_a_snapshot_that_disagrees_with_the_actions(tmp_path: Path) -> None:
    lines = with_snapshot(conversation())
    lines = mutate(lines, len(lines), lambda m: m["result"]["snapshot"]["state"]["turns"][0].update(state="error"))
    code, problems = check(tmp_path, render(lines))
    assert found(problems, "snapshot") == [(len(lines), "$.result.snapshot.state.turns[0].state")]


def test_a_response_to_nothing_and_a_request_never_answered(tmp_path: Path) -> None:
    lines = [
        *conversation(),
        ("s2c", "1", {"jsonrpc": "2.0", "id": 99, "result": None}),
        ("c2s", "1", {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"channel": "ahp-root://"}}),
    ]
    code, problems = check(tmp_path, render(lines))
    assert found(problems, "jsonrpc") == [(len(lines) - 1, "$.id"), (len(lines), "$.id")]


@pytest.mark.parametrize("ident", [[1], {"n": 1}, True])
def test_an_id_that_is_not_a_string_a_number_or_null_is_reported_not_a_crash(tmp_path: Path, ident) -> None:
    lines = [
        *conversation(),
        ("c2s", "1", {"jsonrpc": "2.0", "id": ident, "method": "ping", "params": {"channel": "ahp-root://"}}),
        ("s2c", "1", {"jsonrpc": "2.0", "id": ident, "result": None}),
        ("c2s", "1", {"jsonrpc": "2.0", "id": ident, "result": None}),
    ]
    code, problems = check(tmp_path, render(lines))
    assert code == 1
    n = len(lines)
    assert found(problems, "jsonrpc") == [(n - 2, "$.id"), (n - 1, "$.id"), (n, "$.id")]


def test_text_output_names_line_rule_path_and_excerpt(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    path.write_text(render(with_snapshot(mutate(conversation(), DELTA, lambda m: m["params"].update(serverSeq=2)))))
    out = io.StringIO()
    assert wire_check([str(path)], out=out) == 1
    first = out.getvalue().splitlines()[0]
    assert first.startswith(f"{path}:{DELTA}: server-seq: ") and "$.params.serverSeq: 2" in first


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    err = io.StringIO()
    assert wire_check([str(tmp_path / "absent.jsonl")], out=io.StringIO(), err=err) == 2
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text(render(conversation()) + "not json\n")
    assert wire_check([str(garbage)], out=io.StringIO(), err=err) == 2
    assert f"{garbage}:{len(conversation()) + 1}" in err.getvalue()
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": "world"}\n')
    assert wire_check([str(other)], out=io.StringIO(), err=err) == 2


def test_a_turn_left_running_when_its_connection_closes_is_not_a_defect(tmp_path: Path) -> None:
    lines = [*conversation()[: COMPLETE - 1], closed("1")]
    assert check(tmp_path, render(lines)) == (0, [])
    # Closed with a request in flight: the client left before its answer.
    lines = [*lines[:-1], ("c2s", "1", rpc(id=7, method="ping", params={"channel": "ahp-root://"})), closed("1")]
    assert check(tmp_path, render(lines)) == (0, [])


def test_a_turn_another_connection_saw_end_is_not_left_running(tmp_path: Path) -> None:
    lines = conversation()
    # bob joins mid-turn and hears the ending; alice's capture stops before it.
    bob = join("2", "bob", reduced(lines, 3), 3)
    ending = lines[COMPLETE - 1]
    lines = [*lines[: COMPLETE - 1], *bob, ("s2c", "2", ending[2])]
    assert check(tmp_path, render(lines)) == (0, [])


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_an_empty_capture_exits_2_with_no_frames(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    err = io.StringIO()
    assert wire_check([str(path)], out=io.StringIO(), err=err) == 2
    assert "no frames" in err.getvalue()
    out = io.StringIO()
    assert wire_check([str(path)], as_json=True, out=out) == 2
    assert json.loads(out.getvalue())["error"]["reason"] == "no frames"
    # Only a close on record is no frames either.
    path.write_text(render([closed("1")]))
    assert wire_check([str(path)], out=io.StringIO(), err=io.StringIO()) == 2


def ping(conn: str, ident: int) -> list:
    return [
        ("c2s", conn, rpc(id=ident, method="ping", params={"channel": "ahp-root://"})),
        ("s2c", conn, rpc(id=ident, result=None)),
    ]


@pytest.mark.parametrize("upto", [2, 3, 4])
def test_a_snapshot_is_held_against_what_another_connection_reduced(tmp_path: Path, upto: int) -> None:
    lines = conversation()
    # bob's first snapshot, served after alice heard every action, as of serverSeq ``upto``.
    good = [*lines, *join("2", "bob", reduced(lines, upto), upto), *ping("1", 5)]
    assert check(tmp_path, render(good)) == (0, [])
    wrong = reduced(lines, upto)
    wrong["title"] = "not what the actions say"
    bad = [*lines, *join("2", "bob", wrong, upto), *ping("1", 5)]
    code, problems = check(tmp_path, render(bad))
    assert code == 1
    assert found(problems, "snapshot") == [(len(lines) + 2, "$.result.snapshots[0].state.title")]
    assert problems[0].connection.endswith("/2") and f"serverSeq {upto}" in problems[0].message


def test_a_snapshot_is_not_held_against_a_connection_that_had_gone(tmp_path: Path) -> None:
    lines = conversation()
    stale = reduced(lines, 2)  # a state nobody watching could vouch for at serverSeq 4
    for gone in ([closed("1")], []):  # closed on record, or simply never heard from again
        capture = [*lines, *gone, *join("2", "bob", stale, 4)]
        assert check(tmp_path, render(capture)) == (0, []), gone


def test_a_refusal_handing_back_an_undecodable_action_is_judged_on_the_dispatch(tmp_path: Path) -> None:
    bad = {"type": "chat/turnCancelled", "turnId": "t1", "duration": "soon"}
    channel = action(0, {})["params"]["channel"]
    refusal = action(
        4, bad, {"clientId": "alice", "clientSeq": 2}, rejectionReason="expected a number at $.action.duration"
    )
    lines = [
        *conversation(),
        ("c2s", "1", rpc(method="dispatchAction", params={"channel": channel, "clientSeq": 2, "action": bad})),
        ("s2c", "1", refusal),
    ]
    code, problems = check(tmp_path, render(lines))
    # The client's frame is the defect; the host's answer, its own action back, is not.
    assert found(problems, "schema") == [(len(lines) - 1, "$.params.action.duration")]
    # Another action in the refusal than the one sent is the host's to answer for.
    lines[-1] = (
        "s2c",
        "1",
        action(4, {**bad, "duration": "later"}, {"clientId": "alice", "clientSeq": 2}, rejectionReason="no"),
    )
    code, problems = check(tmp_path, render(lines))
    assert found(problems, "schema") == [
        (len(lines) - 1, "$.params.action.duration"),
        (len(lines), "$.params.action.duration"),
    ]
