"""The long-lived objects every route uses, made once by the app's lifespan: one typed object
instead of loose attributes on `app.state`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from starlette.requests import Request

from proxy.config import ServerSettings
from proxy.core.settings import SettingsResolver
from proxy.offload.cache_keepalive import KeepAlive
from proxy.offload.summarizer import SummaryScheduler
from proxy.offload.tenant import CredentialCheck
from proxy.stats import Recorder
from proxy.store.guarded import GuardedStore
from proxy.store.memory import ObservedSessions
from proxy.store.sealing import Sealer
from proxy.telemetry import Metrics
from proxy.upstream.client import Upstream


@dataclass(frozen=True)
class Services:
    settings: ServerSettings
    settings_resolver: SettingsResolver
    metrics: Metrics
    sealer: Sealer
    credential_check: CredentialCheck
    upstream: Upstream
    store: GuardedStore
    summaries: SummaryScheduler  # summaries made in the background
    recorder: Recorder  # usage statistics, written in the background
    keepalive: KeepAlive | None = None  # keep-alive pings of the sessions that ask for them
    observed: ObservedSessions | None = None  # observe mode: each observed session's plan state, in memory


def services_of(request: Request) -> Services:
    return cast(Services, request.app.state.services)
