"""The console's message search (``/status?id=MESSAGE_ID``): what happened to a message,
or a workflow group's progress (``?id=GROUP_ID``), from the status store of each app
that has one (``App(status=...)``), read-only."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..dlq.text import escape
from .pages import templates
from .security import COOKIE, CSRF_FIELD
from .state import State
from .status_view import MAX_ID, search


async def status_page(request: Request) -> Response:
    """``/status``: the search form, and the groups or histories of the id searched for."""
    state: State = request.app.state.console
    message_id = request.query_params.get("id", "").strip()[:MAX_ID]
    groups, found = await search(state.config.statuses, message_id) if message_id else ([], [])
    if groups:  # the apps that found no message beside a group say nothing
        found = [h for h in found if h.found or h.error]
    session = request.cookies.get(COOKIE)
    who = state.config.guard.who(session)
    context = {
        "config": state.config,
        "signed_in": who is not None,
        "can_act": who is not None and not state.config.read_only,
        "who": who,
        "csrf": state.config.guard.csrf(session) if session and who else "",
        "csrf_field": CSRF_FIELD,
        "message_id": escape(message_id),
        "histories": found,
        "groups": groups,
    }
    return templates.TemplateResponse(request, "status.html", context)
