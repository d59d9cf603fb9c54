"""Train procmem's prompt-injection classifier and measure it (scikit-learn at training time only).

    python bench/train_injection_model.py [--no-loso] [--quick] [--out bench/results/injection_model.json]

Writes the shipped model `procmem/data/injection_model.json.gz` (vocabulary, idf, weights, intercept,
threshold: data, never a pickle) and the measurements `bench/results/injection_model.json`.
Runtime scoring is `procmem.injection_model` (stdlib only); this script checks that it reproduces
scikit-learn's whole-text and span probabilities on every held-out row before writing the results.

Data (../shared/data, public; licences in ../shared/data/injection/licenses/):
- injection/benchmark_dev.jsonl: the team's split by text, "tune" when int(sha1(text), 16) % 2 == 0,
  else "held out". Training, the hyper-parameters (chosen on 5-fold out-of-fold scores of tune: word 1-2
  grams, C = 10; see nbs/11b_injection_model.ipynb) and the threshold use tune only.
- benign procedural text, as negatives: the memories procmem's offline extractor learns from the shared
  Reflexion HotpotQA log, the shared ALFWorld reflections as lessons (procmem.reflexion_lessons) (both
  reflexion/, MIT) and half the logs of tests/fixtures/trajectories (by sha1 of the file path), each as its
  joined title/description/content, each field, each tag and each span `injection_span` scores in them.
  Kept OUT of training, to measure on: the bootstrap pack and the seed memories of tests/fixtures, and the
  memories learned from the other half of the fixture logs.
Scores are SPAN scores (procmem.injection_model.injection_span: the top score over the whole text, each
line and each sentence of a long line with >= MIN_WORDS words), the way the scanner uses the model; the
whole-text-only rates are reported besides.
Model: fold_text -> TfidfVectorizer(word 1-2 grams, min_df 2, sublinear tf, l2, stop word "id", see STOP_WORDS)
-> LogisticRegression (C = 10, balanced classes), optionally pruned to the MAX_TERMS terms of largest |weight|
and refitted on that vocabulary (so the shipped model is exactly a scikit-learn model; the "pruning" table
measures the loss). Threshold: the smallest span score at which at most TARGET_FPR of tune's benign dataset
rows are flagged, on 5-fold out-of-fold scores (not on the training fit; the procedural negatives score near
0 and would dilute the rate, so they are not counted).
Leave-one-source-out: for each source S, the same recipe trained on tune rows of the other sources (its
own out-of-fold threshold) and measured on every row of S (none of S was seen).
"""
import argparse, gzip, hashlib, json, sys, time
from collections import defaultdict
from pathlib import Path

import numpy as np
import sklearn
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline

from _common import REPO, git_commit

sys.path.insert(0, str(REPO))
from procmem.text import fold_text  # noqa: E402
from procmem import injection_model as im  # noqa: E402

DATA = REPO.parent / "shared" / "data"
ROWS = DATA / "injection" / "benchmark_dev.jsonl"
FIXTURES = REPO / "tests" / "fixtures"
C = 10.0  # inverse regularisation strength (tune CV: 1, 10, 100 tried)
MIN_DF = 2  # a term must occur in 2+ training texts
MAX_TERMS = None  # prune the vocabulary to the terms of largest |weight|; None: keep all (the file is small)
TARGET_FPR = 0.01  # out-of-fold false-positive rate on tune's benign DATASET rows the threshold allows
FOLDS = 5
STOP_WORDS = ["id"]
# ^ Agent Security Bench's attacker instructions nearly all name an "ID 492837"; with "id" as a feature it
# became the model's strongest sign of an injection (weight 10; next 8) and flagged benign lines like
# "Report the refund id to the user". Identifiers are values (procmem's extractor writes them as <id>,
# the sink check judges them), not instructions, so the word is dropped before n-grams.


def is_tune(text: str) -> bool:
    return int(hashlib.sha1(text.encode()).hexdigest(), 16) % 2 == 0


def load_rows() -> list[dict]:
    if not ROWS.exists():
        sys.exit(f"shared data file not found: {ROWS}")
    return [json.loads(line) for line in ROWS.open(encoding="utf-8")]


def _memory_text(m) -> str:
    return "\n".join([m.title, m.description, m.content])


def _learned(runs) -> list:
    from procmem.extract import extract_memories
    from procmem.judge import Judgment

    out = []
    for t in runs:
        ok = (t.outcome or {}).get("success")
        verdicts = [ok] if isinstance(ok, bool) else [True, False]
        for v in verdicts:
            j = Judgment(v, "ground truth", 1.0, failure_class=None if v else "intrinsic")
            out += extract_memories(t, j)
    return out


