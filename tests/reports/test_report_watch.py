"""`scaling report --watch` on a real sweep in headless Chromium, and `--inference-tokens`'s section.

The live test starts a real `scaling sweep` (of simulated runs paced at 7 ms a step: 2,918 steps,
about 20 s, one run at a time) and `scaling report --watch` as background processes,
reads the report file continuously while they run (it must never be seen half-written), opens it
in Chromium mid-sweep (it must reload itself) and after the sweep (it must not).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scaling.reports import write_report
from scaling.reports.figures_inference import inference_section
from scaling.reports.output import write_atomic
from scaling.reports.watch import REFRESH_TAG, with_reload

SCALING = str(Path(sys.executable).with_name("scaling"))
LIVE_PLAN = """\
name: tiny-live
runs_dir: {runs_dir}
simulate:
  law: {{E: 1.8, A: 480.0, B: 2100.0, alpha: 0.35, beta: 0.37}}
  pace: 0.007
model: {{aspect_ratio: 8, head_size: 8, vocab_size: 256, context: 32}}
conventions: {{params: non_embedding, flops: 6N}}
train:
  batch_tokens: 256
  optimizer: {{lr: 3.0e-2}}
resources: {{workers: 1, cpus_per_worker: 1, num_cpus: 1}}
retries: 0
seeds: [0]
grid:
  - compute: [3.0e+8, 1.0e+9]
    models:
      - {{n_layer: 2, d_model: 4, n_head: 1}}
      - {{n_layer: 1, d_model: 8, n_head: 1}}
      - {{n_layer: 1, d_model: 16, n_head: 2}}
"""


def test_with_reload_puts_a_refresh_in_the_head() -> None:
    page = "<!DOCTYPE html>\n<html><head>\n<title>t</title></head><body></body></html>"
    out = with_reload(page, 2.4)
    assert out.index(REFRESH_TAG.format(seconds=2)) < out.index("<title>")
    assert out.replace(REFRESH_TAG.format(seconds=2) + "\n", "") == page


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    target.write_text("old")
    write_atomic(target, "new" * 1000)
    assert target.read_text() == "new" * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)


@pytest.mark.browser
def test_inference_section_only_when_asked(sweeps, browser, tmp_path: Path) -> None:
    from scaling.fitting.analysis import SweepSource, analyse

    url, _ = sweeps["typical"]
    analysis = analyse(SweepSource(url), save=False)  # the fits a report makes, made once for both
    plain = write_report(url, None, tmp_path / "plain.html", analysis=analysis)
    assert 'id="inference"' not in plain.read_text()
    page = browser.open(write_report(url, None, tmp_path / "inference.html", analysis=analysis,
                                     extras=[inference_section(1e12)]), "inference")
    assert page.console_errors == []
    assert page.figures["fig-overtraining"] >= 4  # two cost curves and the two optima
    assert "Inference-heavy use" in page.text and "tokens per parameter" in page.text


def _statuses(url: str) -> dict[str, str]:
    from scaling.db import connect

    try:
        with connect(url) as res:
            runs = res.runs(sweep="tiny-live")
    except Exception:  # the sweep is not registered yet
        return {}
    return dict(zip(runs["run_key"], runs["status"]))


class FileReader(threading.Thread):
    """Reads the report file as fast as it can; keeps each distinct version seen."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.versions: list[str] = []
        self.reads = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                time.sleep(0.01)
                continue
            self.reads += 1
            if not self.versions or text != self.versions[-1]:
                self.versions.append(text)
            time.sleep(0.005)


def _reloads(browser, path: Path, wait_s: float) -> bool:
    """Open ``path``, mark the window, wait; True when the page reloaded (the mark is gone)."""
    page = browser._ctx.new_page()
    try:
        page.goto(path.resolve().as_uri(), wait_until="load")
        try:
            page.evaluate("() => { window.__watchMark = 1; }")
            page.wait_for_function("() => window.__watchMark === undefined", timeout=wait_s * 1000)
            return True
        except Exception as exc:  # playwright's TimeoutError: the page stayed as it was
            if "Execution context was destroyed" in str(exc):
                return True  # the loaded page navigated away under us: only its refresh tag does that
            if "Timeout" not in type(exc).__name__:
                raise
            return False
    finally:
        try:  # stop the page's own reloads before closing it: a close that meets a reload can wait forever
            page.goto("about:blank", timeout=10_000)
        except Exception:  # noqa: BLE001 - a page that will not leave is closed all the same
            pass
        page.close()


