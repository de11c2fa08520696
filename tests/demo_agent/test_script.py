"""The demo agent's pure layer: trigger words, texts, chunking."""

from __future__ import annotations

import pytest

from ahpd.demo_agent import script as sc
from ahpd.demo_agent.script import Action


def test_plain_text_has_no_triggers() -> None:
    script = sc.parse("  Hello there, how are you?  ")
    assert script == sc.Script(prompt="Hello there, how are you?")
    assert sc.reply(script, []) == "Demo agent here. You said: “Hello there, how are you?”"


@pytest.mark.parametrize(
    ("prompt", "actions"),
    [
        ("Use a TOOL", (Action("permission"),)),
        ("permission, tools, tool and permissions", (Action("permission"),)),
        ("read notes.txt please", (Action("read", "notes.txt"),)),
        ("read `a b.txt`", (Action("read", "a"),)),
        ("read 'notes.txt'", (Action("read", "notes.txt"),)),
        ("write out.txt hello world\nand more", (Action("write", "out.txt", "hello world"),)),
        ("run echo hi && ls", (Action("run", "echo hi && ls"),)),
        ("ask", (Action("ask"),)),
        ("read", ()),
        ("write onlyapath", ()),
        ("already reading, running, writing, asked, planned, tooling", ()),
    ],
)
def test_actions(prompt: str, actions: tuple[Action, ...]) -> None:
    assert sc.parse(prompt).actions == actions


def test_actions_run_in_the_order_they_appear() -> None:
    script = sc.parse("ask first\nrun echo one\nthen tool, then read a.txt and read b.txt")
    assert [a.kind for a in script.actions] == ["ask", "run", "permission", "read", "read"]
    assert script.triggers == ("ask", "run", "permission", "read", "read")


def test_arguments_are_not_searched_for_triggers() -> None:
    script = sc.parse("run echo plan slow fail ask")
    assert script.actions == (Action("run", "echo plan slow fail ask"),)
    assert not (script.plan or script.slow or script.fail)
    assert sc.parse("write notes.txt read this").actions == (Action("write", "notes.txt", "read this"),)


def test_turn_modifiers() -> None:
    script = sc.parse("Plan it, go SLOW, then fail")
    assert (script.plan, script.slow, script.fail) == (True, True, True)
    assert script.actions == ()


def test_slash_commands() -> None:
    assert sc.parse("/help").command == "help"
    echo = sc.parse("/echo run tool plan")
    assert (echo.command, echo.argument, echo.actions, echo.plan) == ("echo", "run tool plan", (), False)
    assert sc.reply(echo, []) == "run tool plan"
    assert sc.reply(sc.parse("/echo"), []) == "(nothing to echo)"
    assert "| `permission`, `tool` |" in sc.reply(sc.parse("/HELP"), [])
    unknown = sc.parse("/frobnicate ask")
    assert unknown.command is None and unknown.actions == (Action("ask"),)


def test_thoughts_are_three_chunks() -> None:
    assert sc.thoughts(sc.parse("hi")) == [
        "Reading the prompt (1 word). ",
        "No trigger words, so I will echo it back. ",
        "Writing the reply.",
    ]
    assert sc.thoughts(sc.parse("tool then fail"))[1:] == [
        "Trigger words: permission, fail. ",
        "I was asked to fail, so I will.",
    ]


def test_reply_lists_results() -> None:
    text = sc.reply(sc.parse("tool"), ["one", "two"])
    assert text == "Demo agent here. You said: “tool”\n\n- one\n- two"


@pytest.mark.parametrize("text", ["", "one", "a b c d e f g h i", "  lead and trail  ", "lines\n\nand  gaps\n"])
def test_chunks_rebuild_the_text(text: str) -> None:
    assert "".join(sc.chunks(text)) == text
    assert all(len(chunk.split()) <= 4 for chunk in sc.chunks(text))
    assert "".join(sc.even_chunks(text, 40)) == text


def test_slow_reply_has_forty_chunks() -> None:
    text = sc.reply(sc.parse("slow"), [])
    pieces = sc.even_chunks(text, sc.SLOW_CHUNKS)
    assert len(pieces) == 40 and all(pieces) and "".join(pieces) == text


def test_plan_statuses() -> None:
    assert [sc.plan_statuses(i) for i in range(4)] == [
        ["in_progress", "pending", "pending"],
        ["completed", "in_progress", "pending"],
        ["completed", "completed", "in_progress"],
        ["completed", "completed", "completed"],
    ]


def test_title() -> None:
    assert sc.title_of("\n  first line  \nsecond") == "first line"
    assert sc.title_of("x" * 100) == "x" * 79 + "…"
    assert sc.title_of("   ") == ""
