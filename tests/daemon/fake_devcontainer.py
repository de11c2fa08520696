"""A stand-in for the Dev Container CLI and the container engine under it.

``python fake_devcontainer.py devcontainer ARGS`` answers as ``devcontainer``
does and ``python fake_devcontainer.py docker ARGS`` as ``docker`` does, in
their output shapes: ``up`` logs to stderr and prints its outcome object as
the last line of stdout (``{"outcome": "success", "containerId",
"remoteUser", "remoteWorkspaceFolder"}``, or ``{"outcome": "error",
"message", "description"}`` with exit 1); ``exec`` runs its command in the
container's workspace folder with the container's own ``HOME`` and ``PATH``
(stdin, stdout and stderr passed through); ``docker ps -aq --filter
label=devcontainer.local_folder=F``, ``stop`` and ``rm --force`` act on the
containers it made, and ``No such container`` is said for any other.

A "container" is a JSON record under ``$FAKE_DEVCONTAINER_STATE``: its id,
its folder, whether it runs, and the processes ``exec`` started in it, which
``stop`` and ``rm`` end as the engine would. ``$FAKE_DEVCONTAINER_PATH`` is
the ``PATH`` inside. A ``devcontainer.json`` whose image starts with
``no-such`` fails to come up, the way a pull of a missing image does; one
whose image is ``wait-for:<path>`` writes its pid to ``<path>.pid`` and
builds until ``<path>`` exists.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

STATE = Path(os.environ.get("FAKE_DEVCONTAINER_STATE", "/nonexistent"))


def _log(text: str) -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    print(f"[{stamp}Z] {text}", file=sys.stderr, flush=True)


def _records() -> list[dict[str, Any]]:
    folder = STATE / "containers"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _save(record: dict[str, Any]) -> None:
    (STATE / "containers").mkdir(parents=True, exist_ok=True)
    path = STATE / "containers" / f"{record['id']}.json"
    scratch = path.with_suffix(f".{os.getpid()}")
    scratch.write_text(json.dumps(record))
    os.replace(scratch, path)  # whole, for a reader at any moment


def _options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """``--name value`` options up to the first word that is not one, and the rest."""
    options: dict[str, str] = {}
    while len(args) >= 2 and args[0].startswith("--"):
        options[args[0][2:]] = args[1]
        args = args[2:]
    return options, args


def _config(folder: Path) -> Path | None:
    for candidate in (folder / ".devcontainer" / "devcontainer.json", folder / ".devcontainer.json"):
        if candidate.is_file():
            return candidate
    return None


def _outcome(value: dict[str, Any], code: int) -> int:
    print(json.dumps(value), flush=True)
    return code


def up(args: list[str]) -> int:
    options, _ = _options(args)
    folder = Path(options["workspace-folder"])
    _log("@devcontainers/cli 0.80.0 (fake). Node.js v20.0.0. linux 6.1.0 x64.")
    config = _config(folder)
    if config is None:
        said = f"Dev container config ({folder / '.devcontainer' / 'devcontainer.json'}) not found."
        return _outcome({"outcome": "error", "message": said, "description": said}, 1)
    image = json.loads(config.read_text()).get("image", "")
    engine = options.get("docker-path", "docker")
    _log(f"Start: Run: {engine} pull {image}")
    if image.startswith("no-such"):
        _log(f"Error response from daemon: pull access denied for {image}, repository does not exist")
        return _outcome(
            {
                "outcome": "error",
                "message": f"Command failed: {engine} pull {image}",
                "description": "An error occurred setting up the container.",
            },
            1,
        )
    if image.startswith("wait-for:"):  # a build that takes as long as the test wants
        gate = Path(image.removeprefix("wait-for:"))
        Path(f"{gate}.pid").write_text(str(os.getpid()))
        _log(f"Start: Build: waiting for {gate}")
        while not gate.exists():
            time.sleep(0.05)
    record = next((r for r in _records() if r["folder"] == str(folder)), None)
    if record is None:
        made = len(_records())
        ident = hashlib.sha256(f"{folder}:{made}".encode()).hexdigest()
        record = {"id": ident, "folder": str(folder), "running": False, "pids": []}
        _log(f"Start: Run: {engine} run --label devcontainer.local_folder={folder} {image}")
    if not record["running"]:
        _log(f"Start: Starting container {record['id'][:12]}")
        record["running"] = True
        _save(record)
    return _outcome(
        {
            "outcome": "success",
            "containerId": record["id"],
            "remoteUser": "root",
            "remoteWorkspaceFolder": f"/workspaces/{folder.name}",
        },
        0,
    )


def exec_(args: list[str]) -> int:
    options, command = _options(args)
    folder = options["workspace-folder"]
    record = next((r for r in _records() if r["folder"] == folder and r["running"]), None)
    if record is None:
        print("Error: Dev container not found.", file=sys.stderr, flush=True)
        return 1
    home = STATE / "homes" / record["id"]
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "FAKE_DEVCONTAINER"))}
    env.update(HOME=str(home), PATH=os.environ.get("FAKE_DEVCONTAINER_PATH", "/usr/bin:/bin"))
    record["pids"].append(os.getpid())
    _save(record)
    os.chdir(folder)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"exec: {command[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127


def _end(record: dict[str, Any]) -> None:
    for pid in record["pids"]:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    record["pids"], record["running"] = [], False


def docker(args: list[str]) -> int:
    if args[:1] == ["--version"]:
        print("Docker version 27.0.0, build fake")
        return 0
    if args[:1] == ["ps"]:
        wanted = next(a.split("=", 2)[2] for a in args if a.startswith("label=devcontainer.local_folder="))
        for record in _records():
            if record["folder"] == wanted:
                print(record["id"][:12])
        return 0
    if args[:1] in (["stop"], ["rm"]):
        container = args[-1]
        record = next((r for r in _records() if r["id"].startswith(container)), None)
        if record is None:
            print(f"Error response from daemon: No such container: {container}", file=sys.stderr)
            return 1
        _end(record)
        if args[0] == "rm":
            (STATE / "containers" / f"{record['id']}.json").unlink()
        else:
            _save(record)
        print(container)
        return 0
    print(f"docker: '{args[0] if args else ''}' is not a docker command.", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    role, args = argv[0], argv[1:]
    if role == "docker":
        return docker(args)
    if args[:1] == ["--version"]:
        print("0.80.0")
        return 0
    if args[:1] == ["up"]:
        return up(args[1:])
    if args[:1] == ["exec"]:
        return exec_(args[1:])
    print(f"devcontainer: unknown command {args[:1]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
