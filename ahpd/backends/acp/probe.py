"""``python -m ahpd.backends.acp.probe SPEC``: an ACP agent's boot probe, in
a process of its own (see :meth:`AcpBackend.probe`). SPEC is the backend as
JSON; what the probe learned is printed as JSON: ``{"models": [...],
"commands": [...], "modes": ..., "configOptions": [...], "conversations": [...]}``
(empty when the agent could not be asked, which it says on standard error)."""

from __future__ import annotations

import json
import sys

import attrs

from ahpd.backends import _child
from ahpd.backends.acp.backend import AcpBackend


async def _learn(spec: dict) -> dict:
    backend = AcpBackend(
        spec["provider"],
        spec["command"],
        spec.get("args") or (),
        spec.get("env") or {},
        call_timeout=float(spec.get("call_timeout") or 30),
    )
    await backend.learn()
    return {
        "models": backend.agent_info()["models"],
        "commands": backend.commands,
        "modes": backend.modes,
        "configOptions": backend.config_options,
        "conversations": None if backend.listed is None else [attrs.asdict(c) for c in backend.listed],
    }


def main() -> None:
    learned = _child.run(_learn, json.loads(sys.argv[1]))
    try:
        print(json.dumps(learned), flush=True)
    except BrokenPipeError:  # the daemon stopped meanwhile: nobody is waiting for the answer
        pass


if __name__ == "__main__":
    main()
