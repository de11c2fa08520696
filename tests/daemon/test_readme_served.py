"""README's "What it serves" tables say what the host serves and refuses
(issue 27, item 10).

Compared with the host's own tables (``ahpd.host.table``: commands,
notifications, client-action rules) and the protocol's client-dispatchable
list; what the README says is refused is asked of a real daemon, which must
refuse it with the reason the row gives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ahpd import state
from ahpd.host import table
from ahpd.host.kernel.dispatch import OWNER_DISPATCHED
from ahpd.protocol import model

from ..conftest import ROOT
from .helpers import daemon_in_process, rpc

ROW = re.compile(r"^\| (?P<names>`[^|]+?) \| (?P<status>served|refused) \|(?P<notes>[^|]*)\|$")

#: Which family's table an action belongs in, by its prefix.
FAMILY_OF_PREFIX = {
    "root": "Connection and root",
    "session": "Sessions",
    "chat": "Chats",
    "terminal": "Terminals",
    "resourceWatch": "Resources",
    "changeset": "Changesets",
    "automation": "Automations",
    "automationRun": "Automations",
    "annotations": "Annotations",
    "canvas": "Canvases",
}


def _rows() -> list[tuple[str, str, str, str]]:
    """(family, name, served|refused, notes), one per name the README lists."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## What it serves\n", 1)[1].split("\n## ", 1)[0]
    family = ""
    rows: list[tuple[str, str, str, str]] = []
    for line in section.splitlines():
        if line.startswith("### "):
            family = line[4:]
        elif match := ROW.match(line):
            for name in re.findall(r"`([^`]+)`", match["names"]):
                rows.append((family, name, match["status"], match["notes"]))
        else:
            assert not line.startswith("| `"), f"a row the test cannot read: {line}"
    return rows


def test_every_command_and_client_action_has_one_row_that_matches_the_host() -> None:
    rows = _rows()
    names = [name for _, name, _, _ in rows]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)

    listed_commands = {name: status for _, name, status, _ in rows if name not in model.ACTIONS}
    listed_actions = {name: status for _, name, status, _ in rows if name in model.ACTIONS}
    registered = set(table.COMMANDS) | set(table.NOTIFICATIONS)
    declared_unserved = set(model.COMMANDS) - set(table.COMMANDS)
    assert set(listed_commands) == registered | declared_unserved
    assert {n for n, s in listed_commands.items() if s == "refused"} >= declared_unserved

    dispatchable = {a for a, ok in state.CLIENT_DISPATCHABLE.items() if ok and a not in model.EXPERIMENTAL}
    assert {n for n, s in listed_actions.items() if s == "served"} == dispatchable | OWNER_DISPATCHED
    # Refused: the actions a client could name but this host does not serve
    # (dispatch refuses them before any rule); the host's own are one sentence.
    assert {n for n, s in listed_actions.items() if s == "refused"} == model.EXPERIMENTAL & set(model.ACTIONS)
    for family, name, _, _ in rows:
        if name in model.ACTIONS:
            assert family == FAMILY_OF_PREFIX[name.split("/")[0]], (name, family)
        elif name.startswith("vscode/") or name in ("shutdown", "diagnosticsFetch"):
            assert family.startswith("VS Code"), (name, family)


async def test_what_the_readme_says_is_refused_is_refused_with_its_reason(tmp_path: Path) -> None:
    refused = [(name, notes) for _, name, status, notes in _rows() if status == "refused"]
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon, rpc(daemon.url) as client:
        await client.initialize("readme")
        for seq, (name, notes) in enumerate(refused, 1):
            if name in model.ACTIONS:
                if name == "canvas/stateChanged":
                    continue  # the schema wants a whole canvas before the rule is reached; EXPERIMENTAL above
                await client.notify(
                    "dispatchAction", {"channel": "ahp-root://", "clientSeq": seq, "action": {"type": name}}
                )
                while not (
                    (note := await client.next_note()).get("method") == "action"
                    and note["params"].get("origin", {}).get("clientSeq") == seq
                ):
                    pass
                reason = note["params"]["rejectionReason"]
            else:
                reply = await client.call(name, {})
                assert reply["error"]["code"] == -32601, (name, reply)
                assert "-32601" in notes, (name, notes)
                reason = reply["error"]["message"]
            said = "experimental" if "experimental" in notes else "no dev container relay"
            assert said in reason, (name, reason, json.dumps(notes))
