"""Render index.ipynb (the landing notebook) to README.md: markdown cells verbatim, code cells as
```python blocks (cells marked `#| hide` are left out). `python .ci/make_readme.py --check` exits 1
if README.md differs from the rendering, so the two never drift apart."""
import json, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent

def render() -> str:
    nb = json.loads((root / "index.ipynb").read_text(encoding="utf-8"))
    parts = []
    for c in nb["cells"]:
        src = "".join(c["source"]).strip("\n")
        if not src or src.startswith("#| hide"): continue
        if c["cell_type"] == "markdown": parts.append(src)
        elif c["cell_type"] == "code":
            body = "\n".join(l for l in src.splitlines() if not l.startswith("#|")).strip("\n")
            if body: parts.append(f"```python\n{body}\n```")
    return "<!-- Generated from index.ipynb by .ci/make_readme.py: edit the notebook, not this file. -->\n\n" + "\n\n".join(parts) + "\n"

if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        same = (root / "README.md").read_text(encoding="utf-8") == text
        print("README.md matches index.ipynb" if same else "README.md differs from index.ipynb: run python .ci/make_readme.py")
        sys.exit(0 if same else 1)
    (root / "README.md").write_text(text, encoding="utf-8")
