"""Plan and spec files are untrusted YAML: aliases are refused before expansion, size and
nesting are capped, odd scalars are one line; all through the real CLI, exit 2, no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cli_run import run_main, run_process
from scaling import safe_yaml
from scaling.errors import PlanError, SpecError
from scaling.orchestrator.yamlsource import YamlSource

PLAN = """\
name: yaml-safety
model: {aspect_ratio: 16, head_size: 16, context: 64}
train: {precision: fp32, batch_tokens: 2048, optimizer: {lr: 3.0e-3}}
grid:
  - models: [6000, 30000]
    compute: [1.0e+12]
"""
SPEC = """\
model: {n_layer: 1, d_model: 32, n_head: 2, context: 32}
tokens: 6144
batch_tokens: 256
"""


def alias_bomb(levels: int) -> str:
    """Each level lists the previous one nine times: 9**levels leaves from a few hundred bytes."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


HOSTILE = {
    "alias bomb": (alias_bomb(9), "aliases (*name) are not allowed"),
    "merge key": ("base: &b {lr: 1}\nother:\n  <<: *b\n", "aliases (*name) are not allowed"),
    "deep nesting": ("x: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
    "huge integer": ("x: " + "9" * 5000 + "\n", "invalid YAML value"),
    "impossible date": ("x: 2021-13-45\n", "invalid YAML value"),
    "python tag": ("x: !!python/object/apply:os.system [touch pwned]\n", "invalid YAML"),
    "oversized": ("# padding\n" * (safe_yaml.MAX_BYTES // 10 + 1), "larger than"),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_plan_is_one_line(kind: str, tmp_path: Path) -> None:
    text, expected = HOSTILE[kind]
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN + text)
    got = run_main("plan", str(path))
    assert got.code == 2, got
    assert "Traceback" not in got.err and got.err.strip().count("\n") == 0, got.err
    assert expected in got.err and str(path) in got.err
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("kind", ["alias bomb", "deep nesting", "oversized", "huge integer"])
def test_hostile_spec_is_refused(kind: str, tmp_path: Path) -> None:
    from scaling.trainer.spec import RunSpec

    text, expected = HOSTILE[kind]
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC + text)
    with pytest.raises(SpecError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        RunSpec.from_yaml(path)
    got = run_main("train", str(path), "--db", f"sqlite:///{tmp_path / 'r.db'}")
    assert got.code == 2 and expected in got.err and got.err.strip().count("\n") == 0, got.err
    assert not (tmp_path / "r.db").exists()  # refused before the database was touched


def test_alias_bomb_in_a_real_process(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN + alias_bomb(12))
    got = run_process("plan", str(path))
    assert got.code == 2 and "aliases" in got.err and "Traceback" not in got.err, got.err


def test_not_utf8_and_not_a_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_bytes(PLAN.encode() + b"x: \xff\xfe\n")
    got = run_main("plan", str(path))
    assert got.code == 2 and "not UTF-8" in got.err
    got = run_main("plan", str(tmp_path))
    assert got.code == 2 and "not a regular file" in got.err


def test_one_parse_gives_data_and_lines() -> None:
    src = YamlSource(PLAN + "anchor_only: &a 3\n", "p.yaml")  # an anchor without alias is harmless
    assert src.data == yaml.safe_load(PLAN + "anchor_only: 3\n")
    assert src.line(("grid", 0, "compute", 0)) == 6 and src.line(("anchor_only",)) == 7
    with pytest.raises(PlanError, match="p.yaml:2: train: duplicate key"):
        YamlSource("train: 1\ntrain: 2\n", "p.yaml")


@pytest.mark.parametrize("text, field, line", [
    ("model: {n_layer: 2, d_model: 16, n_head: 4}\ntokens: 20000\ntokens: 40000\n", "tokens", 3),
    ("optimizer: {lr: 0.03, lr: 0.1}\n", "optimizer.lr", 1),
    ("grid:\n  - {tokens: [1], tokens: [2]}\n", "grid.0.tokens", 2),
])
def test_a_repeated_key_is_refused_in_every_yaml_file(text: str, field: str, line: int, tmp_path: Path) -> None:
    """Specs and data plans as well as sweep plans: PyYAML alone would keep the last value silently."""
    with pytest.raises(SpecError, match=rf"s.yaml:{line}: {re.escape(field)}: duplicate key"):
        safe_yaml.parse(text, "s.yaml", SpecError)
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: {n_layer: 2, d_model: 16, n_head: 4, context: 64}\nbatch_tokens: 256\n"
                    "tokens: 20000\ntokens: 40000\n")
    got = run_main("train", str(spec), "--dry-run")
    assert got.code == 2 and "tokens: duplicate key" in got.err and len(got.err.strip().splitlines()) == 1


def test_a_located_message_names_its_field_once_and_keeps_it_before_a_longer_word() -> None:
    from scaling.orchestrator.yamlsource import located

    source = YamlSource("name: x\ndata:\n  source: text\n", "plan.yaml")
    assert located(source, ("data",), "data.path: no such file") == "plan.yaml:2: data.path: no such file"
    assert located(source, ("data",), "data: no path") == "plan.yaml:2: data: no path"
    # A message that only begins with the same letters does not name the field: keep it.
    assert located(source, ("data",), "dataset too small") == "plan.yaml:2: data: dataset too small"
