"""ahpd installed as a tool, the way README.md says, then used the way a person would: ``ahpd`` on
``PATH`` and ``man ahpd`` finding its page, with no virtual environment activated.

pipx and ``uv tool install`` each make a virtual environment of the tool's own and link its
commands into ``~/.local/bin``; pipx (1.5 and later) also links its man pages into
``~/.local/share/man``, which ``man`` searches because ``~/.local/bin`` is on ``PATH``. The fast
test below does those steps itself over a real ``pip install`` of a copy of the clone into a
fresh venv (the dependencies are this interpreter's, named by a ``.pth`` file, instead of
installed from an index again); the slow one runs the real pipx.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from .conftest import copy_repository

pytestmark = pytest.mark.skipif(shutil.which("man") is None, reason="man is not installed")


def as_a_user(home: Path, *path: Path) -> dict[str, str]:
    """A login's environment: its HOME, its PATH (nothing of this test's venv), UTF-8."""
    return {
        "HOME": str(home),
        "PATH": os.pathsep.join([*map(str, path), "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "MANWIDTH": "80",
    }


def run(argv: list[str | Path], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def _builds_here() -> bool:
    """Whether this environment's setuptools can build ahpd (the test extra asks for it); an
    older venv builds it the way pip does by default, fetching setuptools into isolation."""
    try:
        return Version(metadata.version("setuptools")) >= Version("77")
    except metadata.PackageNotFoundError:
        return False


def fresh_venv(clone: Path, venv: Path) -> Path:
    """A venv of its own holding a real (not editable) install of ``clone``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            "--no-deps",
            *(["--no-build-isolation"] if _builds_here() else []),
            str(clone),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return venv


def test_installed_as_a_tool_ahpd_is_on_path_and_man_finds_its_page(tmp_path: Path) -> None:
    clone = copy_repository(tmp_path / "clone")
    home = tmp_path / "home"
    tool = fresh_venv(clone, home / ".local" / "share" / "pipx" / "venvs" / "ahpd")
    page = tool / "share" / "man" / "man1" / "ahpd.1"
    assert page.read_bytes() == (clone / "man" / "ahpd.1").read_bytes()

    # What `pipx install` leaves: the commands linked into ~/.local/bin, the page into ~/.local/share/man.
    bin_dir, man_dir = home / ".local" / "bin", home / ".local" / "share" / "man" / "man1"
    bin_dir.mkdir(parents=True)
    man_dir.mkdir(parents=True)
    for command in ("ahpd", "ahpd-demo-agent"):
        (bin_dir / command).symlink_to(tool / "bin" / command)
    (man_dir / "ahpd.1").symlink_to(page)

    user = as_a_user(home, bin_dir)
    version = run(["ahpd", "--version"], user, tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("ahpd "), version.stdout + version.stderr
    where = run(["python3", "-c", "import shutil; print(shutil.which('ahpd'))"], user, tmp_path)
    assert where.stdout.strip() == str(bin_dir / "ahpd")
    found = run(["man", "-w", "ahpd"], user, tmp_path)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).resolve() == page.resolve()
    shown = run(["man", "ahpd"], user, tmp_path)
    assert shown.returncode == 0 and "ahpd ready:" in shown.stdout, shown.stderr
    agent = run(["ahpd-demo-agent", "--help"], user, tmp_path)
    assert agent.returncode == 0, agent.stderr

    # What `uv tool install` leaves: the commands linked, no page; --help names it.
    (man_dir / "ahpd.1").unlink()
    assert run(["man", "-w", "ahpd"], user, tmp_path).returncode != 0
    helped = run(["ahpd", "--help"], user, tmp_path)
    assert f"\n  man {page}\n" in helped.stdout, helped.stdout


def test_a_venv_not_activated_names_its_page_and_an_activated_one_finds_it(tmp_path: Path) -> None:
    """README's own way, ``.venv/bin/ahpd`` with the venv not activated: ``man ahpd`` cannot know
    the venv, so ``ahpd --help`` names the page; with the venv's bin on PATH, man finds it."""
    clone = copy_repository(tmp_path / "clone")
    venv = fresh_venv(clone, clone / ".venv")
    page = venv / "share" / "man" / "man1" / "ahpd.1"
    plain = as_a_user(tmp_path / "home")
    assert run(["man", "-w", "ahpd"], plain, clone).returncode != 0  # what the issue saw

    helped = run([".venv/bin/ahpd", "--help"], plain, clone)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.endswith(f"or where man does not find it:\n  man {page}\n"), helped.stdout
    named = run(["man", page], plain, clone)
    assert named.returncode == 0 and "ahpd ready:" in named.stdout, named.stderr

    activated = as_a_user(tmp_path / "home", venv / "bin")
    found = run(["man", "-w", "ahpd"], activated, clone)
    assert found.returncode == 0 and Path(found.stdout.strip()) == page, found.stdout + found.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pipx", path=os.path.dirname(sys.executable)) is None, reason="pipx not installed")
def test_pipx_install_from_the_clone(tmp_path: Path) -> None:
    """The real pipx, which installs the dependencies from the package index (slow for that:
    it needs the index, and half a minute here on a warm cache)."""
    clone = copy_repository(tmp_path / "clone")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "PIPX_HOME": str(home / ".local" / "share" / "pipx"),
        "PIPX_BIN_DIR": str(home / ".local" / "bin"),
        "PIPX_MAN_DIR": str(home / ".local" / "share" / "man"),
    }
    pipx = Path(sys.executable).parent / "pipx"
    install = run([pipx, "install", "--python", sys.executable, clone], env, tmp_path)
    assert install.returncode == 0, install.stdout + install.stderr
    user = as_a_user(home, home / ".local" / "bin")
    assert run(["ahpd", "--version"], user, tmp_path).stdout.startswith("ahpd ")
    found = run(["man", "-w", "ahpd"], user, tmp_path)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).resolve().parts[-4:] == ("share", "man", "man1", "ahpd.1")
