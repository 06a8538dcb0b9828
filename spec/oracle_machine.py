"""The Hypothesis stateful test of the oracle: random call sequences against an IUT.

``machine_class(config)`` builds a ``RuleBasedStateMachine`` whose rules are the
protocol's calls, made through a ``spec.oracle_driver.Driver`` (which checks
every observation against the spec).  Keys and requests come from Bundles of
two or three values, so calls collide on the same keys and requests.  Rules
carry preconditions computed from the checker's possible states, never
``assume``; after every rule the spec's state invariants are checked on every
possible state.

Stepped mode: the worker steps ``take_batch`` / ``probe_group`` / ``post`` are
rules, so Hypothesis chooses the interleaving.  Threaded mode: the IUT's own
worker thread runs; the ``answer`` rule answers its next tier call (the call
blocks until then) and ``settle`` waits, bounded, until it has posted.

``run`` runs the machine with bounded settings and raises the shrunk
``ConformanceError``; ``Stats`` counts examples and steps for the CLI.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase
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

from spec import core
from spec.adapter import FAULT_LEVELS, Plan, load_target
from spec.oracle_driver import Call, ConformanceError, Driver, dispose_inner_tier, make_inner_tier
from spec.oracle_replay import shrink
from spec.observe import Violation
from spec.properties import ALWAYS

KEYS = (b"k0", b"k1", b"k2")
REQUESTS = ("A", "B", "C")
AFTER_SHUTDOWN = (
    "lookup", "flush", "cleanup", "mark_miss", "mark_present", "drain_results", "shutdown",
)


@dataclass(frozen=True)
class FuzzConfig:
    """What is fuzzed, and how."""

    target: str = "reference"  # "reference" or MODULE:ATTRIBUTE
    mode: str = "stepped"  # "stepped" or "threaded"
    tier: str = "memory"  # "memory", "fs" or "redis"
    faults: str = "all"  # "none", "raise" or "all"
    strict_efficiency: bool = False
    redis_url: str | None = None

    @property
    def tag(self) -> str:
        """A name for this configuration (it keys the example database)."""
        safe = self.target.replace(".", "_").replace(":", "__")
        return f"Oracle_{safe}_{self.mode}_{self.tier}_{self.faults}"


@dataclass
class Stats:
    """What a run did: examples, steps, efficiency warnings (with their calls)."""

    examples: int = 0
    steps: int = 0
    started: float = field(default_factory=time.monotonic)
    warnings: list[tuple[Violation, list[Call]]] = field(default_factory=list)
    on_step: Callable[[Stats], None] | None = None

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
    """Tier answers the ``--faults`` level allows; shrinks toward a proper all-False answer.

    One integer draw decodes to a whole plan (kind, three bits, a size): fewer
    draws make each step cheaper than building the plan field by field.
    """
    kinds = FAULT_LEVELS[faults]
    return st.integers(0, len(kinds) * 8 * 4 - 1).map(lambda n: _plan(kinds, n))


def _plan(kinds: tuple[str, ...], n: int) -> Plan:
    n, kind = divmod(n, len(kinds))
    size, bits = divmod(n, 8)
    return Plan(kinds[kind], tuple(bool(bits >> i & 1) for i in range(3)), size)


def machine_class(
    config: FuzzConfig, stats: Stats | None = None, inner: Any = None
) -> type[RuleBasedStateMachine]:
    """A state machine class fuzzing ``config.target`` as ``config`` says."""
    counters = stats if stats is not None else Stats()
    if inner is None and config.tier != "memory":
        inner = make_inner_tier(config.tier, config.redis_url)
    factory = load_target(config.target)
    answers = plans(config.faults)
    stepped = config.mode == "stepped"
    real_tier = inner is not None

    def is_open(m: OracleMachine) -> bool:
        return not m.driver.checker.stopped

    class OracleMachine(RuleBasedStateMachine):
        keys = Bundle("keys")
        requests = Bundle("requests")
        # Never filled.  Hypothesis lists rules with a target after those without,
        # and draws the first and the last rule it lists about twice as often as
        # the others: targeting this bundle moves drain_results off the front
        # (flush takes it) and puts the worker's moves at the back.
        listed_last = Bundle("listed_last")

        def __init__(self) -> None:
            super().__init__()
            self.driver = self._new_driver()
            counters.examples += 1

        def _new_driver(self) -> Driver:
            if inner is not None:
                for key in KEYS:
                    inner.delete(key)
            return Driver(
                factory, mode=config.mode, inner=inner,
                strict_efficiency=config.strict_efficiency,
                config={"target": config.target, "tier": config.tier},
            )

        @initialize(target=keys, n=st.integers(2, 3))
        def make_keys(self, n: int) -> Any:
            return multiple(*KEYS[:n])

        @initialize(target=requests, n=st.integers(2, 3))
        def make_requests(self, n: int) -> Any:
            return multiple(*REQUESTS[:n])

        # -- scheduler calls ---------------------------------------------------

        @precondition(is_open)
        @rule(key=keys, request=requests)
        def lookup(self, key: bytes, request: str) -> None:
            counters.step()
            self.driver.lookup(key, request)

        @precondition(is_open)
        @rule()
        def flush(self) -> None:
            counters.step()
            self.driver.flush()

        @precondition(is_open)
        @rule(request=requests)
        def cleanup(self, request: str) -> None:
            counters.step()
            self.driver.cleanup(request)

        @precondition(is_open)
        @rule(keys=st.lists(keys, min_size=1, max_size=2, unique=True))
        def mark_miss(self, keys: list[bytes]) -> None:
            counters.step()
            self.driver.mark_miss(keys)

        @precondition(is_open)
        @rule(keys=st.lists(keys, min_size=1, max_size=2, unique=True))
        def mark_present(self, keys: list[bytes]) -> None:
            counters.step()
            self.driver.mark_present(keys)

        @precondition(is_open)
        @rule(target=listed_last)
        def drain_results(self) -> Any:
            counters.step()
            self.driver.drain_results()
            return multiple()

        @precondition(is_open)
        @rule(answer=answers, now=st.sampled_from((True, False, False)))
        def shutdown(self, answer: Plan, now: bool) -> None:
            # ``now`` makes shutdown rarer (it ends the manager's life) and shrinks to True.
            if now:
                counters.step()
                self.driver.shutdown([answer])

        @precondition(lambda m: m.driver.checker.stopped)
        @rule(op=st.sampled_from(AFTER_SHUTDOWN), key=keys, request=requests)
        def call_after_shutdown(self, op: str, key: bytes, request: str) -> None:
            counters.step()
            d = self.driver
            calls: dict[str, Callable[[], None]] = {
                "lookup": lambda: d.lookup(key, request),
                "flush": d.flush,
                "cleanup": lambda: d.cleanup(request),
                "mark_miss": lambda: d.mark_miss([key]),
                "mark_present": lambda: d.mark_present([key]),
                "drain_results": d.drain_results,
                "shutdown": d.shutdown,
            }
            calls[op]()

        @precondition(lambda m: m.driver.checker.stopped)
        @rule()
        def restart(self) -> None:
            """Go on with a fresh IUT: the closed one has nothing left to show."""
            self._collect()
            self.driver = self._new_driver()

        # -- the worker (stepped mode) ---------------------------------------------

        @precondition(lambda m: stepped and is_open(m) and _worker_can(m.driver) != ())
        @rule(target=listed_last, answer=answers, post_first=st.booleans())
        def worker(self, answer: Plan, post_first: bool) -> Any:
            """One worker move: post, or probe the next group (taking a batch first).

            TakeBatch commutes with every scheduler call but shutdown (and shutdown
            probes a batch in hand anyway), so taking a batch separately would add
            steps but no behaviour.  One rule for the worker also keeps swarm
            testing from switching off half of it; ``post_first`` decides when
            both moves are possible.
            """
            counters.step()
            can = _worker_can(self.driver)
            if "post" in can and (post_first or "probe_group" not in can):
                self.driver.post()
            else:
                self.driver.probe_group(answer)
            return multiple()

        # -- the worker thread (threaded mode) -----------------------------------------

        @precondition(
            lambda m: not stepped and is_open(m) and m.driver.checker.owed_tier_calls() > 0
        )
        @rule(target=listed_last, answer=answers)
        def answer(self, answer: Plan) -> Any:
            counters.step()
            self.driver.answer(answer)
            return multiple()

        @precondition(
            lambda m: not stepped and is_open(m) and m.driver.unsettled()
            and m.driver.checker.owed_tier_calls() == 0
        )
        @rule()
        def settle(self) -> None:
            counters.step()
            self.driver.settle()

        # -- a real tier's contents ------------------------------------------------------

        @precondition(lambda m: real_tier and is_open(m))
        @rule(key=keys, present=st.booleans())
        def store(self, key: bytes, present: bool) -> None:
            counters.step()
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
            self.driver.close()
            self._collect()

        def _collect(self) -> None:
            """Keep the driver's property-8 warning (non-strict runs go on past it)."""
            warnings = self.driver.checker.warnings
            if warnings and self.driver.checker.violation is None:
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
    steps: int = 30,
    stats: Stats | None = None,
    backend: str | None = None,
    shrink_budget: float = 20.0,
) -> Stats:
    """Run the machine; return the stats, or raise the shrunk ConformanceError.

    Stepped mode skips Hypothesis's shrinker and shrinks by replaying calls
    (``spec.oracle_replay.shrink``), which is far cheaper; threaded runs, which
    do not replay deterministically, are shrunk by Hypothesis.
    """
    stats = stats if stats is not None else Stats()
    logging.getLogger("reference").setLevel(logging.CRITICAL)  # tier warnings are expected
    inner = make_inner_tier(config.tier, config.redis_url)
    machine = machine_class(config, stats, inner)
    if seed is not None:
        machine._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
    options: dict[str, Any] = {}
    if backend is not None:
        options["backend"] = backend
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if config.mode != "stepped":
        phases.append(Phase.shrink)
    chosen = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=database,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        print_blob=False,
        **options,
    )
    try:
        run_state_machine_as_test(machine, settings=chosen)
    except ConformanceError as error:
        if config.mode == "stepped" and shrink_budget > 0:
            raise shrink(error, shrink_budget) from None
        raise
    finally:
        dispose_inner_tier(inner, KEYS)
    return stats
