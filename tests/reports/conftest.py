"""Fixtures for the report tests: synthetic sweeps in real SQLite files, and headless Chromium.

The sweeps are built once per session (through the real ``scaling.db.Store``) and shared by the
HTML and browser tests. The browser is Debian's ``chromium`` (``$SCALING_CHROMIUM``, else
``/usr/bin/chromium``) driven by Playwright, with a fresh user-data folder; the tests that need it
skip, saying so, when it is not installed (CI installs it).
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import report_synth as S  # noqa: E402
from report_synth import HOSTILE, HOSTILE_ERROR, HOSTILE_TAG  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def artifacts_dir() -> Path:
    """Where screenshots are kept: ``$SCALING_ARTIFACTS`` or ``<repo>/artifacts/reports``."""
    d = Path(os.environ.get("SCALING_ARTIFACTS", REPO / "artifacts")) / "reports"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _sqlite(tmp: Path, name: str) -> str:
    return f"sqlite:///{tmp / (name + '.db')}"


@pytest.fixture(scope="session")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, S.SweepSpec]]:
    """Named synthetic databases: typical, one_run, hostile (failures, spikes, hostile names), pending."""
    tmp = tmp_path_factory.mktemp("report-dbs")
    out: dict[str, tuple[str, S.SweepSpec]] = {}
    out["typical"] = (url := _sqlite(tmp, "typical"), S.build(url, S.SweepSpec(sweep="typical", spikes=(4,))))
    out["one_run"] = (
        url := _sqlite(tmp, "one_run"),
        S.build(url, S.SweepSpec(sweep="one-run", budgets=(3e13,), sizes_per_budget=1)),
    )
    out["hostile"] = (
        url := _sqlite(tmp, "hostile"),
        S.build(
            url,
            S.SweepSpec(
                sweep=HOSTILE,
                budgets=(1e13, 3e13),
                sizes_per_budget=3,
                failures=(1, 3),
                spikes=(0,),
                name_of=lambda i: HOSTILE if i % 2 == 0 else f"run-{i}",
                tags_of=lambda i: {"note": HOSTILE_TAG},
                error_text=HOSTILE_ERROR,
                plan={"name": HOSTILE, "note": "</script><!--"},
            ),
        ),
    )
    out["pending"] = (
        url := _sqlite(tmp, "pending"),
        S.build(url, S.SweepSpec(sweep="not-started", budgets=(1e13,), sizes_per_budget=3, pending=(0, 1, 2))),
    )
    return out


@pytest.fixture(scope="session")
def answer_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(database URL, report path) of :func:`report_synth.build_answer_sweep`: hyperparameter groups and a
    task, so the first screen has N*, D*, loss, lr, batch and an accuracy. Written once (its fits take seconds)."""
    from scaling.reports import write_report

    tmp = tmp_path_factory.mktemp("report-answer")
    url = _sqlite(tmp, "answer")
    S.build_answer_sweep(url)
    return url, write_report(url, "answer", tmp / "answer.html", fit="memory")



@pytest.fixture(scope="session")
def typical_fitted(sweeps) -> Any:
    """The typical sweep's :class:`~scaling.reports.report_data.ReportData` with its laws fitted for the
    report (``fit="memory"``), loaded once: the tests that read it take a copy (:func:`typical_data`)."""
    from scaling.reports.report_data import ReportData

    url, _ = sweeps["typical"]
    return ReportData.load(url, "typical", fit="memory")


@pytest.fixture
def typical_data(typical_fitted) -> Any:
    """A copy of :func:`typical_fitted` of the test's own, free to change (its laws' doubts, runs, notes)."""
    return copy.deepcopy(typical_fitted)

#: Scrolls to each figure in turn (a figure is drawn when it nears the viewport), then back to the top.
SCROLL_TO_EACH_FIGURE = """async () => {
    for (const d of document.querySelectorAll('.figure')) {
        d.scrollIntoView();
        await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r())));
    }
    window.scrollTo(0, 0);
}"""


#: True once every figure of the page is drawn.
ALL_DRAWN = "Array.from(document.querySelectorAll('.figure')).every(d => d.hasAttribute('data-rendered'))"


@dataclass
class PageReport:
    """What a page did when loaded: console messages, page errors, dialogs, figures drawn."""

    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    figures: dict[str, int] = field(default_factory=dict)  # div id -> plotted traces
    text: str = ""
    title: str = ""
    screenshot: Path | None = None
    result: Any = None

    @property
    def console_errors(self) -> list[str]:
        return [t for kind, t in self.console if kind == "error"] + self.errors


