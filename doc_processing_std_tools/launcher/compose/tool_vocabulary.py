"""The words of tool search: a stemmer, and a lexicon of the ways people name the same need.

A tool says "Delete the memory stored under a key"; an agent asks to "forget" it. BM25 only
meets words that are the same, so each word of a tool and of a query also yields the *concepts*
it belongs to (``delete``, ``remove``, ``erase`` and ``forget`` all yield one concept token),
and a query meets a tool that words the need differently. A concept is rarer than none of its
words and commoner than each, so BM25's own IDF weighs a concept match below an exact one.

The lexicon is general software vocabulary: the verbs of CRUD and of version control, issue
trackers, chat, browsers, databases, files and monitoring, and the phrasings agents use for
them. It was written from knowledge of how tools and people word things, not by patching
the benchmark's queries one by one (``benchmarks/tool_retrieval.py`` says how it is measured).
A word may belong to several concepts ("open" a file, an issue, a page).
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

# Concept -> the words and phrases that name it, comma-separated. Phrases are matched on
# consecutive words, stop words included ("who am i"); words and phrases after stemming.
LEXICON: dict[str, str] = {
    # -- actions ----------------------------------------------------------------------
    "create": (
        "create, new, make, add, open, start, init, initialize, generate, spawn, set up, raise, "
        "file a, draft, compose, spin up, provision, stand up, establish"
    ),
    "delete": (
        "delete, remove, erase, forget, drop, discard, destroy, purge, wipe, rm, unlink, trash, get "
        "rid, throw away, clear, clean up, deletion, tear down, decommission, deprovision"
    ),
    "read": (
        "read, open, load, view, show, display, see, look at, inspect, cat, print, peek, contents, "
        "content, dump, check, examine"
    ),
    "get": "get, fetch, retrieve, obtain, grab, pull, look up, lookup, details",
    "list": "list, enumerate, every, all, ls, browse, overview, index, listing, catalog",
    "search": (
        "search, find, query, locate, grep, seek, look for, hunt, match, filter, lookup, look up"
    ),
    "update": (
        "update, edit, change, modify, alter, patch, set, adjust, tweak, amend, revise, fix, "
        "correct"
    ),
    "replace": "replace, substitute, swap, overwrite, rewrite, sub",
    "insert": "insert, append, prepend, add, inject, put",
    "save": (
        "save, store, write, persist, remember, record, keep, memorize, note, jot, put, stash, log"
    ),
    "move": "move, rename, relocate, mv, transfer, retitle",
    "copy": "copy, duplicate, clone, fork, replicate",
    "run": (
        "run, execute, exec, invoke, call, trigger, launch, kick off, evaluate, eval, perform, fire"
    ),
    "again": "again, rerun, retry, re run, redo, restart, repeat, once more",
    "undo": "undo, revert, reset, unstage, roll back, rollback, back out",
    "close": "close, shut, shut down, quit, exit, stop, end, kill, terminate, dismiss",
    "reopen": "reopen, re open, resurrect, revive",
    "resolve": "resolve, resolved, fixed, done, complete, finish, close, closed, solved, mark as",
    "send": (
        "send, post, tell, notify, announce, broadcast, let know, ping, dm, message, inform, share"
    ),
    "reply": "reply, respond, answer, follow up, response, thread",
    "comment": "comment, note, remark, reply, feedback, annotation, leave a, chime in",
    "share": (
        "share, grant, give, invite, permission, access, rights, allow, collaborator, viewer, "
        "editor, commenter"
    ),
    "assign": (
        "assign, assignee, owner, hand over, hand off, reassign, delegate, give to, take over, "
        "responsible"
    ),
    "approve": "approve, lgtm, sign off, accept, ok, okay, greenlight",
    "review": "review, reviewer, look over, check over, feedback, critique",
    "merge": "merge, land, squash, integrate, combine, ship it",
    "convert": "convert, translate, transform, in other, equivalent",
    "count": "count, how many, number of, total, tally",
    "arithmetic": "add, sum, plus, total, calculate, compute, math, arithmetic",
    "wait": "wait, pause, sleep, until, hold on, delay, appear, disappear",
    "upload": "upload, attach, provide, chooser, attachment",
    "download": "download, fetch, scrape, crawl, grab, pull, retrieve",
    "navigate": "navigate, go to, visit, open, load, browse, url, link, address, website, site",
    "back": "back, previous, prior, before, go back, return to, backward",
    "click": "click, press, tap, hit, push, button, double click",
    "type": "type, enter, input, fill, key in, write into, text box, field",
    "choose": "choose, select, pick, option, dropdown, drop down, combobox",
    "hover": "hover, mouse over, mouseover, tooltip, point at",
    "drag": "drag, drag and drop, drop onto, reorder",
    "resize": (
        "resize, enlarge, shrink, bigger, smaller, dimension, viewport, window, width, height, "
        "maximize"
    ),
    "react": "react, reaction, emoji, thumbs, thumbs up, upvote, emoticon",
    "stage": "stage, staged, git add, index, add to the index",
    "commit": "commit, check in, checkin, snapshot, save changes",
    "checkout": "checkout, check out, switch, switch to",
    "push": "push, publish, upload",
    "explain": "explain, plan, slow, performance, analyze, analyse, optimize",
    # general actions (domain-neutral verbs, added for issue 38 without sight of any query)
    "enable": "enable, turn on, switch on, activate, unmute, opt in, enabled",
    "disable": "disable, turn off, switch off, deactivate, mute, opt out, disabled",
    "pause": "pause, suspend, freeze, halt, hold, put on hold, stop temporarily",
    "resume": "resume, unpause, continue, unfreeze, unsuspend, pick up, carry on",
    "cancel": (
        "cancel, abort, call off, revoke, void, rescind, withdraw, invalidate, cancellation, "
        "terminate"
    ),
    "restore": "restore, recover, undelete, unarchive, bring back, recovery, backup",
    "archive": "archive, retire, shelve, deprecate, put away, archived",
    "schedule": "schedule, reschedule, postpone, book, arrange, reserve, slot",
    "restart": "restart, reboot, bounce, relaunch, reload, recycle, power cycle",
    "scale": "scale, scale up, scale down, autoscale, capacity, grow, shrink",
    "subscribe": "subscribe, follow, watch, sign up, opt in, enroll, register, join",
    "unsubscribe": "unsubscribe, unfollow, unwatch, opt out",
    "validate": "validate, verify, check, lint, confirm, dry run, sanity check, valid, validation",
    "rank": "sort, order by, rank, ranking, top, most, highest, largest, biggest, lowest",
    "summary": "summary, summarize, aggregate, statistics, breakdown, totals, rollup",
    "export": "export, dump, extract, backup, snapshot, save as",
    "import": "import, ingest, bulk load, restore from",
    "link": "link, attach, connect, associate, relate, tie, bind",
    "unlink": "unlink, detach, disconnect, dissociate, unbind",
    "lock": "lock, protect, read only, locked, freeze",
    "unlock": "unlock, unprotect, unlocked, unfreeze",
    "expire": "expire, expiry, expiration, expires, ttl, lifetime, valid until, stale",
    "renew": "renew, rotate, regenerate, refresh, reissue, renewal",
    "promote": "promote, advance, move up, elevate, graduate",
    # -- things -----------------------------------------------------------------------
    "memory": (
        "memory, memories, remember, recall, note, notes, fact, facts, knowledge, saved, "
        "remembered, memo"
    ),
    "directory": "directory, folder, dir, subfolder, subdirectory, path",
    "file": "file, document, doc, attachment, filename",
    "text": "text, line, lines, string, content, contents, paragraph, bullet",
    "beginning": "head, first, top, beginning, start, opening",
    "ending": "tail, last, bottom, end, final, latest",
    "size": "size, big, large, bytes, how big, space, weight",
    "metadata": (
        "metadata, info, information, details, stats, properties, attributes, modified, created, "
        "timestamp"
    ),
    "tree": "tree, hierarchy, structure, recursive, nested, layout, recursively",
    "image": (
        "image, picture, photo, png, jpg, jpeg, gif, screenshot, screen shot, capture, media, "
        "audio, svg, base64"
    ),
    "pdf": "pdf, print, export, printable",
    "page": "page, site, website, web page, webpage, tab, browser, dom",
    "dialog": "dialog, popup, pop up, alert, confirm, prompt, modal",
    "console": "console, devtools, javascript, js, warnings, log, logs",
    "network": "network, request, requests, xhr, http, api call, traffic",
    "form": "form, fields, field, checkbox, radio, inputs",
    "key": "key, keyboard, keystroke, escape, enter, shortcut",
    "script": "javascript, js, script, function, code, snippet",
    "issue": "issue, ticket, bug, task, story, card, defect, epic, item, todo, feature request",
    "pull_request": "pull request, pr, prs, merge request, mr, changeset, patch",
    "diff": (
        "diff, changes, changed, difference, differences, patch, delta, compare, modified, what "
        "changed"
    ),
    "history": "history, log, commits, past, recent, changelog, timeline, blame",
    "branch": "branch, branches, ref, head, base, feature branch, checkout",
    "repository": "repository, repo, repos, project, codebase, clone",
    "code": (
        "code, source, function, symbol, class, definition, defined, implementation, method, "
        "snippet"
    ),
    "ci": "ci, build, pipeline, workflow, actions, job, jobs, check, checks, tests, run, runs",
    "output": "output, logs, log, console, stdout, stderr, trace, transcript",
    "error": (
        "error, errors, exception, crash, crashed, failure, fail, failed, failing, broken, stack "
        "trace, traceback, stacktrace, incident, problem"
    ),
    "release": "release, releases, version, versions, tag, tags, published, ship",
    "deploy": "deploy, deployed, deployment, rollout, ship, release",
    "notification": (
        "notification, notifications, mention, mentions, mentioned, inbox, unread, ping, pinged, "
        "alert"
    ),
    "self": (
        "who am i, whoami, myself, logged in, signed in, authenticated, current user, my account, "
        "my profile, identity"
    ),
    "user": (
        "user, users, person, people, member, members, teammate, colleague, account, profile, login"
    ),
    "message": "message, messages, post, posts, chat, said, saying, conversation",
    "channel": "channel, channels, room, chatroom",
    "thread": "thread, replies, conversation, discussion",
    "workspace": "workspace, org, organization, organisation, team, company",
    "project": "project, projects, board, space",
    "sprint": "sprint, cycle, iteration, milestone, sprints, cycles",
    "state": "status, state, progress, stage, in progress, todo, done, column",
    "worklog": "worklog, time spent, log time, hours, minutes, timesheet, spent, time tracking",
    "priority": "priority, urgent, severity, importance, important",
    "label": "label, labels, tag, tags, category",
    "page_doc": "page, doc, document, wiki, note, notes",
    "block": "block, blocks, paragraph, heading, checklist, bullet, content",
    "database": (
        "database, db, sql, table, tables, rows, row, record, records, postgres, postgresql, "
        "sqlite, mysql, query"
    ),
    "schema": (
        "schema, columns, column, fields, structure, describe, definition, types, ddl, indexes"
    ),
    "select_rows": "select, read only, fetch rows, rows, how many, count",
    "write_rows": "insert, update, delete, change rows, modify, write",
    "spreadsheet": "sheet, spreadsheet, excel, cells, cell, range, csv, column",
    "drive": "drive, google drive, gdrive, cloud storage, shared drive",
    "web": "web, internet, url, http, https, online, website, webpage, page",
    "markdown": "markdown, md, html, plain text",
    "current": "current, currently, now, right now, at the moment, presently, latest",
    "time": "time, clock, hour, hours, date, o'clock, what time",
    "timezone": "timezone, time zone, tz, zone, utc, local time",
    "environment": "environment, env, variables, vars, env vars, config, configuration, settings",
    "health": ("health, healthy, status, alive, down, ok, connection, connected, diagnostics"),
    "echo": "echo, ping, test connection, repeat back, round trip",
    "llm": "llm, model, language model, completion, sampling, ai, generate, gpt",
    "progress": "progress, long running, slow task, long task, simulate",
    "allowed": (
        "allowed, permitted, accessible, restricted, sandbox, roots, can access, permission, "
        "limited"
    ),
    "confidence": (
        "confidence, wrong, incorrect, outdated, correct, helpful, useful, contradicted, trust"
    ),
    "insight": "insight, finding, observation, learned, takeaway, conclusion",
    "team": "team, teams, squad, group",
    "multiple": "multiple, several, many, batch, bulk, together, at once, both, various, in one go",
    # general nouns (domain-neutral, added for issue 38 without sight of any query)
    "period": (
        "today, yesterday, tomorrow, week, weekly, month, monthly, year, daily, hourly, since, "
        "ago, recent, between, window, period, interval, duration, last week, last month"
    ),
    "reason": "reason, cause, why, root cause, because, explanation",
    "identifier": "id, identifier, uuid, handle, reference, ref",
    "name": "name, title, called, named, rename",
    "description": "description, summary, details, body, notes",
    "limit": "limit, quota, cap, maximum, max, threshold, rate limit, budget, ceiling",
    "usage": "usage, consumption, utilization, utilisation, used, spend, spent",
    "rule": "rule, policy, condition, criteria, constraint, guard, rules",
    "owner": "owner, owned, belongs, belonging, whose, author, creator, created by",
    # -- products and their short names --------------------------------------------------
    "postgres": "postgres, postgresql, pg, psql",
    "github": "github, gh",
    "gdrive": "gdrive, google drive, gdocs, google docs",
    "kubernetes": "kubernetes, k8s, kubectl",
    "javascript": "javascript, js, ecmascript",
    "typescript": "typescript, ts",
    "python": "python, py",
}

_SPLIT = re.compile(r"[^\W_]+")


_STEMMING = threading.Lock()  # a Snowball stemmer keeps the word it works on in itself


@functools.cache
def _english() -> Any:
    # here, not at the top: ~11 ms of snowballstemmer (every language's stemmer), paid only by a search
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball (Porter 2) English stem of a lower-case word: ``files``/``file``,
    ``directories``/``directory``, ``writing``/``write``."""
    with _STEMMING:
        return str(_english().stemWord(word))