def _parts(ms) -> list:
    "Distinct memories as [title, description, content, [tags]]."
    seen = {(m.title, m.description, m.content, tuple(m.tags)) for m in ms}
    return [[t, d, c, list(tags)] for t, d, c, tags in sorted(seen)]


def _pack(path: Path) -> list:
    return [[d["title"], d["description"], d["content"], list(d.get("tags") or [])] for d in json.loads(path.read_text())]


def _fixture_is_train(path: Path) -> bool:
    "Half the fixture logs (by sha1 of the path under tests/fixtures/trajectories) train; the rest are held out."
    return int(hashlib.sha1(str(path.relative_to(FIXTURES / "trajectories")).encode()).hexdigest(), 16) % 2 == 0


def procedural_texts() -> dict[str, list]:
    "Benign procedural memories per set (see `_parts`); sets named 'train: ...' are trained on."
    import procmem  # noqa: F401  the package registers every log format
    from procmem.ingest import log_files, read_trajectories
    from procmem.reflexion_lessons import lessons_from_env_results
    from procmem.research_logs import from_reflexion_log

    hotpot = from_reflexion_log(DATA / "reflexion" / "hotpotqa_react_reflexion_100q_5trials.txt")
    alf = sorted((DATA / "reflexion" / "alfworld").glob("env_results_trial_*.json"))
    logs = log_files(FIXTURES / "trajectories")
    fx = {k: [m for p in logs if _fixture_is_train(p) == k for m in _learned(read_trajectories(p))] for k in (True, False)}
    return {"train: learned from the shared Reflexion HotpotQA log": _parts(_learned(hotpot)),
            "train: shared ALFWorld reflections as lessons": _parts(m for p in alf for m in lessons_from_env_results(p)),
            "train: learned from half the logs in tests/fixtures/trajectories": _parts(fx[True]),
            "held out: learned from the other half of tests/fixtures/trajectories": _parts(fx[False]),
            "held out: bootstrap pack + seed memories": _pack(REPO / "procmem" / "data" / "bootstrap_general.json")
            + _pack(FIXTURES / "seed_memories.json")}


def memory_texts(m: list) -> list[str]:
    "What the scanner may score of a memory: the joined main fields, each field, each tag."
    return ["\n".join(m[:3]), *m[:3], *m[3]]


def training_texts(m: list) -> list[str]:
    "A memory's texts for training: `memory_texts` and every span `injection_span` would score in them."
    texts = memory_texts(m)
    return texts + [t[a:b] for t in texts for a, b in im._segments(t)]


def training_set(rows: list[dict], proc: list[str], skip_source: str | None = None):
    "Texts (not folded) and labels: tune rows (except `skip_source`), then the procedural negatives."
    tune = [r for r in rows if is_tune(r["text"]) and r["source"] != skip_source]
    X = [r["text"] for r in tune] + proc
    return X, np.array([r["label"] for r in tune] + [0] * len(proc)), len(tune)


def span_scores(m, texts: list[str]) -> np.ndarray:
    "scikit-learn's counterpart of `injection_span`: the top score over each text's judged spans (0: none)."
    owner, segs = [], []
    for i, t in enumerate(texts):
        for a, b in [(0, len(t)), *im._segments(t)]:
            if im._word_count(t[a:b]) >= im.MIN_WORDS:
                owner.append(i)
                segs.append(fold_text(t[a:b]))
    out = np.zeros(len(texts))
    if segs:
        np.maximum.at(out, np.array(owner), m.predict_proba(segs)[:, 1])
    return out


def new_pipeline(vocabulary=None):
    vec = TfidfVectorizer(lowercase=False, ngram_range=(1, 2), sublinear_tf=True, min_df=1 if vocabulary else MIN_DF,
                          vocabulary=vocabulary, stop_words=STOP_WORDS, dtype=np.float64)
    return make_pipeline(vec, LogisticRegression(C=C, class_weight="balanced", max_iter=5000))


def fit(X: list[str], y: np.ndarray, max_terms: int | None = MAX_TERMS):
    "Fit on the folded texts; keep the `max_terms` terms of largest |weight| and refit on them."
    X = [fold_text(t) for t in X]
    m = new_pipeline().fit(X, y)
    terms = m[0].get_feature_names_out()
    if max_terms is None or len(terms) <= max_terms:
        return m
    keep = np.sort(np.argsort(-np.abs(m[-1].coef_[0]), kind="stable")[:max_terms])
    return new_pipeline([str(t) for t in terms[keep]]).fit(X, y)


