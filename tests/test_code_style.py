"""Readable exported code (issue 6, point 17; CONVENTIONS "Lessons"): no line over 120 characters, one
statement per line (no `;` chains) and no named lambdas in the generated modules, `_modidx.py` aside."""
import ast, io, tokenize
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "procmem"
MODULES = sorted(p for p in LIB.glob("*.py") if p.name != "_modidx.py")


def test_modules_found():
    assert len(MODULES) >= 10, [p.name for p in MODULES]


@pytest.mark.parametrize("py", MODULES, ids=[p.stem for p in MODULES])
def test_readable_lines(py):
    src = py.read_text(encoding="utf-8")
    long = [n for n, line in enumerate(src.splitlines(), 1) if len(line) > 120]
    assert not long, f"{py.name}: lines over 120 characters: {long[:10]}"
    toks = tokenize.generate_tokens(io.StringIO(src).readline)
    semis = [t.start[0] for t in toks if t.type == tokenize.OP and t.string == ";"]
    assert not semis, f"{py.name}: `;` statement chains on lines {semis[:10]}"
    named = [n.lineno for n in ast.walk(ast.parse(src))
             if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Lambda)]
    assert not named, f"{py.name}: named lambdas on lines {named}"
