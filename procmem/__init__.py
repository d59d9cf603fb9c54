__version__ = "0.1.0"

# Everything public is importable from the top-level package (`from procmem import MemoryStore`);
# `__all__` below is that public API, so `from procmem import *` brings nothing else. Tuning
# constants, test servers and helpers stay reachable through their modules (`procmem.index.K1`,
# `procmem.testing.fake_anthropic`). Importing `index` also adds `MemoryStore.search` and `sync_index`.
from .core import *
from .core import DEFAULT_NAMESPACE  # not in core's __all__ (nbdev's generated line is full)
from .text import *
from .values import *
from .store import *
from .store_status import *
from .index import *
from .trust import *
from .retrieval import *
from .inject import *
from .bootstrap import *
from .trajectory import *
from .chat_logs import *
from .claude_code import *
from .agent_logs import *
from .tool_logs import *
from .research_logs import *
from .reflexion_lessons import *
from .ingest import *
from .llm import *
from .judge import *
from .extract import *
from .scanner import *
from .injection_model import *
from .sinks import *
from .gates import *
from .loop import *
from .security import *
from .lifecycle import *
from .editing import *
from .simulation import *
from .analysis import *
from .eval import *
from .agent import *

# Names whose modules import the anthropic SDK when they load (SDK tool classes are made at import):
# they load on first use, so `import procmem` stays fast and needs no SDK until you ask for a tool.
_LAZY = {
    "memory_tools": "tools", "MemoryToolkit": "tools",
    "ProcmemMemoryTool": "memory_tool", "AsyncProcmemMemoryTool": "memory_tool",
    "MemoryPathError": "memory_tool", "Session": "session",
    "export_skills": "skills", "import_skills": "skills",  # skills reads the tools' domain rule
    # the PostgreSQL backend (psycopg is imported only when a bank is opened; MemoryStore("postgresql://…")
    # needs none of these names)
    "PgStore": "postgres", "TempPostgres": "postgres", "StoreUnavailableError": "postgres",
    "redact_dsn": "postgres", "migrate_store": "migrate", "MigrateError": "migrate",
}


def __getattr__(name: str):
    "Load a lazily exported name (see `_LAZY`) from its module on first use."
    if name not in _LAZY:
        raise AttributeError(f"module 'procmem' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"procmem.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    # core: the memory item
    "MemoryItem", "MemoryValidationError", "SOURCE_TYPES", "LIMITS", "SCHEMA_VERSION", "Finding",
    "STATUSES",
    "normalize_text", "content_fingerprint",
    # text
    "tokenize", "tf_cosine", "jaccard", "fold_text", "hidden_chars",
    # values and sinks: one set of detectors
    "find_values", "Value", "sink_findings", "permission_findings",
    # store
    "MemoryStore", "StoreError", "MemoryNotFoundError", "StoreConflictError", "StoreImportError",
    "NotAStoreError", "StoreDamagedError", "StoreNotFoundError", "StoreReadOnlyError",
    "BadRowError", "ExportRefusedError", "read_memory_file", "validate_store", "repair_store",
    "StoreBudgetError", "StoreWriteError",
    # index and retrieval
    "BM25Index", "IndexDamagedError", "retrieve_memories", "DEFAULT_MIN_RELEVANCE",
    "question_form", "form_tag", "FORM_RELEVANCE",
    # injection
    "format_memories_for_injection", "strip_injected_memories", "injected_memories",
    "neutralize_text", "memory_key_points",
    # bootstrap pack
    "bootstrap_general_strategies", "validate_bootstrap_strategies", "validate_no_hardcoded_uris",
    "find_hardcoded_uris", "BOOTSTRAP_TITLES",
    # trajectories
    "Trajectory", "Step", "TrajectoryError", "TrajectoryArtifact", "read_trajectories",
    "as_trajectory", "from_rlm_iterations", "from_anthropic_messages", "from_openai_chat",
    "from_minisweagent", "from_reflexion_log", "hide_outcome", "detect_trajectory_format",
    "detect_loop", "extract_trajectory_artifact",
    # log formats
    "LogKeys", "LogFormat", "RecordError", "register_format", "label_outcome",
    "from_langchain_messages", "from_claude_code", "from_sweagent", "from_openhands", "from_taubench",
    "lessons_from_reflections", "lessons_from_env_results", "import_lessons",
    "read_logs", "IngestReport", "FileReport",
    # judge
    "RUN_KINDS", "run_kind", "verdict_label",
    # the LLM seam
    "AnthropicLLM", "Usage", "LLMError", "PRICES", "DEFAULT_MODEL", "resolve_model",
    # judge and extractor
    "judge_trajectory", "Judgment", "offline_judge", "llm_judge", "ground_truth_judgment",
    "judge_agreement", "FAILURE_CLASSES", "EXTRINSIC_CAUSES", "attributable",
    "extract_memories", "extract_memories_contrastive", "Extraction",
    # gates
    "check_memory_deduplication", "apply_dedup", "DedupDecision", "score_generalization",
    "find_task_leaks", "run_gates", "apply_gate", "GateResult", "admit_memory",
    # safety: scanner, classifier, trust on read, the poisoning simulation
    "scan_memory_text", "scan_memory", "SCANNER_VERSION", "injection_probability",
    "DEFAULT_MIN_CONFIRMATIONS", "read_check", "run_texts", "poisoning_simulation", "PoisoningReport",
    # the loop
    "run_with_memory", "learn_from_trajectory", "LoopResult", "LearnResult", "demo_trajectories",
    # usefulness and forgetting (store.prune / restore / archive / merge / history are methods)
    "utility", "is_harmful", "demote_harmful", "PruneReport", "MergeRefusedError", "merge_candidates",
    "ScriptedAgent", "usefulness_simulation", "truth_judge",
    # research views (store.to_df / events_df are methods) and the evaluation harness
    "runs_df", "plot_growth", "plot_utility", "plot_usage", "plot_retrieval_scores", "plot_ab",
    "write_report", "demo_bank", "ab_test", "summarize_ab", "store_copies", "FrozenStoreError",
    "agreement_metrics",
    # tenants: a store object is bound to one namespace (MemoryStore(path, namespace=...))
    "DEFAULT_NAMESPACE",
    # memory for real agents: SDK tools, Claude's memory tool, the reference agent, sessions, skills
    "memory_tools", "MemoryToolkit", "ProcmemMemoryTool", "AsyncProcmemMemoryTool", "MemoryPathError",
    "ClaudeAgent", "Session", "export_skills", "import_skills",
    # one bank for a fleet: PostgreSQL as the system of record (MemoryStore("postgresql://…"))
    "PgStore", "TempPostgres", "StoreUnavailableError", "redact_dsn", "migrate_store", "MigrateError",
]
