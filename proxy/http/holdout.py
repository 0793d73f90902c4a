"""The holdout on the request path (`holdout` setting, `--holdout`): each session's arm
(`proxy.core.settings`, from the session the statistics give it), a control turn forwarded as
received, and what the statistics learn of every turn of the holdout (`proxy.stats`).

The session is the statistics' (`proxy.http.accounting`): X-Offload-Session, else the one
derived from the conversation; a Responses turn continuing a stored response has the session of
that response (`proxy.stats`: its answer's link is written as soon as the answer has
gone, not at the recorder's next flush, so that the next turn finds it). A request with no
session is managed, outside the comparison; so is one in mode `off` or `observe`.

A control turn goes upstream exactly as received and its answer back as the upstream sent it,
as in observe mode (`proxy.http.observed.as_received`): no reload tools, no caching added, no
summary, no emulated context management. Its record is that of a turn whose mode is `off`
(its tokens counted, nothing planned, nothing stored). Either arm's record gets the arm, how
the client's answer ended (`proxy.http.answer_ending`) and the repeated identical tool calls of
the request's history (`proxy.core.answers`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from starlette.background import BackgroundTask
from starlette.responses import Response

from proxy import telemetry
from proxy.core import answers as repeats
from proxy.core import settings as holdout
from proxy.http import accounting, answer_ending, billing, observed
from proxy.http.disconnect import ClientDisconnected
from proxy.http.observed import ManagedCall
from proxy.http.telemetry import current as current_record
from proxy.offload.cpu_pool import CPU
from proxy.stats import session_from_name
from proxy.store.base import StoreUnavailable
from proxy.store.memory import MemoryStore
from proxy.turn import run_turn

log = logging.getLogger("proxy.http.holdout")

UNMANAGED_MODES = frozenset({"off", "observe"})
CONTROL_SETTINGS = {"mode": "off", "reload_tools": False, "cache_control": "off", "cache_keepalive": False}


async def session_of(call: ManagedCall) -> tuple[str | None, tuple[str | None, str | None] | None]:
    """(the session the statistics give this request, the derived pair `accounting.note` takes:
    None when X-Offload-Session named it)."""
    if call.settings.session:
        return call.settings.session, None
    derived = await accounting.derived_session(call, call.body, call.history)
    session, continues = derived
    if session is None and continues is not None:  # its session is the response's it continues
        services = call.services
        try:
            found = await services.recorder.replies.find(
                services.store, call.namespace, continues, sealer=services.sealer
            )
        except StoreUnavailable:
            found = None
        session = found or session_from_name(call.namespace, "response", continues)
        derived = (session, None)
    return session, derived


async def arm_of(call: ManagedCall) -> tuple[holdout.Arm | None, tuple[str | None, str | None] | None]:
    """(the request's arm, None outside the holdout; the session derived for it, when it was)."""
    settings = call.settings
    if settings.holdout <= 0 or settings.mode in UNMANAGED_MODES:
        return None, None
    session, derived = await session_of(call)
    salt = call.services.settings.holdout_salt
    return holdout.arm(call.namespace, session, settings.holdout, salt=salt), derived


async def mark(call: ManagedCall, arm: holdout.Arm) -> None:
    """The arm and the repeated tool calls of the request's history, on its record."""
    rec = current_record.get()
    if rec is None:
        return
    rec.arm = arm
    rec.repeated_calls = await CPU.for_messages(call.history)(repeats.repeated_calls, call.history, call.fmt.view)


async def forward_control(call: ManagedCall, derived: tuple[str | None, str | None] | None) -> Response:
    """The request as received, the answer as sent; recorded as a turn of mode `off`."""
    given = observed.observed_input(call, MemoryStore())  # a store of its own: nothing is kept
    given = replace(
        given,
        settings=call.settings.model_copy(update=CONTROL_SETTINGS),
        emulating=False,
        prompt_cache=False,
        new_summaries=False,
    )
    call.turn = await run_turn(given)
    call.rec = await accounting.note(
        current_record.get(),
        call.turn.report(),
        namespace=call.namespace,
        derive=functools.partial(accounting.known_or_derived, call, derived),
    )
    out = await observed.as_received(call, call.fmt.endpoint)
    billing.tap(call.rec, out, call.fmt.usage)
    accounting.tap_reply(call, out)
    return out


async def watched(call: ManagedCall, answer: Callable[[], Awaitable[Response]]) -> Response:
    """`answer()`, how it ended read into the record, its reply's session linked once it has gone."""
    rec = current_record.get()
    try:
        out = await answer()
    except ClientDisconnected:  # the client went away: no answer ended, nothing is said of it
        raise
    except Exception:  # the proxy answers with its own error: an error of the turn
        answer_ending.failed(rec)
        raise
    out = await answer_ending.tap(rec, out)
    if rec is not None:
        out.background = _then(out.background, BackgroundTask(link_reply, call, rec))
    return out


def _then(first: BackgroundTask | None, second: BackgroundTask) -> BackgroundTask:
    if first is None:
        return second

    async def both() -> None:
        try:
            await first()
        finally:
            await second()

    return BackgroundTask(both)


async def link_reply(call: ManagedCall, rec: telemetry.RequestRecord) -> None:
    """The answer's response id → its session, now: the turn continuing from it may come before
    the recorder's flush, and must be given the same session (and arm)."""
    if not rec.response_id or not rec.session:  # X-Offload-Session: every turn names its session
        return
    services = call.services
    try:
        await services.recorder.replies.remember(
            services.store,
            call.namespace,
            rec.response_id,
            session=rec.session,
            ttl=services.recorder.retention,
            sealer=services.sealer,
        )
    except StoreUnavailable:
        log.info("linking a holdout turn's reply to its session failed: the store is unavailable")