def oof_scores(X: list[str], y: np.ndarray, max_terms=MAX_TERMS) -> np.ndarray:
    "Out-of-fold span scores (each text scored by the model fitted without its fold)."
    out = np.zeros(len(y))
    for tr, te in StratifiedKFold(FOLDS, shuffle=True, random_state=0).split(X, y):
        m = fit([X[i] for i in tr], y[tr], max_terms)
        out[te] = span_scores(m, [X[i] for i in te])
    return out


def dataset_threshold(oof: np.ndarray, y: np.ndarray, n_rows: int) -> float:
    "The threshold from the out-of-fold scores of the first `n_rows` (dataset rows; then procedural ones)."
    return threshold_for(oof[:n_rows][y[:n_rows] == 0])


def threshold_for(neg_scores: np.ndarray, fpr: float = TARGET_FPR) -> float:
    "The smallest threshold t with share(neg_scores >= t) <= fpr (flagged means score >= t)."
    s = np.sort(neg_scores)[::-1]
    k = int(np.floor(fpr * len(s)))  # at most k negatives may be flagged
    return float(np.nextafter(s[k], np.inf)) if k < len(s) else float(s[-1])


def rates(p: np.ndarray, rows: list[dict], thr: float) -> dict:
    y = np.array([r["label"] for r in rows])
    st = np.array([bool(r["standalone"]) for r in rows])
    out = {}
    for name, sel in [("standalone_injections", (y == 1) & st), ("task_relative_injections", (y == 1) & ~st),
                      ("benign", y == 0)]:
        if sel.any():
            out[name] = {"n": int(sel.sum()), "flagged": round(float((p[sel] >= thr).mean()), 4)}
    return out


def per_source(p: np.ndarray, rows: list[dict], thr: float) -> dict:
    by = defaultdict(list)
    for i, r in enumerate(rows):
        by[r["source"]].append(i)
    return {s: rates(p[ix], [rows[i] for i in ix], thr) for s, ix in sorted(by.items())}


def export(m, thr: float, meta: dict) -> dict:
    vec, lr = m[0], m[-1]
    terms = vec.get_feature_names_out()
    return {"format": im._MODEL_FORMAT, "fold": "procmem.text.fold_text",
            "features": {"analyzer": "word", "token_pattern": vec.token_pattern, "ngram_range": list(vec.ngram_range),
                         "sublinear_tf": True, "norm": "l2", "stop_words": STOP_WORDS},
            "vocabulary": [str(t) for t in terms], "idf": vec.idf_.tolist(), "coef": lr.coef_[0].tolist(),
            "intercept": float(lr.intercept_[0]), "threshold": thr, "trained": meta}


def train_tune(rows: list[dict], proc: list[str]):
    X, y, n = training_set(rows, proc)
    oof = oof_scores(X, y)
    thr = dataset_threshold(oof, y, n)  # the procedural negatives are easy: not counted
    return fit(X, y), thr, {"tune_rows": n, "procedural_negatives": len(proc),
                            "oof_benign_flagged": round(float((oof[:n][y[:n] == 0] >= thr).mean()), 4),
                            "oof_injections_flagged": round(float((oof[y == 1] >= thr).mean()), 4)}


def pruning_table(rows, proc, thr_rows) -> list[dict]:
    "Held-out standalone-injection rate at each vocabulary size (each with its own tune-OOF threshold)."
    X, y, n = training_set(rows, proc)
    held = [r["text"] for r in thr_rows]
    out = []
    for k in [None, 12_000, 6_000, 3_000]:
        thr = dataset_threshold(oof_scores(X, y, k), y, n)
        m = fit(X, y, k)
        out.append({"max_terms": k or len(m[0].vocabulary_), "threshold": round(thr, 4),
                    **rates(span_scores(m, held), thr_rows, thr)})
        print("pruning", out[-1], flush=True)
    return out


def loso(rows: list[dict], proc: list[str]) -> dict:
    out = {}
    for s in sorted({r["source"] for r in rows}):
        X, y, n = training_set(rows, proc, skip_source=s)
        thr = dataset_threshold(oof_scores(X, y), y, n)
        test = [r for r in rows if r["source"] == s]
        p = span_scores(fit(X, y), [r["text"] for r in test])
        out[s] = {"threshold": round(thr, 4), **rates(p, test, thr)}
        print("loso", s, out[s], flush=True)
    return out


def _spans(texts: list[str]) -> np.ndarray:
    "The runtime's `injection_span` score of each text (0 when no span is judged)."
    return np.array([(im.injection_span(t) or (0.0,))[0] for t in texts])


