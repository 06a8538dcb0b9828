"""The leak check for any layout: tables found by shape or named with --tables, and said.

A class that keeps its tables under names of its own (``tests/shapes/own_names.py``:
``_states``, ``_by_request``, ``_pending``) has them found by shape, so a pure
leak there is found: a request left in the index is property 4 (after
``cleanup(r)`` nothing refers to r), a probe state left is 5; a class whose
tables hold no key's bytes has the leak check off with the reason until its
tables are named.  Runs go through the
oracle's Python API and ``asynclookup fuzz --impl`` in-process, bounded.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from asynclookup.cli import main
from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.targets.tables import Table
from asynclookup.conformance.targets.vllm import impl_spec, tables_used
from asynclookup.conformance.testcase import first_violation
from tests.conftest import write_module

OWN = "tests.shapes.own_names:OwnNames"
LEAKY = "tests.shapes.own_names:OwnNamesKeepsIndex"
HEX_LEAKY = "tests.shapes.own_names:HexKeyedKeepsIndex"
NAMED = "probes=_states,index=_by_request,batch=_pending"
SEEDS = (0, 1, 2, 3, 4)
EXAMPLES = 150

NESTED = textwrap.dedent('''
    from tests.shapes.own_names import OwnNames, OwnNamesKeepsIndex


    class Book:
        """The tables, kept on an object of their own."""

        def __init__(self):
            self.states, self.by_request, self.pending = {}, {}, []


    def kept_in_book(name):
        return property(lambda self: getattr(self._book, name),
                        lambda self, value: setattr(self._book, name, value))


    class Bookkept(OwnNames):
        def __init__(self, tier_type):
            self._book = Book()
            super().__init__(tier_type)

        _states = kept_in_book("states")
        _by_request = kept_in_book("by_request")
        _pending = kept_in_book("pending")


    class BookkeptKeepsIndex(Bookkept):
        cleanup = OwnNamesKeepsIndex.cleanup
''')

SLOTTED = textwrap.dedent('''
    from tests.shapes.own_names import OwnNames


    class Slotted(OwnNames):
        """Also keeps each probed key in a slot array whose freed slots hold None (a
        struct-of-arrays layout: the array never shrinks)."""

        def __init__(self, tier_type):
            self._slot_keys = []
            super().__init__(tier_type)

        def _sync(self):
            for i, key in enumerate(self._slot_keys):
                if key is not None and key not in self._states:
                    self._slot_keys[i] = None
            for key in self._states:
                if key not in self._slot_keys:
                    if None in self._slot_keys:
                        self._slot_keys[self._slot_keys.index(None)] = key
                    else:
                        self._slot_keys.append(key)

        def lookup(self, key, req_context):
            verdict = super().lookup(key, req_context)
            self._sync()
            return verdict

        def flush(self):
            super().flush()
            self._sync()

        def cleanup(self, req_id):
            super().cleanup(req_id)
            self._sync()

        def drain_results(self):
            super().drain_results()
            self._sync()

        def mark_miss(self, keys):
            super().mark_miss(keys)
            self._sync()

        def mark_present(self, keys):
            super().mark_present(keys)
            self._sync()


    class SlottedKeepsKeys(Slotted):
        """Its slot array never frees a slot: the keys stay."""

        def _sync(self):
            for key in self._states:
                if key not in self._slot_keys:
                    self._slot_keys.append(key)
''')

SHARDED = "tests.strangers.sharded_tables:ShardedManager"
SHARDED_NAMED = "probes=_shards,index=_index_shards,batch=_batch"
SHARDED_LEAKY = textwrap.dedent('''
    from tests.strangers.sharded_tables import ShardedManager


    class ShardedKeepsIndex(ShardedManager):
        """Its cleanup leaves the request in its index shard."""

        def cleanup(self, req_id):
            keys = set(self._index_of(req_id).get(req_id, set()))
            super().cleanup(req_id)
            self._index_of(req_id)[req_id] = keys
''')

SORTED = "tests.strangers.sorted_bisect:SortedBisectManager"
SORTED_LEAKY = textwrap.dedent('''
    from tests.strangers.sorted_bisect import SortedBisectManager


    class SortedKeepsIndex(SortedBisectManager):
        """Its cleanup leaves the request's (request, key) pairs in its sorted index."""

        def cleanup(self, req_id):
            kept = [pair for pair in self._index if pair[0] == req_id]
            super().cleanup(req_id)
            self._index.extend(kept)
            self._index.sort()
