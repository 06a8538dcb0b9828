"""Replaying, shrinking and writing out counterexamples, without Hypothesis.

A counterexample is the list of ``asynclookup.conformance.counterexample.Call``s
that led to a ``ConformanceError``; each names the ``Driver`` method that replays it.  In
stepped mode a replay is deterministic (the test thread plays the worker and
the oracle's tier answers as recorded), so:

- ``replay`` runs calls on a fresh target and returns the error, if any;
- ``shrink`` deletes calls and simplifies their arguments for as long as the
  replay still breaks the same property (much cheaper than shrinking through
  Hypothesis, since a replay costs a millisecond);
- ``replay_file`` writes a standalone pytest file that replays the calls; it
  fails while the target breaks the property and passes on a conforming one.

Threaded runs are not deterministic: shrinking retries each candidate, and a
threaded replay reproduces only as well as the interleaving repeats.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from asynclookup.conformance.counterexample import (
    NOT_REPRODUCIBLE,
    Call,
    ConformanceError,
    ShrinkReport,
    lookup_text,
    reask_text,
)
from asynclookup.conformance.driver import Driver
from asynclookup.conformance.eventually import ASKED_AGAIN, WAIT_BOUND
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.conformance.targets.bounded import CALL_BOUND, CONSTRUCT_BOUND
from asynclookup.conformance.targets.target import FuzzTarget
from asynclookup.observe.classify import FORCED_BY_MARK_MISS, opening

Step = tuple[str, tuple[Any, ...]]
QUICK_WAIT = 0.5  # seconds a threaded shrink candidate waits for what the spec owes
CONFIRMED_AT_MOST = 6  # threaded: shrunk candidates confirmed at the full bound, smallest first

SHRINK_BUDGET = 20.0  # seconds the shrinker works on a violation, unless told otherwise


def open_replay(
    target: FuzzTarget | str, *, mode: str = "stepped", tier: str = "memory",
    strict_efficiency: bool = False,
    wait_bound: float = WAIT_BOUND, call_bound: float = CALL_BOUND,
    construct_bound: float = CONSTRUCT_BOUND,
) -> Driver:
    """A fresh driver for a replay (what replay files call, with the target's text)."""
    return Driver.open(
        target, mode=mode, tier=tier, strict_efficiency=strict_efficiency, patient=True,
        wait_bound=wait_bound, call_bound=call_bound, construct_bound=construct_bound,
    )


def replay(
    config: dict[str, Any], steps: Sequence[Step], wait_bound: float = WAIT_BOUND
) -> ConformanceError | None:
    """Run ``steps`` on a fresh target as ``config`` says; the error they cause, if any.
    A shrink candidate's short ``wait_bound`` bounds its calls too (a call that does not
    return costs a candidate that much; the kept one is confirmed at the full bounds)."""
    try:
        driver = open_replay(
            config.get("target", "reference"), mode=config.get("mode", "stepped"),
            tier=config.get("tier", "memory"),
            strict_efficiency=bool(config.get("strict_efficiency", False)),
            wait_bound=wait_bound,
            call_bound=CALL_BOUND if wait_bound >= WAIT_BOUND else max(wait_bound, 1.0),
        )
    except ConformanceError as error:  # the constructor did not return
        return error
    try:
        for method, args in steps:
            getattr(driver, method)(*args)
        driver.close()
    except ConformanceError as error:
        driver.close()  # unchecked: the driver has failed
        return error
    return None


def shrink(error: ConformanceError, budget: float = SHRINK_BUDGET) -> ConformanceError:
    """The shortest, simplest replay found within ``budget`` seconds breaking the same property.

    Threaded replays depend on the worker thread's timing, so there a candidate
    gets up to two tries and is kept only if its recorded calls break the
    property once more; the run with a settle after every run of answers is
    tried first.  A run that ends in the leak check's asking again is tried as
    its own requester asking again (``_asked_directly``), and a threaded
    ``shutdown()`` as an ``answer`` (``_answered_not_shut``).  A
    candidate waits only ``QUICK_WAIT`` for a tier call or a post the spec owes
    (a counterexample that ends in one that never comes would otherwise cost the
    whole bound a candidate); the kept candidates are then replayed with the
    full bound, smallest first, and the first that breaks the property there is
    returned (the original counterexample if none does).  ``shrink_report``
    says what it did.
    """
    report = ShrinkReport(len(error.calls))
    if not error.reproducible:
        report.note = NOT_REPRODUCIBLE
    shrunk = _shrink(error, budget, report)
    if shrunk is not error:
        for line in error.notes:
            shrunk.note(line)
    report.calls_after = len(shrunk.calls)
    shrunk.shrink_report = report
    return shrunk


def _shrink(error: ConformanceError, budget: float, report: ShrinkReport) -> ConformanceError:
    number = error.violation.number
    threaded = error.config.get("mode", "stepped") != "stepped"
    tries = 2 if threaded else 1  # threaded: answers are held until a wait, so few differ
    wait = QUICK_WAIT if threaded else WAIT_BOUND
    deadline = time.monotonic() + budget
    best = error
    accepted: list[ConformanceError] = []  # every candidate taken, smallest last
    out_of_time = False
    pinned = False  # threaded: best settles after its answers
    offered: set[str] = set()  # threaded: shutdowns replaced by answers, tried once each

    def attempt(steps: list[Step], larger: bool = False) -> bool:
        nonlocal best, out_of_time

        def progress(found: ConformanceError | None) -> bool:
            # progress is a different run that is no larger: a candidate that fails
            # only at the closing shutdown() replays as the very calls of ``best``
            return found is not None and found.violation.number == number and (
                (larger or _size(found) <= _size(best))
                and _steps(found.calls) != _steps(best.calls)
            )

        for _ in range(tries):
            if time.monotonic() > deadline:
                out_of_time = True
                return False
            report.tried += 1
            found = replay(error.config, steps, wait)
            if not progress(found):
                continue
            if threaded and found is not None:
                # Threaded: replay the calls as recorded (a call that did nothing, such
                # as an answer with no tier call waiting, is not recorded, yet it gave
                # the worker time): the run kept must break the property by itself.
                report.tried += 1
                found = replay(error.config, _steps(found.calls), wait)
                if not progress(found):
                    continue
            assert found is not None
            report.reproduced += 1
            best = found
            accepted.append(found)
            return True
        return False

    # Calls the spec ignores (a cleanup of a request that asked nothing since its
    # last cleanup) go first, all at once: they rarely matter, and deleting them
    # one by one costs a replay each.
    inert = _without_inert_cleanups(_steps(best.calls))
    if inert != _steps(best.calls):
        attempt(inert)
    direct = _asked_directly(_steps(best.calls))
    if direct is not None:
        attempt(direct)
    sliced = _sliced(_steps(best.calls), _keys_of(error))
    if sliced is not None:
        attempt(sliced)
    if threaded and number == 8:
        witness = _reuse_race(error)
        if witness is not None and len(witness) < len(best.calls):
            attempt(witness)

    if threaded:
        # Threaded: the calls after an answer may matter only as time for the worker
        # to post.  Give it that time with a settle after every run of answers; if the
        # run still breaks the property so, the settles are candidates for deletion
        # like any call (a settle only waits: it judges nothing).  Otherwise try each
        # answer moved later.
        steps = _steps(best.calls)
        full = _pin_all(steps)
        if full == steps:
            pinned = any(method == "settle" for method, _ in steps)
        elif attempt(full, larger=True):
            pinned = True
        if not pinned:
            before = best
            for candidate in _moved(steps):
                if time.monotonic() > deadline:
                    break
                if attempt(candidate, larger=True):
                    _delete_calls(_steps(best.calls), attempt)
                    if _size(best) < _size(before):
                        break
                    best = before
    changed = True
    while changed and time.monotonic() < deadline:
        changed = _delete_calls(_steps(best.calls), attempt)
        changed = _merge_posts(_steps(best.calls), attempt) or changed
        if threaded:
            changed = _answered_not_shut(_steps(best.calls), attempt, offered) or changed
        if not changed:
            changed = _delete_pairs(_steps(best.calls), attempt)
        changed = _canonical_names(_steps(best.calls), attempt) or changed
        changed = _simplify_arguments(_steps(best.calls), attempt) or changed
    report.stopped = (
        f"stopped at its {budget:g} s budget" if out_of_time or changed
        else "no smaller candidate reproduces"
    )
    if report.tried and not report.reproduced:
        report.stopped += " (no candidate reproduced the violation: the run may hinge on "
        report.stopped += "timing the replay could not repeat)"
    inert_left = len(best.calls) - len(_without_inert_cleanups(_steps(best.calls)))
    if inert_left:
        report.stopped += (
            f"; {inert_left} cleanup(s) the spec ignores kept: without them the "
            "violation did not reproduce, so the IUT does not ignore them"
        )
    if not threaded:
        return best
    if best is error:
        _confirm_original(error, report)
        return best
    # Confirm at the full wait bound, smallest candidate first: one that reproduced
    # only by the luck of the worker's timing gives way to the next larger one.
    chain = sorted({id(c): c for c in accepted if c is not error}.values(), key=_size)
    for rank, kept in enumerate(chain[:CONFIRMED_AT_MOST]):
        for _ in range(tries):
            confirmed = replay(error.config, _steps(kept.calls))
            if confirmed is not None and confirmed.violation.number == number:
                if rank:
                    report.stopped += (
                        f"; the {rank} smallest candidate(s) did not reproduce at the full "
                        "wait bound, so the next larger one is shown"
                    )
                return confirmed
    report.stopped += "; no shrunk run reproduced at the full wait bound, so the "
    report.stopped += "unshrunk counterexample is shown"
    _confirm_original(error, report)
    return error


def settle_name(error: ConformanceError) -> ConformanceError:
    """A finding whose calls fit two properties, settled by replays that ask, not by a rule
    of thumb (docs/oracle.md, "Known limits"):

    - threaded, a finding at a lookup's or drain's answer while a tier call the worker
      already made waits unjudged in the oracle's tier: ``_tier_call_first`` answers
      that call in the run's place, and what it breaks by itself comes first;
    - property 7, a lookup's None after the tier answered the key None: the tier's
      None passed through, or a verdict never delivered (6)?  ``_with_proper_answers``
      replays the run with proper answers;
    - property 8, a second probe of a key while its first is in flight: a cleanup
      deleted the orphaned in-flight probe, or a mark_miss had forced that probe to
      a verdict (3) and the cleanup then deleted the resolved orphan, as the protocol
      lets it.  ``_asked_after_mark_miss`` asks right after the mark_miss;
    - property 2 or 3, a lookup's False where the spec's verdict is None, with a
      mark_miss of that key before it: an orphan's result delivered (2) or a verdict
      the mark_miss forced (3).  ``_without_mark_miss`` replays the run without it;
    - property 2 or 7, a verdict kept for (or a call raising over) a key whose
      request was cleaned up: does the class keep such an orphan while it is PENDING,
      and submit it (1)?  ``_pending_orphan_kept`` asks in a run of four calls.

    Each question is a call the protocol allows, the run with one call changed or
    left out, or (the kept orphan) a run of four calls that asks one thing; the
    class's answers decide the name.  Replays wait the shrinker's short
    bound.  Any other finding, or one the replays do not settle, is returned as it
    is; a settled one carries a note saying how (``ConformanceError.notes``), and, if
    ``error`` was shrunk, its shrink report."""
    settled = _settled(error, _steps(error.calls))
    if settled is not error:
        for line in error.notes:  # an earlier settling's note
            if line not in settled.notes:
                settled.note(line)
        settled.shrink_report = error.shrink_report  # settled after shrinking
        if settled.shrink_report is not None:
            settled.shrink_report.calls_after = len(settled.calls)
    return settled


def settled_and_shrunk(error: ConformanceError, budget: float) -> ConformanceError:
    """What every finding becomes before it is reported: its name settled
    (``settle_name``), then shrunk within ``budget`` seconds (none if 0), then settled
    again, since a short run replays more steadily than the first."""
    error = settle_name(error)
    if budget > 0:
        error = settle_name(shrink(error, budget))
    return error


def _settled(error: ConformanceError, steps: list[Step]) -> ConformanceError:
    earlier = _tier_call_first(error, steps)
    if earlier is not None:
        return earlier
    if error.violation.number == 7 and steps and steps[-1][0] in ("lookup", "await_verdict"):
        return _with_proper_answers(error, steps) or error
    if error.violation.number == 8:
        return _asked_after_mark_miss(error, steps) or error
    if (
        error.violation.number in (2, 3) and steps and steps[-1][0] in ("lookup", "await_verdict")
        and error.calls[-1].text.endswith("-> False")  # the only verdict mark_miss forces
    ):
        settled = _without_mark_miss(error, steps)
        if settled is not None:
            return settled
    if error.violation.number in (2, 7) and steps and steps[-1][0] in _NAMING_KEYS:
        return _pending_orphan_kept(error, steps) or error
    return error


# the calls whose first argument names the key (a lookup, a re-ask) or keys (the marks)
_NAMING_KEYS = ("lookup", "await_verdict", "mark_present", "mark_miss")


def _pending_orphan_kept(error: ConformanceError, steps: list[Step]) -> ConformanceError | None:
    """Property 2 or 7 at a call naming a key that a request of the run asked for and
    was then cleaned up: a verdict the class kept for a probe its cleanup left without
    requesters (a resolved orphan, 2), or a call that raised over such a probe (7, a
    class whose own checks trip on the orphan it kept).  Does its cleanup keep the
    orphan while it is still PENDING?  Then that probe's flush sends it to the tier
    for the cleaned-up request, property 1, which a class that keeps orphans shows
    first on other runs.  Asked in a run of its own: that lookup, the cleanup, a flush
    and the tier call's answer; if that breaks property 1, it is the finding, so one
    bug gets one name whichever orphan a run makes first.  Threaded only (the
    answer is the oracle's tier's); None: not settled."""
    if error.config.get("mode", "stepped") == "stepped":
        return None
    method, args = steps[-1]
    keys = tuple(args[0]) if method in ("mark_present", "mark_miss") else (args[0],)
    for i, (method, args) in enumerate(steps[:-1]):
        if method != "lookup" or args[0] not in keys:
            continue
        key, request = args
        if ("cleanup", (request,)) not in steps[i + 1:-1]:
            continue
        asked: list[Step] = [
            ("lookup", (key, request)), ("cleanup", (request,)), ("flush", ()),
            ("answer", (Plan(),)),
        ]
        for _ in range(_tries(error)):
            found = replay(error.config, asked, QUICK_WAIT)
            if found is not None and found.violation.number == 1:
                found.note(
                    f"named 1, not {error.violation.number}: asked in a run of its own (its "
                    "calls are shown), the class keeps a probe that a cleanup leaves "
                    "without requesters while it is still PENDING, and flush() sends it "
                    "to the tier; a kept orphan is what both runs show"
                )
                return found
        return None
    return None


def _asked(call: Call) -> str:
    """What ``call`` asked, without what came back: its text reads "<asked> -> <what came
    back>", and a key's bytes may hold " ->" themselves, so a lookup and a re-ask are
    written again from their arguments, as the driver wrote them (``lookup_text``,
    ``reask_text``)."""
    if call.method == "lookup" and len(call.args) == 2:
        return lookup_text(*call.args)
    if call.method == "await_verdict" and len(call.args) == 2:
        return reask_text(*call.args)
    return call.text.partition(" ->")[0]


def _tier_call_first(error: ConformanceError, steps: list[Step]) -> ConformanceError | None:
    """Threaded, a finding at a scheduler call's answer (a lookup, a re-ask): replay the
    run up to that call and answer the worker's tier call instead, if one is waiting.
    The oracle's tier holds each call until it answers, so a call the worker made
    before the finding had not been judged yet; if it breaks a property by itself (a
    stale entry submitted, whose probe the class then kept in flight and answered the
    lookup from), that run is the finding: what went wrong first."""
    if error.config.get("mode", "stepped") == "stepped":
        return None
    if not steps or steps[-1][0] not in ("lookup", "await_verdict", "drain_results"):
        return None
    answer: Step = ("answer", (Plan(),))
    found = replay(error.config, [*steps[:-1], answer], QUICK_WAIT)
    if (
        found is None or found.violation.number in (None, error.violation.number)
        or _steps(found.calls[-1:]) != [answer]
    ):
        return None
    found.note(
        f"named {found.violation.number}, not {error.violation.number}: the worker's tier "
        f"call waiting before {_asked(error.calls[-1])} already broke "
        f"property {found.violation.number}; that call, answered, is the finding"
    )
    return found


def _with_proper_answers(error: ConformanceError, steps: list[Step]) -> ConformanceError | None:
    """Property 7 at a lookup that returned None after the tier answered that key None:
    the tier's None passed through as the verdict (7), or a verdict the class never
    delivered (6)?  Replay the run with every tier answer proper: if the same lookup
    still breaks a property other than 7, the tier's fault did not make it, and that
    run is the finding."""
    if not error.calls[-1].text.endswith("-> None"):
        return None
    proper = [(method, tuple(_proper(a) for a in args)) for method, args in steps]
    if proper == steps:
        return None
    for _ in range(_tries(error)):
        found = replay(error.config, proper, QUICK_WAIT)
        if (
            found is not None and found.violation.number not in (None, 7)
            and _steps(found.calls[-1:]) == proper[-1:]
        ):
            found.note(
                f"named {found.violation.number}, not 7: with every tier answer proper, "
                "the same lookup still returns None, so it is not the tier's None "
                "passed through"
            )
            return found
    return None


def _tries(error: ConformanceError) -> int:
    """Replays a settling question gets: two threaded (the worker's timing), one stepped."""
    return 2 if error.config.get("mode", "stepped") != "stepped" else 1


def _proper(value: Any) -> Any:
    """``value`` with every tier answer (``Plan``) in it made a proper one."""
    if isinstance(value, Plan):
        return Plan()
    if isinstance(value, list):
        return [_proper(v) for v in value]
    return value


def _asked_after_mark_miss(error: ConformanceError, steps: list[Step]) -> ConformanceError | None:
    """For each mark_miss of a key that a request asked for and that request's cleanup
    comes later in the run (the orphaning), replay the run up to the mark_miss and have
    that request ask for the key at once: a class whose mark_miss forced the in-flight
    probe answers a verdict where the spec's is still None, and that shorter run
    (property 3) is the finding.  None: every such request was answered as the spec
    answers, and the finding stands."""
    asked: dict[bytes, set[str]] = {}
    for i, (method, args) in enumerate(steps):
        if method == "lookup":
            asked.setdefault(args[0], set()).add(args[1])
        elif method == "cleanup":
            for requests in asked.values():
                requests.discard(args[0])
        elif method == "shutdown":
            asked.clear()
        elif method == "mark_miss":
            later = {args[0] for m, args in steps[i + 1:] if m == "cleanup"}
            for key in args[0]:
                for request in sorted(asked.get(key, set()) & later):
                    question: Step = ("lookup", (key, request))
                    found = replay(error.config, [*steps[:i + 1], question], QUICK_WAIT)
                    if (
                        found is not None and found.violation.number == 3
                        and _steps(found.calls[-1:]) == [question]
                    ):
                        found.note(
                            f"named 3, not 8: lookup({key!r}, {request!r}), asked right "
                            f"after a mark_miss of {key!r}, returned the verdict that "
                            "mark_miss forced; without that question the calls also read "
                            "as a cleanup deleting an in-flight probe (8)"
                        )
                        return found
    return None


def _without_mark_miss(error: ConformanceError, steps: list[Step]) -> ConformanceError | None:
    """The run replayed without the mark_misses of the last lookup's key.  Named 3 (the
    verdict mark_miss forced) and the same lookup still breaks property 2 without them:
    the mark_miss did not make that verdict, and the run without it is the finding.
    Named 2 (an orphan's result delivered, say) and the run reproduces as it is, but
    not at all without them: the verdict was the mark_miss's, property 3.  None: not
    settled (no such mark_miss, or the replays went otherwise)."""
    key = steps[-1][1][0]
    ablated: list[Step] = []
    for method, args in steps:
        if method == "mark_miss" and key in args[0]:
            rest = [k for k in args[0] if k != key]
            if rest:
                ablated.append((method, (rest,)))
            continue
        ablated.append((method, args))
    if ablated == steps:
        return None
    number = error.violation.number
    tries = _tries(error)
    without = [replay(error.config, ablated, QUICK_WAIT) for _ in range(tries)]
    if number == 3:
        for found in without:
            if found is not None and found.violation.number == 2 and (
                _steps(found.calls[-1:]) == steps[-1:]
            ):
                found.note(
                    f"named 2, not 3: without the mark_miss of {key!r} the same lookup "
                    "still returns that verdict, so the mark_miss did not force it"
                )
                return found
        return None
    if any(found is not None for found in without):
        return None
    again = [replay(error.config, steps, QUICK_WAIT) for _ in range(tries)]
    if not any(found is not None and found.violation.number == number for found in again):
        return None
    renamed = ConformanceError(
        dataclasses.replace(
            error.violation, number=3,
            detail=(
                f"{opening(error.violation.detail, error.violation.observation)}: "
                f"{FORCED_BY_MARK_MISS}"
            ),
        ),
        error.calls, error.config,
    )
    renamed.note(
        f"named 3, not 2: the same calls without the mark_miss of {key!r} break nothing, "
        "so the verdict was the one that mark_miss forced"
    )
    return renamed


def _confirm_original(error: ConformanceError, report: ShrinkReport) -> None:
    """Threaded, nothing smaller kept: replay the run's own calls once at the full bound
    (the run ended at its first violation unreplayed, ``machine._FoundFirst``, as
    Hypothesis's replay would have); if that does not break the property, the run is
    marked not reproducible."""
    if not error.reproducible:
        return
    again = replay(error.config, _steps(error.calls))
    if again is not None and again.violation.number == error.violation.number:
        return
    error.not_reproducible("its calls, replayed at the full wait bound, did not break it")
    report.note = NOT_REPRODUCIBLE


def _without_inert_cleanups(steps: list[Step]) -> list[Step]:
    """``steps`` without the cleanups of requests that looked nothing up since their last
    cleanup (or ever): repeated cleanups and cleanups of unknown requests."""
    asked: set[str] = set()
    kept: list[Step] = []
    for method, args in steps:
        if method == "lookup":
            asked.add(args[1])
        elif method == "cleanup":
            if args[0] not in asked:
                continue
            asked.discard(args[0])
        kept.append((method, args))
    return kept


def _asked_directly(steps: list[Step]) -> list[Step] | None:
    """A run that ends in the leak check asking again about a held key (a new request's
    lookup of it): the same run with the key's last requester kept, not cleaned up,
    asking again itself (``await_verdict``).  A stuck probe shows so without the
    leak check's four calls; deleting calls never turns a cleanup into a question."""
    asked = [i for i, (method, args) in enumerate(steps)
             if method == "lookup" and args[1:2] == (ASKED_AGAIN,)]
    if not asked:
        return None
    head, key = steps[:asked[0]], steps[asked[0]][1][0]
    if head and head[-1][0] == "await_empty":
        head = head[:-1]
    lookups = [i for i, (method, args) in enumerate(head)
               if method == "lookup" and args[0] == key]
    if not lookups:
        return None
    request = head[lookups[-1]][1][1]
    kept = [step for i, step in enumerate(head)
            if i < lookups[-1] or step != ("cleanup", (request,))]
    return [*kept, ("await_verdict", (key, request))]


def _keys_of(error: ConformanceError) -> frozenset[bytes]:
    """The keys the violating observation names (a lookup's key, a tier call's keys)."""
    observation = error.violation.observation
    keys = getattr(observation, "keys", None)
    if keys is None:
        key = getattr(observation, "key", None)
        keys = () if key is None else (key,)
    return frozenset(k for k in keys if isinstance(k, bytes))


def _sliced(steps: list[Step], keys: frozenset[bytes]) -> list[Step] | None:
    """``steps`` cut down to what concerns ``keys``: their lookups and re-asks, the
    cleanups of requests that looked one of them up, mark_miss and mark_present of
    them (the other keys left out), and every call that names no key (flushes,
    answers, settles, drains, shutdowns).  A race on one key buried in a long run
    (cleanup, a new request joining, two answers) is one candidate, where deleting
    calls one at a time seldom finds a run that still reproduces; None if nothing
    is cut."""
    if not keys:
        return None
    asked: set[str] = set()
    kept: list[Step] = []
    for method, args in steps:
        if method in ("lookup", "await_verdict", "store"):
            if args[0] not in keys:
                continue
            if method != "store":
                asked.add(args[1])
        elif method == "cleanup":
            if args[0] not in asked:
                continue
        elif method in ("mark_miss", "mark_present"):
            named = [k for k in args[0] if k in keys]
            if not named:
                continue
            args = (named, *args[1:])
        kept.append((method, args))
    return kept if kept != steps else None


def _reuse_race(error: ConformanceError) -> list[Step] | None:
    """Property 8 found at a tier call, threaded: the protocol's own witness of it, the
    race of docs/protocol.md ("Cleanup while the probe is in flight, then the key is
    reused") on the call's first key and request: the request asks, the flush submits,
    the request is cleaned up while the probe is in flight and asks again, the next
    flush, then the two tier calls answered.  A class that deleted the orphan probes
    the key twice; the long runs that find it (a shutdown racing the worker's second
    call) seldom shrink to it by deleting calls."""
    observation = error.violation.observation
    keys, request = getattr(observation, "keys", None), getattr(observation, "request", None)
    if not keys or not isinstance(request, str):
        return None
    key, answer = keys[0], ("answer", (Plan(),))
    return [("lookup", (key, request)), ("flush", ()), ("cleanup", (request,)),
            ("lookup", (key, request)), ("flush", ()), answer, answer]


def _steps(calls: Sequence[Call]) -> list[Step]:
    return [(c.method, c.args) for c in calls]


def _size(error: ConformanceError) -> tuple[int, int]:
    return len(error.calls), sum(len(repr(c.args)) for c in error.calls)


def _delete_calls(steps: list[Step], attempt: Callable[[list[Step]], bool]) -> bool:
    """Delete chunks of calls, halving the chunk size down to one call."""
    changed = False
    chunk = max(1, len(steps) // 2)
    while chunk >= 1:
        i = len(steps) - chunk
        while i >= 0:
            candidate = steps[:i] + steps[i + chunk:]
            if attempt(candidate):
                steps, changed = candidate, True
                i = min(i, len(steps) - chunk)
            else:
                i -= 1
        chunk //= 2
    return changed


def _pin_all(steps: list[Step]) -> list[Step]:
    """``steps`` with a settle after every run of answers (threaded)."""
    settled: list[Step] = []
    for i, step in enumerate(steps):
        settled.append(step)
        after = steps[i + 1][0] if i + 1 < len(steps) else None
        if step[0] == "answer" and after not in ("answer", "settle"):
            settled.append(("settle", ()))
    return settled


def _moved(steps: list[Step]) -> Iterator[list[Step]]:
    """Threaded candidates with one answer moved later, a settle right after it."""
    for i, (method, _) in enumerate(steps):
        if method != "answer":
            continue
        rest = steps[:i] + steps[i + 1:]
        for j in range(i + 1, len(rest)):
            yield [*rest[:j], steps[i], ("settle", ()), *rest[j:]]


def _answered_not_shut(
    steps: list[Step], attempt: Callable[..., bool], tried: set[str]
) -> bool:
    """Threaded: a ``shutdown()`` replaced by an ``answer``, or by two.  A shutdown shows
    the worker's next tier call only if the worker makes it before it sees the stop, a
    race a replay often loses; an answer waits for a call, and a second answer for
    the call the first one let the worker make (a worker that takes the next batch
    only once the last is answered).  One answer has the shorter arguments, so a run
    that fails again at the shutdown a replay closes with is no progress; two are a
    call longer, tried as a larger candidate (the confirmation at the full bound
    prefers the smallest run that reproduces there)."""
    answer: Step = ("answer", (Plan(),))
    for i, (method, _) in enumerate(steps):
        if method != "shutdown":
            continue
        for answers, larger in (([answer], False), ([answer, answer], True)):
            candidate = [*steps[:i], *answers, *steps[i + 1:]]
            if repr(candidate) in tried:
                continue  # a deletion may bring the shutdown back: offer each run once
            tried.add(repr(candidate))
            if attempt(candidate, larger):
                return True
    return False


def _delete_pairs(steps: list[Step], attempt: Callable[[list[Step]], bool]) -> bool:
    """Delete two calls that are not next to each other (a lookup and the worker
    move that probes it, say), when no single deletion helps."""
    for i in range(len(steps)):
        for j in range(i + 2, len(steps)):
            if attempt(steps[:i] + steps[i + 1:j] + steps[j + 1:]):
                return True
    return False


def _merge_posts(steps: list[Step], attempt: Callable[[list[Step]], bool]) -> bool:
    """Fold a later ``post()`` into an earlier held worker move (``post=True``)."""
    for i, (method, args) in enumerate(steps):
        if method != "probe_group" or len(args) != 2 or args[1]:
            continue
        for j in range(i + 1, len(steps)):
            if steps[j][0] == "post":
                merged = [*steps[:i], (method, (args[0], True)), *steps[i + 1:j], *steps[j + 1:]]
                if attempt(merged):
                    return True
                break
    return False


def _canonical_names(steps: list[Step], attempt: Callable[[list[Step]], bool]) -> bool:
    """Rename keys and requests to k0, k1, ... and A, B, ... in order of first use."""
    keys: dict[bytes, bytes] = {}
    requests: dict[str, str] = {}

    def rename(value: Any) -> Any:
        if isinstance(value, bytes):
            return keys.setdefault(value, b"k%d" % len(keys))
        if isinstance(value, str) and len(value) == 1:
            return requests.setdefault(value, "ABCDEFGH"[len(requests)])
        if isinstance(value, list):
            return [rename(v) for v in value]
        return value

    renamed = [(m, tuple(rename(a) for a in args)) for m, args in steps]
    return renamed != steps and attempt(renamed)


def _simpler(value: Any) -> list[Any]:
    """Simpler versions of one argument, simplest first."""
    if isinstance(value, Plan):
        out = [Plan(), Plan(value.kind), Plan(value.kind, size=value.size)]
        for i, bit in enumerate(value.bits):
            if bit:
                bits = (*value.bits[:i], False, *value.bits[i + 1:])
                out.append(Plan(value.kind, bits, value.size))
        if value.size:
            out.append(Plan(value.kind, value.bits, 0))
        return [p for p in out if p != value]
    if isinstance(value, list) and value:
        return [[]] + [value[:i] + value[i + 1:] for i in range(len(value))]
    return []


def _simplify_arguments(steps: list[Step], attempt: Callable[[list[Step]], bool]) -> bool:
    changed = False
    for i in range(len(steps)):
        if i >= len(steps):
            break
        method, args = steps[i]
        for j, arg in enumerate(args):
            for simpler in _simpler(arg):
                new_args = (*args[:j], simpler, *args[j + 1:])
                candidate = [*steps[:i], (method, new_args), *steps[i + 1:]]
                if attempt(candidate):
                    steps, args, changed = candidate, new_args, True
                    break
    return changed


def replay_file(error: ConformanceError) -> str:
    """A standalone pytest module replaying ``error``'s calls: ``replay_template``
    (a real module) with the counterexample filled in."""
    template = Path(__file__).with_name("replay_template.py").read_text(encoding="utf-8")
    head, _, rest = template.partition("\n# This module is the template")
    rest = rest[rest.index("\nfrom __future__"):]
    calls = "\n".join(
        f"        driver.{call.source}  # {number}. {call.text}"
        for number, call in enumerate(error.calls, 1)
    ) or "        pass"
    before, _, after = rest.partition("        # -- BEGIN CALLS\n")
    after = after[after.index("        # -- END CALLS\n") + len("        # -- END CALLS\n"):]
    uses_plan = any(isinstance(a, Plan) or (isinstance(a, list) and any(
        isinstance(p, Plan) for p in a)) for c in error.calls for a in c.args)
    if not uses_plan:
        before = before.replace("from asynclookup.conformance.targets.adapter import Plan\n", "")
    detail = error.violation.detail.replace('"""', "'''").replace("\\", "\\\\")
    config = error.config
    values = (f"MODE, TIER, STRICT = {config.get('mode', 'stepped')!r}, "
              f"{config.get('tier', 'memory')!r}, "
              f"{bool(config.get('strict_efficiency', False))!r}")
    before = before.replace('"reference")', f"{str(config.get('target', 'reference'))!r})", 1)
    before = before.replace('MODE, TIER, STRICT = "stepped", "memory", False', values, 1)
    head = head.replace("TITLE", error.violation.title, 1).replace("DETAIL", detail, 1)
    return head + before + calls + "\n" + after
