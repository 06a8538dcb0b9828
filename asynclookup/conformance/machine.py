"""The Hypothesis stateful test of the oracle: random call sequences against an IUT.

``machine_class(config)`` builds a ``RuleBasedStateMachine`` whose rules are the
protocol's calls, made through a ``asynclookup.conformance.driver.Driver`` (which checks
every observation against the spec).  Keys and requests come from Bundles of
two or three values, so calls collide on the same keys and requests.  Rules
carry preconditions computed from the checker's possible states, never
``assume``; after every rule the spec's state invariants are checked on every
possible state.

Stepped mode: the worker's moves (``take_batch`` + ``probe_group``, ``post``) are
a rule, so Hypothesis chooses the interleaving.  Threaded mode: the IUT's own
worker thread runs; the ``answer`` rule answers its next tier call (the call
blocks until then), ``settle`` waits, bounded, until it has posted, and
``catch_up`` does both until no tier call is owed; a ``cleanup`` may be followed at
once by a request asking for a key the cleaned-up one had asked for (the orphan race).
``shutdown`` checks one call after it (it must raise the closed-manager error)
and the example goes on with a fresh IUT.

``run`` runs the machine with bounded settings and raises the shrunk
``ConformanceError``; ``Stats`` counts examples and steps for the CLI.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from asynclookup.conformance.counterexample import Call, ConformanceError
from asynclookup.conformance.driver import Driver
from asynclookup.conformance.replay import SHRINK_BUDGET, settled_and_shrunk
from asynclookup.conformance.targets.adapter import GENERATED_ONLY_IF_HAD, Plan, plan_kinds
from asynclookup.conformance.targets.inner_tier import dispose_inner_tier, make_inner_tier
from asynclookup.conformance.targets.load import load_target
from asynclookup.conformance.targets.target import REFERENCE, FuzzTarget
from asynclookup.observe.interface import Violation
from asynclookup.spec import core
from asynclookup.spec.properties import ALWAYS

KEYS = (b"k0", b"k1", b"k2")
REQUESTS = ("A", "B", "C")
SHUTDOWN_AFTER = 12  # calls an IUT gets before shutdown may end its life
AFTER_SHUTDOWN = (
    "lookup", "flush", "cleanup", "mark_miss", "mark_present", "drain_results", "shutdown",
)


@dataclass(frozen=True)
class FuzzConfig:
    """What is fuzzed, and how."""

    target: FuzzTarget = REFERENCE  # what is driven (``str()`` of it: its text)
    mode: str = "stepped"  # "stepped" or "threaded"
    tier: str = "memory"  # "memory", "fs" or "redis"
    faults: str = "all"  # "none", "all" or a comma list of FAULT_KINDS
    strict_efficiency: bool = False
    redis_url: str | None = None

    @property
    def tag(self) -> str:
        """A name for this configuration (it keys the example database)."""
        safe = str(self.target).replace(".", "_").replace(":", "__")
        faults = self.faults.replace(",", "_").replace("-", "")
        return f"Oracle_{safe}_{self.mode}_{self.tier}_{faults}"


@dataclass
class Stats:
    """What a run did: examples, steps, efficiency warnings (with their calls)."""

    examples: int = 0
    steps: int = 0
    started: float = field(default_factory=time.monotonic)
    warnings: list[tuple[Violation, list[Call]]] = field(default_factory=list)
    on_step: Callable[[Stats], None] | None = None
    found_after: float | None = None  # seconds to the first failure, before shrinking
    leak_check: bool | None = None  # the target offers a snapshot (None: no IUT built yet)
    not_generated: tuple[str, ...] = ()  # optional calls the target lacks
    first_error: ConformanceError | None = None  # the first violation any example raised

    @property
    def rate(self) -> float:
        """Steps per second so far."""
        elapsed = time.monotonic() - self.started
        return self.steps / elapsed if elapsed > 0 else 0.0

    def step(self) -> None:
        self.steps += 1
        if self.on_step is not None:
            self.on_step(self)


def plans(faults: str) -> st.SearchStrategy[Plan]:
    """Tier answers the ``--faults`` kinds allow; shrinks toward a proper all-False answer.

    One integer draw decodes to a whole plan (kind, three bits, a size): fewer
    draws make each step cheaper than building the plan field by field.
    """
    kinds = plan_kinds(faults)
    return st.integers(0, len(kinds) * 8 * 4 - 1).map(lambda n: _plan(kinds, n))


def _plan(kinds: tuple[str, ...], n: int) -> Plan:
    n, kind = divmod(n, len(kinds))
    size, bits = divmod(n, 8)
    return Plan(kinds[kind], tuple(bool(bits >> i & 1) for i in range(3)), size)


class _FoundFirst(BaseException):
    """Ends a threaded run at its first ConformanceError (``machine_class(stop_at_first=True)``).

    Not an ``Exception``: Hypothesis lets it through like an interrupt (it saves the
    example to its database, and neither replays nor shrinks it), so ``run`` gets the
    violation as it was seen.  A threaded example cannot be replayed exactly anyway,
    and the replay cost as much as the run: a counterexample that ends in a bounded
    wait paid that bound twice.  ``shrink`` replays the calls itself."""

    def __init__(self, error: ConformanceError) -> None:
        super().__init__(error)
        self.error = error


def machine_class(
    config: FuzzConfig, stats: Stats | None = None, inner: Any = None,
    *, stop_at_first: bool = False,
) -> type[RuleBasedStateMachine]:
    """A state machine class fuzzing ``config.target`` as ``config`` says.

    With ``stop_at_first`` the first ConformanceError ends the Hypothesis run
    (``_FoundFirst``, which ``run`` unwraps); only ``run`` uses it."""
    counters = stats if stats is not None else Stats()
    if inner is None and config.tier != "memory":
        inner = make_inner_tier(config.tier, config.redis_url)
    factory = load_target(config.target)
    answers = plans(config.faults)

    def _keep_first(error: ConformanceError) -> None:
        if counters.first_error is None:
            counters.first_error = error
        if stop_at_first:
            raise _FoundFirst(error)
    stepped = config.mode == "stepped"
    real_tier = inner is not None

    class OracleMachine(RuleBasedStateMachine):
        keys = Bundle("keys")
        requests = Bundle("requests")
        # Never filled.  Hypothesis lists rules with a target after those without,
        # and draws the first and the last rule it lists about twice as often as
        # the others.  Targeting this bundle moves drain_results and flush (which
        # close the window between a post and its drain, where races live) off
        # the front, so cleanup gets the first place, and puts the worker's
        # moves last.  Measured: the hardest kills came about 30% sooner.
        listed_last = Bundle("listed_last")

        def __init__(self) -> None:
            super().__init__()
            self.requests_made: tuple[str, ...] = REQUESTS
            self.driver = self._new_driver()
            counters.examples += 1

        def _step(self) -> None:
            counters.step()
            self.rules_run += 1
            # before the rule's call: if only posts the oracle cannot see stand between
            # the spec and quiescence, re-ask until the tables show them (leak check)
            self.driver.await_empty()
            self.driver.ask_about_leftover()

        def _new_driver(self) -> Driver:
            # Rules run on this IUT: preconditions read these, never the checker's
            # states or the recorded calls, which in threaded mode depend on timing.
            self.rules_run = self.flushes = self.answers = 0
            # threaded: the keys each request asked for since its last cleanup, less
            # those a mark_miss named since (what a threaded cleanup's rejoin draws from)
            self.asked: dict[str, set[bytes]] = {}
            if inner is not None:
                for key in KEYS:
                    inner.delete(key)
            driver = Driver(
                factory, mode=config.mode, inner=inner,
                strict_efficiency=config.strict_efficiency,
                config={"target": config.target, "tier": config.tier},
            )
            driver.on_error = _keep_first
            counters.leak_check = driver.leak_check
            counters.not_generated = tuple(sorted(GENERATED_ONLY_IF_HAD - driver.supports))
            return driver

        @initialize(target=keys, n=st.integers(2, 3))
        def make_keys(self, n: int) -> Any:
            return multiple(*KEYS[:n])

        @initialize(target=requests, n=st.integers(2, 3))
        def make_requests(self, n: int) -> Any:
            self.requests_made = REQUESTS[:n]
            return multiple(*REQUESTS[:n])

        # -- scheduler calls ---------------------------------------------------

        @rule(key=keys, request=requests)
        def lookup(self, key: bytes, request: str) -> None:
            self._step()
            self.asked.setdefault(request, set()).add(key)
            self.driver.lookup(key, request)
            # a None that only a post not yet seen explains: re-ask, bounded
            self.driver.await_verdict(key, request)

        @rule(target=listed_last)
        def flush(self) -> Any:
            """The end of a step.  Threaded, answers held for the worker (an ``answer``
            with no wait since) are handed to it as the step ends (a ``settle``,
            numbered on its own): the worker runs beside the scheduler, so its posts
            land after the flush and before the next lookup, which must apply them
            (docs/protocol.md, "The operations"); its tier call for the batch just
            submitted, seen arrive, proves they came (one worker posts before it takes
            the next batch).  Held on, they would land only at the next rule that
            waits, and seldom just there."""
            self._step()
            self.driver.flush()
            self.flushes += 1
            if not stepped and self.answers > 0:
                # answers given since the last settle may still be held for the worker.
                # Decided by that count, not by asking the tier whether it holds any: that
                # depends on the worker's timing, and so would the counters the settle
                # resets, which preconditions read: Hypothesis's choice of the next rule
                # must not depend on timing (FlakyStrategyDefinition)
                self.settle()
            return multiple()

        @rule(lookups=st.lists(st.tuples(keys, requests), min_size=1, max_size=2))
        def scheduler_step(self, lookups: list[tuple[bytes, str]]) -> None:
            """One engine step: one or two lookups, then a flush, each numbered as its
            own call.  Single calls rarely make several steps in a row that each
            submit a batch; this rule makes pipelines of several batches (and so
            several posted items before one drain) common."""
            for key, request in lookups:
                self.lookup(key, request)
            self.flush()

        def _cleanup(self, request: str) -> None:
            self._step()
            self.asked.pop(request, None)
            self.driver.cleanup(request)

        if stepped:

            @precondition(lambda m: "cleanup" in m.driver.supports)
            @rule(request=requests)
            def cleanup(self, request: str) -> None:
                self._cleanup(request)

        else:

            @precondition(lambda m: "cleanup" in m.driver.supports)
            @rule(request=requests, rejoin=st.integers(0, 3), key=st.integers(0, 2))
            def cleanup(self, request: str, rejoin: int, key: int) -> None:
                """The cleanup, then (``rejoin`` > 0) a request asking at once for a key
                the cleaned-up one had asked for: if that probe is in flight with no one
                else waiting, it is an orphan the spec keeps, which the lookup joins
                (docs/protocol.md, "Cleanup while the probe is in flight, then the key
                is reused"); a class that deleted it probes the key a second time.
                Random calls rarely make this pair before the tier answers.  Threaded
                only (a mark_miss since the ask takes the key out of the draw): stepped
                seeds keep their runs."""
                asked = sorted(self.asked.get(request, ()))
                self._cleanup(request)
                if rejoin and asked:
                    joining = sorted(self.requests_made)
                    self.lookup(asked[key % len(asked)], joining[rejoin % len(joining)])

        @precondition(lambda m: "mark_miss" in m.driver.supports)
        @rule(keys=st.lists(keys, min_size=1, max_size=2, unique=True))
        def mark_miss(self, keys: list[bytes]) -> None:
            self._step()
            for asked in self.asked.values():
                asked.difference_update(keys)
            self.driver.mark_miss(keys)

        @precondition(lambda m: "mark_present" in m.driver.supports)
        @rule(keys=st.lists(keys, min_size=1, max_size=2, unique=True))
        def mark_present(self, keys: list[bytes]) -> None:
            self._step()
            self.driver.mark_present(keys)

        @rule(target=listed_last)
        def drain_results(self) -> Any:
            self._step()
            self.driver.drain_results()
            return multiple()

        @precondition(lambda m: m.rules_run >= SHUTDOWN_AFTER)
        @rule(answer=answers, then=st.sampled_from(AFTER_SHUTDOWN), key=keys, request=requests)
        def shutdown(self, answer: Plan, then: str, key: bytes, request: str) -> None:
            """Shut down, make one call that must raise the closed-manager error (when
            the IUT defines that), and go on with a fresh IUT (a closed one has
            nothing more to show)."""
            self._step()
            d = self.driver
            d.shutdown([answer])
            after: dict[str, Callable[[], None]] = {
                "lookup": lambda: d.lookup(key, request),
                "flush": d.flush,
                "cleanup": lambda: d.cleanup(request),
                "mark_miss": lambda: d.mark_miss([key]),
                "mark_present": lambda: d.mark_present([key]),
                "drain_results": d.drain_results,
                "shutdown": d.shutdown,
            }
            has_call = then in d.supports or then not in GENERATED_ONLY_IF_HAD
            if "after_shutdown" in d.supports and has_call:
                after[then]()
            self._collect()
            d.close()  # shut down already: this only lets its scheduler thread go
            self.driver = self._new_driver()

        # -- the worker: stepped, the oracle moves it; threaded, it runs -------------

        if stepped:

            @precondition(lambda m: _worker_can(m.driver) != ())
            @rule(target=listed_last, answer=answers, hold=st.sampled_from((False, False, True)))
            def worker(self, answer: Plan, hold: bool) -> Any:
                """One move of the worker loop: post what it holds answered, or probe
                the next group (taking a batch first) and post, unless ``hold``.

                TakeBatchSeen and PostSeen are invisible to the scheduler except through what
                later drains see, so taking a batch as a move of its own, or posting
                one, would add steps but no behaviour; ``hold`` keeps results unposted
                across later calls (several groups posted at once, a batch in hand
                at shutdown).  One rule for the worker also keeps swarm testing from
                switching off half of it.
                """
                self._step()
                can = _worker_can(self.driver)
                if "post" in can and ("probe_group" not in can or not hold):
                    self.driver.post()
                else:
                    self.driver.probe_group(answer, post=not hold)
                return multiple()

        else:

            # Threaded preconditions read only the rules run so far, never the
            # checker's states: those depend on the worker thread's timing, and a
            # precondition that does would make Hypothesis's generation flaky.

            @precondition(lambda m: m.flushes > 0)
            @rule(target=listed_last, answer=answers, then_settle=st.booleans())
            def answer(self, answer: Plan, then_settle: bool) -> Any:
                """Answer the worker's next tier call (it blocks until then), if one is owed
                or waiting; otherwise nothing happens.  ``then_settle``: then wait until the
                worker has posted (a settle, numbered on its own), so that the next call
                sees the post: the scheduler thread rarely gives the worker the time to
                post between two calls, and swarm testing often turns the settle rule off."""
                self._step()
                self.driver.answer(answer)
                self.answers += 1
                if then_settle:
                    self.settle()
                return multiple()

            @precondition(lambda m: m.flushes > 0)
            @rule(target=listed_last, plans=st.lists(answers, min_size=1, max_size=3))
            def catch_up(self, plans: list[Plan]) -> Any:
                """Let the worker run until it waits on nothing: answer every tier call
                owed (``plans`` in turn, then proper answers) and wait until it has
                posted them all, so several batches are posted between two scheduler
                calls (a slow scheduler step), which a drain must apply together."""
                self._step()
                self.driver.catch_up(plans)
                self.answers = 0
                return multiple()

            @precondition(lambda m: m.answers > 0)
            @rule()
            def settle(self) -> None:
                """Wait, bounded, until the worker has posted everything it was answered
                (when no tier call is owed and something was answered since the last)."""
                self._step()
                self.driver.settle()
                self.answers = 0

        if real_tier:

            @rule(key=keys, present=st.booleans())
            def store(self, key: bytes, present: bool) -> None:
                """Put a key into the real tier or take it out."""
                self._step()
                self.driver.store(key, present)

        @invariant()
        def spec_invariants_hold(self) -> None:
            for state in self.driver.checker.efficient_states()[:16]:
                for prop in ALWAYS:
                    if prop.state is not None and not prop.state(state):
                        raise AssertionError(
                            f"spec invariant {prop.name} fails in {core.describe(state)}"
                        )

        def teardown(self) -> None:
            try:
                self.driver.await_empty()  # may find a leak: the driver is closed all the same
                self.driver.ask_about_leftover()
            finally:
                self.driver.close()
            self._collect()

        def _collect(self) -> None:
            """Keep the driver's property-8 warning (non-strict runs go on past it)."""
            warnings = self.driver.checker.warnings
            if warnings:
                counters.warnings.append((warnings[0], list(self.driver.calls)))

    OracleMachine.__name__ = OracleMachine.__qualname__ = config.tag
    return OracleMachine


def _worker_can(driver: Driver) -> tuple[str, ...]:
    """The worker steps some possible state allows, for stepped mode."""
    checker = driver.checker
    if checker.stopped:
        return ()
    can = []
    states = checker.states
    if any(s.answered for s in states):
        can.append("post")
    if any(s.held for s in states) or checker.may(core.TakeBatch()):
        can.append("probe_group")
    return tuple(can)


def run(
    config: FuzzConfig,
    *,
    examples: int = 100,
    seed: int | None = None,
    database: ExampleDatabase | None = None,
    steps: int = 50,
    stats: Stats | None = None,
    backend: str | None = None,
    shrink_budget: float = SHRINK_BUDGET,
) -> Stats:
    """Run the machine; return the stats, or raise the shrunk ConformanceError.

    Hypothesis's own shrinker is off: ``asynclookup.conformance.replay.shrink`` shrinks by
    replaying calls without Hypothesis, a millisecond a replay in stepped mode.
    (Threaded replays are not deterministic; it retries each candidate.)
    """
    stats = stats if stats is not None else Stats()
    # the IUT's warnings about the oracle's faulty tier answers are expected
    quiet = logging.root.manager.disable
    logging.disable(logging.WARNING)
    inner = make_inner_tier(config.tier, config.redis_url)
    # threaded: the first violation ends the run (Hypothesis's replay of it is not exact)
    machine = machine_class(config, stats, inner, stop_at_first=config.mode == "threaded")
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)  # the public decorator, on the machine class
    options: dict[str, Any] = {}
    if backend is not None:
        options["backend"] = backend
    chosen = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=database,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        print_blob=False,
        **options,
    )
    try:
        try:
            run_state_machine_as_test(machine, settings=chosen)
        except _FoundFirst as found:
            raise found.error from None
    except Exception as exc:
        error = conformance_error_in(exc)
        if isinstance(exc, Flaky) and stats.first_error is not None:
            # A threaded run whose replay by Hypothesis failed otherwise, or not at all
            # (FlakyStrategyDefinition, FlakyFailure): the judgement is the first failure.
            error = stats.first_error
            error.not_reproducible(type(exc).__name__)
        if error is None:
            raise
        stats.found_after = time.monotonic() - stats.started
        raise settled_and_shrunk(error, shrink_budget) from None
    finally:
        dispose_inner_tier(inner, KEYS)
        logging.disable(quiet)
    return stats


def conformance_error_in(exc: BaseException | None) -> ConformanceError | None:
    """The ConformanceError inside what Hypothesis raised, or None.

    Threaded runs are flaky by nature: a replay of a failing example can fail at
    another step (FlakyStrategyDefinition, whose context is the error) or not at
    all (FlakyFailure, an exception group holding it).
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ConformanceError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                found = conformance_error_in(inner)
                if found is not None:
                    return found
        exc = exc.__cause__ or exc.__context__
    return None
