"""Long, realistic task texts for the relevance floor, built at run time from `../shared/data`.

A real agent rarely receives a bare 12-word intent: it gets a request with background, a ticket, or
a harness prompt around the objective. This module builds such texts from public data:

- **relevant**: each WebArena intent (`webarena/tasks_dev.json`, Apache-2.0) embedded in one of the
  paragraph `WRAPPERS` below (a chat request with background, a ticket, a hand-over note, an
  agent-harness prompt, ...), with a phrase naming the task's site. The relevant memories are the
  other tasks of the same `intent_template_id`.
- **unrelated**: the same wrappers around requests that no WebArena memory can answer (HotpotQA
  questions from `reflexion/hotpotqa_react_reflexion_100q_5trials.txt`, MIT; AgentDojo user tasks,
  Agent Security Bench agent tasks and Spikee benign questions from `injection/benchmark_dev.jsonl`,
  MIT/Apache-2.0), so the wrapper text alone must not pull memories in; and long benign texts as
  they are (BIPIA e-mails and Stack Exchange answers, CC BY-SA 4.0 / MIT; AgentDojo tool outputs;
  CPython docstrings, PSF-2.0).

Held out honestly: `split_of` assigns every WebArena template, every wrapper and every unrelated
source to "tune" or "heldout"; a held-out text has a held-out template (or source) AND a held-out
wrapper, so neither the procedure nor the phrasing was seen while tuning.
"""
from __future__ import annotations
import json, random, zlib
from pathlib import Path

SITES = {
    "shopping_admin": "the Magento admin panel of our online store",
    "shopping": "the One Stop Market shopping site",
    "gitlab": "our self-hosted GitLab",
    "reddit": "the Postmill forum",
    "map": "OpenStreetMap",
    "wikipedia": "the offline Wikipedia copy",
}

# Each wrapper: (name, text with {task} and {site}). Written for this benchmark; 50-160 words each.
WRAPPERS = [
    ("chat-background",
     "Hi! I hope your day is going well. I'm covering for a colleague this week and I've been asked to "
     "help out with a few things on {site}. I'm not very familiar with it yet, so please take your "
     "time and double-check before you change anything. Here is what I need: {task} When you are "
     "done, just reply with a short summary of what you did and anything that looked odd to you. "
     "Thanks a lot, I really appreciate it!"),
    ("ticket",
     "Ticket #4821 - priority: normal - reporter: operations team\n\nContext: During last week's "
     "review we noticed that a number of routine requests are still handled by hand. We are "
     "testing whether an assistant can take some of them over. The environment is {site}; you have "
     "a logged-in session with the usual permissions.\n\nRequest: {task}\n\nAcceptance criteria: "
     "the request is completed exactly as stated, nothing else is modified, and the final answer "
     "(if any) is reported in the ticket comment."),
    ("agent-harness",
     "You are an autonomous intelligent agent tasked with navigating a web browser. You will be "
     "given web-based tasks. These tasks will be accomplished through the use of specific actions "
     "you can issue: click, type, hover, press, scroll, goto, go_back and stop. The page you can "
     "see is {site}. Issue only one valid action at a time, and when you think the task is "
     "complete, issue the stop action with the answer in the brackets. OBJECTIVE: {task} PREVIOUS "
     "ACTION: None"),
    ("manager-email",
     "Subject: quick favour before Friday\n\nHello,\n\nour quarterly report is due on Friday and I "
     "am still missing a couple of things. Could you please log into {site} and take care of the "
     "following for me? {task}\n\nIf anything is unclear, make a reasonable assumption and note it "
     "down rather than waiting for me, I'm travelling until Thursday and will have limited access "
     "to e-mail. Best regards, and thank you in advance,\nDana"),
    ("handover",
     "Handover notes, evening shift. Most of the day went to the migration, which is finished; the "
     "backups ran fine and nobody reported problems after the restart. One open item remains for "
     "the next person on duty, and it has to be done on {site}: {task} Please leave a note in the "
     "log once it is done, with the time and anything you had to work around, so the morning "
     "shift knows where things stand."),
    ("voice",
     "ok so um, I'm on my phone right now and can't really use the computer, so can you do "
     "something for me on {site}? basically, {task} yeah that's it I think. oh and if it asks you "
     "to confirm something just go ahead, it's fine. thanks, talk later"),
    ("checklist",
     "Onboarding exercise 3 of 5. This exercise checks that you can complete a realistic task in "
     "{site} without step-by-step guidance. Read the task carefully, plan your steps, and keep "
     "track of the pages you visit. Task: {task} Rules: do not create test data, do not change "
     "settings that are not part of the task, and stop as soon as the task is complete. Your "
     "result will be compared with the expected outcome by the grader."),
    ("customer",
     "Dear support team, I have been a user of {site} for a few years and I'm usually able to "
     "manage on my own, but this time I could not figure it out and my deadline is close. My "
     "question is the following. {task} I would be grateful for a quick answer or for you to do it "
     "on my behalf if that is possible. Kind regards, M. Alvarez"),
    ("planner",
     "You are the planning module of a browsing assistant. Break the user's goal into a short "
     "plan, then carry it out step by step, observing the page after each action. If a step "
     "fails, explain why and try another way instead of repeating it. The website is {site}. "
     "User goal: {task} Return the final answer, or 'N/A' if the goal cannot be achieved on this "
     "website."),
    ("slack",
     "@assistant morning! quick one from the team standup: we agreed that you'd handle this since "
     "everyone else is busy with the release. it's on {site}. {task} no rush, anytime before lunch "
     "is fine. if you hit a permission error ping me and I'll sort it out."),
    ("research",
     "I'm collecting examples for a study on how people use {site} in their day-to-day work, and "
     "part of the protocol is to actually carry out a few representative tasks and record the "
     "outcome. The next task on my list is: {task} Please complete it as an ordinary user would, "
     "and describe the result in one or two sentences so I can add it to the notes."),
    ("reminder",
     "Reminder from yesterday's meeting (action items, owner: you). 1) Send the minutes to the "
     "group - done. 2) Book the room for the next session - done. 3) This one is still open and "
     "needs {site}: {task} 4) Prepare two slides for the Monday sync - later. Please tick item 3 "
     "off once it's finished."),
]

