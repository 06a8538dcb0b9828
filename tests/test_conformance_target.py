"""The target of a fuzz run as one frozen value, with one text form.

``FuzzTarget`` is what the machine, the driver, the shrinker and the campaign's
workers hold; ``str()`` and ``FuzzTarget.parse`` are the only way it becomes
text and back (the CLI, replay files), and they are each other's inverse for
every target, options included.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asynclookup.conformance.machine import FuzzConfig
from asynclookup.conformance.targets.shape import METHODS, ROLES, Shape
from asynclookup.conformance.targets.target import REFERENCE, FuzzTarget

NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
PATHS = st.lists(NAMES, min_size=1, max_size=3).map(".".join)
LITERALS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=6,
)


@st.composite
def shapes(draw: st.DrawFn) -> Shape:
    """Any shape the options can say: renamed calls, tables, constructor arguments."""
    renamed = draw(st.lists(st.sampled_from(METHODS), unique=True, max_size=3))
    new_names = draw(st.lists(NAMES.map(lambda n: f"my_{n}"), min_size=len(renamed),
                              max_size=len(renamed), unique=True))
    pairs = zip(renamed, new_names, strict=True)
    methods = tuple(sorted(pairs, key=lambda kv: METHODS.index(kv[0])))
    roles = draw(st.lists(st.sampled_from(ROLES), unique=True, max_size=4))
    tables = tuple(sorted(((r, draw(PATHS)) for r in roles), key=lambda kv: ROLES.index(kv[0])))
    args = draw(st.dictionaries(NAMES.filter(lambda n: n != "tier_type"), LITERALS, max_size=3))
    return Shape(
        methods=methods,
        cleanup_arg=draw(st.sampled_from((None, "id", "context"))),
        verdicts=draw(st.none() | st.builds(lambda m, f: f"{m}:{f}", PATHS, NAMES)),
        tables=tables,
        args=tuple(sorted((k, repr(v)) for k, v in args.items())),
        drain_before_lookup=draw(st.booleans()),
    )


TARGETS = st.one_of(
    st.just(REFERENCE),
    st.builds(FuzzTarget, st.just("target"), PATHS, NAMES),
    st.builds(FuzzTarget, st.just("impl"), PATHS, NAMES, shapes()),
)


@given(TARGETS)
def test_text_and_back_is_the_same_target(target: FuzzTarget) -> None:
    """parse(str(target)) is target, whatever its options (literals with ';' and ',' too)."""
    assert FuzzTarget.parse(str(target)) == target


@given(TARGETS)
def test_a_target_survives_pickling_to_a_worker(target: FuzzTarget) -> None:
    """The campaign's worker processes get the value itself, pickled."""
    assert pickle.loads(pickle.dumps(target)) == target


def test_the_text_reads_as_the_options_say() -> None:
    """The text of an impl target is ``impl:MODULE:CLASS`` then its options, in a fixed order."""
    target = FuzzTarget.impl(
        "mypkg.lookup:Manager", methods="mark_miss=invalidate,cleanup=none",
        args={"n_lookup_threads": 1, "name": "a;b"}, drain_before_lookup=True,
    )
    assert str(target) == (
        "impl:mypkg.lookup:Manager;method=cleanup=none,mark_miss=invalidate;"
        "args=n_lookup_threads=1,name='a;b';drain-before-lookup"
    )
    assert target.shape.constructor_kwargs() == {"n_lookup_threads": 1, "name": "a;b"}


def test_options_given_override_those_in_the_text() -> None:
    """``FuzzTarget.impl`` merges: options given replace those of the text, others stay."""
    base = FuzzTarget.impl("m:C", cleanup_arg="context", tables="probes=_s")
    merged = FuzzTarget.impl(str(base), tables="probes=_t")
    assert merged.cleanup_arg == "context" and merged.tables == (("probes", "_t"),)


@pytest.mark.parametrize(("text", "said"), [
    ("no-colon", "--target must be 'reference' or MODULE:ATTRIBUTE, got 'no-colon'"),
    ("impl:nocolon", "--impl must be MODULE:CLASS"),
    ("impl:m:C;colour=red", "unknown option 'colour=red'"),
    ("impl:m:C;drain-before-lookup=yes", "unknown option"),
    ("impl:m:C;args=n=1;args=n=2", "option args given twice"),
    ("impl:m:C;args=n=foo", "foo is not a Python literal (a string is quoted: n='foo')"),
    ("impl:m:C;method=lookup=none", "lookup is required, it cannot be none"),
])
def test_bad_text_is_one_line_naming_what_is_wrong(text: str, said: str) -> None:
    """Text that names no target is a ValueError whose one line says what is wrong."""
    with pytest.raises(ValueError, match=None) as raised:
        FuzzTarget.parse(text)
    assert said in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_config_holds_the_value() -> None:
    """A FuzzConfig holds the target itself; its tag (the example database's key) is
    made from the target's text."""
    target = FuzzTarget.impl("tests.shapes.sized:SizedPool", args={"n_lookup_threads": 2})
    config = FuzzConfig(target=target, mode="threaded")
    assert config.target is target
    assert "n_lookup_threads=2" in config.tag
