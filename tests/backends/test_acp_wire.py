"""The ACP backend's pure parts: shapes between ACP and AHP, and file confinement."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from acp.exceptions import RequestError
from acp.schema import ElicitationSchema, ListSessionsResponse, NewSessionResponse, PromptCapabilities, Usage

from ahpd.backends.acp import files as _acp_files
from ahpd.ports import fs
from ahpd.backends.acp.files import confine, read_text, write_text
from ahpd.backends.acp.wire import (
    elicitation_content,
    elicitation_questions,
    models_from_config,
    prompt_blocks,
    rpc_error_message,
    stored_conversations,
    usage_info,
)
from ahpd.backends.acp.backend import AcpBackend
from ahpd.protocol.strict_schema import validator


def test_usage_maps_to_usage_info() -> None:
    usage = Usage(total_tokens=10, input_tokens=3, output_tokens=5, cached_read_tokens=2)
    info = usage_info(usage)
    assert info == {"inputTokens": 3, "outputTokens": 5, "cacheReadTokens": 2}
    validator("/$defs/UsageInfo").validate(info)
    assert usage_info(None) is None


def test_rpc_error_message_keeps_the_agents_words() -> None:
    assert rpc_error_message(RequestError(-32603, "the demo agent was asked to fail", {"trigger": "fail"})) == (
        "the demo agent was asked to fail"
    )
    assert rpc_error_message(RequestError.internal_error({"details": "boom"})) == "Internal error: boom"
    assert rpc_error_message(RequestError(1, "", None)) == "error"


def test_prompt_blocks_from_attachments() -> None:
    attachments = [
        {"type": "simple", "label": "sel", "modelRepresentation": "selected text"},
        {"type": "resource", "label": "main.py", "uri": "file:///w/main.py", "contentType": "text/x-python"},
        {"type": "embeddedResource", "label": "pic", "data": "AAAA", "contentType": "image/png"},
        {"type": "chat", "label": "other chat", "resource": "ahp://chat/1"},
        {"type": "unknown", "label": "?"},
    ]
    blocks = prompt_blocks("hi", attachments, PromptCapabilities(image=True))
    assert blocks == [
        {"type": "text", "text": "hi"},
        {"type": "text", "text": "selected text"},
        {"type": "resource_link", "uri": "file:///w/main.py", "name": "main.py", "mimeType": "text/x-python"},
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        {"type": "resource_link", "uri": "ahp://chat/1", "name": "other chat"},
    ]
    # An agent without image support gets a note instead of the image.
    (_, note) = prompt_blocks("hi", attachments[2:3], None)
    assert note["type"] == "text" and "pic" in note["text"]


def test_elicitation_form_to_questions_and_back() -> None:
    schema = ElicitationSchema.model_validate(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name", "minLength": 1},
                "color": {
                    "type": "string",
                    "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}],
                },
                "count": {"type": "integer", "description": "How many?", "minimum": 1, "maximum": 9},
                "ok": {"type": "boolean", "default": True},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 2},
            },
            "required": ["name"],
        }
    )
    questions, kinds = elicitation_questions(schema)
    for q in questions:
        validator("/$defs/ChatInputQuestion").validate(q)
    by_id = {q["id"]: q for q in questions}
    assert by_id["name"] == {
        "id": "name",
        "message": "Name",
        "title": "Name",
        "required": True,
        "kind": "text",
        "min": 1,
    }
    assert by_id["color"]["options"] == [{"id": "r", "label": "Red"}, {"id": "g", "label": "Green"}]
    assert by_id["count"] == {"id": "count", "message": "How many?", "kind": "integer", "min": 1, "max": 9}
    assert by_id["ok"]["defaultValue"] is True
    assert by_id["tags"]["kind"] == "multi-select" and by_id["tags"]["max"] == 2

    answers = {
        "name": {"state": "submitted", "value": {"kind": "text", "value": "Ada"}},
        "color": {"state": "submitted", "value": {"kind": "selected", "value": "g"}},
        "count": {"state": "submitted", "value": {"kind": "number", "value": 3.0}},
        "ok": {"state": "skipped"},
        "tags": {"state": "submitted", "value": {"kind": "selected-many", "value": ["a"], "freeformValues": ["z"]}},
        "stray": {"state": "submitted", "value": {"kind": "text", "value": "?"}},
    }
    assert elicitation_content(kinds, answers) == {"name": "Ada", "color": "g", "count": 3, "tags": ["a", "z"]}


def test_models_and_catalogue() -> None:
    new = NewSessionResponse.model_validate(
        {
            "sessionId": "s",
            "configOptions": [
                {
                    "type": "select",
                    "id": "model",
                    "name": "Model",
                    "category": "model",
                    "currentValue": "m1",
                    "options": [{"value": "m1", "name": "Model One"}, {"value": "m2", "name": "Model Two"}],
                }
            ],
        }
    )
    models = models_from_config("p", new.config_options)
    assert models == [
        {"id": "m1", "provider": "p", "name": "Model One"},
        {"id": "m2", "provider": "p", "name": "Model Two"},
    ]
    backend = AcpBackend("p", "agent", display_name="P", description="An agent")
    backend._models = models
    validator("/$defs/AgentInfo").validate(backend.agent_info())

    page = ListSessionsResponse.model_validate(
        {
            "sessions": [
                {"sessionId": "old", "cwd": "/w", "updatedAt": "2024-01-01T00:00:00Z"},
                {"sessionId": "undated", "cwd": "/w", "title": "?"},
                {"sessionId": "new", "cwd": "/w", "title": "Newest", "updatedAt": "2025-01-01T00:00:00Z"},
            ]
        }
    )
    assert [c.backend_id for c in stored_conversations(page.sessions)] == ["new", "old", "undated"]


def test_a_stored_title_cut_in_half_a_character_is_repaired() -> None:
    page = ListSessionsResponse.model_validate(
        {"sessions": [{"sessionId": "s", "cwd": "/w", "title": "Fix the \ud83d"}]}
    )
    [conversation] = stored_conversations(page.sessions)
    assert conversation.title == "Fix the \ufffd"


# -- files -------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return Path(os.path.realpath(path))


def test_confine_follows_links_and_dots(root: Path, tmp_path: Path) -> None:
    (root / "in.txt").write_text("x")
    (root / "out-link").symlink_to(tmp_path)
    (root / "in-link").symlink_to(root / "in.txt")
    assert confine(root, str(root / "in.txt")) == root / "in.txt"
    assert confine(root, str(root / "in-link")) == root / "in.txt"
    assert confine(root, str(root)) == root
    for bad in (str(root / ".." / "x"), str(root / "out-link" / "x"), "/etc/passwd", str(root) + "-sibling/x"):
        with pytest.raises(RequestError) as caught:
            confine(root, bad)
        assert "outside the conversation's working directory" in str(caught.value)
    with pytest.raises(RequestError):
        confine(root, "relative/path")


def test_read_with_line_and_limit(root: Path) -> None:
    path = root / "f.txt"
    path.write_text("a\nb\nc\nd\n")
    assert read_text(root, str(path)) == "a\nb\nc\nd\n"
    assert read_text(root, str(path), line=2) == "b\nc\nd\n"
    assert read_text(root, str(path), line=2, limit=2) == "b\nc\n"
    assert read_text(root, str(path), limit=1) == "a\n"
    assert read_text(root, str(path), line=9) == ""


def test_read_refuses_what_is_not_a_file(root: Path) -> None:
    os.mkfifo(root / "fifo")
    with pytest.raises(RequestError, match="not a regular file"):
        read_text(root, str(root / "fifo"))
    with pytest.raises(RequestError, match="not a regular file"):
        read_text(root, str(root))
    with pytest.raises(RequestError) as caught:
        read_text(root, str(root / "missing"))
    assert caught.value.code == -32002


def test_write_creates_folders_and_refuses_a_dangling_link_out(root: Path, tmp_path: Path) -> None:
    write_text(root, str(root / "a" / "b" / "c.txt"), "hi\n")
    assert (root / "a" / "b" / "c.txt").read_text() == "hi\n"
    (root / "dangling").symlink_to(tmp_path / "created-outside.txt")
    with pytest.raises(RequestError, match="outside"):
        write_text(root, str(root / "dangling"), "no")
    assert not (tmp_path / "created-outside.txt").exists()


def test_read_by_lines_holds_no_more_than_the_cap(root: Path, monkeypatch) -> None:
    """A line of 100 MB (a sparse file, no disk used) is refused, and one
    skipped over is never held: memory stays near the cap, not the file."""
    cap = 4 * 2**20
    monkeypatch.setattr(_acp_files, "MAX_READ_BYTES", cap)
    huge = root / "one-line.bin"
    with open(huge, "wb") as f:
        f.truncate(100 * 2**20)
        f.seek(0, os.SEEK_END)
        f.write(b"\nwanted\r\nlast")
    tracemalloc.start()
    try:
        with pytest.raises(RequestError, match="larger than 4194304 bytes"):
            read_text(root, str(huge), line=1, limit=1)
        _, peak_refused = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        assert read_text(root, str(huge), line=2) == "wanted\r\nlast"
        assert read_text(root, str(huge), line=2, limit=1) == "wanted\r\n"
        assert read_text(root, str(huge), line=4) == ""
        _, peak_skipped = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_refused < 3 * cap
    assert peak_skipped < 8 * fs._CHUNK  # the file is 100 MB
    with pytest.raises(RequestError, match="larger than 4194304 bytes"):
        read_text(root, str(huge))  # the whole file, without line or limit


def test_read_by_lines_keeps_utf8_split_across_pieces(root: Path, monkeypatch) -> None:
    monkeypatch.setattr(fs, "_CHUNK", 3)
    path = root / "u.txt"
    path.write_text("héllo wörld\nzwei\n", encoding="utf-8")
    assert read_text(root, str(path), line=1, limit=1) == "héllo wörld\n"
    assert read_text(root, str(path), line=2, limit=5) == "zwei\n"
