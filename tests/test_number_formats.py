"""One number format per quantity, in the CLI's text and in the report alike (scaling/fmt.py):
compute in e-notation (1e+15) in text and on every compute axis, parameter and token counts with a
K/M/B/T suffix (83M) in group labels, losses to four significant digits."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from scaling import fmt
from scaling.fitting import fit_sweep
from scaling.fitting.hyperparams import hparams_synthetic as HS
from scaling.naming import group_title
from scaling.reports.titles import axis, titled


@pytest.fixture(scope="module")
def tagged_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A swept lr / batch grid whose groups carry a plan's labels (``4x32x2 D=1.99885e+06``)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('formats') / 'hp.db'}"
    runs = HS.sweep(HS.HparamTruth(), np.random.default_rng(5), sizes=(5e7, 1e8, 2e8), tokens_per_param=(10, 20, 40),
                    n_lr=5, n_batch=3, noise=0.001)
    layers = {n: i + 2 for i, n in enumerate(sorted(set(runs["N"])))}
    runs["group"] = ["%dx32x2 D=%.6g" % (layers[n], d) for n, d in zip(runs["N"], runs["D"])]
    HS.store_sweep(url, runs, "tagged")
    return url


def test_compute_is_written_in_e_notation_in_text_and_on_every_compute_axis(tagged_db: str, tmp_path) -> None:
    assert fmt.flops(1e15) == "1e+15" and fmt.flops(3.2e21) == "3.2e+21" and fmt.flops(None) == fmt.MISSING
    fig = titled(go.Figure(go.Scatter(x=[1e12, 1e15], y=[3.0, 2.5])), "t", x=axis("C", "FLOPs"), y=axis("loss", "nats/token"))
    assert fig.layout.xaxis.exponentformat == fmt.FLOPS_AXIS_FORMAT == "e"
    assert fig.layout.yaxis.exponentformat is None  # not a compute axis: plotly's own
    from scaling.reports import write_report

    report = write_report(tagged_db, "tagged", tmp_path / "r.html", fit="memory").read_text()
    figures = json.loads(re.search(r'<script type="application/json" id="figure-data">(.*?)</script>', report, re.S)[1])
    compute_axes = {(fid, key): ax.get("exponentformat") for fid, f in figures.items()
                    for key, ax in (f.get("layout") or {}).items()
                    if re.fullmatch(r"[xy]axis\d*", key) and "(FLOPs)" in str((ax.get("title") or {}).get("text", ""))}
    assert compute_axes and set(compute_axes.values()) == {"e"}, compute_axes


def test_group_sizes_are_counts_in_the_cli_table_as_in_the_report(tagged_db: str) -> None:
    table = fit_sweep(tagged_db, "tagged", "approach3", 20, save=False).hparams.table()
    labels = re.findall(r"\dx32x2 D=[^\s:]+", table)
    assert len(set(labels)) == 9, table
    assert all(re.fullmatch(r"\dx32x2 D=\d+(?:\.\d+)?[KMBT]", label) for label in labels), labels
    assert "e+0" not in " ".join(labels)
    batches = re.findall(r"│\s+(\S+) (?:\[|\(no interval)", table)[2::3]  # the B* column: a count of tokens
    assert batches and all(re.fullmatch(r"\d+(?:\.\d+)?[KMBT]?", b) for b in batches), batches
    assert group_title("2x32x2 D=8.32911e+07") == "2x32x2 D=83M"


def test_a_loss_is_written_to_four_significant_digits() -> None:
    assert fmt.loss(2.716814) == "2.717" and fmt.loss(10.04) == "10.04" and fmt.loss(float("nan")) == fmt.MISSING
    assert fmt.bounds(2.634405, 2.80011, 4) == f"[{fmt.loss(2.634405)}, {fmt.loss(2.80011)}]"


# -- the orchestrator's and the fits' text: a count of parameters, tokens or a batch as the report writes it --
#: A count as :func:`scaling.fmt.count` writes it (``496``, ``1.76K``, ``83.3M``): no e-notation, no digit groups.
COUNT = r"\d+(?:\.\d+)?[KMBT]?"


def test_counts_and_an_estimate_printed_alone_are_written_as_the_report_writes_them() -> None:
    assert fmt.count(83_291_100) == "83.3M" == fmt.size(83_291_100) and fmt.count(256) == "256"
    assert fmt.count(65_536) == "65.5K" and fmt.count(None) == fmt.MISSING
    # two counts compared in one message read unequal when they are
    assert fmt.counts_apart(1020, 1024) == ("1.020K", "1.024K") and fmt.counts_apart(100, 256) == ("100", "256")
    iv = {"value": 8.33e7, "lo": 6.1e7, "hi": 1.12e8, "kind": "percentile"}
    assert str(fmt.Interval.of(iv, "count")) == "83.3M [61.0M, 112M]"
    assert str(fmt.Interval.of({"value": 2.716814, "lo": 2.6, "hi": 2.8, "kind": "percentile"}, "loss")) == \
        "2.717 [2.6, 2.8]"
    assert str(fmt.Interval.of(iv)) == "8.33e+07 [6.1e+07, 1.12e+08]"  # a quantity not named: plain digits
    with pytest.raises(ValueError, match="quantity must be one of"):
        fmt.Interval.of(iv, "tokens")


def test_the_api_prints_a_batch_estimate_as_a_count(tagged_db: str) -> None:
    """The notebook's estimates name their quantity: a group's B* or a recommended batch printed alone reads
    as the report's cell (``79.0K [...]``), not as ``7.9e+04 [...]``."""
    from scaling import api

    hp = api.hparams(tagged_db, "tagged", bootstrap=20)
    group = next(g for g in hp.groups if g.status == "fitted")
    assert re.fullmatch(rf"{COUNT} \[{COUNT}, {COUNT}\]", str(group.batch)), str(group.batch)
    assert str(group.batch) == group.batch.text(3, fmt.size) and "e+" not in str(group.batch)
    batch = hp.recommend(1e8, 2e9)["batch"]
    assert batch is not None and re.match(rf"{COUNT} ", str(batch)) and "e+" not in str(batch), str(batch)


