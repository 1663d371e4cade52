"""One number format per quantity, in the CLI's text and in the report alike (scaling/fmt.py):
compute in e-notation (1e+15) in text and on every compute axis, parameter and token counts with a
K/M/B/T suffix (83M) in group labels, losses to four significant digits."""

from __future__ import annotations

import json
import re

import numpy as np
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
