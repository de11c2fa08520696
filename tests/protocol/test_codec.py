"""The codec's rules, shown on hand-written wire examples of each family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ahpd.protocol import codec, model
from ahpd.protocol.codec import DecodeError


def roundtrip(tp, wire):
    obj = codec.decode(tp, wire)
    assert codec.encode(obj) == wire
    return obj


# -- one example per family ---------------------------------------------------


def test_state_root() -> None:
    wire = {
        "agents": [
            {
                "provider": "demo",
                "displayName": "Demo",
                "description": "offline agent",
                "models": [{"id": "m1", "provider": "demo", "name": "Model One"}],
            }
        ],
        "activeSessions": 2,
    }
    state = roundtrip(model.RootState, wire)
    assert state.agents[0].models[0].name == "Model One"
    assert state.terminals is None  # absent, and stays absent on the way out


def test_state_chat_with_turn_and_parts() -> None:
    wire = {
        "resource": "ahp-chat:/c1",
        "title": "t",
        "status": 1,
        "modifiedAt": "2026-12-02T10:00:00Z",
        "interactivity": "full",
        "turns": [
            {
                "id": "turn-1",
                "message": {"text": "hi", "origin": {"kind": "user"}},
                "responseParts": [
                    {"kind": "markdown", "id": "p1", "content": "hello"},
                    {"kind": "reasoning", "id": "p2", "content": "thinking"},
                ],
                "usage": {"inputTokens": 3, "outputTokens": 4},
                "state": "complete",
            }
        ],
    }
    try:
        state = roundtrip(model.ChatState, wire)
    except DecodeError as exc:  # keep the example honest against the schema
        pytest.fail(f"example does not fit the schema: {exc}")
    parts = state.turns[0].responseParts
    assert [type(p).__name__ for p in parts] == ["MarkdownResponsePart", "ReasoningResponsePart"]


def test_action_envelope_without_origin_omits_it() -> None:
    wire = {
        "channel": "ahp-chat:/c1",
        "action": {"type": "chat/delta", "turnId": "t", "partId": "p", "content": "x"},
        "serverSeq": 12,
    }
    env = roundtrip(model.ActionEnvelope, wire)
    assert isinstance(env.action, model.ChatDeltaAction)
    assert isinstance(env.serverSeq, int)  # 12 stays 12, never 12.0
    assert "origin" not in codec.encode(env)


def test_confirmed_tool_call_picks_approved_or_denied() -> None:
    base = {"type": "chat/toolCallConfirmed", "turnId": "t", "toolCallId": "c"}
    approved = codec.decode_action({**base, "approved": True, "confirmed": "user-action"})
    denied = codec.decode_action({**base, "approved": False, "reason": "denied"})
    assert isinstance(approved, model.ChatToolCallApprovedAction)
    assert isinstance(denied, model.ChatToolCallDeniedAction)
    assert codec.encode(denied)["approved"] is False


def test_command_params_and_result() -> None:
    params = codec.decode_params(
        "initialize",
        {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "c1"},
    )
    assert isinstance(params, model.InitializeParams)
    assert codec.decode_result("createSession", None) is None
    with pytest.raises(DecodeError):
        codec.decode_result("createSession", {"unexpected": 1})


def test_notification_params() -> None:
    params = codec.decode_params("root/progress", {"channel": "ahp-root://", "progressToken": "p", "progress": 1})
    assert isinstance(params, model.ProgressParams)


def test_error_data() -> None:
    wire = {"supportedVersions": ["1.0.0", "0.10.0", "0.9.0"]}
    roundtrip(model.UnsupportedProtocolVersionErrorData, wire)
    assert model.AhpErrorCode.UnsupportedProtocolVersion == -32005
    assert model.JsonRpcErrorCode.MethodNotFound == -32601


def test_session_status_is_a_set_of_bits() -> None:
    status = codec.decode(model.SessionStatus, 1 | 32)
    assert model.SessionStatus.IsRead in status and model.SessionStatus.Idle in status
    assert codec.encode(status) == 33


# -- strictness ---------------------------------------------------------------


def test_undeclared_key_is_refused_with_its_path() -> None:
    wire = {
        "channel": "ahp-chat:/c1",
        "action": {
            "type": "chat/responsePart",
            "turnId": "t",
            "part": {"kind": "markdown", "id": "p", "content": "", "colour": "red"},
        },
        "serverSeq": 1,
    }
    with pytest.raises(DecodeError) as err:
        codec.decode(model.ActionEnvelope, wire)
    assert err.value.path == "$.action.part.colour"
    assert "undeclared" in err.value.reason
    # A lenient decode drops it instead.
    lenient = codec.decode(model.ActionEnvelope, wire, strict=False)
    assert "colour" not in json.dumps(codec.encode(lenient))


def test_missing_field_and_wrong_type_are_named() -> None:
    with pytest.raises(DecodeError) as err:
        codec.decode_action({"type": "chat/delta", "turnId": "t", "partId": "p"})
    assert err.value.path == "$.content"
    with pytest.raises(DecodeError) as err:
        codec.decode_action({"type": "root/activeSessionsChanged", "activeSessions": "2"})
    assert err.value.path == "$.activeSessions"
    with pytest.raises(DecodeError) as err:
        codec.decode(model.RootState, {"agents": [{"provider": 1}], "activeSessions": 0})
    assert err.value.path.startswith("$.agents[0]")


def test_null_is_not_absent() -> None:
    with pytest.raises(DecodeError) as err:
        codec.decode_action({"type": "chat/delta", "turnId": "t", "partId": "p", "content": "x", "_meta": None})
    assert err.value.path == "$._meta"


def test_unknown_discriminator_is_named() -> None:
    with pytest.raises(DecodeError) as err:
        codec.decode(model.ResponsePart, {"kind": "hologram", "id": "p"})
    assert err.value.path == "$.kind"
    assert "hologram" in err.value.reason
    with pytest.raises(DecodeError) as err:
        codec.decode_action({"type": "chat/teleport"})
    assert err.value.path == "$.type"


def test_meta_bags_stay_open() -> None:
    wire = {
        "type": "chat/delta",
        "turnId": "t",
        "partId": "p",
        "content": "x",
        "_meta": {"ahpd.sender": "user:1", "nested": {"anything": [1, None]}},
    }
    action = roundtrip(model.ChatDeltaAction, wire)
    assert action._meta["nested"]["anything"] == [1, None]


def test_no_coercion() -> None:
    for bad in (True, "3", None):
        with pytest.raises(DecodeError):
            codec.decode_action({"type": "root/activeSessionsChanged", "activeSessions": bad})
    limits = {"windowBytes": 1, "maximumFrameBytes": 2, "maximumMessageBytes": 3}
    assert codec.decode(model.ChannelReceiveLimits, limits).windowBytes == 1
    for bad in (True, 1.5, "3"):  # an "integer" is a whole number
        with pytest.raises(DecodeError):
            codec.decode(model.ChannelReceiveLimits, {**limits, "windowBytes": bad})
    with pytest.raises(DecodeError):  # a string is not an array of characters
        codec.decode(model.UnsupportedProtocolVersionErrorData, {"supportedVersions": "1.0.0"})


def test_an_optional_number_is_a_json_number() -> None:
    # Through cattrs, an optional number fell back on float(): "1.5" and true were read as 1.5 and 1.0.
    for bad in ("1.5", True):
        with pytest.raises(DecodeError) as err:
            codec.decode(model.UsageInfo, {"inputTokens": bad})
        assert err.value.path == "$.inputTokens"
        with pytest.raises(DecodeError):
            codec.check(model.UsageInfo, {"inputTokens": bad})
    assert codec.decode(model.UsageInfo, {"inputTokens": 2.0}).inputTokens == 2.0
    assert codec.encode(codec.decode(model.UsageInfo, {"inputTokens": 7})) == {"inputTokens": 7}


def test_check_builds_nothing_and_agrees_with_decode() -> None:
    good = {"type": "chat/delta", "turnId": "t", "partId": "p", "content": "x"}
    assert codec.check(model.ChatDeltaAction, good) is None
    for bad in ({**good, "extra": 1}, {**good, "content": 3}, {"type": "chat/delta"}):
        with pytest.raises(DecodeError) as decoded:
            codec.decode(model.ChatDeltaAction, bad)
        with pytest.raises(DecodeError) as checked:
            codec.check(model.ChatDeltaAction, bad)
        assert (checked.value.path, checked.value.reason) == (decoded.value.path, decoded.value.reason)


def test_model_objects_are_immutable_values() -> None:
    a = model.TextPosition(line=1, character=2)
    assert a == model.TextPosition(line=1, character=2) and hash(a) == hash(model.TextPosition(line=1, character=2))
    with pytest.raises(AttributeError):
        a.line = 3  # type: ignore[misc]
    with pytest.raises(ValueError):
        model.ChatDeltaAction(type="chat/reasoning", turnId="t", partId="p", content="x")  # type: ignore[arg-type]
    assert repr(a) == "TextPosition(line=1, character=2)"


def _both(tp: object, value: object) -> tuple[object, object]:
    """What decode-then-encode and normalize make of ``value``: the wire JSON or the error."""
    try:
        slow: object = codec.encode(codec.decode(tp, value))
    except DecodeError as err:
        slow = ("refused", err.path)
    try:
        fast: object = codec.normalize(tp, value)
    except DecodeError as err:
        fast = ("refused", err.path)
    return slow, fast


def test_normalize_is_decode_then_encode_on_the_conformance_capture() -> None:
    capture = Path(__file__).parents[2] / "conformance" / "fixtures" / "wire.jsonl"
    compared = 0
    for line in capture.read_text().splitlines():
        frame = json.loads(line)
        method, params = frame.get("method"), frame.get("params")
        if not isinstance(params, dict):
            continue
        if method == "action":
            tp: object = model.ActionEnvelope
        elif method in model.COMMANDS:
            tp = model.COMMANDS[method][0]
        elif method in model.CLIENT_NOTIFICATIONS:
            tp = model.CLIENT_NOTIFICATIONS[method]
        else:
            continue
        slow, fast = _both(tp, params)
        assert fast == slow, method
        assert not isinstance(fast, dict) or list(fast) == list(slow)  # type: ignore[arg-type]
        compared += 1
    assert compared > 50


def test_normalize_fills_constants_drops_nulls_and_refuses_what_a_constructor_would() -> None:
    delta = {"content": "x", "partId": "p", "turnId": "t"}  # no type: the class's constant
    assert _both(model.ChatDeltaAction, delta)[1] == {
        "type": "chat/delta",
        "turnId": "t",
        "partId": "p",
        "content": "x",
    }
    confirmed = {"type": "chat/toolCallConfirmed", "turnId": "t", "toolCallId": "c", "confirmed": "user-action"}
    for approved in (True, False, 1, 0, 1.0, "yes", [True]):
        params = {"channel": "c", "clientSeq": 1, "action": {**confirmed, "approved": approved}}
        slow, fast = _both(model.DispatchActionParams, params)
        # Refused alike (where: the constructor's refusal has no path; this one names the key).
        assert fast == slow or (fast[0] == slow[0] == "refused"), approved  # type: ignore[index]
    for value in ({"inputTokens": 2.0}, {"inputTokens": 7, "outputTokens": None}, {"inputTokens": "7"}):
        assert _both(model.UsageInfo, value)[0] == _both(model.UsageInfo, value)[1]


def test_normalize_names_what_is_wrong_as_decode_does() -> None:
    good = {"type": "chat/draftChanged", "draft": {"text": "t", "origin": {"kind": "user"}}}
    wrong = [
        {**good, "extra": 1},
        {**good, "draft": None},
        {**good, "draft": {"text": 3, "origin": {"kind": "user"}}},
        {**good, "draft": {"origin": {"kind": "user"}}},
        {**good, "draft": {"text": "t", "origin": {"kind": "user"}, "model": None}},
        {**good, "draft": {"text": "t", "origin": {"kind": "nobody"}}},
        {**good, "draft": {"text": "t", "origin": {"kind": "user"}, "_meta": []}},
        {"type": "chat/draftChanged", "draft": [good]},
    ]
    for action in wrong:
        params = {"channel": "c", "clientSeq": 1, "action": action}
        with pytest.raises(DecodeError) as decoded:
            codec.decode(model.DispatchActionParams, params)
        with pytest.raises(DecodeError) as normalized:
            codec.normalize(model.DispatchActionParams, params)
        assert (normalized.value.path, normalized.value.reason) == (decoded.value.path, decoded.value.reason)
    params = {"channel": "c", "clientSeq": 1, "action": {**good, "draft": {**good["draft"], "_meta": {"k": None}}}}
    assert codec.normalize(model.DispatchActionParams, params) == codec.encode(
        codec.decode(model.DispatchActionParams, params)
    )
