"""What every console page shares: the templates (control characters shown as escapes
in every field), the console's state and session of a request, rendering a page with
who is signed in, and the error page."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from ..settings import scrub, url_password
from . import views
from .security import COOKIE, CSRF_FIELD
from .state import State

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["when"] = views.when
templates.env.filters["rate"] = views.rate_text
templates.env.filters["described"] = views.described  # encrypted texts: "encrypted (key K)"
templates.env.finalize = views.shown  # control characters as escapes, in every field


def state_of(request: Request) -> State:
    return cast(State, request.app.state.console)


def session_of(request: Request) -> str | None:
    return request.cookies.get(COOKIE)


def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
    state = state_of(request)
    session = session_of(request)
    who = state.config.guard.who(session)
    context.update(
        config=state.config,
        signed_in=who is not None,
        who=who,
        can_act=who is not None and not state.config.read_only,
        csrf=state.config.guard.csrf(session) if session and who else "",
        csrf_field=CSRF_FIELD,
    )
    return templates.TemplateResponse(request, name, context, status_code=status)


def error_page(request: Request, status: int, message: str) -> Response:
    state = state_of(request)
    text = scrub(message, url_password(state.config.url))
    return render(request, "error.html", status=status, message=text)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_page(request, exc.status_code, exc.detail)