@pytest.mark.browser
def test_watch_rewrites_atomically_and_reloads_only_while_the_sweep_runs(browser, tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(LIVE_PLAN.format(runs_dir=tmp_path / "runs"))
    url = f"sqlite:///{tmp_path / 'live.db'}"
    report = tmp_path / "out" / "live.html"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sweep = subprocess.Popen([SCALING, "sweep", str(plan), "--db", url, "--no-report", "--no-fit"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    watcher = None
    reader = FileReader(report)
    try:
        deadline = time.monotonic() + 300
        while not _statuses(url) and time.monotonic() < deadline:
            assert sweep.poll() is None, sweep.stdout.read()[-3000:]
            time.sleep(0.5)
        assert _statuses(url), "the sweep registered no runs in 300 s"
        reader.start()
        watcher = subprocess.Popen([SCALING, "report", "--db", url, "--watch", "--interval", "1", "--fit", "stored",
                                    "-o", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env, cwd=tmp_path)
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert report.exists(), "the watch wrote no report"
        live = REFRESH_TAG.format(seconds=1)
        assert live in report.read_text(), "the first report of a running sweep does not reload itself"
        assert any(s in ("pending", "running") for s in _statuses(url).values()), \
            "the sweep ended before the test could look at it mid-way (make the plan longer)"
        assert _reloads(browser, report, wait_s=20), "the page did not reload itself while the sweep ran"

        sweep_out, _ = sweep.communicate(timeout=900)
        assert sweep.returncode == 0, sweep_out[-3000:]
        out, err = watcher.communicate(timeout=300)  # the watch ends on its own when the sweep does
        assert watcher.returncode == 0, err[-3000:]
        time.sleep(0.3)
    finally:
        reader.stop.set()
        for proc in (sweep, watcher):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    reader.join(timeout=5)
    assert set(_statuses(url).values()) == {"completed"}
    final = report.read_text()
    assert live not in final and "http-equiv" not in final
    assert not _reloads(browser, report, wait_s=3), "the finished sweep's page still reloads itself"
    # never half-written: every version read while rewrites happened is a whole page
    assert reader.reads > 20 and len(reader.versions) >= 2
    for v in reader.versions:
        assert v.startswith("<!DOCTYPE html>") and v.rstrip().endswith("</html>"), (len(v), v[-200:])
    assert live in reader.versions[0] and live not in reader.versions[-1]
    assert [p.name for p in report.parent.iterdir()] == ["live.html"]  # no temporary left behind
    assert "sweep done" in err and str(report) in out


def test_watch_stores_the_new_fits_only_with_store_fits(tmp_path: Path) -> None:
    """--watch --store-fits stores each rewrite's new fits as a plain report with --store-fits does."""
    import report_synth as S

    from scaling.db import connect
    from scaling.reports.watch import watch

    url = f"sqlite:///{tmp_path / 'done.db'}"
    S.build(url, S.SweepSpec(sweep="done", budgets=(1e13, 3e13, 1e14), sizes_per_budget=5))

    def stored() -> int:
        with connect(url) as res:
            return len(res.fits(sweep="done"))

    watch(url, None, tmp_path / "read-only.html", interval=1, fit="sweep", sleep=lambda s: None)
    assert stored() == 0
    watch(url, None, tmp_path / "stored.html", interval=1, fit="sweep", store_fits=True, sleep=lambda s: None)
    assert stored() > 0
    with pytest.raises(ValueError, match="interval"):
        watch(url, None, tmp_path / "never.html", interval=1e10)


def test_a_watch_stopped_by_ctrl_c_leaves_a_page_that_no_longer_reloads(tmp_path: Path) -> None:
    """Ctrl-C (a real SIGINT) ends the watch of a sweep that is still going: the page stays whole and
    drops its reload, as the last rewrite of a finished sweep does; the command exits 130."""
    import signal

    import report_synth as S

    url = f"sqlite:///{tmp_path / 'going.db'}"
    S.build(url, S.SweepSpec(sweep="going", budgets=(1e13, 3e13, 1e14), sizes_per_budget=5, pending=(0,)))
    report = tmp_path / "out" / "going.html"
    watcher = subprocess.Popen([SCALING, "report", "--db", url, "--watch", "--interval", "1", "--fit", "memory",
                                "-o", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=tmp_path)
    try:
        deadline = time.monotonic() + 240
        while not report.exists() and time.monotonic() < deadline and watcher.poll() is None:
            time.sleep(0.2)
        assert report.exists(), watcher.stderr.read() if watcher.poll() is not None else "no report in 240 s"
        assert REFRESH_TAG.format(seconds=1) in report.read_text()  # a live page, reloading itself
        watcher.send_signal(signal.SIGINT)
        _, err = watcher.communicate(timeout=120)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 130 and "Traceback" not in err, err
    final = report.read_text()
    assert "http-equiv" not in final
    assert final.startswith("<!DOCTYPE html>") and final.rstrip().endswith("</html>")
    assert [p.name for p in report.parent.iterdir()] == ["going.html"]  # no temporary left behind
