"""The tutorials are executed specs: every notebook in ``tutorials/`` runs top to bottom without error.

Each notebook runs in a fresh ``python3`` kernel with ``FLASHSIM_FAST=1`` (which shrinks every budget) and a
temporary working directory for the figures it writes. The kernel is the interpreter running pytest:
jupyter_client runs an installed ``python3`` kernelspec whose command is ``python`` with ``sys.executable``,
and without an installed kernelspec ipykernel (a dev dependency) provides ``python3`` natively.
Committed notebooks must carry no outputs (STYLE rule 20).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))
CELL_TIMEOUT = 300  # seconds per cell; the fast budgets need a few


def test_the_tutorials_folder_holds_notebooks():
    assert len(NOTEBOOKS) >= 2, f"expected the tutorial notebooks in {TUTORIALS}, found {NOTEBOOKS}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_committed_notebook_has_no_outputs_and_no_execution_counts(path):
    cells = json.loads(path.read_text())["cells"]  # plain JSON: importing nbformat costs ~3 s of collection
    dirty = [
        index
        for index, cell in enumerate(cells)
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} carry outputs or execution counts; clear all outputs and save before "
        f"committing (see tutorials/README.md)"
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs_without_error_at_the_fast_budget(path, tmp_path, monkeypatch):
    import nbclient
    import nbformat

    monkeypatch.setenv("FLASHSIM_FAST", "1")  # the kernel inherits this process's environment
    monkeypatch.delenv("MPLBACKEND", raising=False)  # let ipykernel pick its inline backend (figures as PNG)
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError (with the cell and its traceback) on the first failing cell
    streams = "".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    assert "FLASHSIM_FAST = True" in streams, "the notebook's first code cell must read FLASHSIM_FAST"
