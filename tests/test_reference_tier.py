"""The tier boundary: every tier misbehaviour becomes misses and one warning.

Property 7 of docs/properties.md (survival): an exception, a wrong length, a non-bool, a
lazy iterable that raises part-way, never stop the worker.  The shipped bugs
were a lazy iterable consumed outside the try (the worker died) and zip()
silently truncating a short answer (probes stranded IN_FLIGHT).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import cast

import pytest

from asynclookup.reference import (
    AsyncLookupManager,
    Event,
    InMemoryTier,
    Phase,
    RequestContext,
    ask_tier,
)

CTX = RequestContext("r1")
KEYS = [b"a", b"b", b"c"]


def _raising(keys: Sequence[bytes]) -> Iterable[object]:
    raise RuntimeError("boom")


def _lazy_raising(keys: Sequence[bytes]) -> Iterator[object]:
    yield True
    raise ConnectionError("lost part-way")


def _not_iterable(keys: Sequence[bytes]) -> Iterable[object]:
    return None  # type: ignore[return-value]  # the misbehaviour under test


Answer = Callable[[Sequence[bytes]], Iterable[object]]

# name -> (how the tier answers KEYS, the verdicts the worker must use, failure text)
BAD: dict[str, tuple[Answer, list[bool], str]] = {
    "raises": (_raising, [False, False, False], "raised RuntimeError: boom"),
    "too_few": (lambda keys: [True] * (len(keys) - 1), [False] * 3, "returned 2 results for 3"),
    "too_many": (lambda keys: [True] * (len(keys) + 1), [False] * 3, "more than 3 results"),
    "endless": (lambda keys: itertools.repeat(True), [False] * 3, "more than 3 results"),
    "lazy_raises": (_lazy_raising, [False] * 3, "raised ConnectionError: lost part-way"),
    "not_iterable": (_not_iterable, [False] * 3, "raised TypeError"),
    "non_bool": (lambda keys: [True, 1, "yes"], [True, False, False], "non-bool values (int, str)"),
}


class ScriptedTier(InMemoryTier):
    """A tier whose answers come from a script, one answer function per call."""

    name = "scripted"

    def __init__(self, *answers: Answer) -> None:
        super().__init__()
        self.answers = list(answers)

    def batch_lookup(  # type: ignore[override]
        self, keys: Sequence[bytes], request_context: RequestContext
    ) -> Iterable[bool]:
        if self.answers:  # a misbehaving tier breaks its own signature: that is the test
            return cast("Iterable[bool]", self.answers.pop(0)(keys))
        return super().batch_lookup(keys, request_context)


@pytest.mark.parametrize("behaviour", sorted(BAD))
def test_ask_tier_turns_misbehaviour_into_misses(behaviour: str) -> None:
    """Each misbehaviour yields False for every key not answered properly."""
    answer, verdicts, _ = BAD[behaviour]
    got = ask_tier(ScriptedTier(answer), KEYS, CTX)
    assert got.verdicts == verdicts


@pytest.mark.parametrize("behaviour", sorted(BAD))
def test_ask_tier_names_the_failure(behaviour: str) -> None:
    """Each misbehaviour is described in words an operator can act on."""
    answer, _, failure = BAD[behaviour]
    got = ask_tier(ScriptedTier(answer), KEYS, CTX)
    assert got.failure is not None and failure in got.failure


def test_ask_tier_accepts_a_proper_answer() -> None:
    """A list of bools of the right length passes through with no failure."""
    tier = InMemoryTier()
    tier.store(b"b")
    assert ask_tier(tier, KEYS, CTX) == ([False, True, False], None)


def test_ask_tier_accepts_a_lazy_proper_answer() -> None:
    """A generator of the right number of bools is a proper answer."""
    got = ask_tier(ScriptedTier(lambda keys: (True for _ in keys)), KEYS, CTX)
    assert got == ([True, True, True], None)


def test_ask_tier_reads_at_most_one_surplus_item() -> None:
    """An endless answer is cut after len(keys) + 1 items instead of hanging."""
    counter = itertools.count()

    def endless(keys: Sequence[bytes]) -> Iterator[bool]:
        for _ in counter:
            yield True

    ask_tier(ScriptedTier(endless), KEYS, CTX)
    assert next(counter) == len(KEYS) + 1


@pytest.mark.parametrize("behaviour", sorted(BAD))
def test_bad_call_logs_one_warning_naming_tier_and_failure(
    behaviour: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad tier call logs exactly one warning that names the tier and what went wrong."""
    answer, _, failure = BAD[behaviour]
    m = AsyncLookupManager(ScriptedTier(answer), mode="stepped")
    for key in KEYS:
        m.lookup(key, CTX)
    m.flush()
    with caplog.at_level(logging.WARNING, logger="reference"):
        m.worker.run_pending()
    m.shutdown()
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "'scripted'" in record.getMessage() and failure in record.getMessage()


def test_good_call_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A proper answer logs no warning."""
    m = AsyncLookupManager(InMemoryTier(), mode="stepped")
    m.lookup(b"a", CTX)
    m.flush()
    with caplog.at_level(logging.WARNING, logger="reference"):
        m.worker.run_pending()
    m.shutdown()
    assert caplog.records == []


@pytest.mark.parametrize("behaviour", sorted(BAD))
def test_bad_call_resolves_its_probes(behaviour: str) -> None:
    """Probes of a bad call are RESOLVED with the sanitised verdicts, never stranded."""
    answer, verdicts, _ = BAD[behaviour]
    m = AsyncLookupManager(ScriptedTier(answer), mode="stepped")
    for key in KEYS:
        m.lookup(key, CTX)
    m.flush()
    m.worker.run_pending()
    m.flush()
    probes = m.snapshot().probes
    m.shutdown()
    assert [probes[k].phase for k in KEYS] == [Phase.RESOLVED] * 3
    assert [probes[k].verdict for k in KEYS] == verdicts


@pytest.mark.parametrize("behaviour", sorted(BAD))
def test_threaded_worker_survives_a_bad_call(
    behaviour: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After a bad tier call the worker thread lives on and answers the next batch."""
    answer, _, _ = BAD[behaviour]
    tier = ScriptedTier(answer)
    tier.store(b"later")
    posts = threading.Semaphore(0)

    def observe(event: Event) -> None:
        if event.kind == "post":
            posts.release()

    with caplog.at_level(logging.ERROR), AsyncLookupManager(tier, observer=observe) as m:
        m.lookup(b"first", CTX)
        m.flush()
        assert posts.acquire(timeout=10)
        m.lookup(b"later", CTX)
        m.flush()
        assert posts.acquire(timeout=10)
        m.drain_results()
        assert m.lookup(b"later", CTX) is True
        assert m.health().alive


def test_tier_receives_the_batched_context(caplog: pytest.LogCaptureFixture) -> None:
    """The tier gets the very context object that was batched with the probe."""
    seen: list[RequestContext] = []

    class Recording(InMemoryTier):
        def batch_lookup(
            self, keys: Sequence[bytes], request_context: RequestContext
        ) -> list[bool]:
            seen.append(request_context)
            return super().batch_lookup(keys, request_context)

    m = AsyncLookupManager(Recording(), mode="stepped")
    ctx = RequestContext("mine")
    m.lookup(b"a", ctx)
    m.flush()
    m.worker.run_pending()
    m.shutdown()
    assert seen == [ctx] and seen[0] is ctx
