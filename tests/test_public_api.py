"""The top-level package exports its public API and nothing else, and the runtime requirements are
exactly the third-party packages the library imports (issue 6, point 15)."""
import ast, configparser, re, sys, types
from pathlib import Path

import procmem

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "procmem"

# The seed's public names keep their meaning (DESIGN.md), so they must stay importable from the top.
SEED_NAMES = {"MemoryItem", "MemoryStore", "extract_trajectory_artifact", "judge_trajectory",
              "extract_memories", "retrieve_memories", "format_memories_for_injection",
              "bootstrap_general_strategies", "validate_bootstrap_strategies",
              "validate_no_hardcoded_uris", "check_memory_deduplication", "score_generalization",
              "run_with_memory"}


def _star() -> dict:
    ns: dict = {}
    exec("from procmem import *", ns)
    return {k: v for k, v in ns.items() if k != "__builtins__"}


def test_star_import_is_the_declared_public_api():
    names = _star()
    assert set(names) == set(procmem.__all__)
    assert len(procmem.__all__) == len(set(procmem.__all__)), "a name is listed twice in __all__"
    assert not [k for k, v in names.items() if isinstance(v, types.ModuleType)], "modules leak"
    for internal in ("B", "K1", "anthropic", "STORE_FIELDS", "FakeAnthropic", "fake_anthropic",
                     "write_recording", "patch", "Path", "json"):
        assert internal not in names, f"{internal} is not public API"
    assert not [k for k in names if k.startswith("_")]
    assert SEED_NAMES <= set(names), SEED_NAMES - set(names)
    # 126 through issue 8; issue 9 added the lifecycle, research views and A/B harness (~20 names);
    # issue 10 the agent tools, Claude's memory tool, the reference agent, sessions, skills (10)
    assert len(names) < 170, f"{len(names)} public names: is every one of them API?"


def test_every_public_name_is_defined_in_a_procmem_module():
    for name in procmem.__all__:
        obj = getattr(procmem, name)
        mod = getattr(obj, "__module__", None)
        if mod is not None and not isinstance(obj, (str, int, float, tuple, dict, frozenset)):
            assert mod.startswith("procmem."), f"{name} comes from {mod}"


def _requirements(key: str) -> set[str]:
    cfg = configparser.ConfigParser(delimiters=["="])
    cfg.read(ROOT / "settings.ini", encoding="utf-8")
    names = (re.split(r"[<>=!~\[ ;]", r)[0] for r in cfg["DEFAULT"].get(key, "").split())
    return {n.lower().replace("_", "-") for n in names if n}


def _lazy_import(node) -> bool:
    "A call that imports a module named by a string: `importlib.import_module('x')`, `_LazyModule('x')`."
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
    return name in ("import_module", "_LazyModule") and isinstance(node.args[0].value, str)


def _third_party_imports() -> set[str]:
    "Top-level names of the modules procmem/*.py import, outside the standard library and procmem."
    found = set()
    for py in LIB.glob("*.py"):
        if py.name == "_modidx.py":
            continue
        for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
            elif _lazy_import(node):
                found.add(node.args[0].value.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in ("procmem", "__future__")}


# import name -> distribution name, where they differ
_DIST = {"Stemmer": "pystemmer", "yaml": "pyyaml"}


def test_runtime_requirements_are_what_the_library_imports():
    imported = {_DIST.get(m, m).lower().replace("_", "-") for m in _third_party_imports()}
    required = _requirements("requirements") | _requirements("mcp_requirements")  # + the mcp extra
    required |= _requirements("postgres_requirements")  # + the postgres extra
    assert imported == required, (f"imported but not required: {sorted(imported - required)}; "
                                  f"required but never imported: {sorted(required - imported)}")
    assert "rank-bm25" not in required  # the reference BM25 the tests compare with
    assert {"rank-bm25", "pytest"} <= _requirements("dev_requirements")


def test_import_procmem_does_not_import_pandas_or_matplotlib():
    "pandas and matplotlib are runtime requirements of the research views and `procmem report` only."
    import subprocess
    code = "import sys, procmem; print(sorted({'pandas', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_import_procmem_loads_no_sdk_until_a_tool_is_asked_for():
    "The agent tools and Claude's memory tool load the anthropic SDK on first use, not on import."
    import subprocess
    code = ("import sys, procmem, procmem.cli, procmem.mcp_server, procmem.skills, procmem.postgres;"
            " print(sorted({'anthropic', 'mcp', 'yaml', 'psycopg'} & set(sys.modules)));"
            " procmem.ProcmemMemoryTool; print('anthropic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"], out.stdout
    assert "ProcmemMemoryTool" in dir(procmem)
    with __import__("pytest").raises(AttributeError, match="no attribute 'nope'"):
        procmem.nope


def test_the_mcp_extra_is_declared():
    "`pip install procmem[mcp]` brings the MCP SDK; the dev extra includes it (tests need it)."
    assert _requirements("mcp_requirements") == {"mcp"}
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert "'mcp': mcp_requirements" in setup and "dev_requirements + mcp_requirements" in setup


def test_the_postgres_extra_is_declared_and_loaded_only_for_a_bank():
    "`pip install procmem[postgres]` brings psycopg 3; the dev extra includes it; only a DSN imports it."
    assert _requirements("postgres_requirements") == {"psycopg"}
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert "'postgres': postgres_requirements" in setup and "+ postgres_requirements" in setup
    import subprocess
    code = ("import sys, procmem; procmem.PgStore; s = procmem.MemoryStore();"
            " print('psycopg' in sys.modules, type(s).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "MemoryStore"], out.stdout
