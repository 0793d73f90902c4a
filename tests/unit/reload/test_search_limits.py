"""The search's limits: the server's settings handed down (proxy.reload never imports proxy.config)."""

from __future__ import annotations

from proxy.config import ServerSettings
from proxy.reload.search import SearchLimits


def test_the_search_limits_default_to_the_server_settings_defaults():
    fields = ServerSettings.model_fields
    assert SearchLimits() == SearchLimits(fields["search_timeout"].default, fields["search_max_bytes"].default)
    assert SearchLimits.of(ServerSettings(search_timeout=3.5)) == SearchLimits(3.5, fields["search_max_bytes"].default)
