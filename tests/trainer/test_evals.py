"""Downstream tasks: task files refused line by line, the built-in task, scoring by hand, the metrics
a real short run and a simulated run write."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from scaling import vocab
from scaling.db import Store, connect
from scaling.errors import PlanError, SpecError
from scaling.fitting.tasks.task_data import chance_of_events
from scaling.trainer.evaluation import next_line
from scaling.trainer import train
from scaling.trainer.evaluation.evals import Encoded, TaskEvaluator, batches, continuation_logprobs, encode, score, task_metrics
from scaling.trainer.runtime import Runtime
from scaling.trainer.spec import RunSpec
from scaling.trainer.evaluation.task_cost import eval_cost, evaluation_steps
from scaling.trainer.evaluation.eval_tasks import EvalsSpec, Item, Task, TaskFile, check_tasks, load_task

GOOD = [
    {"context": "The sky is", "choices": ["blue", "green"], "gold": 0},
    {"query": "Two plus two is", "choices": ["four", "five", "six"], "gold": 0, "id": 7, "label": "x"},
    {"context": "Q: red? A:", "choices": ["yes", "no"], "gold": 1, "few_shot": "Q: blue? A: no\n\n"},
]


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_task_file_in_lm_eval_harness_shape_parses(tmp_path: Path) -> None:
    path = _write(tmp_path / "qa.jsonl", [json.dumps(d) for d in GOOD[:2]] + ["", "  ", json.dumps(GOOD[2])])
    task = load_task(TaskFile(path=path))
    assert task.name == "qa" and len(task.items) == 3 and task.delimiter == " "
    assert task.items[1] == Item("Two plus two is", ("four", "five", "six"), 0, f"{path}:2")
    assert task.items[2].context == "Q: blue? A: no\n\nQ: red? A:" and task.items[2].where == f"{path}:5"
    assert len(load_task(TaskFile(path=path, items=2, name="qa2")).items) == 2


BAD = [
    ("{not json", "not a JSON object"),
    ("[1, 2]", "expected a JSON object"),
    ('{"context": "a", "choices": ["x", "y"], "gold": 2}', "gold 2 is out of range for 2 choices"),
    ('{"context": "a", "choices": ["x", "y"], "gold": -1}', "gold -1 is out of range"),
    ('{"context": "a", "choices": ["x", "y"], "gold": true}', "`gold` must be the index"),
    ('{"context": "a", "choices": ["x", "y"], "gold": 0.0}', "`gold` must be the index"),
    ('{"context": "a", "choices": ["x", ""], "gold": 0}', "choice 1 is empty"),
    ('{"context": "a", "choices": ["x"], "gold": 0}', "1 choices; an item offers 2 to"),
    ('{"context": "a", "choices": "xy", "gold": 0}', "`choices` must be a list of strings"),
    ('{"context": "a", "choices": ["x", 3], "gold": 0}', "`choices` must be a list of strings"),
    ('{"context": "", "choices": ["x", "y"], "gold": 0}', "the context is empty"),
    ('{"choices": ["x", "y"], "gold": 0}', "`context` (or `query`) must be a string"),
    ('{"context": "a", "choices": ["x", "y"], "gold": 0, "few_shot": 3}', "`few_shot` must be a string"),
    ('{"context": "a", "choices": ["x", "y"], "gold": NaN}', "not a JSON object"),
    ('{"context": "a", "choices": ["x", "x"], "gold": 0}', "choices 0 and 1 are identical ('x')"),
    ('{"context": "a", "choices": ["x", "y", "z", "y"], "gold": 0}', "choices 1 and 3 are identical ('y')"),
    ('{"context": "a", "query": "b", "choices": ["x", "y"], "gold": 0}', "both `context` and `query` are given"),
]


@pytest.mark.parametrize("line, problem", BAD, ids=[p for _, p in BAD])
def test_each_bad_line_is_one_error_naming_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = _write(tmp_path / "t.jsonl", [json.dumps(GOOD[0]), line])
    with pytest.raises(SpecError) as err:
        load_task(TaskFile(path=path))
    msg = str(err.value)
    assert msg.startswith(f"{path}:2: ") and problem in msg and "\n" not in msg


def test_hostile_files_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling.trainer.evaluation import eval_tasks

    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(json.dumps(GOOD[0]).encode() + b"\n\xff\xfe\n")
    with pytest.raises(SpecError, match=r"raw.jsonl:2: not UTF-8"):
        load_task(TaskFile(path=str(raw)))
    many = _write(tmp_path / "many.jsonl", [json.dumps(GOOD[0])] * 4)
    monkeypatch.setattr(eval_tasks, "MAX_ITEMS", 3)
    with pytest.raises(SpecError, match=r"many.jsonl:4: more than 3 items"):
        load_task(TaskFile(path=many))
    monkeypatch.setattr(eval_tasks, "MAX_TASK_BYTES", 64)
    big = _write(tmp_path / "big.jsonl", [json.dumps(GOOD[1])] * 2)
    with pytest.raises(SpecError, match="larger than a task"):
        load_task(TaskFile(path=big))
    empty = _write(tmp_path / "empty.jsonl", [""])
    with pytest.raises(SpecError, match="holds no items"):
        load_task(TaskFile(path=empty))
    with pytest.raises(SpecError, match="not a regular file"):
        load_task(TaskFile(path=str(tmp_path)))


def test_the_evals_section_names_and_switches(tmp_path: Path) -> None:
    assert EvalsSpec(next_line=False).next_line is None and not EvalsSpec(next_line=False).enabled
    assert EvalsSpec(next_line=True).next_line is not None
    assert EvalsSpec().next_line.count(65536) == 256 and EvalsSpec().next_line.count(512) == 16
    for bad in ({"path": "a.jsonl", "name": "next_line"}, {"path": "a.jsonl", "name": "a b"}, {"path": "x" * 60 + ".jsonl"}):
        with pytest.raises(ValueError):
            TaskFile.model_validate(bad)
    with pytest.raises(ValueError, match="two tasks are named"):
        EvalsSpec(tasks=[{"path": "a/t.jsonl"}, {"path": "b/t.jsonl"}])


def test_a_plan_refuses_a_bad_task_file_before_anything_runs(tmp_path: Path) -> None:
    from scaling.orchestrator.plan import load_plan
    from cli_run import run_main

    bad = _write(tmp_path / "bad.jsonl", [json.dumps(GOOD[0]), '{"context": "a", "choices": ["x", "y"], "gold": 5}'])
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: t\nevals:\n  tasks:\n    - path: {bad}\ngrid:\n  - tokens: [8192]\n    models: [{{N: 1000}}]\n")
    with pytest.raises(PlanError, match=rf"plan.yaml:\d+: evals: .*bad.jsonl:2: gold 5 is out of range"):
        load_plan(plan)
    out = run_main("plan", str(plan))
    assert out.code == 2 and "bad.jsonl:2: gold 5" in out.err and len(out.err.strip().splitlines()) == 1
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"model: {{n_layer: 1, d_model: 16, n_head: 2, context: 32}}\ntokens: 2560\nbatch_tokens: 256\n"
                    f"precision: fp32\nevals: {{tasks: [{{path: {bad}}}]}}\n")
    db, folder = tmp_path / "t.db", tmp_path / "run"
    out = run_main("train", str(spec), "--db", f"sqlite:///{db}", "--run-dir", str(folder))
    assert out.code == 2 and "bad.jsonl:2: gold 5" in out.err and len(out.err.strip().splitlines()) == 1
    assert not db.exists() and not folder.exists()  # nothing registered, no folder made
    long = _write(tmp_path / "long.jsonl", [json.dumps({"context": "a", "choices": ["x" * 300, "y"], "gold": 0})])
    plan.write_text(f"name: t\nevals:\n  tasks: [{{path: {long}}}]\ngrid:\n  - tokens: [8192]\n    models: [{{N: 1000}}]\n")
    with pytest.raises(PlanError, match=r"long.jsonl:1: a choice of 301 bytes does not fit the model's context of 256"):
        load_plan(plan)
    plan.write_text(f"name: t\ndata: {{source: tokens, path: {bad}}}\nevals:\n  tasks: [{{path: {bad}}}]\n"
                    "grid:\n  - tokens: [8192]\n    models: [{N: 1000}]\n")
    with pytest.raises(PlanError, match="has no tokenizer to encode a task's text"):
        load_plan(plan)
    plan.write_text(f"name: t\nevals:\n  tasks: [{{path: {tmp_path / 'none.jsonl'}}}]\ngrid:\n  - tokens: [8192]\n"
                    "    models: [{N: 1000}]\n")
    with pytest.raises(PlanError, match=r"plan.yaml:\d+: evals.tasks: task \(JSON Lines\) file not found") as got:
        load_plan(plan)
    assert "evals: evals" not in str(got.value)


def test_scaling_plan_shows_what_scoring_the_tasks_costs(tmp_path: Path) -> None:
    from cli_run import run_main

    qa = _write(tmp_path / "qa.jsonl", [json.dumps(d) for d in GOOD])
    plan = tmp_path / "plan.yaml"
    body = ("name: t\nmodel: {{context: 64}}\ntrain: {{precision: fp32, batch_tokens: 1024, eval_interval: 10}}\n{evals}"
            "resources: {{throughput_flops: 1.0e+9}}\ngrid:\n  - tokens: [102400]\n    models: [{{n_layer: 1, d_model: 16, n_head: 2}}]\n")
    plan.write_text(body.format(evals=f"evals: {{tasks: [{{path: {qa}}}]}}\n"))
    out = run_main("plan", str(plan), "--format", "json")
    summary = json.loads(out.out)
    run = summary["runs"][0]
    assert out.code == 0 and run["task_eval_fraction"] > 0 and run["task_eval_flops"] == summary["totals"]["task_eval_flops"]
    assert any(n.startswith("task scoring (next_line, qa)") for n in summary["notes"])
    plan.write_text(body.format(evals="evals: {next_line: false}\n"))
    summary = json.loads(run_main("plan", str(plan), "--format", "json").out)
    assert summary["totals"]["task_eval_flops"] == 0 and not any("task scoring" in n for n in summary["notes"])


# -- the built-in task ------------------------------------------------------------------------------
HELD_OUT = b"".join(b"    line %d: value = compute(%d) + offset\n" % (i, i * 7) for i in range(400))


def test_next_line_is_fixed_by_the_fingerprint() -> None:
    a, _ = next_line.build(HELD_OUT, "ab" * 32, 50, 64)
    b, _ = next_line.build(HELD_OUT, "ab" * 32, 50, 64)
    c, _ = next_line.build(HELD_OUT, "cd" * 32, 50, 64)
    assert a is not None and b is not None and c is not None
    assert a.items == b.items and a.sha256 == b.sha256 and a.sha256 != c.sha256
    assert len(a.items) == 50 and {i.gold for i in a.items} == {0, 1, 2, 3}
    for item in a.items:
        assert len(set(item.choices)) == 4 and {len(ch.encode()) for ch in item.choices} == {8}
        assert len(item.context.encode()) <= next_line.passage_limit(64)
        start = HELD_OUT.index(item.context.encode())  # the passage and its true continuation are contiguous
        assert HELD_OUT[start:].startswith((item.context + item.choices[item.gold]).encode())
    none, why = next_line.build(b"a\nb\na\nb\n", "ab" * 32, 10, 64)
    assert none is None and "distinct" in why


# -- scoring against a model whose logits are known ---------------------------------------------------
class Bigram(torch.nn.Module):
    """logits[b, t] = table[idx[b, t]]: the next token's log-probabilities depend on this token only."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(table)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.table[idx]


