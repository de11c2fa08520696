"""The console's terminal pane in a real browser: a shell the page opened
(claimed by its own clientId), typed into key by key; colours, a progress
bar that rewrites its line, and ``top`` on the alternate screen. And the
page's emulator (``vt.js``) and Markdown renderer fed known sequences in the
page itself, where they run."""

from __future__ import annotations

from typing import Any

from .conftest import Daemon, Shots
from .test_console import _expect, _open, _same_as_host


def _screen(page: Any) -> Any:
    return page.locator("#terminal-screen")


def test_a_shell_of_its_own_typed_into_with_colours_a_progress_bar_and_top(
    browser: Any, daemon: Daemon, shots: Shots
) -> None:
    expect = _expect()
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url)
    expect(page.locator("#connection")).to_have_text("connected")
    page.click("#new-terminal")
    expect(page.locator("#terminal-head")).to_contain_text("yours")
    screen = _screen(page)
    screen.click()
    page.keyboard.type("printf '\\033[31mRED\\033[0m \\033[38;5;208mORANGE\\033[0m \\033[38;2;1;2;3mTRUE\\033[0m\\n'")
    page.keyboard.press("Enter")
    red = screen.locator("span", has_text="RED").last
    expect(red).to_have_css("color", "rgb(205, 49, 49)")
    expect(screen.locator("span", has_text="ORANGE").last).to_have_css("color", "rgb(255, 135, 0)")
    expect(screen.locator("span", has_text="TRUE").last).to_have_css("color", "rgb(1, 2, 3)")
    # a progress bar: one line rewritten with CR and erased to its end
    page.keyboard.type(
        "for i in 1 2 3 4; do printf '\\r[%-4s] %d%%\\033[K' $(printf '#%.0s' $(seq $i)) $((i*25)); done; echo"
    )
    page.keyboard.press("Enter")
    expect(screen).to_contain_text("[####] 100%")
    text = page.evaluate("window.ahpdApp.terminal.screen.text().join('\\n')")
    assert "] 25%" not in text and "] 75%" not in text  # rewritten, not appended
    shots(page, "shell")
    # top: a full screen drawn with cursor moves and erases, redrawn each second; q leaves it
    page.keyboard.type("top -d 1")
    page.keyboard.press("Enter")
    expect(screen).to_contain_text("load average")
    expect(screen).to_contain_text("PID")
    rows = page.evaluate("window.ahpdApp.terminal.screen.text()")
    assert rows[0].startswith("top - ") and any(r.lstrip().startswith("PID") for r in rows), rows[:8]
    shots(page, "top")
    page.keyboard.press("q")
    # Typed only once the shell's prompt is back: keys that reach top before
    # it has left are top's (an "e" changes its memory units).
    page.wait_for_function(
        "() => /[#$]$/.test(window.ahpdApp.terminal.screen.text().map(r => r.trimEnd()).filter(Boolean).pop() || '')",
        timeout=120_000,
    )
    page.keyboard.type("echo done-$((6*7))")
    page.keyboard.press("Enter")
    expect(screen).to_contain_text("done-42")
    # the alternate screen, as a full-screen program asks for it, and back
    page.keyboard.type("printf '\\033[?1049hALTERNATE'; read x; printf '\\033[?1049l'")
    page.keyboard.press("Enter")
    expect(screen).to_have_attribute("data-alternate", "yes")
    expect(screen).to_contain_text("ALTERNATE")
    page.keyboard.press("Enter")
    expect(screen).to_have_attribute("data-alternate", "no")
    expect(screen).to_contain_text("done-42")
    shots(page, "after-top")
    terminal = page.evaluate("window.ahpdApp.terminal.channel")
    _same_as_host(page, daemon, terminal)
    page.context.close()


