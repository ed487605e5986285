"""Executes a notebook top to bottom in a scratch folder (CI: so it cannot rot).

Usage: python run_notebook.py NOTEBOOK [--write OUT]. Exits non-zero, with the
failing cell's error, when any cell raises.
"""

import argparse
import sys
import tempfile
import time

import nbclient
import nbformat


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("notebook")
    ap.add_argument("--write", help="save the executed notebook (with outputs) here")
    ap.add_argument("--expect-widgets", action="store_true", help="fail unless a progress bar drew as a widget")
    args = ap.parse_args()
    nb = nbformat.read(args.notebook, as_version=4)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as cwd:
        client = nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}}
        )
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as e:
            print(f"{args.notebook}: a cell failed:\n{e}", file=sys.stderr)
            return 1
    cells = sum(c.cell_type == "code" for c in nb.cells)
    print(f"{args.notebook}: {cells} code cells ran in {time.time() - t0:.1f} s")
    # mechlab's progress bars draw as Jupyter widgets when ipywidgets is there
    # (not as text with tqdm's "IProgress not found" warning).
    widgets = sum(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    if args.expect_widgets and widgets == 0:
        print(f"{args.notebook}: no progress widget in any output", file=sys.stderr)
        return 1
    print(f"{args.notebook}: {widgets} widget outputs (progress bars)")
    if args.write:
        nbformat.write(nb, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
