"""The console's routes under ``/ui``: sign-in, Servers (and an upstream's login), Tools,
Activity, Pins and Charts.

Every page is rendered here (Jinja2, autoescaped) and sent with a Content-Security-Policy that
allows no inline script; the one script, ``static/console.js``, follows the Activity stream and
filters lists. Nothing runs per tool call for the console: Activity's server-sent events come
from an audit subscription that exists only while the page listens, and Charts read the metrics
registry every 10 s (:mod:`.samples`), not the calls.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ...calls.pins import PinError
from .charts import HEIGHT, WIDTH, charts
from .forms import BadInput, Field, arguments_of, fields_of
from .loopback import Loopback
from .pin_rows import approve_served, drifted_rows
from .responses import SecurityHeaders, one_line, shown_result
from .samples import PERIOD, Sampler
from .server_rows import server_rows
from .sources import ConsoleSources
from .upstream_login import LoginRefused, Logins
from .visitors import Visitor, Visitors, clear_cookie, loopback_client, same_origin, set_cookie

if TYPE_CHECKING:
    from starlette.templating import Jinja2Templates

log = logging.getLogger("dpt-launch")

HERE = Path(__file__).parent
PREFIX = "/ui"
PAGES = ("servers", "tools", "activity", "pins", "charts")
SEARCH_LIMIT = 20  # tools a search shows

Endpoint = Callable[[Request, Visitor], Awaitable[Response]]


class Console:
    """The pages, over *sources*, for the MCP endpoint at *path* (the console calls through it)."""

    def __init__(self, sources: ConsoleSources, verifier: Any, path: str) -> None:
        self.sources, self.path = sources, path
        self.visitors = Visitors(verifier)
        self.logins = Logins(sources.entries)
        self.sampler = Sampler(sources.metrics)

    @functools.cached_property
    def templates(self) -> Jinja2Templates:
        """The pages' Jinja2 templates, loaded when the first page is rendered."""
        # Imported here: Jinja2 is 2 MB of every HTTP launcher's private memory (USS,
        # smaps_rollup), whose console most never open.
        from starlette.templating import Jinja2Templates

        return Jinja2Templates(directory=str(HERE / "templates"))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the daemon serves: the Charts' sampler, when there are metrics to sample; on the
        way out, the logins still waiting for a browser end."""
        async with anyio.create_task_group() as group:
            if self.sampler.on:
                group.start_soon(self.sampler.run)
            try:
                yield
            finally:
                self.logins.cancel()
                group.cancel_scope.cancel()

    # -- who may see a page ----------------------------------------------------------------

    def _refusal(self, request: Request) -> Response | None:
        if not self.visitors.needs_sign_in and not loopback_client(request):
            return PlainTextResponse(
                "Forbidden: without transport.auth the console is served only on loopback",
                status_code=403,
            )
        return None

    def page(self, endpoint: Endpoint, *, action: bool = False) -> Callable[[Request], Any]:
        """*endpoint* for signed-in visitors (others are sent to sign in); with *action*, only
        for a same-site POST carrying the page's CSRF token."""

        async def guarded(request: Request) -> Response:
            refused = self._refusal(request)
            if refused is not None:
                return refused
            if action and not same_origin(request):
                return PlainTextResponse("Forbidden: a cross-site request", status_code=403)
            visitor = await self.visitors.visitor(request)
            if visitor is None and not self.visitors.needs_sign_in:
                return self._anonymous(request)
            if visitor is None:
                if action or request.headers.get("accept", "").startswith("text/event-stream"):
                    return PlainTextResponse("Unauthorized: sign in first", status_code=401)
                return RedirectResponse(f"{PREFIX}/signin", status_code=303)
            if action:
                form = await request.form()
                given = form.get("csrf")
                if not isinstance(given, str) or not self.visitors.csrf_ok(visitor.cookie, given):
                    return PlainTextResponse(
                        "Forbidden: the form's CSRF token is missing or stale; reload the page",
                        status_code=403,
                    )
            return await endpoint(request, visitor)

        return guarded

    def _anonymous(self, request: Request) -> Response:
        """A loopback visitor without auth: an anonymous cookie, then the page again."""
        if request.method != "GET":
            return PlainTextResponse("Forbidden: load the page first", status_code=403)
        response = RedirectResponse(str(request.url.path), status_code=303)
        set_cookie(response, request, self.visitors.anonymous_cookie(), None)
        return response

    def render(
        self, request: Request, visitor: Visitor | None, name: str, status: int = 200, **ctx: Any
    ) -> Response:
        context = {
            "prefix": PREFIX,
            "pages": PAGES,
            "visitor": visitor,
            "csrf": self.visitors.csrf(visitor.cookie) if visitor else "",
            "signs_in": self.visitors.needs_sign_in,
            **ctx,
        }
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    # -- sign-in ---------------------------------------------------------------------------

    async def signin_form(self, request: Request) -> Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        if not self.visitors.needs_sign_in:
            return RedirectResponse(f"{PREFIX}/servers", status_code=303)
        return self.render(request, None, "signin.html", page="signin", error=None)

    async def signin(self, request: Request) -> Response:
        refused = self._refusal(request)
        if refused is not None:
            return refused
        if not same_origin(request):
            return PlainTextResponse("Forbidden: a cross-site request", status_code=403)
        if not self.visitors.needs_sign_in:
            return RedirectResponse(f"{PREFIX}/servers", status_code=303)
        form = await request.form()
        token = form.get("token")
        signed = await self.visitors.sign_in(token if isinstance(token, str) else "")
        if signed is None:
            log.info("console: a sign-in was refused")
            return self.render(
                request,
                None,
                "signin.html",
                status=401,
                page="signin",
                error="That token is not accepted by this daemon.",
            )
        response = RedirectResponse(f"{PREFIX}/servers", status_code=303)
        set_cookie(response, request, *signed)
        return response

    async def signout(self, request: Request, visitor: Visitor) -> Response:
        target = f"{PREFIX}/signin" if self.visitors.needs_sign_in else f"{PREFIX}/servers"
        response = RedirectResponse(target, status_code=303)
        clear_cookie(response, request)
        return response

    # -- Servers ---------------------------------------------------------------------------

    async def servers(self, request: Request, visitor: Visitor) -> Response:
        rows = server_rows(self.sources, self.logins.servers())
        return self.render(
            request,
            visitor,
            "servers.html",
            page="servers",
            servers=rows,
            message=request.query_params.get("done"),
        )

    async def login(self, request: Request, visitor: Visitor) -> Response:
        """The "Log in" button: start the upstream's login, send the browser to authorize."""
        name = request.path_params["name"]
        redirect = str(request.url_for("login_callback"))
        try:
            url = await self.logins.start(name, redirect)
        except LoginRefused as exc:
            return RedirectResponse(f"{PREFIX}/servers?done={exc}", status_code=303)
        log.warning("console: %s started the login of %s", visitor.user, name)
        # (a page with a link, not a redirect: form-action 'self' would stop a form's redirect)
        return self.render(request, visitor, "login.html", page="servers", server=name, url=url)

    async def login_callback(self, request: Request) -> Response:
        """Where the authorization server sends the browser back (no cookie: see
        :mod:`.upstream_login`); the ``state`` names the login it belongs to."""
        refused = self._refusal(request)
        if refused is not None:
            return refused
        outcome, failed = await self.logins.finish(dict(request.query_params))
        page = self.templates.get_template("logged_in.html").render(
            prefix=PREFIX, outcome=outcome, failed=failed
        )
        return HTMLResponse(page, status_code=400 if failed else 200)

    # -- Tools -----------------------------------------------------------------------------

    def _loopback(self, request: Request, visitor: Visitor) -> Loopback:
        return Loopback(request, self.path, visitor.token)

    async def tools(self, request: Request, visitor: Visitor) -> Response:
        """The tools the visitor may call; with ``q``, the best matches of ``search_tools``'s
        ranking, best first."""
        query = request.query_params.get("q", "").strip()
        context: dict[str, Any] = {"page": "tools", "query": query, "error": None}
        try:
            listed = await self._loopback(request, visitor).tools()
        except Exception as exc:  # (the daemon's own endpoint: say why, keep the page)
            return self.render(
                request, visitor, "tools.html", tools=[], **context | {"error": one_line(exc)}
            )
        if query and self.sources.search is not None:
            by_name = {t.name: t for t in listed}
            found = self.sources.search(listed, query, SEARCH_LIMIT)
            rows = [by_name[n] for n in found if n in by_name]
        else:
            rows = sorted(listed, key=lambda t: t.name)
        return self.render(request, visitor, "tools.html", tools=rows, **context)

    async def _named_tool(
        self, request: Request, visitor: Visitor
    ) -> tuple[Any, list[Field]] | Response:
        """The tool the path names, as the visitor's list has it, and its form's fields; or
        the 404 page when the visitor may call no tool of that name."""
        name = request.path_params["name"]
        listed = await self._loopback(request, visitor).tools()
        found = next((t for t in listed if t.name == name), None)
        if found is None:
            return self.render(
                request,
                visitor,
                "tools.html",
                status=404,
                page="tools",
                tools=[],
                error=f"no tool {name!r} that you may call",
            )
        return found, fields_of(found.input_schema)

    async def tool(self, request: Request, visitor: Visitor) -> Response:
        named = await self._named_tool(request, visitor)
        if isinstance(named, Response):
            return named
        found, fields = named
        return self.render(
            request, visitor, "tool.html", page="tools", tool=found, fields=fields, values={}
        )

    async def run_tool(self, request: Request, visitor: Visitor) -> Response:
        named = await self._named_tool(request, visitor)
        if isinstance(named, Response):
            return named
        found, fields = named
        form = await request.form()
        values = {f.name: str(form.get(f.name, "")) for f in fields}
        context: dict[str, Any] = {"page": "tools", "tool": found, "fields": fields}
        try:
            arguments = arguments_of(fields, values)
        except BadInput as exc:
            return self.render(
                request, visitor, "tool.html", status=400, values=values, error=str(exc), **context
            )
        try:
            result = await self._loopback(request, visitor).call(found.name, arguments)
        except Exception as exc:
            return self.render(
                request, visitor, "tool.html", values=values, error=one_line(exc), **context
            )
        return self.render(
            request, visitor, "tool.html", values=values, result=shown_result(result), **context
        )

    # -- Activity --------------------------------------------------------------------------

    async def activity(self, request: Request, visitor: Visitor) -> Response:
        return self.render(
            request,
            visitor,
            "activity.html",
            page="activity",
            audited=self.sources.audit is not None,
        )

    async def activity_stream(self, request: Request, visitor: Visitor) -> Response:
        audit = self.sources.audit
        if audit is None:
            return PlainTextResponse("no audit log is configured", status_code=404)

        async def events() -> AsyncIterator[str]:
            yield ": following the audit log\n\n"
            with audit.subscribe() as subscription:  # (exists only while this page listens)
                async for line in subscription:
                    yield f"data: {line}\n\n"

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )

    # -- Pins ------------------------------------------------------------------------------

    async def pins(self, request: Request, visitor: Visitor) -> Response:
        gate = self.sources.pins
        return self.render(
            request,
            visitor,
            "pins.html",
            page="pins",
            drifted=drifted_rows(self.sources),
            lock=str(gate.lock_path) if gate is not None and gate.lock_path else None,
            policy=gate.policy if gate is not None else None,
            message=request.query_params.get("done"),
        )

    async def approve(self, request: Request, visitor: Visitor) -> Response:
        """``dpt-launch pins approve [TARGET]`` from the page, then a reload (as after SIGHUP)."""
        gate = self.sources.pins
        if gate is None or gate.lock_path is None:
            return PlainTextResponse("no lock file to write", status_code=404)
        form = await request.form()
        target = form.get("target")
        only = target if isinstance(target, str) and target else None
        try:
            taken = approve_served(gate.lock_path, self.sources, only)
        except (PinError, OSError) as exc:
            return self.render(
                request,
                visitor,
                "pins.html",
                status=500,
                page="pins",
                drifted=drifted_rows(self.sources),
                lock=str(gate.lock_path),
                policy=gate.policy,
                message=f"cannot approve: {one_line(exc)}",
            )
        log.warning(
            "console: %s approved %s in %s",
            visitor.user,
            ", ".join(taken) or "nothing",
            gate.lock_path,
        )
        if taken and self.sources.reload is not None:
            await self.sources.reload()
        done = f"approved {len(taken)} definition(s)" if taken else "nothing to approve"
        return RedirectResponse(f"{PREFIX}/pins?done={done}", status_code=303)

    # -- Charts ----------------------------------------------------------------------------

    async def charts(self, request: Request, visitor: Visitor) -> Response:
        series = self.sampler.series()
        return self.render(
            request,
            visitor,
            "charts.html",
            page="charts",
            metrics=self.sampler.on,
            charts=charts(series, self.sampler.clock()),
            width=WIDTH,
            height=HEIGHT,
            period=PERIOD,
        )

    # -- routes ----------------------------------------------------------------------------

    def routes(self) -> list[Any]:
        page = self.page

        async def home(request: Request) -> Response:
            return RedirectResponse(f"{PREFIX}/servers", status_code=303)

        return [
            Mount(
                PREFIX,
                routes=[
                    Route("/", home, methods=["GET"]),
                    Route("/signin", self.signin_form, methods=["GET"]),
                    Route("/signin", self.signin, methods=["POST"]),
                    Route("/signout", page(self.signout, action=True), methods=["POST"]),
                    Route("/servers", page(self.servers), methods=["GET"]),
                    Route("/tools", page(self.tools), methods=["GET"]),
                    Route("/tools/{name}", page(self.tool), methods=["GET"]),
                    Route("/tools/{name}", page(self.run_tool, action=True), methods=["POST"]),
                    Route("/activity", page(self.activity), methods=["GET"]),
                    Route("/activity/stream", page(self.activity_stream), methods=["GET"]),
                    Route("/pins", page(self.pins), methods=["GET"]),
                    Route("/pins/approve", page(self.approve, action=True), methods=["POST"]),
                    Route("/charts", page(self.charts), methods=["GET"]),
                    Route(
                        "/login/callback",
                        self.login_callback,
                        methods=["GET"],
                        name="login_callback",
                    ),
                    Route("/login/{name}", page(self.login, action=True), methods=["POST"]),
                    Mount("/static", app=StaticFiles(directory=str(HERE / "static"))),
                ],
                middleware=[Middleware(SecurityHeaders)],
            ),
            Route(PREFIX, home, methods=["GET"]),
        ]


def console_app(sources: ConsoleSources, verifier: Any, path: str) -> Console:
    """The console: add its :meth:`~Console.routes` to the HTTP app and run it
    (:meth:`~Console.running`) in the app's lifespan (see :mod:`..http`)."""
    return Console(sources, verifier, path)
