"""Reports run without torch, Ray, the trainer or the orchestrator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = """
import sys
from scaling.reports import write_report
from scaling.reports import figures
write_report(sys.argv[1], None, sys.argv[2])
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray')
               or m.startswith('scaling.orchestrator') or m.startswith('scaling.trainer'))
print(heavy)
"""


def test_writing_a_report_imports_nothing_heavy(sweeps, tmp_path: Path) -> None:
    url, _ = sweeps["one_run"]
    res = subprocess.run([sys.executable, "-c", CHECK, url, str(tmp_path / "r.html")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"
