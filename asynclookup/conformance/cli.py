"""``asynclookup fuzz``: the conformance oracle's Hypothesis machine from the command line.

``register(subparsers)`` adds the subcommand (``asynclookup.cli`` calls it); ``run(args)``
fuzzes one target and returns the exit code: 0 no violation (property-8
warnings allowed unless ``--strict-efficiency``), 1 a violation, 2 bad arguments
(one line on stderr), 3 incomplete (the oracle's state bound was exceeded, or a
``--workers`` process died).  On a violation it prints the shrunk counterexample
as numbered calls with the property it breaks, and ``--replay-out`` writes it as
a standalone pytest file.  ``--workers``, ``--duration`` and the live line on a
terminal (stderr, off with ``--quiet``) are ``asynclookup.conformance.campaign``'s;
``--json`` keeps stdout one JSON object.

It does not decide conformance itself: ``asynclookup.conformance.machine`` runs the machine,
``asynclookup.observe.engine`` judges, ``asynclookup.conformance.replay`` shrinks
and writes replays.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from asynclookup._cli import (
    EXIT_HOLDS,
    EXIT_INCOMPLETE,
    EXIT_VIOLATION,
    LiveLine,
    UsageError,
    integer,
    parse_duration,
    parse_workers,
    positive_int,
)
from asynclookup.conformance.counterexample import (
    NOT_REPRODUCIBLE,
    Call,
    ConformanceError,
    format_counterexample,
)
from asynclookup.conformance.regression.writer import RegressionError, unsupported, write_regression
from asynclookup.conformance.replay import SHRINK_BUDGET, replay_file
from asynclookup.conformance.targets.adapter import FAULT_KINDS, faults_text, parse_faults
from asynclookup.conformance.targets.load import leak_tables, load_target
from asynclookup.conformance.targets.target import FuzzTarget
from asynclookup.observe.interface import Violation

if TYPE_CHECKING:  # at run time these load Hypothesis, which only ``fuzz`` needs
    from hypothesis.database import ExampleDatabase

    from asynclookup.conformance.machine import FuzzConfig, Stats

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _bad(why: str) -> UsageError:
    """The usage error of ``fuzz``: one line saying which argument is wrong and why."""
    return UsageError(f"asynclookup fuzz: {why}")


def register(subparsers: Any) -> None:
    """Add ``fuzz``: Hypothesis stateful fuzzing of an implementation against the spec."""
    p = subparsers.add_parser(
        "fuzz",
        help="fuzz an implementation against the spec (the conformance oracle)",
        description="Drive an implementation with random call sequences, answer its tier "
        "calls (with faults), and check every observation against the spec.",
        epilog="Files: found counterexamples are kept only in --db (none by default). "
        "Hypothesis caches what it reads of the code under test in .hypothesis/ of the "
        "working directory; where that cannot be written (a read-only directory), the run "
        "goes on without the cache.",
    )
    p.add_argument("--target", default="reference", metavar="MODULE:ATTR",
                   help="reference (default), or a manager class / adapter factory by path")
    p.add_argument("--impl", metavar="MODULE:CLASS",
                   help="a vLLM-shaped manager class (implies threaded mode)")
    p.add_argument("--method", action="append", default=[], metavar="CALL=NAME",
                   help="with --impl: the class's name for a protocol call, e.g. "
                   "mark_miss=invalidate (repeatable or a comma list; NAME none: it has none, "
                   "for cleanup, mark_miss, mark_present)")
    p.add_argument("--cleanup-arg", choices=("id", "context"),
                   help="with --impl: cleanup takes the request id (default) or its context")
    p.add_argument("--verdicts", metavar="MODULE:FUNC",
                   help="with --impl: a function mapping lookup's answers to True/False/None")
    p.add_argument("--tables", metavar="ROLE=ATTR,...",
                   help="with --impl: the class's tables, e.g. probes=_states,index=_by_request,"
                   "batch=_pending,results=_done (roles not named are found by shape; none: "
                   "no leak check; NAME() calls a method that returns the table; results "
                   "must be a queue the oracle can count)")
    p.add_argument("--impl-arg", action="append", default=[], metavar="NAME=VALUE",
                   help="with --impl: a keyword argument of the class's constructor, after "
                   "the tier's name; VALUE is a Python literal, e.g. n_lookup_threads=1 or "
                   "name=\"'x'\" (repeatable)")
    p.add_argument("--drain-before-lookup", action="store_true",
                   help="with --impl: call drain_results() before every lookup(), as a "
                   "scheduler that must drain first does")
    p.add_argument("--tier", choices=("memory", "fs", "redis"), default="memory",
                   help="where proper verdicts come from (default memory: the oracle's own)")
    p.add_argument("--mode", choices=("stepped", "threaded"), default="stepped",
                   help="stepped: the oracle plays the worker; threaded: the IUT's thread")
    p.add_argument("--faults", default="all", metavar="KINDS",
                   help="what the tier may do besides answering True/False: none, all "
                   "(default), or a comma list of " + ", ".join(FAULT_KINDS))
    p.add_argument("--examples", type=positive_int, default=None, metavar="N",
                   help="Hypothesis examples to run, over all workers (default 200; "
                   "none with --duration)")
    p.add_argument("--duration", type=_duration, metavar="TIME",
                   help="run for this long (90s, 10m, 1h30m); with --examples, whichever "
                   "comes first")
    p.add_argument("--workers", type=_workers, default=1, metavar="N|auto",
                   help="processes fuzzing at once with seeds S, S+1, ... sharing --db "
                   "(default 1; auto: one per core)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress line on stderr (it shows only on a terminal)")
    p.add_argument("--steps", type=positive_int, default=50, metavar="N",
                   help="rules per Hypothesis example at most (default 50)")
    p.add_argument("--seed", type=integer, metavar="S", help="seed Hypothesis (reproducible runs)")
    p.add_argument("--db", metavar="PATH_OR_REDIS_URL",
                   help="keep and share found counterexamples: a directory or a redis:// "
                   "URL (default: none kept)")
    p.add_argument("--redis-url", metavar="URL",
                   help=f"the server of --tier redis (default $ASYNCLOOKUP_REDIS_URL or "
                   f"{DEFAULT_REDIS_URL})")
    p.add_argument("--replay-out", metavar="FILE",
                   help="on a violation, write a pytest file that replays it")
    p.add_argument("--regression-out", metavar="FILE",
                   help="on a violation (--impl), write a pytest module in the class's own "
                   "words: it imports only the class, pytest and the standard library")
    p.add_argument("--shrink-budget", type=_seconds, default=SHRINK_BUDGET, metavar="SECONDS",
                   help=f"how long the shrinker may work on a violation (default "
                   f"{SHRINK_BUDGET:g}; 0: report the call sequence as found)")
    p.add_argument("--strict-efficiency", action="store_true",
                   help="property 8 (no redundant probe) fails the run instead of warning")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run_fuzz)


def _workers(text: str) -> int:
    try:
        return parse_workers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: want a finite number of seconds, >= 0")
    return seconds


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_fuzz(args: argparse.Namespace) -> int:
    """Fuzz as ``args`` say; print the outcome; return the exit code."""
    config, database = _configure(args)
    from asynclookup.conformance.campaign import Campaign, render, run_campaign

    line = LiveLine.on(sys.stderr, quiet=args.quiet)
    examples = args.examples if args.examples is not None else (None if args.duration else 200)
    campaign = Campaign(config, workers=args.workers, examples=examples,
                        duration=args.duration, seed=args.seed, db=args.db, steps=args.steps,
                        shrink_budget=args.shrink_budget)
    try:
        outcome = run_campaign(campaign, database=database,
                               progress=None if line is None else (lambda p: line.show(render(p))))
    finally:
        if line is not None:
            line.clear()
    for lost in outcome.lost:  # a worker process died: reported, the others went on
        print(f"asynclookup fuzz: {lost}", file=sys.stderr)
    if outcome.failure is not None or outcome.limit is not None:
        why = outcome.failure or f"the oracle gave up: {outcome.limit}"
        print(f"asynclookup fuzz: {why}", file=sys.stderr)
        if args.json:  # still one object on stdout, so that a script reads why
            report = _as_json(config, outcome.stats, outcome.seconds, None, None)
            report |= {"result": "incomplete", "reason": why}
            print(json.dumps(report | outcome.as_json()))
        return EXIT_INCOMPLETE
    stats, error, seconds = outcome.stats, outcome.error, outcome.seconds
    replay = None
    if error is not None and args.replay_out:
        with open(args.replay_out, "w", encoding="utf-8") as out:
            out.write(replay_file(error))
        replay = args.replay_out
    if error is not None and args.regression_out:
        try:
            written = write_regression(error, args.regression_out,
                                       command=_regression_command(args))
        except RegressionError as exc:
            print(f"asynclookup fuzz: --regression-out: {exc}", file=sys.stderr)
        else:
            helper = f", its harness {written[1]}" if len(written) > 1 else ""
            print(f"regression test: {args.regression_out}{helper} "
                  f"(pytest {args.regression_out})", file=sys.stderr)
    elif args.regression_out:  # nothing to regress: say so rather than leave the user guessing
        print(f"asynclookup fuzz: --regression-out: no violation, {args.regression_out} "
              "not written", file=sys.stderr)
    if args.json:
        report = _as_json(config, stats, seconds, error, replay)
        if error is None and outcome.lost:  # exit 3, as below: no judgement
            report |= {"result": "incomplete", "reason": "; ".join(outcome.lost)}
        print(json.dumps(report | outcome.as_json()))
    else:
        lines = _as_text(config, stats, seconds, error, replay).split("\n")
        print("\n".join(lines[:2] + [outcome.summary()] * bool(outcome.summary()) + lines[2:]))
        if stats.leak_check is not None:
            print(_coverage(config, stats))
    if error is not None:
        return EXIT_VIOLATION
    return EXIT_INCOMPLETE if outcome.lost else EXIT_HOLDS  # a lost worker: incomplete


def _regression_command(args: argparse.Namespace) -> str:
    """The command that regenerates a regression file: this run's options that shape it
    (not ``sys.argv``, which is another program's when the CLI runs in-process)."""
    words = ["asynclookup", "fuzz"]
    words += ["--impl", args.impl] if args.impl else ["--target", args.target]
    if args.tables:
        words += ["--tables", args.tables]
    words += ["--faults", faults_text(args.faults)]
    if args.strict_efficiency:
        words.append("--strict-efficiency")
    for flag, value, default in (("--seed", args.seed, None), ("--examples", args.examples, None),
                                 ("--steps", args.steps, 50)):
        if value != default:
            words += [flag, str(value)]
    return shlex.join([*words, "--regression-out", args.regression_out])


def _configure(args: argparse.Namespace) -> tuple[FuzzConfig, ExampleDatabase | None]:
    target = _target(args)
    try:
        load_target(target)
    except ValueError as exc:
        flag = "" if target.is_impl else "--target: "
        raise _bad(f"{flag}{exc}") from None
    if target.is_impl:
        args.mode = "threaded"
    redis_url = args.redis_url or os.environ.get("ASYNCLOOKUP_REDIS_URL") or DEFAULT_REDIS_URL
    if args.tier == "redis":
        _reachable(redis_url, "--tier redis")
    if args.regression_out is not None:
        parent = os.path.dirname(os.path.abspath(args.regression_out))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            raise _bad(f"--regression-out: cannot write {args.regression_out!r}")
        why = unsupported({"target": target, "tier": args.tier})
        if why is not None:
            raise _bad(why)
    if args.replay_out is not None:
        parent = os.path.dirname(os.path.abspath(args.replay_out))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            raise _bad(f"--replay-out: cannot write {args.replay_out!r}")
    try:
        faults = faults_text(args.faults)
    except ValueError as exc:
        raise _bad(f"--faults: {exc}") from None
    from asynclookup.conformance.machine import FuzzConfig

    config = FuzzConfig(
        target=target, mode=args.mode, tier=args.tier, faults=faults,
        strict_efficiency=args.strict_efficiency, redis_url=redis_url,
    )
    return config, _database(args.db)


def _target(args: argparse.Namespace) -> FuzzTarget:
    """The one ``FuzzTarget`` the options name (a usage error, one line, if they cannot)."""
    if getattr(args, "impl", None):  # --impl: asynclookup.conformance.targets.vllm drives it
        try:
            return FuzzTarget.impl(
                args.impl, methods=args.method, cleanup_arg=args.cleanup_arg,
                verdicts=args.verdicts, tables=args.tables or (), args=args.impl_arg,
                drain_before_lookup=args.drain_before_lookup,
            )
        except ValueError as exc:
            raise _bad(str(exc)) from None
    shaped = [f for f, v in (("--method", args.method), ("--cleanup-arg", args.cleanup_arg),
                             ("--verdicts", args.verdicts), ("--tables", args.tables),
                             ("--impl-arg", args.impl_arg),
                             ("--drain-before-lookup", args.drain_before_lookup)) if v]
    if shaped:
        raise _bad(f"{shaped[0]} is an option of --impl (a vLLM-shaped class)")
    try:
        return FuzzTarget.parse(args.target)
    except ValueError as exc:
        raise _bad(f"--target: {exc}") from None


def _database(where: str | None) -> ExampleDatabase | None:
    """The example database ``--db`` names: a directory, or a Redis server by URL."""
    from asynclookup.conformance.campaign import open_database

    if where is None:
        return None
    if where.startswith(("redis://", "rediss://", "unix://")):
        _reachable(where, "--db")
        return open_database(where)
    if os.path.exists(where) and not os.path.isdir(where):
        raise _bad(f"--db: {where!r} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(where))
    if not os.path.isdir(parent):
        raise _bad(f"--db: the parent directory of {where!r} does not exist")
    return open_database(where)


def _reachable(url: str, flag: str) -> None:
    """Raise a usage error unless a Redis server answers PING at ``url``."""
    if importlib.util.find_spec("redis") is None:
        raise _bad(f"{flag}: redis-py is not installed (pip install 'asynclookup[redis]')")
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0).ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _bad(f"{flag}: cannot reach Redis at {url!r}: {reason}") from None


def _describe(config: FuzzConfig) -> str:
    return (
        f"{config.target}, {config.mode} mode, {config.tier} tier, faults {config.faults}"
        + (", strict efficiency" if config.strict_efficiency else "")
    )


def _as_text(
    config: FuzzConfig, stats: Stats, seconds: float,
    error: ConformanceError | None, replay: str | None,
) -> str:
    rate = stats.steps / seconds if seconds > 0 else 0.0
    lines = [f"asynclookup fuzz: {_describe(config)}"]
    lines.append(
        f"  {stats.examples:,} examples, {stats.steps:,} steps in {seconds:.1f} s "
        f"({rate:,.0f} steps/s)"
    )
    if error is not None:
        lines.append(f"VIOLATION ({error.violation.kind}), {len(error.calls)} calls:")
        lines.append(format_counterexample(error.violation, error.calls))
        lines.extend(f"  {line}" for line in error.notes)
        if error.shrink_report is None and not error.reproducible:
            lines.append(f"  {NOT_REPRODUCIBLE}")  # (a shrink line says it itself)
        if error.shrink_report is not None:
            lines.append(error.shrink_report.line())
        if replay is not None:
            lines.append(f"replay: {replay} (pytest {replay})")
        return "\n".join(lines)
    if stats.warnings:
        violation, calls = min(stats.warnings, key=lambda w: len(w[1]))
        lines.append(
            f"warning: {violation.title} in {len(stats.warnings)} example(s); the shortest, "
            f"{len(calls)} calls (--strict-efficiency makes this a failure):"
        )
        lines.append(format_counterexample(violation, calls))
    lines.append("no violation")
    return "\n".join(lines)


def _violation_json(violation: Violation, calls: Sequence[Call]) -> dict[str, Any]:
    from asynclookup.spec.core import describe

    return {
        **violation.as_json(),
        "calls": [{"call": c.text, "replay": c.source, "tier": c.notes} for c in calls],
        "states": [describe(s) for s in violation.states],
    }


def _reproducible(error: ConformanceError) -> bool:
    """False when Hypothesis's own replay of the run that found ``error`` went otherwise."""
    shrunk_from = error.shrink_report
    return error.reproducible and (shrunk_from is None or shrunk_from.note != NOT_REPRODUCIBLE)


def _coverage(config: FuzzConfig, stats: Stats) -> str:
    """Whether the leak check ran, and which optional calls the target never got."""
    tables = leak_tables(config.target)
    if tables is not None:  # a vLLM-shaped class: the tables found by shape or named
        leaks = tables.describe()
    elif stats.leak_check:
        leaks = "on"
    else:
        leaks = "OFF (the adapter offers no snapshot())"
    order = ("cleanup", "mark_miss", "mark_present", "after_shutdown")
    shown = [c if c != "after_shutdown" else "calls after shutdown()"
             for c in order if c in stats.not_generated]
    posts = "" if tables is None else f"; {tables.post_watch()}"
    unchecked = f"; {WITHOUT_CLEANUP}" if "cleanup" in stats.not_generated else ""
    return (
        f"leak check (properties 4, 5): {leaks}; not generated: "
        f"{', '.join(shown) or 'nothing'}{unchecked}{posts}"
    )


# What a run cannot check of a class without cleanup() (docs/oracle.md, "Shapes near vLLM's").
WITHOUT_CLEANUP = (
    "without cleanup() properties 4 and 5 go unchecked (only a cleanup releases a request "
    "and lets the tables empty), and 1 and 2 are checked only for entries mark_present "
    "made stale"
)


def _as_json(
    config: FuzzConfig, stats: Stats, seconds: float,
    error: ConformanceError | None, replay: str | None,
) -> dict[str, Any]:
    return {
        "target": str(config.target),
        "mode": config.mode,
        "tier": config.tier,
        "faults": list(parse_faults(config.faults)),
        "strict_efficiency": config.strict_efficiency,
        "examples": stats.examples,
        "steps": stats.steps,
        "seconds": round(seconds, 3),
        "steps_per_second": round(stats.steps / seconds, 1) if seconds > 0 else 0.0,
        "result": "violation" if error is not None else "clean",
        "violation": None if error is None else _violation_json(error.violation, error.calls),
        "shrink": None if error is None or error.shrink_report is None
        else error.shrink_report.as_json(),
        "reproducible": None if error is None else _reproducible(error),
        "notes": [] if error is None else list(error.notes),
        "warnings": [_violation_json(v, calls) for v, calls in stats.warnings[:5]],
        "replay": replay,
        "leak_check": stats.leak_check,
        "leak_tables": None if (t := leak_tables(config.target)) is None else t.as_json(),
        "not_generated": list(stats.not_generated),
    }
