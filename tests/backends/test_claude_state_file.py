"""Where the Claude CLI keeps a conversation's transcript, for the window's debug view."""

from __future__ import annotations

from ahpd.backends.claude import transcripts as _claude_transcripts


def test_the_transcript_is_found_under_whichever_project_holds_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    moved = tmp_path / "projects" / "-old-place"
    moved.mkdir(parents=True)
    (tmp_path / "projects" / "-new-place").mkdir()
    transcript = moved / "1b4e28ba-2fa1-11d2-883f-0016d3cca427.jsonl"
    transcript.write_text("{}\n")
    assert _claude_transcripts.state_file("1b4e28ba-2fa1-11d2-883f-0016d3cca427") == transcript
    assert _claude_transcripts.state_file("00000000-0000-0000-0000-000000000000") is None
    assert _claude_transcripts.state_file("*") is None and _claude_transcripts.state_file("../x") is None
