"""The console's message search (``/status?id=MESSAGE_ID``): what happened to a message,
from the status store of each app that has one (``App(status=...)``), read-only."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..dlq.text import escape
from .pages import templates
from .security import COOKIE, CSRF_FIELD
from .state import State
from .status_view import MAX_ID, histories


async def status_page(request: Request) -> Response:
    """``/status``: the search form, and the histories of the id searched for."""
    state: State = request.app.state.console
    message_id = request.query_params.get("id", "").strip()[:MAX_ID]
    found = await histories(state.config.statuses, message_id) if message_id else []
    session = request.cookies.get(COOKIE)
    who = state.config.guard.who(session)
    context = {
        "config": state.config,
        "signed_in": who is not None,
        "who": who,
        "csrf": state.config.guard.csrf(session) if session and who else "",
        "csrf_field": CSRF_FIELD,
        "message_id": escape(message_id),
        "histories": found,
    }
    return templates.TemplateResponse(request, "status.html", context)