def test_the_widen_the_sweep_note_writes_the_batch_as_a_count() -> None:
    """A group whose best batch is the largest tried says so with that batch written as B* is elsewhere."""
    from scaling.fitting.hyperparams.hparams import fit_group

    truth = HS.HparamTruth()
    N, D = 5e7, 1e9
    b_star, lr_star = float(truth.batch_star(D)), float(truth.lr_star(N, D))
    lr, batch = (a.ravel() for a in np.meshgrid(lr_star * np.array([0.5, 1, 2]), b_star / np.array([16, 8, 4])))
    runs = pd.DataFrame({"N": N, "D": D, "C": 6 * N * D, "lr": lr, "batch": batch,
                         "loss": truth.loss(np.full(lr.size, N), np.full(lr.size, D), lr, batch)})
    group = fit_group(runs, "g", n_bootstrap=10)
    assert group.status == "edge", group.message
    assert f"batch* at the largest value tried ({fmt.count(b_star / 4)}): widen the sweep" in group.message
    assert re.search(rf"\({COUNT}\): widen", group.message) and "e+" not in group.message, group.message


@pytest.fixture(scope="module")
def demo_sweep(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`make demo`'s plan, simulated and trained in this process (tests/example_sim.py)."""
    from example_sim import train_example

    url, _ = train_example("plan", tmp_path_factory.mktemp("demo"))
    return url


def test_scaling_runs_and_status_write_counts_and_compute_as_the_report(demo_sweep: str) -> None:
    from scaling.orchestrator.status import list_runs, render_status, sweep_status
    from scaling.fmt import PlainText

    table = list_runs(demo_sweep, "example").splitlines()
    head = [c.strip() for c in table[2].strip("┃").split("┃")]
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in table[4:-1]]
    assert len(rows) == 12, table
    for name, pattern in (("N", COUNT), ("D", COUNT), ("C", r"\d(?:\.\d+)?e\+\d+")):
        column = [r[head.index(name)] for r in rows]
        assert all(re.fullmatch(pattern, v) for v in column), (name, column)
    assert {r[head.index("N")] for r in rows} >= {"496", "1.76K", "25.5K"}  # examples/plan.yaml's N = 24 d^2 + 28 d
    text = PlainText(200)
    text.print(render_status(sweep_status(demo_sweep, "example")))
    spent = re.search(r"compute\s+(\S+) of (\S+) FLOPs spent", text.text())
    assert spent and spent[2] == fmt.flops(sweep_status(demo_sweep, "example")["flops_total"]), text.text()


def test_scaling_plan_writes_counts_and_compute_as_the_report(tmp_path) -> None:
    """`scaling plan`'s runs and groups tables, its totals and `--explain`: N, D and the batch as counts."""
    from cli_run import run_main

    out = run_main("plan", "examples/sim-hparams.yaml")
    assert out.code == 0, out.err
    totals = re.search(r"total C (\S+) FLOPs, (\S+) tokens", out.out)
    assert totals and re.fullmatch(r"\d(?:\.\d+)?e\+\d+", totals[1]) and re.fullmatch(COUNT, totals[2]), out.out
    assert re.search(r"256, 512, 1\.02K", out.out), out.out  # the groups' batches
    key = re.search(r"[│┃] ([0-9a-f]{8,})", out.out)[1]
    explained = run_main("plan", "examples/sim-hparams.yaml", "--explain", key)
    assert explained.code == 0, explained.err
    first = explained.out.splitlines()[0]
    assert re.match(rf"run {key}\S*: N={COUNT} \(\S+\), D={COUNT}, batch {COUNT} tokens, ", first), first
    assert re.search(rf"parameters: {COUNT} in all, {COUNT} active per token", explained.out), explained.out


def test_plan_errors_and_notes_write_counts_and_compute_as_the_report(tmp_path) -> None:
    """What expanding a plan says (a model dropped by the grid's bounds, a branch shorter than a batch, a rule's
    bad value): N and D as counts, compute as FLOPs are written everywhere."""
    import yaml

    from scaling.errors import PlanError
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    demo = yaml.safe_load(open("examples/plan.yaml"))
    demo["grid"][0]["bounds"] = {"max_tokens": 1.0e6}
    path = tmp_path / "bounded.yaml"
    path.write_text(yaml.safe_dump(demo))
    notes = [n for n in expand(*load_plan(path)).notes if n.startswith("dropped ")]
    assert notes and all(re.match(rf"dropped N={COUNT} at C=3e\+09: D={COUNT} > max_tokens 1.00M ", n) for n in notes), notes

    branches = yaml.safe_load(open("examples/branches.yaml"))
    branches["grid"][0]["branches"]["tokens"] = [100.0]
    path.write_text(yaml.safe_dump(branches))
    with pytest.raises(PlanError) as err:
        expand(*load_plan(path))
    assert re.search(r"D=100 tokens for N=1\.76K is less than one batch \(256 tokens\)", str(err.value)), err.value
