"""The JSON Schema of the trace format, derived from ``asynclookup.trace.format.EVENTS``.

asynclookup/trace/trace.schema.json is ``schema_text()``; regenerate it with
``python -m asynclookup.trace.schema > asynclookup/trace/trace.schema.json`` (a test checks that
the shipped file is current).  The schema states the shape of each line; the
rules it cannot state (seq order, the header on line 1 only, pairing, answer
lengths) are in docs/trace-format.md and in the parser.
"""

from __future__ import annotations

import json
from typing import Any

from asynclookup.trace.format import EVENTS, FAILURE_KINDS, FORMAT, VERSION

_SCHEMA_TYPES: dict[str, dict[str, Any]] = {
    "key": {"type": "string", "pattern": "^([0-9a-fA-F]{2})*$"},
    "keys": {"type": "array", "items": {"$ref": "#/$defs/key"}},
    "str": {"type": "string"},
    "strs": {"type": "array", "items": {"type": "string"}},
    "int": {"type": "integer", "minimum": 0},
    "bool": {"type": "boolean"},
    "verdict": {"type": ["boolean", "null"]},
    "error": {"type": ["string", "null"]},
    "answers": {"type": "array", "items": {"type": "boolean"}},
    "failure": {
        "type": "object",
        "required": ["kind"],
        "properties": {
            "kind": {"enum": list(FAILURE_KINDS)},
            "error": {"type": "string"},
            "items": {"type": "array", "items": {"type": ["boolean", "string"]}},
        },
        "additionalProperties": False,
    },
    "entries": {
        "type": "array",
        "items": {
            "type": "array", "minItems": 3, "maxItems": 3,
            "prefixItems": [{"$ref": "#/$defs/key"}, {"type": "string"}, {"$ref": "#/$defs/int"}],
        },
    },
    "results": {
        "type": "array",
        "items": {
            "type": "array", "minItems": 3, "maxItems": 3,
            "prefixItems": [{"$ref": "#/$defs/key"}, {"$ref": "#/$defs/int"}, {"type": "boolean"}],
        },
    },
}


def build_schema() -> dict[str, Any]:
    """The JSON Schema of one line (asynclookup/trace/trace.schema.json is this, pretty-printed).

    Rules that a schema cannot state (seq order, the header on line 1 only,
    pairing, answer lengths) are in docs/trace-format.md and in the parser.
    """
    defs: dict[str, Any] = {name: dict(schema) for name, schema in _SCHEMA_TYPES.items()}
    defs["header"] = {
        "type": "object",
        "required": ["format", "version", "recorder", "worker_steps"],
        "properties": {
            "format": {"const": FORMAT},
            "version": {"const": VERSION},
            "recorder": {"type": "string", "minLength": 1},
            "worker_steps": {"type": "boolean"},
            "meta": {"type": "object"},
        },
        "additionalProperties": False,
    }
    kinds = []
    for kind, fields in EVENTS.items():
        schema: dict[str, Any] = {
            "type": "object",
            "required": ["seq", "event", "thread"] + [f.name for f in fields if f.required],
            "properties": {
                "seq": {"$ref": "#/$defs/int"},
                "event": {"const": kind},
                "thread": {"type": "string"},
            }
            | {f.name: {"$ref": f"#/$defs/{f.type}"} for f in fields},
            "additionalProperties": False,
        }
        if kind == "tier_call_finished":
            schema["oneOf"] = [{"required": ["answers"]}, {"required": ["failure"]}]
        defs[f"event_{kind}"] = schema
        kinds.append({"$ref": f"#/$defs/event_{kind}"})
    defs["event"] = {"oneOf": kinds}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://asynclookup.invalid/trace/v{VERSION}.schema.json",
        "title": f"asynclookup trace, version {VERSION}: one JSON object per line",
        "description": "Line 1 is a header; every other line is an event.",
        "oneOf": [{"$ref": "#/$defs/header"}, {"$ref": "#/$defs/event"}],
        "$defs": defs,
    }


def schema_text() -> str:
    """``build_schema()`` as the text of asynclookup/trace/trace.schema.json."""
    return json.dumps(build_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
