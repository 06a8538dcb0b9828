"""The oracle's machines as pytest test cases, for pytest-xdist and HypoFuzz campaigns.

Not collected by the plain suite (the name does not start with ``test_``):
``tests/test_conformance_campaign_tools.py`` names this file on the command line of
``pytest -n 2`` and of ``hypothesis fuzz``, as a maintainer names their own.

Each class is ``machine_class(FuzzConfig(...)).TestCase``, the Hypothesis
convention; ``FuzzConfig`` is the one ``asynclookup fuzz`` builds from the same
options, so the machine's name, and with it the example database's key, is the
one ``asynclookup fuzz --target ... --db ...`` reads.

``ASYNCLOOKUP_FUZZ_DB`` (a directory or a ``redis://`` URL, as ``--db`` takes)
becomes the database of the default settings profile before the classes are
made.  HypoFuzz requires that: it fuzzes only tests whose database is the
default profile's, and it writes its failures where Hypothesis's reuse phase
reads them, so a plain ``asynclookup fuzz --db`` run replays them at once.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

from asynclookup.conformance.campaign import open_database
from asynclookup.conformance.machine import FuzzConfig, machine_class
from asynclookup.conformance.targets.target import FuzzTarget

SEEDED_BUG = "tests.mutants_reference:FlushWithoutRevalidation"  # property 1, the seed
QUICK_BUG = "tests.mutants_reference:MarkMissOnPending"  # property 3, found in ~10 examples

_where = os.environ.get("ASYNCLOOKUP_FUZZ_DB")
settings.register_profile(
    "asynclookup-campaign",
    database=open_database(_where) if _where else None,
    # not the "ci" profile's derandomize, which Hypothesis loads when CI is set: a
    # derandomized test saves nothing, and HypoFuzz does not fuzz it
    derandomize=False,
    deadline=None,
    # every check but nested_given: HypoFuzz skips a test that suppresses that one
    suppress_health_check=[c for c in HealthCheck if c is not HealthCheck.nested_given],
    max_examples=int(os.environ.get("ASYNCLOOKUP_FUZZ_EXAMPLES", "100")),
    stateful_step_count=50,  # as asynclookup fuzz
    # no Hypothesis shrinking, as in asynclookup fuzz: the failure is saved as found,
    # and the oracle's own shrinker (asynclookup fuzz --db) shrinks it on replay
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
settings.load_profile("asynclookup-campaign")

TestReference = machine_class(FuzzConfig()).TestCase
# the reference conforms: a few examples say it runs clean here, the bugs get the budget
TestReference.settings = settings(max_examples=10)  # the profile's database and the rest
TestFlushWithoutRevalidation = machine_class(
    FuzzConfig(target=FuzzTarget.parse(SEEDED_BUG))).TestCase
TestMarkMissOnPending = machine_class(FuzzConfig(target=FuzzTarget.parse(QUICK_BUG))).TestCase