UNRELATED_SOURCES = ["hotpotqa", "agentdojo-user-task", "asb-agent-task", "spikee-benign-question",
                     "bipia-email", "bipia-code", "agentdojo-env-text", "stdlib-docstring"]
_WRAPPED = {"hotpotqa", "agentdojo-user-task", "asb-agent-task", "spikee-benign-question"}
_SUBSET = {"agentdojo-user-task": "user_task", "asb-agent-task": "agent_task",
           "spikee-benign-question": "benign_question", "bipia-email": "email_context",
           "bipia-code": "code_context", "agentdojo-env-text": "env_text",
           "stdlib-docstring": "docstring"}


def split_of(key) -> str:
    "'tune' or 'heldout' for a template id, wrapper name or source name (stable hash, about half each)."
    return "tune" if zlib.crc32(str(key).encode()) % 2 == 0 else "heldout"


def wrap(task: str, wrapper: str, site: str) -> str:
    "`task` embedded in the wrapper named `wrapper`, about the site `site` (a key of `SITES`)."
    text = dict(WRAPPERS)[wrapper]
    return text.format(task=task.strip(), site=SITES.get(site, site))


def _hotpot_questions(data: Path) -> list[str]:
    "The distinct HotpotQA questions of the Reflexion log."
    path = data / "reflexion" / "hotpotqa_react_reflexion_100q_5trials.txt"
    out = []
    for line in path.read_text().splitlines():
        q = line.split(":", 1)[1].strip() if line.startswith("Question:") else ""
        if q and q not in out:
            out.append(q)
    return out


def unrelated_texts(data: Path) -> dict[str, list[str]]:
    "Texts no WebArena memory answers, by source (see `UNRELATED_SOURCES`)."
    rows = [json.loads(l) for l in (data / "injection" / "benchmark_dev.jsonl").open() if l.strip()]
    out = {"hotpotqa": _hotpot_questions(data)}
    for src, sub in _SUBSET.items():
        texts = [r["text"].strip() for r in rows if r["label"] == 0 and r["subset"] == sub]
        out[src] = [t for t in dict.fromkeys(texts) if t]
    return out


def _relevant_rows(tasks: list[dict], rnd: random.Random, per_task: int) -> list[dict]:
    "Each WebArena task embedded in `per_task` wrappers (one of each split when per_task >= 2)."
    by_split = {s: [n for n, _ in WRAPPERS if split_of(n) == s] for s in ("tune", "heldout")}
    rows = []
    for t in tasks:
        tsplit = split_of(t["intent_template_id"])
        names = rnd.sample(by_split[tsplit], min(per_task, len(by_split[tsplit])))
        for n in names:
            rows.append(dict(query=wrap(t["intent"], n, t["sites"][0]), kind="relevant",
                             task_id=t["task_id"], template=t["intent_template_id"], wrapper=n,
                             source="webarena", split=tsplit))
    return rows


def _unrelated_rows(data: Path, rnd: random.Random, per_source: int) -> list[dict]:
    "Up to `per_source` unrelated texts per source; short requests wrapped, long texts as they are."
    rows = []
    sites = sorted(SITES)
    for src, texts in unrelated_texts(data).items():
        s = split_of(src)
        names = [n for n, _ in WRAPPERS if split_of(n) == s]
        for x in rnd.sample(texts, min(per_source, len(texts))):
            n = rnd.choice(names) if src in _WRAPPED else "none"
            q = wrap(x, n, rnd.choice(sites)) if src in _WRAPPED else x
            rows.append(dict(query=q, kind="unrelated", task_id=None, template=None, wrapper=n,
                             source=src, split=s))
    return rows


def long_tasks(data: Path, tasks: list[dict], per_task: int = 1, per_source: int = 60,
               seed: int = 0) -> list[dict]:
    "Relevant (WebArena intents in paragraphs) and unrelated long texts, each tagged with its split."
    rnd = random.Random(seed)
    return _relevant_rows(tasks, rnd, per_task) + _unrelated_rows(Path(data), rnd, per_source)


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from quality import DATA, load_tasks
    rows = long_tasks(DATA, load_tasks())
    for s in ("tune", "heldout"):
        print(s, [n for n, _ in WRAPPERS if split_of(n) == s])
    for r in random.Random(1).sample(rows, 4):
        print(f"--- {r['kind']} {r['source']} {r['split']} ({len(r['query'].split())} words)")
        print(r["query"])
