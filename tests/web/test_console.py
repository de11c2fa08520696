"""The web console in a real browser against a real daemon and the demo agent.

A person's first five minutes, a screenshot at each step: open the printed
URL, create a session, send ``permission`` and approve it, ``slow`` then
cancel, ``ask`` and answer, ``run ls`` and watch its terminal, ``write`` a file
and discard it from the changes pane, and come back after a daemon restart.
On the way, what the page reduced for each channel is compared with a fresh
snapshot from a Python client. And the door: without a token only a sign-in
line; an agent's HTML and ``javascript:`` links stay text; a page from
another origin cannot open the WebSocket.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.daemon.helpers import rpc
from tests.gitrepo import make_repo

from .conftest import TOKEN, WAIT_MS, Daemon, Shots


def _expect() -> Any:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    return expect


def _snapshot(url: str, channel: str) -> dict[str, Any]:
    """A fresh snapshot of ``channel`` from a Python client of the daemon."""

    async def fetch() -> dict[str, Any]:
        async with rpc(url) as client:
            await client.initialize("checker")
            reply = await client.call("subscribe", {"channel": channel})
            return reply["result"]["snapshot"]["state"]

    return trio.run(fetch)


def _same_as_host(page: Any, daemon: Daemon, channel: str) -> None:
    """The page's reduced state of ``channel`` equals the host's snapshot.

    Actions may still be in flight either way, so the two are read again
    until they agree (each read waits on the socket, not on a clock); 30
    disagreements in a row fail with the difference."""
    page_state = host_state = None
    for _ in range(30):
        host_state = _snapshot(daemon.url, channel)
        page_state = page.evaluate("(ch) => window.ahpd.states.get(ch)", channel)
        if page_state == host_state:
            return
    assert page_state == host_state


def _send(page: Any, text: str) -> None:
    page.fill("#composer-text", text)
    page.press("#composer-text", "Enter")


def _turns(page: Any) -> Any:
    return page.locator("#chat-log article.turn")


def _open(browser: Any, url: str) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.on("console", lambda message: print(f"page {message.type}: {message.text}"))
    page.on("pageerror", lambda error: print(f"page error: {error}"))
    page.goto(url)
    return page


def _with_a_new_session(browser: Any, daemon: Daemon, folder: Path) -> Any:
    """A started daemon's page, connected, with a session just created in ``folder`` and open."""
    expect = _expect()
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url)
    expect(page.locator("#connection")).to_have_text("connected")
    page.click("#new-session summary")
    page.fill("#create-folder", str(folder))
    page.click("#create-button")
    expect(page.locator("#composer")).to_be_visible()
    return page