def procedural_rates(sets: dict, thr: float) -> dict:
    "Share of memories flagged: on the joined main fields, and on any field or tag scored alone."
    out = {}
    for name, mems in sets.items():
        joined = _spans([memory_texts(m)[0] for m in mems]) >= thr
        fields = [[t for t in memory_texts(m)[1:] if _spans([t])[0] >= thr] for m in mems]
        out[name] = {"n": len(mems), "flagged": round(float(np.mean(joined)), 4),
                     "any_field_flagged": round(float(np.mean([bool(f) for f in fields])), 4),
                     "flagged_fields": [t for f in fields for t in f][:10]}
    return out


def dilution(held: list[dict], mems: list, thr: float) -> dict:
    "Held-out standalone injections inserted as step 2 of held-out benign memories: flagged whole vs by span."
    inj = [r["text"] for r in held if r["label"] == 1 and r["standalone"]]
    texts = []
    for i, t in enumerate(inj):
        lines = mems[i % len(mems)][2].split("\n")
        texts.append("\n".join(lines[:2] + ["2. " + " ".join(t.split())] + lines[2:]))
    whole = np.array([im.injection_probability(t) for t in texts])
    return {"n": len(texts), "flagged_whole_text": round(float((whole >= thr).mean()), 4),
            "flagged_by_span": round(float((_spans(texts) >= thr).mean()), 4)}


def speed(texts: list[str]) -> dict:
    "Texts per second of `injection_probability` (whole text) and `injection_span` (every span)."
    im.injection_probability("warm up")
    out = {"texts": len(texts), "mean_chars": round(sum(map(len, texts)) / len(texts))}
    for f in (im.injection_probability, im.injection_span):
        t = time.perf_counter()
        for x in texts:
            f(x)
        out[f"{f.__name__}_texts_per_s"] = round(len(texts) / (time.perf_counter() - t))
    return out


def write_model(m, thr: float, meta: dict) -> tuple[Path, dict]:
    model = export(m, thr, meta)
    path = REPO / "procmem" / "data" / im._MODEL_FILE
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same model gives the same bytes
        f.write(json.dumps(model, separators=(",", ":")).encode())
    im._load_model.cache_clear()
    return path, model


def check_runtime(m, held: list[dict]) -> tuple[np.ndarray, np.ndarray, float]:
    "scikit-learn's whole-text and span scores of the held-out rows; asserts the runtime gives the same."
    texts = [r["text"] for r in held]
    p = m.predict_proba([fold_text(t) for t in texts])[:, 1]
    sp = span_scores(m, texts)
    diff = max(float(np.abs(p - np.array([im.injection_probability(t) for t in texts])).max()),
               float(np.abs(sp - _spans(texts)).max()))
    assert diff < 1e-9, f"runtime scorer differs from scikit-learn by {diff}"
    return p, sp, diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-loso", action="store_true", help="skip leave-one-source-out (9 more trainings)")
    ap.add_argument("--quick", action="store_true", help="also skip the pruning table (a trial run)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "injection_model.json"))
    a = ap.parse_args(argv)
    rows, sets = load_rows(), procedural_texts()
    proc = sorted({t for k, ms in sets.items() if k.startswith("train") for m in ms for t in training_texts(m)})
    m, thr, meta = train_tune(rows, proc)
    meta = {**meta, "sklearn": sklearn.__version__, "C": C, "min_df": MIN_DF, "max_terms": MAX_TERMS, "stop_words": STOP_WORDS,
            "target_oof_fpr": TARGET_FPR, "commit": git_commit()}
    path, model = write_model(m, thr, meta)
    held = [r for r in rows if not is_tune(r["text"])]
    p, sp, diff = check_runtime(m, held)
    res = {"split": "tune = int(sha1(text),16) % 2 == 0; measured on held out", "threshold": thr,
           "model_bytes": path.stat().st_size, "vocabulary": len(model["vocabulary"]), "trained": meta,
           "max_abs_diff_runtime_vs_sklearn": diff, "min_words": im.MIN_WORDS,
           "held_out": rates(sp, held, thr), "held_out_per_source": per_source(sp, held, thr),
           "held_out_whole_text_only": rates(p, held, thr),
           "procedural": procedural_rates(sets, thr),
           "injection_as_a_step": dilution(held, sets["held out: bootstrap pack + seed memories"]
                                           + sets["held out: learned from the other half of tests/fixtures/trajectories"], thr),
           "speed": speed([r["text"] for r in held])}
    print(json.dumps(res, indent=1), flush=True)
    res["pruning"] = [] if a.quick else pruning_table(rows, proc, held)
    res["leave_one_source_out"] = {} if a.no_loso else loso(rows, proc)
    res["held_out_scores"] = {r["id"]: round(float(x), 12) for r, x in zip(held, p)}
    res["held_out_span_scores"] = {r["id"]: round(float(x), 12) for r, x in zip(held, sp)}
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
