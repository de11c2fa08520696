"""Shell integration marks read back out of pty output, however the reads split it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ahpd.host.terminals.shell_marks import Mark, MarkReader, Text, command_line

STREAM = (
    b"\x1b]133;D;0\x07\x1b]7;file://vm/home/ann/my%20dir\x07\x1b]133;A\x07"
    b"\x1b[?2004hann$ \x1b]133;B\x07pwd; false\r\n\x1b[?2004l\r\x1b]133;C\x07"
    b"/home/ann \xe2\x82\xac\r\n\x1b]0;title\x07\x1b]133;D;1\x1b\\"
)
EXPECTED = [
    Mark("D", "0"),
    Mark("cwd", "/home/ann/my dir"),
    Mark("A"),
    Text("\x1b[?2004hann$ "),
    Mark("B"),
    Text("pwd; false\r\n\x1b[?2004l\r"),
    Mark("C"),
    Text("/home/ann \u20ac\r\n\x1b]0;title\x07"),
    Mark("D", "1"),
]


def merged(events: list) -> list:
    out: list = []
    for event in events:
        if isinstance(event, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].text + event.text)
        else:
            out.append(event)
    return out


def test_one_read() -> None:
    assert MarkReader().feed(STREAM) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    reader = MarkReader()
    events: list = []
    bounds = [0, *sorted(cuts), len(STREAM)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        events += reader.feed(STREAM[start:end])
    assert merged(events) == EXPECTED


def test_an_unterminated_osc_that_is_not_ours_passes_through() -> None:
    reader = MarkReader()
    assert reader.feed(b"a\x1b]0;half") == [Text("a\x1b]0;half")]
    long = reader.feed(b"\x1b]133;" + b"x" * 5000)
    assert "".join(e.text for e in long if isinstance(e, Text)).startswith("\x1b]133;")


def test_command_line_read_back_off_the_echo() -> None:
    assert command_line("pwd; cd /tmp; false\r\n\x1b[?2004l\r") == "pwd; cd /tmp; false"
    assert command_line("lss\b \b -l\r\n") == "ls -l"
    assert command_line("\r\n") == ""