def test_a_persons_first_five_minutes(browser: Any, daemon: Daemon, tmp_path: Path, shots: Shots) -> None:
    expect = _expect()
    repo = make_repo(tmp_path / "repo", {"README.md": "a repository\n", "alpha.txt": "a\n"})
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url)

    # -- open the printed URL: the token moves to sessionStorage and out of the address bar
    expect(page.locator("#connection")).to_have_text("connected")
    assert "tkn" not in page.url
    assert page.evaluate("sessionStorage.getItem('ahpd-token')") == TOKEN
    assert page.context.cookies() == []
    shots(page, "opened")

    # -- create a session in the repository, with the demo agent
    page.click("#new-session summary")
    page.select_option("#create-provider", "demo")
    page.fill("#create-folder", str(repo))
    page.click("#create-button")
    expect(page.locator("#composer")).to_be_visible()
    expect(page.locator("#sessions li.session.open")).to_have_count(1)
    shots(page, "session-created")
    session = page.evaluate("window.ahpdApp.session")
    chat = page.evaluate("window.ahpdApp.chat.channel")

    # -- permission: a tool call asks; approve it; the reply says so
    _send(page, "permission")
    approve = page.locator(".tool[data-status='pending-confirmation'] button.approve")
    expect(approve).to_be_visible()
    expect(page.locator("#sessions li.session.open .status")).to_have_text("input needed")
    shots(page, "permission-asked")
    approve.click()
    expect(_turns(page).nth(0).locator(".turn-state")).to_have_text("complete")
    expect(_turns(page).nth(0).locator(".reply")).to_contain_text("with your permission")
    expect(page.locator("#sessions li.session.open .status")).to_have_text("idle")
    shots(page, "permission-approved")
    _same_as_host(page, daemon, chat)

    # -- slow, then cancel it while it streams
    _send(page, "slow")
    expect(page.locator("#cancel")).to_be_visible()
    expect(_turns(page).nth(1).locator(".markdown")).not_to_have_count(0)
    shots(page, "slow-streaming")
    page.click("#cancel")
    expect(_turns(page).nth(1).locator(".turn-state")).to_have_text("cancelled")
    shots(page, "slow-cancelled")

    # -- ask: a question; answer yes
    _send(page, "ask")
    question = page.locator("form.question")
    expect(question).to_be_visible()
    shots(page, "asked")
    question.locator("label", has_text="yes").first.click()
    question.locator("button.answer-submit").click()
    expect(_turns(page).nth(2).locator(".turn-state")).to_have_text("complete")
    expect(_turns(page).nth(2).locator(".reply")).to_contain_text("you answered")
    shots(page, "answered")
    _same_as_host(page, daemon, chat)

    # -- run ls: approve, then watch its terminal
    _send(page, "run ls")
    approve = _turns(page).nth(3).locator("button.approve")
    expect(approve).to_be_visible()
    approve.click()
    expect(_turns(page).nth(3).locator(".turn-state")).to_have_text("complete")
    _turns(page).nth(3).locator("button.watch-terminal").first.click()
    expect(page.locator("#pane-terminal")).to_be_visible()
    expect(page.locator("#terminal-screen")).to_contain_text("alpha.txt")
    shots(page, "terminal")
    terminal = page.evaluate("window.ahpdApp.terminal.channel")
    _same_as_host(page, daemon, terminal)

    # -- write a file, then discard it from the changes pane (asked first)
    page.click(".tab[data-tab='chat']")
    _send(page, "write notes.txt hello from the web")
    approve = _turns(page).nth(4).locator("button.approve")
    expect(approve).to_be_visible()
    approve.click()
    expect(_turns(page).nth(4).locator(".turn-state")).to_have_text("complete")
    assert (repo / "notes.txt").read_text().startswith("hello from the web")
    page.click(".tab[data-tab='changes']")
    notes = page.locator("#changes-files details.file", has_text="notes.txt")
    expect(notes).to_be_visible()
    notes.locator("summary .path").click()
    expect(notes.locator(".diff .add")).to_contain_text("hello from the web")
    shots(page, "changes")
    changeset = page.evaluate("window.ahpdApp.changes.channel")
    _same_as_host(page, daemon, changeset)
    page.click("#changes-ops button.op-discard")
    expect(page.locator("#confirm")).to_be_visible()
    expect(page.locator("#confirm-text")).to_contain_text("cannot be undone")
    shots(page, "discard-confirmation")
    page.click("#confirm-yes")
    expect(page.locator("#changes-files details.file", has_text="notes.txt")).to_have_count(0)
    assert not (repo / "notes.txt").exists()
    shots(page, "discarded")

    # -- the inspector: the chat's envelopes and reduced state
    page.click(".tab[data-tab='inspector']")
    page.select_option("#inspector-channel", chat)
    expect(page.locator("#inspector-log li.envelope").first).to_be_visible()
    expect(page.locator("#inspector-tree")).to_contain_text("turns")
    shots(page, "inspector")
    _same_as_host(page, daemon, session)

    # -- the daemon restarts on the same ports: the page comes back by itself
    port, web_port = daemon.port, daemon.web_port
    daemon.stop()
    expect(page.locator("#connection")).to_contain_text("reconnecting")
    shots(page, "daemon-gone")
    daemon.start("--port", str(port), "--web-port", str(web_port))
    expect(page.locator("#connection")).to_have_text("connected")
    page.click(".tab[data-tab='chat']")
    _send(page, "hello again")
    expect(_turns(page).nth(5).locator(".turn-state")).to_have_text("complete")
    expect(_turns(page).nth(5).locator(".reply")).to_contain_text("hello again")
    shots(page, "reconnected")
    _same_as_host(page, daemon, chat)
    _same_as_host(page, daemon, "ahp-root://")
    page.context.close()