class Browser:
    """A headless Chromium (fresh profile) that opens report files and reports what happened."""

    def __init__(self, executable: str) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self._profile = tempfile.mkdtemp(prefix="scaling-chromium-")
        self._ctx = self._pw.chromium.launch_persistent_context(
            self._profile, executable_path=executable, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000}, offline=True,
        )

    def open(self, path: Path, shot_name: str, actions: Callable[[Any], Any] | None = None, *,
             draw_all: bool = True) -> PageReport:
        """Load ``path``, scroll to every figure and wait for each to be drawn (``draw_all=False``: neither),
        record what happened; ``actions(page)`` runs last and its result is kept in ``PageReport.result``."""
        rep = PageReport()
        page = self._ctx.new_page()
        page.on("console", lambda m: rep.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: rep.errors.append(str(e)))

        def on_dialog(d) -> None:  # a dialog means user text ran as script
            rep.dialogs.append(d.message)
            d.dismiss()

        page.on("dialog", on_dialog)
        try:
            page.goto(path.resolve().as_uri(), wait_until="load")
            if draw_all:
                page.evaluate(SCROLL_TO_EACH_FIGURE)  # figures are drawn as they near the viewport
                page.wait_for_function(ALL_DRAWN, timeout=60_000)
            rep.figures = page.evaluate(
                """() => Object.fromEntries(Array.from(document.querySelectorAll('.figure')).map(d => [d.id,
                     d.querySelector('svg.main-svg') ? d.querySelectorAll(
                       '.scatterlayer .trace, .contourlayer .contour, .barlayer .trace').length : -1]))"""
            )
            rep.text = page.inner_text("body")
            rep.title = page.title()
            rep.screenshot = artifacts_dir() / f"{shot_name}.png"
            page.screenshot(path=str(rep.screenshot), full_page=True)
            print(f"screenshot: {rep.screenshot}")
            if actions is not None:
                rep.result = actions(page)
        finally:
            page.close()
        return rep

    def close(self) -> None:
        self._ctx.close()
        self._pw.stop()
        shutil.rmtree(self._profile, ignore_errors=True)


def chromium_path() -> str | None:
    exe = os.environ.get("SCALING_CHROMIUM") or "/usr/bin/chromium"
    return exe if Path(exe).is_file() else shutil.which("chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    exe = chromium_path()
    if not exe:
        pytest.skip("Chromium is not installed (set $SCALING_CHROMIUM or install Debian's chromium)")
    b = Browser(exe)
    try:
        yield b
    finally:
        b.close()


TINY_PLAN = """\
name: tiny-real
runs_dir: {runs_dir}
data: {{source: builtin}}
model: {{aspect_ratio: 8, head_size: 8, vocab_size: 256, context: 32}}
conventions: {{params: non_embedding, flops: 6N}}
train:
  precision: fp32
  batch_tokens: 256
  optimizer: {{lr: 3.0e-2}}
  eval_interval: 50
  eval_tokens: 4096
  checkpoint_interval: 1000
  log_interval: 1
  threads: 1
resources: {{workers: 1, cpus_per_worker: 1, num_cpus: 2}}
retries: 0
seeds: [0]
evals: {{next_line: false}}
grid:
  - compute: [3.0e+8, 1.0e+9]
    models:
      - {{n_layer: 2, d_model: 4, n_head: 1}}
      - {{n_layer: 1, d_model: 8, n_head: 1}}
      - {{n_layer: 2, d_model: 8, n_head: 1}}
      - {{n_layer: 1, d_model: 16, n_head: 2}}
"""


@dataclass
class RealSweep:
    url: str
    sweep: str
    report: Path  # the report `scaling sweep` wrote at its end
    stdout: str


@pytest.fixture(scope="session")
def real_sweep(tmp_path_factory: pytest.TempPathFactory) -> RealSweep:
    """A real small sweep: `scaling sweep` on 8 tiny runs (2 budgets x 4 sizes) on a local Ray."""
    import subprocess

    tmp = tmp_path_factory.mktemp("real-sweep")
    plan = tmp / "plan.yaml"
    plan.write_text(TINY_PLAN.format(runs_dir=tmp / "runs"))
    url = f"sqlite:///{tmp / 'sweep.db'}"
    env = {**os.environ, "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1", "OMP_NUM_THREADS": "1"}
    scaling = str(Path(sys.executable).with_name("scaling"))
    res = subprocess.run([scaling, "sweep", str(plan), "--db", url], capture_output=True, text=True,
                         timeout=900, env=env, cwd=tmp)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("report: ")]
    assert lines, f"`scaling sweep` printed no report path:\n{res.stdout[-2000:]}"
    return RealSweep(url=url, sweep="tiny-real", report=Path(lines[-1].split("report: ", 1)[1].strip()), stdout=res.stdout)
