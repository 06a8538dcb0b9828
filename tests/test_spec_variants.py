"""The broken variants of ``asynclookup.spec.variants``: each is a model-check target of the CLI.

``tests/test_modelcheck_search.py`` shows the checker finds every variant; this module
pins that the three of ours (not shipped) are variants like the others, so
``asynclookup model-check --variant NAME`` accepts them and exits 1.
"""

from __future__ import annotations

import pytest

from asynclookup import cli
from asynclookup.spec.variants import VARIANTS

OURS = sorted(name for name, variant in VARIANTS.items() if not variant.shipped)
SMALL = ["--keys", "2", "--requests", "2", "--batch-entries", "2", "--queued-batches", "1",
         "--posted-results", "2"]


def test_three_variants_are_ours() -> None:
    """The variants not shipped are the three for properties 4, 5 and 9."""
    assert OURS == ["cleanup-keeps-orphans", "cleanup-keeps-requester", "wrong-request-context"]
    assert sorted(n for name in OURS for n in VARIANTS[name].breaks) == [4, 5, 9]


@pytest.mark.parametrize("name", OURS)
def test_model_check_finds_a_variant_of_ours(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """model-check --variant accepts a variant of ours and exits 1 naming the property it breaks."""
    code = cli.main(["model-check", "--variant", name, *SMALL])
    out, err = capsys.readouterr()
    (number,) = VARIANTS[name].breaks
    assert code == 1 and err == "", err
    assert f"VIOLATION of property {number} " in out


def test_model_check_rejects_an_unknown_variant(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown variant name exits 2 with one line that lists the known ones."""
    code = cli.main(["model-check", "--variant", "no-such-variant"])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--variant" in err and all(name in err for name in VARIANTS)