def test_without_a_token_the_page_shows_only_a_sign_in_line(browser: Any, daemon: Daemon, shots: Shots) -> None:
    expect = _expect()
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url.split("?")[0])
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#signin-line")).to_contain_text("Sign in")
    expect(page.locator("#console")).to_be_hidden()
    assert page.evaluate("window.ahpd === undefined")  # no connection was even tried
    shots(page, "sign-in")
    # a wrong token: still only the sign-in line, now saying it could not connect
    page.fill("#signin-token", "not-the-token")
    page.click("#signin-form button")
    expect(page.locator("#signin-line")).to_contain_text("Could not connect")
    expect(page.locator("#console")).to_be_hidden()
    # the right one signs in
    page.fill("#signin-token", TOKEN)
    page.click("#signin-form button")
    expect(page.locator("#connection")).to_have_text("connected")
    expect(page.locator("#console")).to_be_visible()
    page.context.close()


def test_an_agents_html_and_script_links_stay_text(browser: Any, daemon: Daemon, tmp_path: Path, shots: Shots) -> None:
    expect = _expect()
    page = _with_a_new_session(browser, daemon, tmp_path)
    hostile = (
        '<img src=x onerror="window.xssflag=1"> [click me](javascript:window.xssflag=2) '
        "<script>window.xssflag=3</script> [fine](https://example.com/) <b onmouseover=alert(1)>bold</b>"
    )
    _send(page, f"/echo {hostile}")
    expect(_turns(page).nth(0).locator(".turn-state")).to_have_text("complete")
    reply = _turns(page).nth(0).locator(".reply")
    expect(reply).to_contain_text('<img src=x onerror="window.xssflag=1">')
    expect(reply).to_contain_text("[click me](javascript:window.xssflag=2)")
    shots(page, "hostile-reply")
    assert page.locator("#chat-log img").count() == 0
    assert page.locator("#chat-log script").count() == 0
    assert page.locator("#chat-log b").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    assert page.locator("#chat-log a[href='https://example.com/']").count() == 1
    assert page.evaluate("window.xssflag") is None
    page.context.close()


