"""The console's ASGI application: routes, the Host check, security headers and the
sampler's lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .outbox_page import outbox_page
from .pages import http_error
from .routes import routes
from .security import host_allowed, host_name
from .state import Config, State
from .status_page import status_page

# Everything the pages use is served by the console itself; nothing runs inline.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not no-referrer: with it Chromium sends "Origin: null" on form posts, which the
    # same-origin check must refuse.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class _Headers(BaseHTTPMiddleware):
    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


class _HostCheck:
    """Refuses (400) a request whose ``Host`` is not one the console serves."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not host_allowed(raw, self.allowed):
                name = host_name(raw)[:100] or "(none)"  # repr() escapes control characters
                response = PlainTextResponse(
                    f"refused: this console is not served as {name!r} (DNS rebinding?); "
                    "start it with --allowed-host to serve that name\n",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(config: Config, *, sample: bool = True) -> Starlette:
    """The console for ``config``; ``sample=False`` leaves depth sampling to the caller
    (tests call :meth:`State.sample_once`)."""
    state = State(config=config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if sample:
            await state.start()
        try:
            yield
        finally:
            await state.stop()

    app = Starlette(
        routes=[*routes, Route("/outbox", outbox_page), Route("/status", status_page)],
        middleware=[
            Middleware(_Headers),
            Middleware(_HostCheck, allowed=tuple(config.allowed_hosts)),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.console = state
    return app