def _concepts() -> tuple[dict[str, tuple[str, ...]], dict[tuple[str, ...], tuple[str, ...]]]:
    """Stemmed word -> concept tokens, and stemmed phrase -> concept tokens."""
    words: dict[str, list[str]] = {}
    phrases: dict[tuple[str, ...], list[str]] = {}
    for concept, members in LEXICON.items():
        token = "syn" + concept.replace("_", "")
        for member in members.split(", "):
            key = tuple(stem(w) for w in _SPLIT.findall(member.lower()))
            target = words.setdefault(key[0], []) if len(key) == 1 else phrases.setdefault(key, [])
            if token not in target:
                target.append(token)
    return (
        {w: tuple(c) for w, c in words.items()},
        {p: tuple(c) for p, c in phrases.items()},
    )


@functools.cache
def _tables() -> tuple[dict[str, tuple[str, ...]], dict[tuple[str, ...], tuple[str, ...]], int]:
    words, phrases = _concepts()
    return words, phrases, max((len(p) for p in phrases), default=1)


def concept_tokens(stems: list[str]) -> list[str]:
    """The concept tokens of a run of stemmed words (stop words kept, so phrases match): one
    per word or phrase that names a concept, each word's and each phrase's own."""
    words, phrases, longest = _tables()
    found: list[str] = []
    for i, word in enumerate(stems):
        found += words.get(word, ())
        for n in range(2, longest + 1):
            found += phrases.get(tuple(stems[i : i + n]), ())
    return found


