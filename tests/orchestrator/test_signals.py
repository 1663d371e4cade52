"""Ctrl-C while the sweep starts Ray: the start completes, then the interrupt is raised and Ray is shut down.

A Ctrl-C inside ``ray.init`` left a half-started Ray that the interpreter's exit tore down under its
own threads (one interrupt in nine ended in SIGSEGV after "interrupted"). The signals here are real
(``os.kill`` of this process); Ray's start itself is replaced by a stand-in that is interrupted
half-way, because the moment a user's Ctrl-C lands inside it cannot be caused on demand.
A repeated-interrupt run of a real simulated sweep is benchmarks/bench_interrupts.py.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from scaling.orchestrator.signals import deferred_interrupts


def test_a_signal_inside_a_deferred_block_is_raised_after_it_completes() -> None:
    steps = []
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # Python runs the handler here; the block goes on
            steps.append("finished")
    assert steps == ["finished"] and signal.getsignal(signal.SIGINT) is before
    with deferred_interrupts():  # no signal: nothing raised
        steps.append("quiet")
    assert steps == ["finished", "quiet"]


def test_ctrl_c_while_ray_starts_lets_the_start_finish_and_shuts_ray_down(
        tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling.db import connect
    from scaling.orchestrator import sweep as sweep_module

    plan = tmp_path / "p.yaml"
    plan.write_text(f"""name: starting
runs_dir: {tmp_path / 'runs'}
simulate:
  law: {{E: 1.69, A: 406.4, B: 410.7, alpha: 0.34, beta: 0.28}}
model: {{vocab_size: 1024, context: 128}}
train: {{batch_tokens: 512}}
resources: {{num_cpus: 1}}
grid:
  - tokens: [1.0e+6, 2.0e+6]
    models: [{{n_layer: 2, d_model: 16, n_head: 2}}, {{n_layer: 2, d_model: 32, n_head: 2}}]
""")
    events = []

    def start_interrupted(address: object, num_cpus: object) -> bool:
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, half-way through the start
        time.sleep(0.05)
        events.append("started")
        return True

    class Ray:  # what run_sweep's clean-up calls on the Ray it started
        @staticmethod
        def shutdown() -> None:
            events.append("shut down")

    monkeypatch.setattr(sweep_module, "start_ray", start_interrupted)
    monkeypatch.setitem(__import__("sys").modules, "ray", Ray)
    sigterm = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        sweep_module.run_sweep(plan, db=sqlite_url, fit=False, report=False, echo=lambda _: None)
    assert events == ["started", "shut down"]
    assert signal.getsignal(signal.SIGTERM) is sigterm
    assert set(connect(sqlite_url).runs(sweep="starting")["status"]) == {"pending"}


def test_ctrl_c_inside_a_models_serializer_stays_an_interrupt() -> None:
    """pydantic wraps whatever a custom serializer raises (the run spec's data section has one); a
    Ctrl-C landing there (a real SIGINT) must reach the CLI as KeyboardInterrupt, not a traceback."""
    from pydantic import model_serializer

    from scaling.schema import StrictModel

    class Section(StrictModel):
        x: int = 1

        @model_serializer(mode="wrap")
        def interrupted(self, handler: object) -> object:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            return handler(self)  # type: ignore[operator]

    class Spec(StrictModel):
        section: Section = Section()

    # Python's own Ctrl-C handler, as in the CLI: a handler an earlier test's Ray left in this process
    # would run instead of raising.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for dump in (lambda: Spec().model_dump(mode="json"), lambda: Spec().model_dump_json()):
            with pytest.raises(KeyboardInterrupt):
                dump()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_the_command_line_loads_is_one_line_and_exit_130() -> None:
    """A real SIGINT, sent at a fixed point of the CLI's imports (when its command modules load)."""
    import subprocess
    import sys

    code = (
        "import os, signal, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'scaling.cli.sweep_cmds':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from scaling.cli import main\n"
        "main(['--help'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 130 and done.stderr.strip() == "interrupted", done.stderr
