"""Execute a notebook as its docs say, with `jupyter nbconvert --execute`, in a process of its own.

A kernel client in the pytest process would leave its event loop running on that worker, which
Playwright's synchronous API (the browser tests) cannot share; nbconvert's process takes it away.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def execute_notebook(notebook: Path, out_dir: Path, env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    """Run ``notebook`` in a fresh python3 kernel (this checkout first on the path, one BLAS thread) from
    ``cwd``; the executed copy goes to ``out_dir``. Returns its code cells' outputs, none of them an error."""
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.is_file():
        pytest.skip("jupyter (nbconvert) is not installed: pip install -e '.[dev]'")
    env = {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])}
    done = subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--output-dir", str(out_dir),
                           "--ExecutePreprocessor.timeout=600", "--ExecutePreprocessor.kernel_name=python3",
                           str(notebook)], capture_output=True, text=True, env=env, timeout=900, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    nb = json.loads((out_dir / notebook.name).read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    return outputs