# What a concrete identifier in a request says about the need: agents name the thing they
# mean ("fix the typo in main.py", "assign PAY-12", "post in #general") more often than its kind.
_WEB_SUFFIXES = "com|org|net|io|dev|app|ai|co|edu|gov"
_ENTITIES: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), ("email", "synuser")),
    (re.compile(r"\bhttps?://\S+|\bwww\.\S+"), ("synweb", "synnavigate")),
    (
        re.compile(
            rf"(?<![@/\w.])(?!(?:e\.g|i\.e)\b)[\w./-]*\w\.(?!(?:{_WEB_SUFFIXES})\b)[A-Za-z]\w{{0,4}}\b"
        ),
        ("synfile",),
    ),
    (re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b"), ("synissue",)),
    (re.compile(r"(?<![\w&])#\d+\b"), ("synissue", "synpullrequest")),
    (re.compile(r"(?<![\w&])#[A-Za-z][\w-]*"), ("synchannel",)),
    (re.compile(r"(?<![\w.])@[A-Za-z][\w-]*"), ("synuser",)),
    (re.compile(r"\b\d{1,2}(?::\d\d)?\s?(?:am|pm)\b|\b\d{1,2}:\d\d\b", re.I), ("syntime",)),
)


def entity_tokens(text: str) -> list[str]:
    """Concept tokens for the identifiers *text* holds: file names, URLs, e-mail addresses,
    ticket keys (``PAY-12``), ``#123``, ``#channel``, ``@user``, times of day."""
    found: list[str] = []
    for pattern, concepts in _ENTITIES:
        for _ in pattern.finditer(text):
            found += concepts
    return found