EMULATOR_CASES = r"""
async () => {
  const { Screen } = await import("/vt.js");
  const run = (input, cols = 10, rows = 4) => { const s = new Screen(cols, rows); s.write(input); return s; };
  const out = {};
  out.cup = run("\x1b[2;3HX\x1b[1;1HY").text();
  out.moves = run("abc\x1b[2D\x1b[1BZ\x1b[1AQ\x1b[3CW").text();
  out.el = run("hello\x1b[3D\x1b[K").text();
  out.ed = run("a\r\nb\r\nc\x1b[2;1H\x1b[J").text();
  out.bs = run("ab\bX").text();
  out.wrap = run("0123456789AB").text();
  out.scroll = run("1\r\n2\r\n3\r\n4\r\n5").text();
  const alt = run("main\x1b[?1049hALT");
  out.alt = [alt.alternate, alt.text()];
  alt.write("\x1b[?1049l");
  out.back = [alt.alternate, alt.text()];
  const split = run("\x1b[3");
  split.write("1mR");
  out.split = split.buf.lines[0][0].a.fg;
  out.reset = run("\x1b[1;4;7mA\x1b[0mB").buf.lines[0].map((c) => [c.a.bold, c.a.underline, c.a.inverse]).slice(0, 2);
  out.title = run("\x1b]0;my title\x07x").title;
  out.region = run("1\r\n2\r\n3\r\n4\x1b[2;3r\x1b[3;1H\n").text();
  out.lines = run("\x1b(0lqk\x1b(B lqk\x1b)0\x0ex\x0fx").text()[0];
  return out;
}
"""


def test_the_emulator_in_the_page(browser: Any, daemon: Daemon) -> None:
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url.split("?")[0])
    out = page.evaluate(EMULATOR_CASES)
    assert out["cup"] == ["Y", "  X", "", ""]
    assert out["moves"] == ["abQ   W", " Z", "", ""]
    assert out["el"] == ["he", "", "", ""]
    assert out["ed"] == ["a", "", "", ""]
    assert out["bs"] == ["aX", "", "", ""]
    assert out["wrap"] == ["0123456789", "AB", "", ""]
    assert out["scroll"] == ["2", "3", "4", "5"]
    assert out["alt"] == [True, ["ALT", "", "", ""]]
    assert out["back"] == [False, ["main", "", "", ""]]
    assert out["split"] == "#cd3131"  # ESC [ 3 | 1 m R: a sequence split across writes
    assert out["reset"] == [[True, True, True], [False, False, False]]
    assert out["title"] == "my title"
    assert out["region"] == ["1", "3", "", "4"]  # LF at the region's bottom scrolls only the region
    assert out["lines"] == "┌─┐ lqk│x"  # DEC line drawing in G0, back to ASCII; G1 through SO/SI
    page.context.close()


MARKDOWN_CASES = r"""
async () => {
  const { render, safeUrl } = await import("/markdown.js");
  const box = document.createElement("div");
  box.append(...render([
    "# Title", "", "some **bold** and *em* and `code <b>`", "",
    "- one", "- [two](https://example.com/x)", "", "1. first", "2. second", "",
    "> quoted <script>x()</script>", "", "```js", "<img src=x onerror=alert(1)>", "```", "",
    "| a | b |", "| --- | --- |", "| 1 | [bad](javascript:alert(1)) |", "",
    "[data](data:text/html,hi) [mail](mailto:a@example.com) <https://example.org/>",
  ].join("\n")));
  return {
    tags: [...box.querySelectorAll("*")].map((n) => n.tagName.toLowerCase()),
    links: [...box.querySelectorAll("a")].map((a) => a.getAttribute("href")),
    text: box.textContent,
    safe: ["javascript:alert(1)", "JAVASCRIPT:x", " data:x", "vbscript:x", "/relative", "https://ok/"].map(safeUrl),
  };
}
"""


def test_markdown_builds_nodes_and_only_safe_links(browser: Any, daemon: Daemon) -> None:
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url.split("?")[0])
    out = page.evaluate(MARKDOWN_CASES)
    assert {"h3", "p", "strong", "em", "code", "ul", "ol", "li", "blockquote", "pre", "table", "td"} <= set(out["tags"])
    assert not {"img", "script", "b"} & set(out["tags"])
    assert out["links"] == ["https://example.com/x", "mailto:a@example.com", "https://example.org/"]
    assert "<img src=x onerror=alert(1)>" in out["text"] and "<script>x()</script>" in out["text"]
    assert "[bad](javascript:alert(1))" in out["text"] and "[data](data:text/html,hi)" in out["text"]
    assert out["safe"] == [None, None, None, None, None, "https://ok/"]
    page.context.close()
