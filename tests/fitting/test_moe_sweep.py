"""A simulated MoE sweep end to end: examples/sim-moe.yaml's runs (dense llama, 8 and 32 experts top-1)
trained by the simulated trainer through the sweep's lifecycle, then `scaling fit --law moe` and
`scaling recommend --law moe-sparsity` on the database, the truth of the plan's law recovered.

The plan's law: L = 2 + 40 (1 - S)^0.3 / N^0.3 + 400 / D^0.3, S = 1 - top_k / n_experts of each run's
shape and N its active parameters (scaling.trainer.sections.SimulatedExperts).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cli_run import run_cli
from in_process_sweep import train_plan

from scaling.fitting.moe import moe_data

PLAN = Path(__file__).resolve().parents[2] / "examples" / "sim-moe.yaml"
TRUTH = {"c": 2.0, "a": 40.0, "b": 400.0, "delta": 0.3, "alpha": 0.3, "beta": 0.3}


def test_a_simulated_moe_sweep_fits_and_recommends_its_law(sqlite_url: str, tmp_path: Path) -> None:
    train_plan(PLAN, sqlite_url, tmp_path)
    # the plan stored with the sweep reads back as a plan (its MoE blocks state every field, None ones too)
    from scaling.orchestrator.expand import stored_plan
    from scaling.orchestrator.plan import Plan

    assert [b.model.family if b.model else None for b in Plan.from_dict(stored_plan(sqlite_url, "sim-moe")).grid] == [
        None, "moe", "moe"]
    data, sweep = moe_data.from_db(sqlite_url)
    assert sweep == "sim-moe" and len(data.points) == 48
    assert sorted(set(data.points["S"].round(6))) == [0.0, 0.875, 0.96875]

    code, out, err = run_cli("fit", "--db", sqlite_url, "--law", "moe", "--format", "json", "--bootstrap", "40")
    assert code == 0, err
    (law,) = json.loads(out)["laws"].values()
    assert json.loads(out)["conventions"]["N"] == "active parameters"
    for name, truth in TRUTH.items():
        iv = law["intervals"][name]
        assert iv["lo"] <= truth <= iv["hi"], (name, iv)

    code, out, err = run_cli("recommend", "--db", sqlite_url, "--law", "moe-sparsity", "--bootstrap", "40")
    assert code == 0, err
    assert "S = 0.969" in out  # the law's loss keeps falling with sparsity: the sparsest measured cut
    for what in ("N_active*", "N_total*", "D*"):
        assert re.search(rf"{re.escape(what)} = \S+ \[\S+, \S+\]", out), (what, out)
    assert "compared with S = 0 (the dense model)" in out and "loss saved against it: " in out

    # the sweep's analysis holds the laws of sparsity, stored and read back whole
    from scaling.fitting.analysis import Settings, SweepSource, analyse

    settings = Settings(law="approach2", n_bootstrap=30, next_runs=False, tasks=False)  # one quick dense law beside them
    first = analyse(SweepSource(sqlite_url, "sim-moe"), settings)
    again = analyse(SweepSource(sqlite_url, "sim-moe"), settings)
    assert again.reused and first.moe is not None and again.moe is not None
    assert again.moe.laws["sparsity"].params_ == first.moe.laws["sparsity"].params_
    assert again.moe.laws["sparsity"].reported_intervals() == first.moe.laws["sparsity"].reported_intervals()

    # the report shows them, with the N they count and the recommendation against the dense optimum
    report = tmp_path / "moe.html"
    code, _, err = run_cli("report", "--db", sqlite_url, "-o", str(report))
    assert code == 0, err
    page = report.read_text()
    moe = page[page.index('<section id="moe">'):]
    moe = moe[:moe.index("</section>")]
    assert "N counts the active parameters" in moe and "moe-sparsity law" in moe
    assert "N_active* = " in moe and "compared with S = 0 (the dense model)" in moe



def test_a_mixed_sweeps_answer_names_each_law_family_and_gives_the_experts_optimum(sqlite_url: str,
                                                                                 tmp_path: Path) -> None:
    """On dense and MoE runs together, the closing answer and the report's first screen say which family
    of law each answer comes from, and give the experts' N_active*, sparsity and D* with intervals."""
    from scaling.cli.sweep_cmds import answer
    from scaling.fitting.analysis import Settings, SweepSource, analyse
    from scaling.orchestrator.sweep import SweepResult
    from scaling.reports.html import render
    from scaling.reports.report_data import ReportData

    train_plan(PLAN, sqlite_url, tmp_path)
    analysis = analyse(SweepSource(sqlite_url, "sim-moe"),
                       Settings(law="approach3", n_bootstrap=30, next_runs=False, tasks=False))
    # the dense law fitted to every run, active N and all, is not determined on this sweep: the answer
    # says the dense laws give none, and the laws of sparsity still answer
    lines = answer(SweepResult(sweep="sim-moe", url=sqlite_url, outcome=None, fit=analysis))
    text = "\n".join(lines)
    assert lines[0].startswith("no recommendation from the dense laws: "), text
    (head,) = [i for i, line in enumerate(lines) if line.startswith("mixture of experts at C = ")]
    assert "from the moe-sparsity law (law of sparsity; N = active parameters)" in lines[head], text
    moe_line = lines[head + 1]
    for what in ("N_active*", "D*"):
        assert re.search(rf"{re.escape(what)} = \S+ \[\S+, \S+\]", moe_line), (what, moe_line)
    # the truth's loss keeps falling with sparsity: every replicate picks the sparsest measured cut, so
    # its interval has no width and none is shown (why instead)
    assert "sparsity S = 0.969 (no interval: replicates do not vary)" in moe_line, moe_line

    html = render(ReportData.load(sqlite_url, "sim-moe", sweep_fit=analysis))
    assert "No recommendation from the dense laws for the next budget" in html
    grid = re.search(r'<dl class="answer-grid" id="answer-moe">(.*?)</dl>', html, re.S)
    assert grid is not None, "no MoE answer on the first screen"
    assert "recommended by the moe-sparsity law (a law of sparsity; N counts the active parameters)" in html
    cells = dict(re.findall(r'<a href="#moe">(.*?)</a></dt><dd[^>]*>(.*?)</dd>', grid.group(1), re.S))
    assert "[" in cells["N_active* (parameters)"] and "[" in cells["D* (tokens)"], cells
    assert "0.969" in cells["sparsity S"] and "replicates do not vary" in cells["sparsity S"], cells
    assert html.index('id="answer-moe"') < html.index('id="moe"')  # on the first screen, above its section
