"""The console's pages and actions (Starlette endpoints).

Reading pages need no sign-in and no JavaScript. Every POST that changes something needs
a signed-in session, its CSRF token, and a same-site ``Origin``; ``--read-only`` refuses
them all. Messages are only ever read, replayed, exported or purged through
:mod:`rabbitq.dlq`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import dlq
from ..crypto.view import reveal
from ..errors import DlqError, RabbitqError
from ..unique.release import purge_releases
from . import cancel_page, views
from .actions import (
    OPERATIONS,
    SCOPES,
    Job,
    ScopeError,
    Snapshot,
    new_job_id,
    operation_filters,
    select,
)
from .chart import sparkline
from .fingerprint import group_messages, reason_counts
from .pages import error_page, render, session_of, state_of
from .security import COOKIE, CSRF_FIELD, same_origin
from .status_view import histories, tracing_for

HERE = Path(__file__).parent
log = logging.getLogger("rabbitq.console")
MAX_ROWS = 200  # message rows listed on a DLQ page (groups count them all)
BUSY_WAIT = 0.5  # seconds a page waits for a running job before saying it is busy


def _queue(request: Request) -> str:
    name: str = request.path_params["queue"]
    target = state_of(request).target(name)
    if target is None:
        raise HTTPException(404, f"{name!r} is not one of this console's queues")
    return target.dlq


# ---------------------------------------------------------------- reading


async def overview(request: Request) -> Response:
    state = state_of(request)
    samples = list(state.history.samples)
    now = time.time()
    services = views.overview(state.config.targets, samples)
    charts = {
        s.target.dlq: sparkline(state.history.series(s.target.dlq), now=now) for s in services
    }
    return render(
        request,
        "overview.html",
        services=services,
        charts=charts,
        sampled=samples[-1].at if samples else None,
        broker_error=state.broker_error,
        metrics=state.metrics_reachable,
    )


async def _read(request: Request, queue: str, filters: dlq.Filters) -> list[dlq.DeadMessage]:
    """Read the DLQ under its lock; a running job makes the page say it is busy."""
    state = state_of(request)
    lock = state.lock(queue)
    try:
        await asyncio.wait_for(lock.acquire(), timeout=BUSY_WAIT)
    except TimeoutError:
        job = state.jobs.running(queue)
        raise _Busy(job) from None
    try:
        return await dlq.list_messages(
            queue, url=state.config.url, filters=filters, limit=state.config.max_read
        )
    finally:
        lock.release()


class _Busy(Exception):
    def __init__(self, job: Job | None) -> None:
        self.job = job


async def dead_letters(request: Request) -> Response:
    queue = _queue(request)
    state = state_of(request)
    params = views.filter_params(request.query_params)
    try:
        filters = dlq.Filters.build(
            types=views.split_list(params.get("type")),
            reasons=views.split_list(params.get("reason")),
            since=params.get("since"),
            until=params.get("until"),
            grep=params.get("grep"),
        )
    except DlqError as exc:
        return render(request, "dlq.html", status=400, queue=queue, params=params, bad=str(exc))
    try:
        messages = await _read(request, queue, filters)
    except _Busy as busy:
        return render(request, "busy.html", status=503, queue=queue, job=busy.job)
    except RabbitqError as exc:
        return error_page(request, 502, str(exc))
    groups = group_messages(messages)
    chosen = request.query_params.get("group")
    group = next((g for g in groups if g.id == chosen), None) if chosen else None
    if group is not None:
        keys = set(group.keys)
        messages = [m for m in messages if m.key in keys]
        groups = [group]
    snap = state.snapshots.add(
        queue,
        filters,
        [m.key for m in messages],
        {g.id: tuple(g.keys) for g in groups},
        {g.id: f"{g.reason} · {g.label}" for g in groups},
    )
    return render(
        request,
        "dlq.html",
        queue=queue,
        target=state.target(queue),
        params=params,
        filters_text=filters.describe(),
        reasons=reason_counts(groups),
        groups=groups,
        group=group,
        messages=messages[:MAX_ROWS],
        total=len(messages),
        truncated=len(messages) > MAX_ROWS,
        read_limit=len(messages) >= state.config.max_read,
        snapshot=snap,
        bad=None,
    )


async def message(request: Request) -> Response:
    queue = _queue(request)
    state = state_of(request)
    key = request.path_params["key"]
    try:
        found = await _read(request, queue, dlq.Filters(keys=frozenset({key})))
    except _Busy as busy:
        return render(request, "busy.html", status=503, queue=queue, job=busy.job)
    except RabbitqError as exc:
        return error_page(request, 502, str(exc))
    if not found:
        return error_page(
            request, 404, f"that message is no longer in {queue} (replayed or purged since)"
        )
    m = found[0]
    snap = state.snapshots.add(queue, dlq.Filters(), [m.key])
    target = state.target(queue)
    m = reveal(m, target.cipher if target is not None else None)  # shown, never moved
    history = await histories(state.config.statuses, m.message_id) if m.message_id else []
    return render(
        request, "message.html", queue=queue, m=m, s=views.message_sections(m), snapshot=snap,
        histories=history,
    )  # fmt: skip


# ---------------------------------------------------------------- signing in


def _local(path: str | None) -> str:
    return path if path and path.startswith("/") and not path.startswith("//") else "/"


async def login(request: Request) -> Response:
    state = state_of(request)
    if request.method == "GET":
        return render(request, "login.html", next=_local(request.query_params.get("next")))
    if not same_origin(request.headers.get("origin"), request.headers.get("host")):
        return error_page(request, 403, "refused: the form came from another site")
    form = await request.form()
    session = state.config.guard.sign_in(str(form.get("token", "")))
    if session is None:
        return render(
            request, "login.html", status=403, next=_local(str(form.get("next"))), failed=True
        )
    response = RedirectResponse(_local(str(form.get("next", "/"))), status_code=303)
    response.set_cookie(COOKIE, session, httponly=True, samesite="strict", path="/")
    return response


async def logout(request: Request) -> Response:
    await _checked_form(request, allow_read_only=True)
    state_of(request).config.guard.sign_out(session_of(request))
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


async def _checked_form(request: Request, *, allow_read_only: bool = False) -> FormData:
    """The form of a state-changing POST, or 403: read-only, not signed in, bad CSRF
    token, or another site's ``Origin``."""
    state = state_of(request)
    guard = state.config.guard
    if guard.read_only and not allow_read_only:
        raise HTTPException(403, "read-only console: actions are disabled")
    if not same_origin(request.headers.get("origin"), request.headers.get("host")):
        raise HTTPException(403, "refused: the form came from another site")
    session = session_of(request)
    if guard.who(session) is None:
        raise HTTPException(403, "sign in with the console's token first")
    form = await request.form()
    offered = form.get(CSRF_FIELD)
    if not guard.check_csrf(session, offered if isinstance(offered, str) else None):
        raise HTTPException(403, "refused: missing or wrong CSRF token (reload the page)")
    return form


