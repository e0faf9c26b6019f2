"""The console's ASGI application: routes, security headers and the sampler's lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .outbox_page import outbox_page
from .routes import http_error, routes
from .state import Config, State

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
        routes=[*routes, Route("/outbox", outbox_page)],
        middleware=[Middleware(_Headers)],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.console = state
    return app
