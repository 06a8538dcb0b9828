"""The ``msgspec`` parser (the ``fast`` extra): each common event line decoded and typed at once.

Theory of operation
-------------------
``STRUCTS`` are msgspec Structs made from ``asynclookup.trace.format.EVENTS``,
one per kind that the check's inner loop takes inline
(``asynclookup.trace.hot.TYPED``), tagged by ``event``, with no unknown
field: ``seq`` an integer >= 0, ``thread`` a string, and each field typed as
the table says (strings, integers >= 0, booleans, lists and triples of
them).  The fields that only the exact judge reads (``error``, ``failure``)
are left out, so a line that has one is rejected here; a tier call's
``answers`` is required, since a ``failure`` is not taken.  What msgspec
cannot say is left to the loop: that a key is hex (it looks keys up in the
reader's cache of validated keys) and that the answers fit the keys.

``decode_block`` decodes each line of a block alone: a line msgspec rejects
(any other kind or shape, a malformed line) is None, and the loop decodes it
again with ``json.loads`` and judges it as the standard library's path does,
so a judgement never depends on the parser (tests/test_trace_reader.py).
msgspec reads JSON as ``json.loads`` does where both accept a line: a
repeated member keeps its last value, an integer of any size is an integer.

This module imports msgspec: it is loaded only when ``--parser msgspec``
asks for it (``asynclookup.trace.reader.loader``).
"""

from __future__ import annotations

from typing import Annotated, Any, Union

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from asynclookup.trace.format import EVENTS

Nat = Annotated[int, Meta(ge=0)]
TYPES: dict[str, Any] = {
    "key": str, "keys": list[str], "str": str, "strs": list[str], "int": Nat, "bool": bool,
    "verdict": Union[bool, None],  # noqa: UP007  (a runtime type for msgspec)
    "answers": list[bool], "entries": list[tuple[str, str, Nat]],
    "results": list[tuple[str, Nat, bool]],
}
SKIPPED = ("error", "failure")  # types only the exact judge reads: such a line is rejected
INLINE_KINDS = (
    "lookup_called", "lookup_returned", "result_applied", "result_stale", "result_orphaned",
    "flush", "drain", "cleanup", "take_batch", "post", "tier_call_started",
    "tier_call_finished",
)


class Event(Struct, tag_field="event", forbid_unknown_fields=True, gc=False):
    """The members every event line has (``event`` is the tag)."""

    seq: Nat
    thread: str


def _struct(kind: str) -> type[Event]:
    required: list[tuple[str, Any]] = []
    optional: list[tuple[str, Any, Any]] = []
    for field in EVENTS[kind]:
        if field.type in SKIPPED:
            continue
        if field.required or (kind, field.name) == ("tier_call_finished", "answers"):
            required.append((field.name, TYPES[field.type]))
        else:
            optional.append((field.name, Union[TYPES[field.type], UnsetType], UNSET))  # noqa: UP007
    made: type[Event] = msgspec.defstruct(  # type: ignore[assignment]
        "".join(part.title() for part in kind.split("_")), [*required, *optional],
        bases=(Event,), tag=kind, namespace={"kind": kind}, module=__name__,
    )
    return made


STRUCTS = {kind: _struct(kind) for kind in INLINE_KINDS}
_DECODER = msgspec.json.Decoder(Union[tuple(STRUCTS.values())])  # noqa: UP007


def decode_block(lines: list[bytes]) -> list[Any]:
    """Each line as its Struct, or None where msgspec rejects it (the general path judges)."""
    decode = _DECODER.decode
    out: list[Any] = []
    for raw in lines:
        try:
            out.append(decode(raw))
        except msgspec.DecodeError:  # ValidationError too
            out.append(None)
    return out
