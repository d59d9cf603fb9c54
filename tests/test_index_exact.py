"""Issue 6 point 8: BM25Index scores equal rank-bm25's BM25Okapi with Lucene's IDF on the live documents
in EVERY index state (documents split between the flushed base and the overlay, removed and replaced
documents, filters), and the rank-safe pruning never changes the top k.

Seeded random corpora go through random add / replace / remove / flush interleavings; after each step
several queries are compared with rank-bm25 rebuilt on the live documents: the same ids in the same
order (ties by id) and every score equal to 1e-6 relative. The larger corpora have very common terms
and long queries, so the MaxScore pruning is at work (and checked to have skipped postings)."""
import math, random

import pytest
from rank_bm25 import BM25Okapi
from procmem import BM25Index, MemoryItem, MemoryStore, tokenize
from procmem.index import B, K1, bm25_idf, memory_text


class LuceneBM25(BM25Okapi):
    "rank-bm25's Okapi BM25 with Lucene's monotonic IDF (the formula BM25Index implements)."
    def _calc_idf(self, nd):
        self.idf = {w: bm25_idf(self.corpus_size, n) for w, n in nd.items()}


def _rank_key(pair):
    "Best first; scores equal to 9 decimals are ties (summation order differs), broken by id."
    return (-round(pair[1], 9), pair[0])


def reference(live: dict, kinds: dict, query: list, k: int, kind=None) -> list:
    "rank-bm25 (Lucene IDF) over ALL live documents, then the filter, top k with ties by id."
    ids = sorted(live)
    if not ids:
        return []
    scores = LuceneBM25([live[i] for i in ids], k1=K1, b=B).get_scores(query)
    hits = [(i, s) for i, s in zip(ids, scores) if s > 0 and (kind is None or kinds[i] == kind)]
    return sorted(hits, key=_rank_key)[:k]


def assert_same(got: list, want: list, where):
    assert [i for i, _ in got] == [i for i, _ in want], (where, got, want)
    for (_, a), (_, b) in zip(got, want):
        assert math.isclose(a, b, rel_tol=1e-6), (where, a, b)


def _zipf_words(rng, n_words):
    words = [f"w{i}" for i in range(n_words)]
    weights = [1 / (r + 1) ** 1.1 for r in range(n_words)]
    return words, weights


def _run(seed, n_ids, n_words, n_steps, check_every, p_flush, doc_len, q_len, ks):
    rng = random.Random(seed)
    words, weights = _zipf_words(rng, n_words)
    ix = BM25Index(keywords=("kind",), flush_every=10**9)
    live, kinds, checks = {}, {}, 0
    for step in range(n_steps):
        op, doc_id = rng.random(), f"d{rng.randrange(n_ids):05d}"
        if op < 0.7:
            live[doc_id] = rng.choices(words, weights, k=rng.randint(*doc_len))
            kinds[doc_id] = rng.choice(["a", "b"])
            ix.add(doc_id, live[doc_id], kind=kinds[doc_id])
        elif op < 1 - p_flush:
            assert ix.remove(doc_id) == (live.pop(doc_id, None) is not None)
        else:
            ix.flush()
        if step % check_every:
            continue
        assert len(ix) == len(live)
        for _ in range(3):
            q = rng.choices(words, weights, k=rng.randint(*q_len))
            k, kind = rng.choice(ks), rng.choice([None, None, "a"])
            got = ix.search(q, k=k, filters={"kind": kind})
            assert_same(got, reference(live, kinds, q, k, kind), (seed, step, q, k, kind))
            checks += 1
    return ix, checks


@pytest.mark.parametrize("seed", range(8))
def test_small_corpora_every_state_matches_rank_bm25(seed):
    _, checks = _run(seed, n_ids=40, n_words=25, n_steps=300, check_every=1, p_flush=0.08,
                     doc_len=(1, 12), q_len=(1, 5), ks=[1, 3, 10, 100])
    assert checks == 900


@pytest.mark.parametrize("seed", range(3))
def test_large_corpora_with_pruning_match_rank_bm25(seed):
    # ~1,500 live documents, a Zipf vocabulary (the top words are in most documents), queries of up
    # to 12 terms: the MaxScore loop stops early, so this checks that pruning never changes the top k.
    ix, checks = _run(100 + seed, n_ids=2500, n_words=400, n_steps=4000, check_every=97, p_flush=0.002,
                      doc_len=(3, 40), q_len=(2, 12), ks=[1, 5, 10])
    assert checks >= 120
    ix.flush()
    assert len(ix._base.ids) > 1000


def test_pruning_skips_postings_yet_is_exact():
    rng = random.Random(7)
    words, weights = _zipf_words(rng, 300)
    live = {f"d{i:05d}": rng.choices(words, weights, k=rng.randint(5, 30)) for i in range(3000)}
    ix = BM25Index()
    ix.add_many(live.items())
    ix.flush()
    added, calls = [], []
    orig = BM25Index._add_term

    def spy(self, acc, term, avg):
        added.append(term[5] - term[4])
        return orig(self, acc, term, avg)

    BM25Index._add_term = spy
    try:
        for _ in range(50):
            q = rng.choices(words, weights, k=rng.randint(3, 10))
            plan, avg = ix._plan(ix.query_terms(q))
            calls.append(sum(t[5] - t[4] for t in ix._terms(plan, avg)))
            assert_same(ix.search(q, k=5), reference(live, {}, q, 5), q)
    finally:
        BM25Index._add_term = orig
    assert sum(added) < 0.8 * sum(calls)  # pruning accumulated well under all the postings


def test_store_mixed_states_match_rank_bm25(tmp_path):
    "A file store: base on disk + overlay + deletions + a second process's flush; scores stay exact."
    rng = random.Random(3)
    words, weights = _zipf_words(rng, 60)

    def item(i):  # a unique word keeps items distinct (the store merges duplicates)
        return MemoryItem(" ".join(rng.choices(words, weights, k=rng.randint(2, 8))) + f" u{i}x{rng.random()}",
                          " ".join(rng.choices(words, weights, k=rng.randint(0, 10))), "1. do it", id=f"m{i:04d}")

    w, r = MemoryStore(tmp_path / "m.db"), MemoryStore(tmp_path / "m.db")
    w.add_many([item(i) for i in range(400)])  # builds the base
    for i in range(400, 420):
        w.add(item(i))  # overlay
    for i in range(0, 400, 27):
        w.delete(f"m{i:04d}")  # dead base documents
    for i in range(2, 400, 50):
        w.update(item(i))  # replaced base documents (same id, new text)
    ix = w.sync_index()
    assert ix.pending > 30 and len(ix._base.ids) == 400 and len(ix._dead) == 15 + 8  # a mixed state
    for store in (w, r, w):
        live = {m.id: tokenize(memory_text(m)) for m in store}
        for _ in range(25):
            q = rng.choices(words, weights, k=rng.randint(1, 6))
            got = [(m.id, s) for m, s in store.search(" ".join(q), k=8)]
            assert_same(got, reference(live, {}, q, 8), q)
        r.sync_index(flush=True)  # another process writes the base: w reloads it at its next search
