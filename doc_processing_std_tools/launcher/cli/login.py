"""``dpt-launch login NAME``, ``login --list`` and ``logout NAME``: OAuth logins of ``url:`` servers.

``login`` runs the browser flow of :func:`..external.oauth.login` and keeps the tokens in
the per-user token store, where a running launcher picks them up (no restart). Nothing it
prints holds a token.
"""

from __future__ import annotations

import argparse
import sys
import time
import webbrowser
from typing import Any

import anyio

from ..config.schema import ConfigError, LoadedConfig, ServerEntry, load_config
from ..external.oauth import NeedsLogin, login_state
from ..external.oauth import login as oauth_login
from ..external.tokens import TokenStore, TokenStoreError
from ..external.wording import shown_url
from ..reasons import error_reason
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail


def parse(verb: str, argv: list[str], default_config: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"dpt-launch {verb}",
        description="Log in to a url server configured with 'auth: oauth' (docs/auth.md)."
        if verb == "login"
        else "Forget the OAuth login of a url server.",
    )
    parser.add_argument("-c", "--config", default=default_config, help="the YAML config")
    if verb == "login":
        parser.add_argument("name", nargs="?", help="the server's name under servers:")
        parser.add_argument(
            "--list", action="store_true", help="each OAuth server's login state and expiry"
        )
        parser.add_argument(
            "--no-browser",
            action="store_true",
            help="print the URL to open instead of opening a browser (headless machines)",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=300.0,
            help="seconds to wait for the browser step (default 300)",
        )
    else:
        parser.add_argument("name", help="the server's name under servers:")
    parser.add_argument(
        "--user",
        metavar="SUB",
        help="the login of this user (the subject of the daemon's incoming auth), not the "
        "launcher's own",
    )
    args = parser.parse_args(argv)
    if verb == "login" and not args.list and not args.name:
        parser.error("name a server (dpt-launch login NAME), or give --list")
    return args


def _oauth_entry(loaded: LoadedConfig, name: str) -> ServerEntry | str:
    """The entry of *name*, or why it cannot be logged in to."""
    entry = loaded.config.servers.get(name)
    oauth = sorted(n for n, e in loaded.config.servers.items() if e.auth is not None)
    known = f"; OAuth servers in {loaded.path}: {', '.join(oauth)}" if oauth else ""
    if entry is None:
        return f"no server {name!r} in {loaded.path}{known}"
    if entry.auth is None:
        hint = " (add 'auth: oauth' under it first)" if entry.url else ""
        return f"servers.{name} does not use OAuth{hint}{known}"
    return entry


def _load(config: str) -> LoadedConfig | int:
    try:
        return load_config(config)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)


def login(args: argparse.Namespace) -> int:
    loaded = _load(args.config)
    if isinstance(loaded, int):
        return loaded
    store = TokenStore()
    try:
        if args.list:
            return _list(loaded, store, args.user)
        entry = _oauth_entry(loaded, args.name)
        if isinstance(entry, str):
            return _fail(entry, EXIT_USAGE)
        return anyio.run(_login, args, entry, store)
    except TokenStoreError as exc:
        return _fail(str(exc), EXIT_FAILURE)


def _list(loaded: LoadedConfig, store: Any, user: str | None) -> int:
    rows = [(n, e) for n, e in loaded.config.servers.items() if e.auth is not None and e.url]
    if not rows:
        print(f"no server in {loaded.path} uses OAuth (auth: oauth)")
        return EXIT_OK
    now = time.time()
    width = max(len(name) for name, _ in rows)
    for name, entry in rows:
        state = login_state(store.get(name, user), entry.url or "", now)
        print(f"{name:<{width}}  {state}")
    print(f"(tokens kept in {store.where})")
    return EXIT_OK


async def _login(args: argparse.Namespace, entry: ServerEntry, store: Any) -> int:
    async def show_url(url: str) -> None:
        if args.no_browser:
            print(f"Open this URL in a browser to log in to {args.name!r}:", file=sys.stderr)
            print(url, flush=True)
            return
        opened = webbrowser.open(url)
        how = "A browser was opened" if opened else "No browser could be opened"
        print(f"{how}; if it shows nothing, open this URL:\n{url}", file=sys.stderr, flush=True)

    where = shown_url(entry.url or "")
    try:
        tools = await oauth_login(
            args.name, entry, store, args.user, show_url=show_url, timeout=args.timeout
        )
    except NeedsLogin as exc:
        return _fail(f"servers.{args.name}: {exc}", EXIT_FAILURE)
    except TimeoutError:
        return _fail(
            f"servers.{args.name}: no answer from the browser within {args.timeout:g} s; "
            "run the login again",
            EXIT_FAILURE,
        )
    except Exception as exc:
        reason = error_reason(exc)
        if entry.url:
            reason = reason.replace(entry.url, where)
        return _fail(
            f"servers.{args.name}: login to {where} failed: {type(exc).__name__}: {reason[:300]}",
            EXIT_FAILURE,
        )
    state = login_state(store.get(args.name, args.user), entry.url or "")
    whose = f" as user {args.user!r}" if args.user else ""
    print(
        f"logged in to {args.name!r} ({where}){whose}: {len(tools)} tools; {state}; "
        f"kept in {store.where}",
        file=sys.stderr,
    )
    return EXIT_OK


def logout(args: argparse.Namespace) -> int:
    loaded = _load(args.config)
    if isinstance(loaded, int):
        return loaded
    entry = _oauth_entry(loaded, args.name)
    if isinstance(entry, str):
        return _fail(entry, EXIT_USAGE)
    try:
        had = TokenStore().delete(args.name, args.user)
    except TokenStoreError as exc:
        return _fail(str(exc), EXIT_FAILURE)
    whose = f" of user {args.user!r}" if args.user else ""
    said = "forgot the login" if had else "there was no login"
    print(f"{args.name}: {said}{whose}", file=sys.stderr)
    return EXIT_OK