''')


HISTORY = textwrap.dedent('''
    from collections import deque

    from tests.shapes.own_names import OwnNames


    class RecentLookups(OwnNames):
        """Also keeps the last 32 lookups, (key, request id), for debugging: bounded."""

        def __init__(self, tier_type):
            self._recent = deque(maxlen=32)
            super().__init__(tier_type)

        def lookup(self, key, req_context):
            self._recent.append((key, req_context.req_id))
            return super().lookup(key, req_context)


    class EveryLookup(RecentLookups):
        """Keeps every lookup: a list that grows with every key and request for ever."""

        def __init__(self, tier_type):
            super().__init__(tier_type)
            self._recent = []
''')


def _fuzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(["fuzz", *argv])
    captured = capsys.readouterr()
    out = captured.out
    return code, json.loads(out) if out.strip().startswith("{") else out, captured.err


def _kill(spec: str) -> ConformanceError | None:
    for seed in SEEDS:
        error = first_violation(spec, seed=seed, examples=EXAMPLES)
        if error is not None:
            return error
    return None


def test_own_table_names_are_found_by_shape() -> None:
    """A class keeping _states / _by_request / _pending gets each as its role, found by
    shape, and its results queue _done for the settles."""
    used = tables_used(OWN)
    assert used.tables == (
        Table("probes", "_states", named=False), Table("index", "_by_request", named=False),
        Table("batch", "_pending", named=False),
    )
    assert used.results == Table("results", "_done", named=False)
    assert used.leak_check


def test_vllm_names_are_found_by_shape_too() -> None:
    """The zoo's class, with vLLM's own names, has exactly those found."""
    used = tables_used("tests.zoo.vllm_shaped:VllmShapedManager")
    assert [t.path for t in used.tables] == ["_lookup_state", "_req_keys", "_lookup_batch"]
    assert used.results is not None and used.results.path == "_pending_results"


def test_pure_leak_in_own_tables_is_property_4() -> None:
    """Cleanup that keeps the request index entry is found as property 4 (the table left is
    the request index), naming the table."""
    error = _kill(LEAKY)
    assert error is not None, "the leak survived every seed"
    assert error.violation.number == 4, str(error)
    assert "_by_request=" in error.violation.detail


def test_correct_class_with_own_names_passes() -> None:
    """The same class without the leak passes, leak check on, every fault, strict."""
    assert first_violation(OWN, seed=1, examples=60, faults="all") is None


def test_tables_holding_no_key_bytes_leave_the_leak_check_off_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A class whose tables hold keys as hex finds none by shape: the coverage line says
    OFF, why, and which option turns it on; the JSON says the same."""
    code, out, _ = _fuzz(capsys, "--impl", HEX_LEAKY, "--examples", "2", "--seed", "0")
    assert code == 0
    assert "leak check (properties 4, 5): OFF (no attribute of the class holds the looked-up key" \
        in out and "--tables probes=" in out
    code, result, _ = _fuzz(capsys, "--impl", HEX_LEAKY, "--examples", "2", "--seed", "0",
                            "--json")
    assert result["leak_check"] is False
    assert result["leak_tables"]["probes"] is None
    assert "no attribute of the class" in result["leak_tables"]["reason"]


def test_named_tables_turn_the_leak_check_on_and_find_the_leak() -> None:
    """The same class with its tables named: the index left behind is property 4; unnamed,
    it goes unseen (nothing it returns is wrong)."""
    assert _kill(HEX_LEAKY) is None
    error = _kill(impl_spec(HEX_LEAKY, tables=NAMED))
    assert error is not None and error.violation.number == 4, str(error)


def test_report_says_which_tables_and_how(capsys: pytest.CaptureFixture[str]) -> None:
    """Text and JSON name each table and whether it was named or found by shape."""
    argv = ["--impl", OWN, "--tables", "probes=_states", "--examples", "2", "--seed", "0"]
    code, out, _ = _fuzz(capsys, *argv)
    assert code == 0
    assert ("leak check (properties 4, 5): on (named probes=_states; found by shape "
            "index=_by_request, batch=_pending)") in out
    code, result, _ = _fuzz(capsys, *argv, "--json")
    assert result["leak_tables"] == {
        "probes": {"attribute": "_states", "how": "named"},
        "index": {"attribute": "_by_request", "how": "shape"},
        "batch": {"attribute": "_pending", "how": "shape"},
        "results": {"attribute": "_done", "how": "shape"},
        "reason": None,
    }


def test_tables_none_turns_the_leak_check_off(capsys: pytest.CaptureFixture[str]) -> None:
    """--tables none: the leak is not looked for, and the line says it was asked so."""
    code, out, _ = _fuzz(capsys, "--impl", LEAKY, "--tables", "none", "--examples", "2",
                         "--seed", "0")
    assert code == 0
    assert "leak check (properties 4, 5): OFF (--tables none)" in out


@pytest.mark.parametrize(("tables", "named"), [
    ("probes=_statez", "_statez"),
    ("index=_by_request,batch=_book.pending", "_book.pending"),
])
def test_unknown_table_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], tables: str, named: str
) -> None:
    """A --tables attribute the class lacks exits 2 with one line naming it."""
    code, _, err = _fuzz(capsys, "--impl", OWN, "--tables", tables)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert f"has no attribute {named}" in err and "_states" in err


@pytest.mark.parametrize("tables", ["probe=_states", "probes", "probes=not a name"])
def test_malformed_tables_exit_2(capsys: pytest.CaptureFixture[str], tables: str) -> None:
    """A --tables item that is no ROLE=ATTRIBUTE exits 2 with one line saying so."""
    code, _, err = _fuzz(capsys, "--impl", OWN, "--tables", tables)
    assert code == 2
    assert err.startswith("asynclookup fuzz: --tables") and len(err.strip().splitlines()) == 1


def test_tables_kept_one_level_down_are_found(outside: Path) -> None:
    """Tables on an attribute object (self._book.states) are found by shape by path, and a
    leak of the request index there is property 4."""
    module = write_module(outside, "user_bookkept", NESTED)
    used = tables_used(f"{module}:Bookkept")
    assert [t.path for t in used.tables] == ["_book.states", "_book.by_request", "_book.pending"]
    error = _kill(f"{module}:BookkeptKeepsIndex")
    assert error is not None and error.violation.number == 4, str(error)
    assert "_book.by_request=" in error.violation.detail


def test_a_guessed_table_is_held_only_while_it_names_a_key_or_request(outside: Path) -> None:
    """A slot array found by shape (it held the key after lookup, and after a drain: a
    list of keys, so a probe table) that keeps a freed slot's None is no leak: a table
    the oracle only guessed counts as held while it mentions a key or request id of the
    run, not for being non-empty.  The same array keeping the keys is still property 5,
    naming it."""
    module = write_module(outside, "user_slotted", SLOTTED)
    used = tables_used(f"{module}:Slotted")
    assert Table("probes", "_slot_keys", named=False) in used.tables
    assert first_violation(f"{module}:Slotted", seed=0, examples=EXAMPLES) is None
    error = _kill(f"{module}:SlottedKeepsKeys")
    assert error is not None and error.violation.number == 5, str(error)
    assert "_slot_keys=" in error.violation.detail


def test_a_history_bounded_by_maxlen_is_no_table(outside: Path) -> None:
    """A deque with a maxlen that keeps the last lookups (keys and request ids) is not
    taken for a table by its shape: it cannot grow without bound, so it is no leak, and a
    correct class keeping one passes.  The same history kept in a plain list, which
    grows for ever, is still found and reported, naming it."""
    module = write_module(outside, "user_history", HISTORY)
    used = tables_used(f"{module}:RecentLookups")
    assert [t.path for t in used.tables] == ["_states", "_by_request", "_pending"]
    assert first_violation(f"{module}:RecentLookups", seed=0, examples=EXAMPLES) is None
    assert "_recent" in [t.path for t in tables_used(f"{module}:EveryLookup").tables]
    error = _kill(f"{module}:EveryLookup")
    assert error is not None and error.violation.number in (4, 5), str(error)
    assert "_recent=" in error.violation.detail


def test_sharded_tables_are_found_with_their_roles(outside: Path) -> None:
    """A probe table and an index each split into a list of dicts (shards) are found as the
    probes and the index, and a batch grouped by request (a mapping by request id, as an
    index looks before a flush) as the batch, because a flush empties it.  A request
    left in an index shard is then property 4, naming the shards."""
    used = tables_used(SHARDED)
    assert used.tables == (
        Table("probes", "_shards", named=False), Table("index", "_index_shards", named=False),
        Table("batch", "_batch", named=False),
    )
    module = write_module(outside, "user_sharded", SHARDED_LEAKY)
    error = _kill(f"{module}:ShardedKeepsIndex")
    assert error is not None and error.violation.number == 4, str(error)
    assert "_index_shards=" in error.violation.detail


def test_list_shaped_tables_are_read_by_what_they_hold_after_a_drain(outside: Path) -> None:
    """Tables kept as sorted lists (no mapping) all hold the key after lookup, as a batch
    does; after the flush, the tier's answer and a drain, the list of keys itself is the
    probe table and the list of (request, key) pairs the index, while the batch is empty.
    A request left in that index is then property 4, naming it (it was 5, the index
    taken for a batch)."""
    used = tables_used(SORTED)
    assert used.tables == (
        Table("probes", "_keys", named=False), Table("index", "_index", named=False),
        Table("batch", "_batch", named=False),
    )
    module = write_module(outside, "user_sorted", SORTED_LEAKY)
    error = _kill(f"{module}:SortedKeepsIndex")
    assert error is not None and error.violation.number == 4, str(error)
    assert "_index=" in error.violation.detail


def test_named_tables_holding_only_empty_shards_hold_nothing() -> None:
    """Named tables must hold nothing when the spec holds nothing: a list of empty shards
    holds nothing (it is not an empty list, and was property 4 at the first call)."""
    assert first_violation(impl_spec(SHARDED, tables=SHARDED_NAMED), seed=0,
                           examples=EXAMPLES) is None


SQLITE = textwrap.dedent('''
    from tests.strangers.sqlite_tables import SqliteTablesManager


    class SqliteNamed(SqliteTablesManager):
        """The SQLite stranger, with methods that read its tables out as Python values."""

        def probe_rows(self):
            with self._lock:
                rows = self._db.execute("SELECT key, generation, phase FROM probes").fetchall()
            return {key: (generation, phase) for key, generation, phase in rows}

        def index_rows(self):
            with self._lock:
                rows = self._db.execute("SELECT request_id, key FROM requesters").fetchall()
            index = {}
            for request, key in rows:
                index.setdefault(request, []).append(key)
            return index

        def batch_rows(self):
            with self._lock:
                return self._db.execute("SELECT key, request_id FROM batch").fetchall()

        def broken_rows(self):
            raise RuntimeError("no such table")


    class SqliteKeepsIndex(SqliteNamed):
        """Keeps a second index, a table of (request, key) rows that lookup fills and
        cleanup never empties: its own leak, seen only in that table."""

        def lookup(self, key, req_context):
            verdict = super().lookup(key, req_context)
            with self._lock:
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS seen (request_id TEXT, key BLOB)")
                self._db.execute(
                    "INSERT INTO seen VALUES (?, ?)", (req_context.req_id, key))
            return verdict

        def index_rows(self):
            with self._lock:
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS seen (request_id TEXT, key BLOB)")
                rows = self._db.execute("SELECT request_id, key FROM seen").fetchall()
            index = {}
            for request, key in rows:
                index.setdefault(request, []).append(key)
            return index
