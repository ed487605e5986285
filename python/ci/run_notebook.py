"""Executes notebooks top to bottom, as Jupyter does (CI: so they cannot rot).

Usage: python run_notebook.py [--expect-widgets] NOTEBOOK... [--write OUT].

Each notebook runs in its own folder, as Jupyter runs it, with TMPDIR pointing
at a scratch folder that is removed afterwards (so the runs a notebook makes
with ``tempfile.mkdtemp()`` vanish with it). Exits non-zero, with the failing
cell's error, when any cell raises, and when a notebook left files in its folder
(a run written to a relative path lands in the checkout when a user runs it).
The notebook files themselves are never rewritten: ``--write`` saves one
executed notebook, with its outputs, elsewhere.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbclient
import nbformat


def listing(folder: Path) -> set:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def execute(path: Path, expect_widgets: bool, write: "str | None") -> int:
    nb = nbformat.read(path, as_version=4)
    folder = path.resolve().parent
    before = listing(folder)
    t0 = time.time()
    old_tmp = os.environ.get("TMPDIR")
    with tempfile.TemporaryDirectory() as scratch:
        # The kernel inherits the environment: its tempfile module makes its
        # folders under the scratch folder.
        os.environ["TMPDIR"] = scratch
        try:
            client = nbclient.NotebookClient(
                nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
            )
            client.execute()
        except nbclient.exceptions.CellExecutionError as e:
            print(f"{path}: a cell failed:\n{e}", file=sys.stderr)
            return 1
        finally:
            if old_tmp is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = old_tmp
    cells = sum(c.cell_type == "code" for c in nb.cells)
    print(f"{path}: {cells} code cells ran in {time.time() - t0:.1f} s")
    new = listing(folder) - before
    left = sorted(p for p in new if str(Path(p).parent) not in new)  # the new top-level paths
    if left:
        print(
            f"{path}: executing it left new files in {folder} "
            f"(write runs to tempfile.mkdtemp()): {', '.join(left[:10])}",
            file=sys.stderr,
        )
        return 1
    # mechlab's progress bars draw as Jupyter widgets when ipywidgets is there
    # (not as text with tqdm's "IProgress not found" warning).
    widgets = sum(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    if expect_widgets and widgets == 0:
        print(f"{path}: no progress widget in any output", file=sys.stderr)
        return 1
    print(f"{path}: {widgets} widget outputs (progress bars)")
    if write:
        nbformat.write(nb, write)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("notebooks", nargs="+", metavar="notebook")
    ap.add_argument("--write", help="save the executed notebook (with outputs) here; one notebook only")
    ap.add_argument("--expect-widgets", action="store_true", help="fail unless a progress bar drew as a widget")
    args = ap.parse_args()
    paths = [Path(p) for p in args.notebooks]
    if args.write and (len(paths) > 1 or Path(args.write).resolve() == paths[0].resolve()):
        ap.error("--write takes one notebook and a path other than the notebook's own")
    t0 = time.time()
    failed = [p for p in paths if execute(p, args.expect_widgets, args.write) != 0]
    if len(paths) > 1:
        print(f"{len(paths) - len(failed)} of {len(paths)} notebooks ran in {time.time() - t0:.1f} s")
    if failed:
        print(f"failed: {', '.join(map(str, failed))}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
