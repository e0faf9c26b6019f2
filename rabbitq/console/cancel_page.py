"""The console's cancel action (``App(cancellable=True)``; docs/console.md): from the
status page of a message that has not finished, signed in, with the CSRF token, and
confirmed on a page of its own, as a replay is. It runs ``app.cancel(message_id)``
and shows its one-line answer; the routes check the form (:mod:`.routes`)."""

from __future__ import annotations

import logging
from typing import Any

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..cancellation.cancel import can_cancel, close_stores
from ..errors import RabbitqError
from .pages import error_page, render, session_of, state_of
from .status_view import MAX_ID

log = logging.getLogger("rabbitq.console")


def _target(request: Request, form: FormData) -> tuple[str, Any, str]:
    """``(MODULE:APP, app, message_id)`` the form names, or 400."""
    label = str(form.get("app", ""))
    message_id = str(form.get("id", "")).strip()
    if not message_id or len(message_id) > MAX_ID:
        raise HTTPException(400, "no message id to cancel")
    for known, app in state_of(request).config.statuses:
        if known == label and can_cancel(app):
            return label, app, message_id
    raise HTTPException(400, f"{label or 'that app'} cannot cancel: App(cancellable=True)")


async def confirm(request: Request, form: FormData) -> Response:
    """The confirmation page of a cancel."""
    label, _, message_id = _target(request, form)
    return render(request, "cancel_confirm.html", label=label, message_id=message_id)


async def run(request: Request, form: FormData) -> Response:
    """Cancel the message, and say what it was."""
    label, app, message_id = _target(request, form)
    who = state_of(request).config.guard.who(session_of(request)) or "?"
    try:
        (report,) = await app.cancel(message_id)
    except RabbitqError as exc:
        return error_page(request, 502, f"not cancelled: {exc}")
    finally:
        await close_stores(app)
    log.info("action cancel by %s on %s: %s: %s", who, label, message_id, report.text)
    return render(request, "cancel_done.html", label=label, report=report)
