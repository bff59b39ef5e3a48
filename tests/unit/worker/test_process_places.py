"""The pool's limit on attempts at once (``queue_core.worker.process.places.Places``)."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from queue_core.worker.process.places import Places

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _settle() -> None:
    for _ in range(5):
        await anyio.lowlevel.checkpoint()


async def test_free_places_are_taken_at_once_and_the_rest_wait_in_order() -> None:
    places = Places(2)
    order: list[int] = []

    async def holder(n: int) -> None:
        await places.acquire()
        order.append(n)

    await places.acquire()
    await places.acquire()
    assert places.taken == 2
    async with anyio.create_task_group() as tg:
        for n in (1, 2, 3):
            tg.start_soon(holder, n)
            await _settle()
        assert order == []  # all three wait: both places are held
        places.release()
        await _settle()
        assert order == [1]
        places.release()
        places.release()
    assert order == [1, 2, 3]
    assert places.taken == 2  # the places went from hand to hand


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    places = Places(1)
    await places.acquire()
    with anyio.move_on_after(0.01) as scope:
        await places.acquire()
    assert scope.cancelled_caught
    places.release()
    assert places.taken == 0  # nobody was waiting any more: the place is free
    await places.acquire()
    assert places.taken == 1


async def test_a_place_handed_to_a_waiter_cancelled_meanwhile_is_not_lost() -> None:
    places = Places(1)
    await places.acquire()
    got: list[str] = []

    async def waiter(name: str) -> None:
        await places.acquire()
        got.append(name)

    async with anyio.create_task_group() as tg:
        first = anyio.CancelScope()
        tg.start_soon(_cancellable, places, first, got)
        await _settle()
        tg.start_soon(waiter, "second")
        await _settle()
        places.release()  # handed to the first waiter...
        first.cancel()  # ...which is cancelled before (or just as) it runs
    assert got[-1] == "second"  # the place reached the next waiter either way
    assert places.taken == 1


async def _cancellable(places: Places, scope: anyio.CancelScope, got: list[str]) -> None:
    with scope:
        await places.acquire()
        got.append("first")  # it got the place after all: it gives it back
        places.release()


async def test_a_caller_cancelled_already_takes_no_place() -> None:
    places = Places(1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await places.acquire()
    assert places.taken == 0


async def test_a_waiter_cancelled_after_the_hand_over_passes_the_place_on() -> None:
    places = Places(1)
    await places.acquire()
    first = asyncio.ensure_future(places.acquire())
    second = asyncio.ensure_future(places.acquire())
    await _settle()
    places.release()  # the place is handed to ``first``...
    first.cancel()  # ...which is cancelled before it resumes: CancelledError at its wait
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 5)  # the place went on to the next waiter
    assert places.taken == 1
