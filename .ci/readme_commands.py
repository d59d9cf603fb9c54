"""Print one of the two commands in README.md's first code block: `main` (line 1) or `test` (line 2).

CI runs exactly what README.md tells users to run; this fails loudly if the block is not two lines.
"""
import re, sys
from pathlib import Path

text = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text(encoding="utf-8")
m = re.search(r"```[a-z]*\n(.*?)```", text, re.S)
lines = [l for l in (m.group(1).splitlines() if m else []) if l.strip()]
if len(lines) != 2: sys.exit(f"README.md: the first code block must hold exactly two commands, found {len(lines)}")
print(lines[{"main": 0, "test": 1}[sys.argv[1]]])