# ---------------------------------------------------------------- actions


def _action(request: Request, form: FormData) -> tuple[str, Snapshot, tuple[str, ...], str]:
    """``(operation, snapshot, keys, description)`` named by a form."""
    state = state_of(request)
    queue = _queue(request)
    operation, _, rest = str(form.get("act", "")).partition(":")
    scope, _, group = rest.partition(":")
    if operation not in OPERATIONS or scope not in SCOPES:
        raise HTTPException(400, "unknown action")
    snap = state.snapshots.get(str(form.get("snapshot", "")))
    if snap is None or snap.queue != queue:
        raise HTTPException(409, "this page is too old (or the console restarted): reload it")
    chosen = [str(k) for k in form.getlist("k")]
    try:
        keys, what = select(snap, scope, group=group or None, chosen=chosen)
    except ScopeError as exc:
        raise HTTPException(400, str(exc)) from None
    return operation, snap, keys, what


def _target_queue(form: FormData) -> str | None:
    to = str(form.get("to", "")).strip()
    return to or None


async def confirm(request: Request) -> Response:
    form = await _checked_form(request)
    operation, snap, keys, what = _action(request, form)
    return render(
        request,
        "confirm.html",
        queue=snap.queue,
        operation=operation,
        act=form.get("act"),
        snapshot=snap,
        keys=keys,
        chosen=form.getlist("k"),
        what=what,
        to=_target_queue(form) if operation == "replay" else None,
    )


