"""`scaling runs`: a sweep's runs as a table, JSON or CSV text."""

from __future__ import annotations

import io
import json
from typing import Optional

from scaling.errors import NotFoundError, UserError, mask_url

FORMATS = ("table", "json", "csv")
TABLE_COLUMNS = ["run_key", "status", "N", "D", "C", "attempts", "final_loss", "final_train_loss", "host", "error"]


def list_runs(url: Optional[str], sweep: Optional[str] = None, fmt: str = "table") -> str:
    """The runs of ``sweep`` (default: the latest sweep) formatted as ``fmt``."""
    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    from scaling.db.results import connect

    with connect(url) as res:
        name = sweep or res.latest_sweep()
        if name is None:
            raise NotFoundError(f"no sweeps in {mask_url(res.url)}: run a sweep first, or pass --db")
        df = res.runs(sweep=name)
    if fmt == "json":
        records = json.loads(df.to_json(orient="records", date_format="iso"))
        return json.dumps(records, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        df.drop(columns=["spec"]).to_csv(buf, index=False)
        return buf.getvalue()
    return _table(name, df[TABLE_COLUMNS])


def _table(sweep: str, df) -> str:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sweep {sweep}: {len(df)} runs", title_justify="left")
    for col in df.columns:
        table.add_column(col, justify="right" if col in ("N", "D", "C", "attempts", "final_loss", "final_train_loss") else "left")
    for row in df.itertuples(index=False):
        table.add_row(*(_cell(c, v) for c, v in zip(df.columns, row)))
    buf = io.StringIO()
    Console(file=buf, width=200, force_jupyter=False, color_system=None).print(table)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def _cell(col: str, v: object) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if col in ("N", "D", "C"):
        return f"{float(v):.3g}"  # type: ignore[arg-type]
    if col.startswith("final"):
        return f"{float(v):.4f}"  # type: ignore[arg-type]
    if col == "error":
        text = " ".join(str(v).split())
        return text[:60] + ("…" if len(text) > 60 else "")
    return str(v)
