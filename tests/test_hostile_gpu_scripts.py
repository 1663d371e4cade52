"""The GPU scripts' preamble against a careless environment: a download that fails keeps the last
good wheels, and a PYTHON that is missing, not Python, or lacks the packages is one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", f"scripts/{name}", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_a_failed_download_keeps_the_last_good_wheels(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    good = {f"w{i}.whl" for i in range(9)}
    for name in good:
        (wheels / name).write_bytes(b"a wheel of the last good run")
    unreachable = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                   "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PIP_FIND_LINKS": ""}
    proc = _script("gpu-wheels.sh", {**unreachable, "PYTHON": sys.executable, "SCALING_GPU_WHEELS": str(wheels)})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "the download failed" in proc.stderr, proc.stderr
    assert f"{wheels} is left as it was" in proc.stderr and "Traceback" not in proc.stderr
    assert {p.name for p in wheels.iterdir()} == good and sorted(p.name for p in tmp_path.iterdir()) == ["wheels"]


@pytest.mark.parametrize("script, args", [("gpu-wheels.sh", ()), ("gpu-check.sh", ("--dry-run",))])
@pytest.mark.parametrize("python", ["/nonexistent/python", "/usr/bin/false"])
def test_a_python_that_does_not_run_is_one_line(script: str, args: tuple[str, ...], python: str,
                                                tmp_path: Path) -> None:
    proc = _script(script, {"PYTHON": python, "SCALING_GPU_WHEELS": str(tmp_path / "wheels")}, *args)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and f"{python} (from $PYTHON) is not a Python" in proc.stderr, proc.stderr
    assert not (tmp_path / "wheels").exists()


def test_a_python_without_the_packages_to_pin_is_one_line(tmp_path: Path) -> None:
    bare = tmp_path / "bare-python"  # the same interpreter without site-packages: nothing to pin
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    bare.chmod(0o755)
    proc = _script("gpu-wheels.sh", {"PYTHON": str(bare), "SCALING_GPU_WHEELS": str(tmp_path / "wheels")})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "has no pydantic" in proc.stderr and not (tmp_path / "wheels").exists()
