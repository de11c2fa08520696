"""Claude Code's boot probe and transcript catalogue, in a process of their own.

``python -m ahpd.backends.claude.catalogue WHAT [ID]`` with the backend as
JSON on standard input prints one JSON answer:

* ``probe``: what the CLI said at ``initialize`` (``serverInfo``), its MCP
  servers and plugins (:meth:`ClaudeBackend.probe_here`), and the stored
  conversations as ``list`` says them (``conversations``, null when they
  could not be read), since the SDK is loaded for the probe anyway;
* ``list``: the stored conversations (the transcripts' catalogue);
* ``history ID`` / ``subagents ID``: one stored conversation's turns, or its
  subagents' by spawning call;
* ``delete ID``: whether a transcript was there to delete.

Every one of these needs the Claude Agent SDK, which is ~60 MB and most of a
second to import; asked here, the daemon holds none of it until a Claude
conversation of its own starts (after which it asks in-process, the SDK
being loaded anyway). The daemon's side is
:meth:`~ahpd.backends.claude.backend.ClaudeBackend._ask`. The backend comes
on standard input, not on the command line, because its ``env`` may hold a
credential. A failure is said on standard error, with exit status 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import attrs
import trio

from ahpd.backends.claude import transcripts
from ahpd.backends.claude.backend import ClaudeBackend


async def answer(backend: ClaudeBackend, what: str, rest: list[str], cwd: str | None) -> Any:
    if what == "probe":
        try:
            conversations: list[Any] | None = [attrs.asdict(c) for c in await transcripts.list_conversations()]
        except Exception as exc:  # noqa: BLE001 - the listing is asked again on its own; the probe goes on
            print(f"ahpd: {backend.provider}: list failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            conversations = None
        await backend.probe_here(Path(cwd) if cwd else None)
        return {
            "serverInfo": backend.server_info,
            "mcpServers": backend.mcp_servers,
            "plugins": backend.plugins,
            "conversations": conversations,
        }
    if what == "list":
        return [attrs.asdict(c) for c in await transcripts.list_conversations()]
    if what == "history":
        return [attrs.asdict(t) for t in await transcripts.read_history(rest[0])]
    if what == "subagents":
        return {call: attrs.asdict(t) for call, t in (await transcripts.read_subagents(rest[0])).items()}
    if what == "delete":
        return await transcripts.delete_conversation(rest[0])
    raise ValueError(f"no such question: {what!r}")


def main() -> None:
    what, *rest = sys.argv[1:]
    spec = json.loads(sys.stdin.read() or "{}")
    backend = ClaudeBackend(
        spec.get("provider") or "claude",
        cli_path=spec.get("cli_path"),
        env=spec.get("env") or {},
        model=spec.get("model"),
        start_timeout=float(spec.get("start_timeout") or 60),
        shutdown_timeout=float(spec.get("shutdown_timeout") or 20),
    )
    try:
        result = trio.run(answer, backend, what, rest, spec.get("cwd"))
    except Exception as exc:  # noqa: BLE001 - a child's one answer to any failure is "could not", said
        print(f"ahpd: {backend.provider}: {what} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
    try:
        print(json.dumps(result), flush=True)
    except BrokenPipeError:  # the daemon stopped meanwhile: nobody is waiting for the answer
        pass


if __name__ == "__main__":
    main()
