"""Runs the README's Python block as a newcomer would, and checks its comments.

Usage: python readme_block.py README.md

CI runs it in a virtual environment that has only the mechlab wheel and what the
wheel asks for (the README's install command), from a scratch folder. Each line's
trailing comment is held to what it promises, where a machine can tell:
"DataFrame" (a pandas DataFrame whose "mean"/"n" columns, if any, are numbers),
a literal shape such as "(8, 3, 101, 101)", "ndarray" (a dict of numpy arrays),
"one dict per claim" (a list of dicts with "pass"), and "progress bar" (tqdm
importable).
"""

import ast
import os
import re
import sys
import tempfile
from pathlib import Path


def block(readme: Path) -> str:
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.S)
    if len(blocks) != 1:
        sys.exit(f"{readme}: expected one ```python block, found {len(blocks)}")
    return blocks[0]


def check(comment: str, value, where: str) -> None:
    def fail(why: str) -> None:
        sys.exit(f"{where}: the comment says {comment!r}, but {why}")

    if "DataFrame" in comment:
        import pandas as pd

        if not isinstance(value, pd.DataFrame):
            fail(f"it returned a {type(value).__name__}")
        for col in ("mean", "n"):
            if col in value.columns and not pd.api.types.is_numeric_dtype(value[col]):
                fail(f"column {col!r} is {value[col].dtype}, not numbers")
    shape = re.search(r"\((\d+(?:, \d+)+)\)", comment)
    if shape and tuple(value) != tuple(int(x) for x in shape.group(1).split(", ")):
        fail(f"it is {tuple(value)}")
    if "ndarray" in comment:
        import numpy as np

        if not (isinstance(value, dict) and all(isinstance(v, np.ndarray) for v in value.values())):
            fail("it is not a dict of numpy arrays")
    if "one dict per claim" in comment:
        if not (isinstance(value, list) and value and all("pass" in v for v in value)):
            fail("it is not a list of verdict dicts")
    if "progress bar" in comment:
        try:
            import tqdm  # noqa: F401
        except ImportError:
            fail("tqdm is not installed, so no bar is shown")


def main(readme: str) -> None:
    path = Path(readme).resolve()
    src = block(path)
    comments = {i + 1: line.split("#", 1)[1].strip() for i, line in enumerate(src.splitlines()) if "  # " in line}
    ns: dict = {}
    os.chdir(tempfile.mkdtemp())
    for node in ast.parse(src).body:
        where = f"{path.name} python block, line {node.lineno}"
        comment = comments.get(node.end_lineno or node.lineno, "")
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), where, "eval"), ns)
            check(comment, value, where)
        else:
            exec(compile(ast.Module([node], []), where, "exec"), ns)
            if comment and isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                check(comment, ns[node.targets[0].id], where)
    print(f"{path.name}: the Python block ran, {len(comments)} comments checked")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "README.md")
