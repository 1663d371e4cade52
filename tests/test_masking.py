"""Secrets never leave their URL: every form of password is masked where a URL or plan is
stored, printed or rendered (errors, the stored plan, the report's header and plan, CLI lines)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from scaling.errors import DatabaseError, mask_data, mask_text, mask_url

PW = "S3cretPW77"
QPW = "QueryPW99"

URL_FORMS = {
    "userinfo": (f"postgresql+psycopg://postgres:{PW}@db.example:5432/x", [PW]),
    "query": (f"postgresql+psycopg://postgres@db.example/x?sslmode=require&password={QPW}", [QPW]),
    "unencoded_at": ("postgresql+psycopg://postgres:S3cretA@TailB9@db.example/x", ["S3cretA", "TailB9"]),
    "percent_encoded": ("postgresql+psycopg://postgres:S3cr%40etPW@db.example/x", ["S3cr%40etPW", "S3cr@etPW"]),
    "both": (f"postgresql://u:{PW}@h/db?password={QPW}", [PW, QPW]),
    "no_scheme": (f"://alice:{PW}@db.example/x", [PW]),
    # SQLAlchemy takes an unencoded "?" as part of the password; it is not the query's start
    "unencoded_question_mark": ("postgresql+psycopg://bob:S3cr?3tPW@db.example:5432/x", ["S3cr?3tPW", "3tPW"]),
    "unencoded_at_then_fragment": ("postgresql://alice:Pa@ss#w?rd91@db.example/x", ["ss#w?rd91", "w?rd91"]),
    "space": ("postgresql://alice:correct Horse77@db.example/x", ["correct Horse77", "Horse77"]),
}


@pytest.mark.parametrize("form", list(URL_FORMS))
def test_mask_url_hides_every_form(form: str) -> None:
    url, secrets = URL_FORMS[form]
    masked = mask_url(url)
    assert "***" in masked
    for secret in secrets:
        assert secret not in masked
    assert "db.example" in masked or "@h/" in masked  # where it points stays readable


def test_mask_url_leaves_urls_without_password_alone() -> None:
    for url in ("sqlite:///a/b@c.db", "postgresql+psycopg://postgres@127.0.0.1:5432/x",
                "postgresql://host:5432/db?sslmode=require", "sqlite:///rel.db"):
        assert mask_url(url) == url


def test_mask_text_hides_driver_echoes_and_keeps_field_names() -> None:
    url = "postgresql+psycopg://postgres:S3cretA@TailB9@localhost:5999/x"
    text = f"cannot open database {url}: failed to resolve host 'TailB9@localhost': [Errno -2]"
    masked = mask_text(text)
    assert "S3cretA" not in masked and "TailB9" not in masked and "localhost" in masked
    assert mask_text(f"connection failed: password={QPW} host=x") == "connection failed: password=*** host=x"
    plain = "grid.0.tokens: must be > 0; train.batch_tokens: 1000; password authentication failed"
    assert mask_text(plain) == plain


def test_user_error_line_is_masked() -> None:
    err = DatabaseError(f"cannot open postgresql://u:{PW}@h/db?password={QPW}")
    line = err.one_line()
    assert PW not in line and QPW not in line and line.startswith("error: cannot open postgresql://u:***@h/db")


def test_mask_data_masks_a_plan_but_keeps_its_numbers() -> None:
    plan = {"name": "p", "db": URL_FORMS["both"][0], "train": {"batch_tokens": 512, "tokens": 1e9},
            "extra": [{"password": "zz-top"}]}
    masked = mask_data(plan)
    text = json.dumps(masked)
    assert PW not in text and QPW not in text and "zz-top" not in text
    assert masked["train"] == plan["train"] and masked["name"] == "p"


@pytest.mark.parametrize("password", ["p@ss#w?rdQ1", "batt ery5Staple"])
def test_mask_data_masks_a_db_url_whole(password: str) -> None:
    """Passwords no URL in this process has shown before: nothing remembered helps the masking."""
    masked = json.dumps(mask_data({"db": f"postgresql://alice:{password}@db.example/x"}))
    assert "alice:***@db.example/x" in masked
    for piece in (password, password.split("@")[-1], password.split(" ")[-1]):
        assert piece not in masked, masked


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = "import sys; sys.argv[0] = 'scaling'; from scaling.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize("url,secrets", [
    # SQLAlchemy cuts the password at the first "@": the driver then fails to resolve "TailB9@127.0.0.1"
    ("postgresql+psycopg://postgres:S3cretA@TailB9@127.0.0.1:1/x", ["S3cretA", "TailB9"]),
    (f"postgresql+psycopg://postgres@127.0.0.1:1/x?password={QPW}", [QPW]),
    ("postgresql+psycopg://postgres:S3cr%40etPW@127.0.0.1:1/x", ["S3cr%40etPW", "S3cr@etPW"]),
    (f"postgresql+psycopg://postgres:{PW}@127.0.0.1:1/x", [PW]),
    ("postgresql+psycopg://bob:S3cr?3tPW@127.0.0.1:1/x", ["S3cr?3tPW", "3tPW"]),
])
def test_cli_errors_from_the_real_driver_are_masked(url: str, secrets: list[str]) -> None:
    out = _cli("status", "--db", url)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    for secret in secrets:
        assert secret not in out.stderr + out.stdout


@pytest.mark.parametrize("typo", [
    "postgresql+psycopg//alice:{pw}@db.example.com/results",  # ':' dropped
    "postgresql+psycopg:/alice:{pw}@db.example.com/results",  # a '/' dropped
    "alice:{pw}@localhost/results",  # no dialect at all
])
@pytest.mark.parametrize("command", ["status", "runs", "db upgrade"])
def test_a_url_missing_its_slashes_is_refused_masked_not_taken_as_a_file(typo: str, command: str,
                                                                         tmp_path: Path) -> None:
    secret = "Pa55" + uuid.uuid4().hex[:8]
    out = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'scaling'; from scaling.cli import main; main()",
                          *command.split(), "--db", typo.format(pw=secret)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.returncode == 2 and "malformed database URL" in out.stderr and "'://'" in out.stderr, out.stderr
    assert secret not in out.stderr + out.stdout and len(out.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no folder made for a "file" of that name


def test_the_stored_plan_is_masked(tmp_path: Path, sqlite_url: str) -> None:
    from scaling.db import Store, connect
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.sweep import register

    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump({
        "name": "masked", "runs_dir": str(tmp_path / "runs"), "db": URL_FORMS["both"][0],
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 32},
        "train": {"batch_tokens": 512, "eval_tokens": 2048},
        "grid": [{"compute": [1e9], "models": [{"n_layer": 1, "d_model": 16, "n_head": 1}]}],
    }))
    plan, source = load_plan(plan_file)
    with Store(sqlite_url) as store:
        register(store, plan, expand(plan, source))
    stored = json.dumps(connect(sqlite_url).sweep_info("masked")["plan"])
    assert "u:***@h/db" in stored
    assert PW not in stored and QPW not in stored


def test_report_masks_its_header_and_a_plan_stored_unmasked(tmp_path: Path, postgres_url: str) -> None:
    """On PostgreSQL (trust auth accepts and ignores a password): the header shows the URL the
    report was read from, the summary the plan as an earlier version stored it (unmasked)."""
    sys.path.insert(0, str(Path(__file__).parent / "reports"))
    import report_synth as S

    S.build(postgres_url, S.SweepSpec(sweep="masked", budgets=(1e13, 3e13), sizes_per_budget=3, steps=40,
                                      eval_every=10, plan={"name": "masked", "db": URL_FORMS["both"][0]}))
    sep = "&" if "?" in postgres_url else "?"
    url = postgres_url.replace("postgresql+psycopg://postgres@", f"postgresql+psycopg://postgres:{PW}@")
    url += f"{sep}password={QPW}"
    from scaling.reports import write_report

    path = write_report(url, "masked", tmp_path / "r.html", fit="memory")
    page = path.read_text()
    assert "Plan as submitted" in page and "u:***@h/db" in page
    assert PW not in page and QPW not in page
