"""During a key rotation the statistics the old key sealed are sealed again as they are read:
a Responses answer's session, a tenant's label (`proxy.store.sealing`)."""

from __future__ import annotations

import uuid

import pytest

from proxy.stats import _reader as reader
from proxy.stats._recorder import label_key
from proxy.stats._sessions import Replies
from tests.unit.offload.test_records import AFTER, BEFORE, ROTATING, store  # noqa: F401  (SQLite, Redis)

pytestmark = pytest.mark.anyio


async def test_an_answers_session_read_during_the_rotation_reads_after_it(store):  # noqa: F811
    ns, response = uuid.uuid4().hex, f"resp_{uuid.uuid4().hex}"
    await Replies().remember(store, ns, response, session="the session", ttl=600, sealer=BEFORE)
    assert await Replies().find(store, ns, response, sealer=ROTATING) == "the session"
    assert await Replies().find(store, ns, response, sealer=AFTER) == "the session"


async def test_a_label_read_during_the_rotation_reads_after_it(store):  # noqa: F811
    ns = uuid.uuid4().hex
    await store.put(label_key(ns), BEFORE.seal(b"sk-proj...AbCd", label_key(ns)), 600)
    assert await reader.tenant_labels(store, [ns], {}, sealer=ROTATING) == {ns: "sk-proj...AbCd"}
    assert await reader.tenant_labels(store, [ns], {}, sealer=AFTER) == {ns: "sk-proj...AbCd"}