async def run(request: Request) -> Response:
    form = await _checked_form(request)
    operation, snap, keys, what = _action(request, form)
    state = state_of(request)
    to = _target_queue(form) if operation == "replay" else None
    who = state.config.guard.who(session_of(request)) or "?"
    job = Job(
        id=new_job_id(),
        operation=operation,
        queue=snap.queue,
        what=what,
        count=len(keys),
        who=who,
        to=to,
    )
    filters = operation_filters(snap, keys)
    url = state.config.url
    tracing = tracing_for(state.config.statuses, snap.queue)  # App(status=...): recorded
    apps = [app for _, app in state.config.statuses if app.topology().dlq.name == snap.queue]
    released = purge_releases(apps[0]) if apps else []  # a purge frees its messages' keys
    lock = state.lock(snap.queue)
    if operation == "export":
        state.config.export_dir.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^\w.-]", "_", snap.queue)
        job.export_path = state.config.export_dir / f"{safe}-{job.id}.jsonl"

    async def work(progress: dlq.Progress) -> dlq.Tally:
        async with lock:
            if operation == "replay":
                return await dlq.replay(
                    snap.queue,
                    url=url,
                    filters=filters,
                    limit=len(keys),
                    to=to,
                    on_progress=progress,
                    tracing=tracing,
                )
            if operation == "purge":
                return await dlq.purge(
                    snap.queue, url=url, filters=filters, limit=len(keys), on_progress=progress,
                    tracing=tracing, released=released,
                )  # fmt: skip
            assert job.export_path is not None
            return await dlq.export(
                snap.queue,
                job.export_path,
                url=url,
                filters=filters,
                limit=len(keys),
                on_progress=progress,
            )

    log.info(
        "action %s started by %s on %s: %s, %d message(s)%s",
        operation,
        who,
        snap.queue,
        what,
        len(keys),
        f", to {to}" if to else "",
    )
    state.jobs.start(job, work)
    return RedirectResponse(f"/jobs/{job.id}", status_code=303)


async def job_page(request: Request) -> Response:
    job = state_of(request).jobs.get(request.path_params["job"])
    if job is None:
        return error_page(request, 404, "no such job (the console keeps the latest 200)")
    return render(request, "job.html", job=job)


async def export_file(request: Request) -> Response:
    state = state_of(request)
    if state.config.guard.who(session_of(request)) is None:
        return error_page(request, 403, "sign in with the console's token first")
    job = state.jobs.get(request.path_params["job"])
    if job is None or job.export_path is None or not job.done or not job.export_path.exists():
        return error_page(request, 404, "no such export")
    return FileResponse(
        job.export_path, media_type="application/x-ndjson", filename=job.export_path.name
    )


async def cancel_confirm(request: Request) -> Response:
    return await cancel_page.confirm(request, await _checked_form(request))


async def cancel_run(request: Request) -> Response:
    return await cancel_page.run(request, await _checked_form(request))


routes = [
    Route("/", overview),
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/q/{queue}", dead_letters),
    Route("/q/{queue}/m/{key}", message),
    Route("/q/{queue}/confirm", confirm, methods=["POST"]),
    Route("/q/{queue}/run", run, methods=["POST"]),
    Route("/cancel/confirm", cancel_confirm, methods=["POST"]),
    Route("/cancel/run", cancel_run, methods=["POST"]),
    Route("/jobs/{job}", job_page),
    Route("/jobs/{job}/export", export_file),
    Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
]
