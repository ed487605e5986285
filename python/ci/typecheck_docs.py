"""Type-checks the Python a user copies from the docs: every ```python block of
README.md and of every page under docs/, the README's ``python -c`` one-liners, and the code
cells of the notebooks, each as its own module, with ``mypy --strict``
against the installed ``mechlab`` package (its stubs and ``py.typed``).

Usage: python typecheck_docs.py REPO. Third-party modules without stubs (pandas,
tqdm) are taken as untyped; everything of mechlab's must type-check.
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def blocks(md: str) -> list:
    return re.findall(r"```python\n(.*?)```", md, flags=re.S)


def one_liners(md: str) -> list:
    return [m.replace("; ", "\n") for m in re.findall(r'python -c "(.*?)"', md)]


def main() -> int:
    repo = Path(sys.argv[1])
    sources = {}
    docs = ["README.md"] + sorted(str(p.relative_to(repo)) for p in (repo / "docs").rglob("*.md"))
    for doc in docs:
        md = (repo / doc).read_text()
        if "```python" not in md and doc != "README.md":
            continue
        # A doc's blocks read top to bottom as one session; interactive ones
        # (>>> prompts) show output, not a program.
        sources[f"{Path(doc).stem.replace('-', '_')}_blocks"] = "\n\n".join(x for x in blocks(md) if ">>>" not in x)
        if doc == "README.md":
            for i, b in enumerate(one_liners(md)):
                sources[f"readme_oneliner{i}"] = b
    for name in sorted(p.stem for p in (repo / "docs/notebooks").glob("*.ipynb")):
        nb = json.loads((repo / f"docs/notebooks/{name}.ipynb").read_text())
        cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
        sources[f"notebook_{name}"] = "\n\n".join(cells)
    with tempfile.TemporaryDirectory() as d:
        files = []
        for name, text in sources.items():
            f = Path(d) / f"{name}.py"
            f.write_text(text)
            files.append(str(f))
        cmd = [sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports", "--no-incremental", *files]
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(r.stdout.replace(d + "/", ""), end="")
        print(f"type-checked {len(files)} snippets from the docs: {'ok' if r.returncode == 0 else 'errors'}")
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())
