"""ClientWatch.run: the work runs in the caller's task; a client that goes away cancels it."""

from __future__ import annotations

import asyncio

import pytest

from proxy.http.disconnect import ClientDisconnected, ClientWatch

pytestmark = pytest.mark.anyio


class FakeRequest:
    def __init__(self, messages: asyncio.Queue) -> None:
        self.messages = messages

    async def receive(self) -> dict:
        return await self.messages.get()


def watch_for(messages: asyncio.Queue) -> ClientWatch:
    return ClientWatch(FakeRequest(messages), body_read=True)  # type: ignore[arg-type]


async def test_the_work_returns_and_the_watcher_is_gone() -> None:
    watch = watch_for(asyncio.Queue())
    before = len(asyncio.all_tasks())
    assert await watch.run(asyncio.sleep(0, result="done")) == "done"
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == before


async def test_a_disconnect_cancels_the_work() -> None:
    messages: asyncio.Queue = asyncio.Queue()
    cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    asyncio.get_running_loop().call_later(0.01, messages.put_nowait, {"type": "http.disconnect"})
    with pytest.raises(ClientDisconnected):
        await watch_for(messages).run(work())
    assert cancelled.is_set()
    await asyncio.sleep(0)  # the task goes on normally afterwards: no cancellation left pending


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def caller() -> None:
        await watch_for(asyncio.Queue()).run(asyncio.sleep(30))

    task = asyncio.ensure_future(caller())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_error_of_the_work_is_raised_as_it_is() -> None:
    async def work() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await watch_for(asyncio.Queue()).run(work())