''')
SQLITE_TABLES = "probes=probe_rows(),index=index_rows(),batch=batch_rows()"


def test_tables_read_by_a_method_turn_the_leak_check_on(
    outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A class whose tables are no Python collections (rows of an in-memory SQLite
    database) has the leak check off; naming a method of it that returns each table
    (``--tables index=index_rows()``) turns it on: the class passes, and a second
    index the class never empties is property 4, naming the method.  A method that raises,
    or one named for the results queue, exits 2 with one line."""
    module = write_module(outside, "user_sqlite", SQLITE)
    assert not tables_used(f"{module}:SqliteNamed").leak_check
    named = impl_spec(f"{module}:SqliteNamed", tables=SQLITE_TABLES)
    assert tables_used(named).leak_check
    assert first_violation(named, seed=0, examples=EXAMPLES) is None
    error = _kill(impl_spec(f"{module}:SqliteKeepsIndex", tables=SQLITE_TABLES))
    assert error is not None and error.violation.number == 4, str(error)
    assert "index_rows()=" in error.violation.detail
    for tables, said in (("probes=broken_rows()", "calling it raised RuntimeError"),
                         ("results=rows()", "is not an attribute name")):
        code, _, err = _fuzz(capsys, "--impl", f"{module}:SqliteNamed", "--tables", tables)
        assert code == 2 and len(err.strip().splitlines()) == 1 and said in err, err