def test_scores_match_a_hand_computation() -> None:
    table = torch.tensor([[0.0, 1.0, 2.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    logp = torch.log_softmax(table, dim=-1).double()
    chars = {"a": 0, "b": 1, "c": 2}
    task = Task("toy", (Item("ab", ("a", "cc"), 1, "toy:1"), Item("c", ("b", "ab"), 0, "toy:2")), "", "toy", "")
    enc = encode(task, lambda s: [chars[ch] for ch in s], context=8)
    model = Bigram(table)
    scores = continuation_logprobs(model, enc.sequences, enc.continuation, torch.device("cpu")).numpy()
    want = [logp[1, 0], logp[1, 2] + logp[2, 2], logp[2, 1], logp[2, 0] + logp[0, 1]]
    np.testing.assert_allclose(scores, [float(w) for w in want], rtol=1e-12)
    # Item 1: "a" scores ln p(a|b) = 2 - lse(2,0,0); "cc" scores p(c|b) p(c|c): per byte it wins.
    m = task_metrics(enc, scores)
    acc = np.mean([np.argmax(scores[0:2]) == 1, np.argmax(scores[2:4]) == 0])
    acc_norm = np.mean([np.argmax(scores[0:2] / [1, 2]) == 1, np.argmax(scores[2:4] / [1, 2]) == 0])
    bpb = np.mean([-scores[1] / (2 * math.log(2)), -scores[2] / math.log(2)])
    assert m == pytest.approx({vocab.TASK_ACC: acc, vocab.TASK_ACC_NORM: acc_norm, vocab.TASK_BPB: bpb})
    # Batched any way (one sequence per pass, or all at once), the scores are the same.
    rt = Runtime.current("cpu")
    for max_tokens in (1, 4, 1000):
        np.testing.assert_allclose(score(model, enc, rt, max_tokens=max_tokens, precision="fp32"), scores, rtol=1e-12)
    ev = TaskEvaluator([enc], {}, 4, "fp32")
    assert ev.evaluate(model, rt) == pytest.approx({vocab.task_metric("toy", k): v for k, v in m.items()})


def test_contexts_are_cut_from_the_left_and_long_choices_refused() -> None:
    task = Task("t", (Item("abcdefgh", ("xy", "z"), 0, "t:1"),), " ", "t", "")
    enc: Encoded = encode(task, lambda s: [ord(ch) for ch in s], context=5)
    assert [bytes(s.tolist()).decode() for s in enc.sequences] == ["fgh xy", "efgh z"]
    assert enc.continuation.tolist() == [3, 2] and enc.nbytes.tolist() == [3, 2]
    with pytest.raises(SpecError, match="t:1: choice 0 is 3 tokens"):
        encode(task, lambda s: [ord(ch) for ch in s], context=2)
    assert batches([3, 5, 2, 5], 10) == [[1, 3], [0, 2]]


# -- what runs write ---------------------------------------------------------------------------------
def test_a_short_real_run_records_its_task_metrics(make_spec, registered, tmp_path: Path) -> None:
    path = _write(tmp_path / "qa.jsonl", [json.dumps(d) for d in GOOD])
    spec = make_spec(evals={"next_line": True, "tasks": [{"path": path}]})
    url = registered(spec)
    train(spec, url, tmp_path / "run")
    res = connect(url)
    df = res.metrics(run_keys=[spec.key])
    for task in ("next_line", "qa"):
        for kind in vocab.TASK_KINDS:
            got = df[df["name"] == vocab.task_metric(task, kind)]
            assert got["step"].tolist() == [8, 16, 24], (task, kind)  # every eval_interval and the end
            assert got["value"].between(0, 1).all() if kind != "bpb" else (got["value"] > 0).all()
    detail = res.events(run_keys=[spec.key], kinds=[vocab.DATA])["detail"].iloc[0]
    assert detail["tasks"]["qa"]["items"] == 3 and detail["tasks"]["next_line"]["items"] == 16
    assert detail["tasks"]["qa"]["chance"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 2) / 3)  # the task laws' floor
    events = res.events(run_keys=[spec.key], kinds=[vocab.DATA])
    assert chance_of_events(events, ["qa"]) == {"qa": pytest.approx(4 / 9)}  # read back for the task laws
    assert evaluation_steps(spec) == 3 and 0 < eval_cost(spec).fraction
    off = make_spec(evals={"next_line": False})
    assert eval_cost(off).fraction == 0.0 and off.key == spec.key  # tasks are not part of the key


def test_the_default_cost_is_a_small_share_of_training() -> None:
    spec = RunSpec.from_dict({"model": {"n_layer": 4, "d_model": 256, "n_head": 4}, "tokens": 8192 * 1000, "precision": "fp32"})
    cost = eval_cost(spec)
    assert cost.evaluations == 10 and cost.tokens == 256 * 4 * 72
    assert 0 < cost.fraction < 0.1
    # a pipeline scores its tasks too, each sequence padded to a whole context
    piped = spec.model_copy(update={"execution": spec.execution.model_copy(update={"workers": 2, "pp": 2})})
    assert eval_cost(piped).tokens == 256 * 4 * (spec.model.context + 1)


def test_simulated_task_metrics_follow_their_law(sqlite_url: str) -> None:
    from scaling.trainer.simulate import simulate

    law = {"E": 1.7, "A": 400.0, "B": 410.0, "alpha": 0.34, "beta": 0.28}
    task = {"E": 0.6, "A": 50.0, "B": 100.0, "alpha": 0.3, "beta": 0.3, "slope": 4.0, "midpoint": 1.2, "items": 100000}
    base = {"model": {"n_layer": 2, "d_model": 64, "n_head": 2}, "tokens": 2**22, "precision": "fp32"}
    plain = RunSpec.from_dict({**base, "simulate": {"law": law}})
    tasked = RunSpec.from_dict({**base, "simulate": {"law": law, "noise": 0.0, "tasks": [task]}})
    assert "tasks" not in plain.key_fields()["simulate"]  # keys of simulations without tasks are unchanged
    with Store(sqlite_url) as store:
        store.register("s", [plain.record(), tasked.record()])
    simulate(plain, sqlite_url, sweep="s")
    simulate(tasked, sqlite_url, sweep="s")
    df = connect(sqlite_url).metrics()
    assert not df[df["run_key"] == plain.key]["name"].str.startswith(vocab.TASK_PREFIX).any()
    mine = df[df["run_key"] == tasked.key].set_index(["name", "step"])["value"]
    bpb, acc = mine[vocab.task_metric("next_line", "bpb")], mine[vocab.task_metric("next_line", "acc")]
    last = bpb.index.max()
    N, D = tasked.n_params, tasked.trained_tokens
    want_bpb = 0.6 + 50.0 / N**0.3 + 100.0 / D**0.3
    assert bpb[last] == pytest.approx(want_bpb, rel=1e-9)
    assert acc[last] == pytest.approx(0.25 + 0.75 / (1 + math.exp(4.0 * (want_bpb - 1.2))), abs=0.01)
    assert (np.diff(bpb.to_numpy()) < 0).all()
    event = connect(sqlite_url).events(run_keys=[tasked.key], kinds=[vocab.SIMULATED])["detail"].iloc[0]
    assert event["tasks"][0]["midpoint"] == 1.2  # the truth a fit of the task laws can be checked against


def test_metric_names_outside_the_vocabulary_are_refused(db_url: str) -> None:
    assert vocab.task_metric("hellaswag", "acc_norm") == "task/hellaswag/acc_norm"
    assert vocab.metric_problem("task/hellaswag/bpb") is None and vocab.metric_problem(vocab.EVAL_LOSS) is None
    for bad in ("custom/x", "task/a b/acc", "task/x/loss", "task//acc"):
        assert vocab.metric_problem(bad)
    with pytest.raises(ValueError):
        vocab.task_metric("x" * (vocab.MAX_TASK_NAME + 1), "acc")
    spec = RunSpec.from_dict({"model": {"n_layer": 1, "d_model": 32, "n_head": 2}, "tokens": 8192, "precision": "fp32"})
    with Store(db_url) as store:
        store.register("s", [spec.record()])
        with pytest.raises(ValueError, match="not in scaling.vocab"):
            store.log_metrics(spec.key, [(1, 1, 1.0, "custom/x", 1.0)])
        name = vocab.task_metric("x" * vocab.MAX_TASK_NAME, "acc_norm")
        assert len(name) == 64 and store.log_metrics(spec.key, [(1, 1, 1.0, name, 0.5)]) == 1


def test_check_tasks_passes_good_files(tmp_path: Path) -> None:
    from scaling.trainer.sections import DataSpec

    path = _write(tmp_path / "qa.jsonl", [json.dumps(d) for d in GOOD])
    got = check_tasks(EvalsSpec(tasks=[{"path": path}]), DataSpec(), 64)
    assert [t.name for t in got] == ["qa"]