class _ForeignPage(http.server.BaseHTTPRequestHandler):
    """Another origin: a page that tries the daemon's WebSocket with the token in hand."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = (
            "<!doctype html><title>trying</title><script>"
            f"const ws = new WebSocket({self.target!r});"
            "ws.onopen = () => { document.title = 'opened'; };"
            "ws.onerror = () => { if (document.title !== 'opened') document.title = 'refused'; };"
            "</script>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def foreign_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ForeignPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_from_another_origin_cannot_connect(
    browser: Any, daemon: Daemon, foreign_server: http.server.ThreadingHTTPServer, shots: Shots
) -> None:
    expect = _expect()
    daemon.start("--port", "0", "--web-port", "0")
    _ForeignPage.target = daemon.url  # ws://127.0.0.1:PORT/?tkn=TOKEN: the token does not help
    page = _open(browser, f"http://127.0.0.1:{foreign_server.server_address[1]}/")
    expect(page).to_have_title("refused")
    shots(page, "foreign-origin-refused")
    # the console's own page, same browser, connects
    own = _open(browser, daemon.web_url)
    expect(own.locator("#connection")).to_have_text("connected")
    page.context.close()
    own.context.close()


def test_queue_a_message_and_deny_a_tool_call(browser: Any, daemon: Daemon, tmp_path: Path, shots: Shots) -> None:
    expect = _expect()
    page = _with_a_new_session(browser, daemon, tmp_path)
    chat = page.evaluate("window.ahpdApp.chat.channel")
    # a message sent while a turn runs is queued, and runs after it
    _send(page, "slow")
    expect(page.locator("#send")).to_have_text("Queue")
    _send(page, "/echo queued after the slow one")
    expect(page.locator("#chat-queue .queued")).to_contain_text("queued after the slow one")
    shots(page, "queued")
    expect(_turns(page).nth(1).locator(".turn-state")).to_have_text("complete")
    expect(_turns(page).nth(1).locator(".reply")).to_contain_text("queued after the slow one")
    expect(page.locator("#chat-queue .queued")).to_have_count(0)
    # deny: the call is cancelled and never runs
    _send(page, "permission")
    deny = _turns(page).nth(2).locator("button.deny")
    expect(deny).to_be_visible()
    deny.click()
    expect(_turns(page).nth(2).locator(".turn-state")).to_have_text("complete")
    expect(_turns(page).nth(2).locator(".tool")).to_have_attribute("data-status", "cancelled")
    shots(page, "denied")
    _same_as_host(page, daemon, chat)
    # a second chat in the session: made, talked in, and the first one is still there
    page.click("#new-chat")
    expect(page.locator("#chat-picker option")).to_have_count(2)
    expect(_turns(page)).to_have_count(0)
    _send(page, "/echo from the side chat")
    expect(_turns(page).nth(0).locator(".reply")).to_contain_text("from the side chat")
    side = page.evaluate("window.ahpdApp.chat.channel")
    assert side != chat
    shots(page, "second-chat")
    _same_as_host(page, daemon, side)
    page.select_option("#chat-picker", chat)
    expect(_turns(page)).to_have_count(3)
    page.context.close()


def test_create_a_session_with_a_chosen_model(browser: Any, daemon: Daemon, tmp_path: Path, shots: Shots) -> None:
    expect = _expect()
    daemon.start("--port", "0", "--web-port", "0")
    page = _open(browser, daemon.web_url)
    expect(page.locator("#connection")).to_have_text("connected")
    page.click("#new-session summary")
    page.select_option("#create-provider", "demo")
    # the agent's models arrive once its first start told the host (root/agentsChanged)
    expect(page.locator("#create-model option[value='demo-deep']")).to_have_count(1)
    page.select_option("#create-model", "demo-deep")
    page.fill("#create-folder", str(tmp_path))
    shots(page, "model-chosen")
    page.click("#create-button")
    expect(page.locator("#composer")).to_be_visible()
    session = page.evaluate("window.ahpdApp.session")
    page.wait_for_function(
        "(s) => ((window.ahpd.states.get(s) || {}).config || {values: {}}).values.model === 'demo-deep'",
        arg=session,
        timeout=WAIT_MS,
    )
    _same_as_host(page, daemon, session)
    page.context.close()


def test_archive_then_dispose_of_a_session(browser: Any, daemon: Daemon, tmp_path: Path, shots: Shots) -> None:
    expect = _expect()
    page = _with_a_new_session(browser, daemon, tmp_path)
    session = page.evaluate("window.ahpdApp.session")
    row = page.locator(f"#sessions li.session[data-uri='{session}']")
    page.click("#archive")
    expect(row.locator(".status")).to_have_text("archived")
    expect(page.locator("#archive")).to_have_text("Unarchive")
    _same_as_host(page, daemon, session)
    page.click("#archive")
    expect(row.locator(".status")).to_have_text("idle")
    page.click("#dispose")
    expect(page.locator("#confirm-text")).to_contain_text("Dispose")
    page.click("#confirm-yes")
    expect(row).to_have_count(0)  # root/sessionRemoved
    expect(page.locator("#chat-empty")).to_be_visible()
    shots(page, "disposed")
    page.context.close()
