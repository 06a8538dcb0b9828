"""The docs cannot rot: generated blocks are current, examples run, links resolve.

Three checks, each with a planted failure that proves it can fail:
- ``docgen.generate --check``: every generated block of docs/*.md and README.md is
  what the code produces now (counterexamples, predicate lists, diagrams);
- ``tests.doc_examples``: every runnable example of docs/*.md and README.md runs;
- relative links and their anchors resolve.
It also pins what the prose says about generated facts, and that each
counterexample of docs/properties.md is a real run of its broken variant.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import pytest

from asynclookup.cli import parser as cli_parser
from asynclookup.modelcheck.search import TraceStep
from asynclookup.spec.core import INITIAL, step
from asynclookup.spec.properties import ALWAYS
from docgen import generate as docgen
from docgen.diagrams import SCENARIOS, DiagramError, Scenario, probe_transitions, run
from tests.doc_examples import Block, ExampleError, blocks, run_file

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = docgen.doc_files(ROOT)
PROPERTIES = ROOT / "docs" / "properties.md"
NUMBER_OF = {p.name: p.number for p in ALWAYS} | {"progress_quiescence_reachable": 6}


# -- generated blocks ----------------------------------------------------------------


def test_generated_blocks_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    """Every generated block of the committed docs equals what the code produces now."""
    code = docgen.main(["--check", *map(str, DOC_FILES)])
    assert code == 0, capsys.readouterr().out


def _plant(tmp_path: Path, old: str, new: str) -> Path:
    text = PROPERTIES.read_text(encoding="utf-8")
    assert old in text
    planted = tmp_path / "properties.md"
    planted.write_text(text.replace(old, new, 1), encoding="utf-8")
    return planted


def test_check_fails_on_a_planted_stale_counterexample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A counterexample edited by hand makes --check exit 1 naming its block."""
    planted = _plant(tmp_path, "    2. cleanup(A)\n", "    2. cleanup(B)\n")
    assert docgen.main(["--check", str(planted)]) == 1
    assert "'counterexample flush-no-revalidate'" in capsys.readouterr().out


def test_regenerating_repairs_a_planted_stale_block(tmp_path: Path) -> None:
    """Running the generator on a stale copy rewrites it to the committed text."""
    planted = _plant(tmp_path, "    2. cleanup(A)\n", "    2. cleanup(B)\n")
    assert docgen.main([str(planted)]) == 0
    assert planted.read_text(encoding="utf-8") == PROPERTIES.read_text(encoding="utf-8")


def test_a_marker_without_its_end_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A BEGIN GENERATED marker with no END exits 2 with one line on stderr."""
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- BEGIN GENERATED: variants -->\nno end\n", encoding="utf-8")
    assert docgen.main(["--check", str(doc)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_an_unknown_block_name_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A block name the generator does not know exits 2 naming it."""
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- BEGIN GENERATED: nonsense -->\n<!-- END GENERATED -->\n", "utf-8")
    assert docgen.main(["--check", str(doc)]) == 2
    assert "nonsense" in capsys.readouterr().err


def _sections() -> dict[int, str]:
    """Property number -> the variant whose counterexample its section shows."""
    text = PROPERTIES.read_text(encoding="utf-8")
    found: dict[int, str] = {}
    for part in re.split(r"^## (?=\d\. )", text, flags=re.MULTILINE)[1:]:
        names = re.findall(r"BEGIN GENERATED: counterexample (\S+) -->", part)
        assert len(names) == 1, part.splitlines()[0]
        found[int(part[0])] = names[0]
    return found


def test_every_property_has_a_counterexample_section() -> None:
    """docs/properties.md has a section with one counterexample for each of the nine."""
    assert sorted(_sections()) == list(range(1, 10))


@pytest.mark.parametrize("number", range(1, 10))
def test_each_counterexample_breaks_its_sections_property(number: int) -> None:
    """The variant shown under property N breaks N, first or in the same step."""
    violation = docgen.counterexample(_sections()[number])
    broken = {violation.number} | {NUMBER_OF[name] for name in violation.also}
    assert number in broken


@pytest.mark.parametrize("name", sorted(docgen.all_variants()))
def test_each_counterexample_is_a_real_run_of_its_variant(name: str) -> None:
    """Replaying the trace through the variant's own table reproduces every state."""
    violation = docgen.counterexample(name)
    table = docgen.all_variants()[name].table
    state = INITIAL
    for traced in violation.trace:
        after, output = step(state, traced.action, table)
        assert TraceStep(traced.action, output, after) == traced
        state = after


def test_the_stale_result_of_property_2_comes_from_mark_present() -> None:
    """The prose of property 2 says its counterexample's stale result is made by mark_present."""
    trace = docgen.counterexample("drain-no-generation-check").trace
    actions = [type(s.action).__name__ for s in trace]
    assert "MarkPresent" in actions and "Cleanup" not in actions


def test_the_oracle_report_in_the_index_is_the_one_its_prose_reads() -> None:
    """index.md explains a 4-call property-1 report whose last possible state has no probe."""
    report = docgen.render("oracle-seed")
    assert "VIOLATION (safety), 4 calls:" in report
    assert "\nproperty 1 (no cleaned-up entry is submitted): " in report
    assert "    probes {} " in report


def test_the_forced_mark_miss_of_property_3_hits_a_pending_probe() -> None:
    """The prose of property 3 says its counterexample forces a PENDING probe by mark_miss."""
    trace = docgen.counterexample("mark-miss-forces-resolved").trace
    before = trace[-2].state if len(trace) > 1 else INITIAL
    assert type(trace[-1].action).__name__ == "MarkMiss"
    assert all(p.phase.name == "PENDING" for _, p in before.probes)


# -- diagrams ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_race_diagram_is_a_run_of_the_spec(name: str) -> None:
    """Every scenario plays through the spec with every property kept."""
    assert len(run(SCENARIOS[name].actions)) == len(SCENARIOS[name].actions)


def test_a_scenario_with_a_disabled_action_is_rejected() -> None:
    """A scenario that is not a run of the spec (a post with nothing answered) raises."""
    from asynclookup.spec.core import Post

    with pytest.raises(DiagramError, match="step 1"):
        run(Scenario("planted", (Post(),)).actions)


MERMAID_LINE = re.compile(
    r"^(sequenceDiagram|stateDiagram-v2|flowchart \w+"
    r"|    participant \w+ as [^;#]+"
    r"|    \w+(->>|-->>|-\)|--x)\w+: [^;#]+"
    r"|    Note (over|right of) \w+: [^;#]+"
    r"|    (\[\*\]|\w+) --> (\[\*\]|\w+): [^;#:]+)$"
)


def test_generated_mermaid_uses_only_plain_statements() -> None:
    """Every line of a generated diagram is one simple statement, free of ';' and '#'."""
    bad = [
        line
        for name in [*(f"sequence {s}" for s in SCENARIOS), "probe-states"]
        for line in docgen.render(name).splitlines()[1:-1]
        if not MERMAID_LINE.match(line)
    ]
    assert bad == []


def test_no_cleanup_deletes_an_in_flight_probe_in_the_state_diagram() -> None:
    """The prose of protocol.md says no cleanup arrow leaves IN_FLIGHT."""
    arrows = probe_transitions()
    assert not any(
        start == "IN_FLIGHT" and "cleanup" in verbs for (start, _, _), verbs in arrows.items()
    )
    assert any(start == "IN_FLIGHT" for start, _, _ in arrows)


# -- examples ------------------------------------------------------------------------


# Blocks of pages this suite does not own that are fenced ```python but are not
# examples (a signature, or pseudo-code with names left undefined).  Each waits
# for its page's owner to fence it as ```text; then its entry must go, because
# test_pending_entries_still_name_failing_examples fails on it.
PENDING_OWNER_FIX: dict[tuple[str, str], str] = {}


def _pending(block: Block) -> bool:
    first = block.text.splitlines()[0] if block.text.strip() else ""
    return (block.path.name, first) in PENDING_OWNER_FIX


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.name)
def test_examples_run(path: Path, tmp_path: Path) -> None:
    """Every runnable example of this file runs and gives the exit codes it shows."""
    run_file(path, tmp_path, skip=_pending)


@pytest.mark.parametrize("entry", sorted(PENDING_OWNER_FIX), ids=lambda e: f"{e[0]}:{e[1][:20]}")
def test_pending_entries_still_name_failing_examples(
    entry: tuple[str, str], tmp_path: Path
) -> None:
    """Each skipped block still exists as a python block and still fails alone."""
    path = ROOT / "docs" / entry[0]
    found = [b for b in blocks(path) if b.lang == "python" and _pending(b) and
             b.text.splitlines()[0] == entry[1]]
    assert len(found) == 1, f"{entry} is fixed or gone: remove it from PENDING_OWNER_FIX"
    single = tmp_path / path.name
    single.write_text(f"```python\n{found[0].text}```\n", encoding="utf-8")
    with pytest.raises(ExampleError):
        run_file(single, tmp_path / "work")


def _doc(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "planted.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_broken_python_example_fails_naming_its_line(tmp_path: Path) -> None:
    """A python block that raises fails the runner with the file and fence line."""
    doc = _doc(tmp_path, "text\n\n```python\nx = 1\nassert x == 2\n```\n")
    with pytest.raises(ExampleError, match=r"planted\.md:3: python example failed"):
        run_file(doc, tmp_path / "work")


def test_a_doctest_with_the_wrong_output_fails(tmp_path: Path) -> None:
    """A >>> block whose shown output differs from the real one fails."""
    doc = _doc(tmp_path, "```python\n>>> 1 + 1\n3\n```\n")
    with pytest.raises(ExampleError, match="doctest example failed"):
        run_file(doc, tmp_path / "work")


def test_a_broken_cli_example_fails(tmp_path: Path) -> None:
    """An asynclookup line that exits 2 (bad input) fails the runner."""
    doc = _doc(tmp_path, "```sh\nasynclookup model-check --keys 0\n```\n")
    with pytest.raises(ExampleError, match=r"planted\.md:2: `asynclookup model-check --keys 0`"):
        run_file(doc, tmp_path / "work")


def test_a_cli_example_must_give_the_exit_code_it_shows(tmp_path: Path) -> None:
    """A line marked '# exit 1' that exits 0 fails the runner."""
    doc = _doc(tmp_path, "```sh\nasynclookup model-check --keys 1 --requests 1  # exit 1\n```\n")
    with pytest.raises(ExampleError, match="exited 0, expected 1"):
        run_file(doc, tmp_path / "work")


def test_text_blocks_and_other_commands_are_not_run(tmp_path: Path) -> None:
    """text blocks, make lines and bare fences are skipped: nothing runs."""
    text = "```text\nraise SystemExit(1)\n```\n```sh\nmake test\n```\n```\nboom(\n```\n"
    doc = _doc(tmp_path, text)
    assert run_file(doc, tmp_path / "work") == 0


def test_python_blocks_of_one_file_share_a_namespace(tmp_path: Path) -> None:
    """A later block of the same file sees the names an earlier block defined."""
    doc = _doc(tmp_path, "```python\nanswer = 42\n```\n\n```python\nassert answer == 42\n```\n")
    assert run_file(doc, tmp_path / "work") == 2


def test_each_file_starts_from_a_fresh_namespace(tmp_path: Path) -> None:
    """A name defined by one file's example is not visible to another file's."""
    first = tmp_path / "a.md"
    first.write_text("```python\nleaked = 1\n```\n", encoding="utf-8")
    second = tmp_path / "b.md"
    second.write_text("```python\nleaked\n```\n", encoding="utf-8")
    run_file(first, tmp_path / "work")
    with pytest.raises(ExampleError, match="NameError"):
        run_file(second, tmp_path / "work")


def test_a_file_block_is_written_for_later_examples_to_import(tmp_path: Path) -> None:
    """A ``file=NAME`` block is written, not run, and a later python block imports it."""
    text = ("```python file=planted_mod.py\nVALUE = 7\n```\n"
            "```python\nimport planted_mod\nassert planted_mod.VALUE == 7\n```\n")
    doc = _doc(tmp_path, text)
    assert run_file(doc, tmp_path / "work") == 2
    assert (tmp_path / "work" / "planted_mod.py").read_text() == "VALUE = 7\n"


def test_a_file_block_that_does_not_import_fails_its_user(tmp_path: Path) -> None:
    """A broken ``file=`` block fails the runner at the example that imports it."""
    text = ("```python file=planted_broken.py\nVALUE = (\n```\n"
            "```sh\nasynclookup fuzz --impl planted_broken:Manager\n```\n")
    doc = _doc(tmp_path, text)
    with pytest.raises(ExampleError, match="exited 2, expected 0"):
        run_file(doc, tmp_path / "work")


def test_an_unclosed_fence_is_reported(tmp_path: Path) -> None:
    """A code fence that is never closed is an error, not a silently skipped block."""
    with pytest.raises(ExampleError, match="never closed"):
        blocks(_doc(tmp_path, "```python\nx = 1\n"))


# -- links and the README --------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def broken_links(path: Path) -> list[str]:
    """The relative links of a markdown file whose file or heading does not exist."""
    bad = []
    code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            code = not code
        if code:
            continue
        for m in LINK.finditer(line):
            target = m["target"]
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                bad.append(target)
            elif anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", linked.read_text("utf-8"), re.MULTILINE)
                if anchor not in {_slug(h) for h in headings}:
                    bad.append(target)
    return bad


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.name)
def test_relative_links_resolve(path: Path) -> None:
    """Every relative link of this file names an existing file and heading."""
    assert broken_links(path) == []


def test_a_planted_broken_link_is_found(tmp_path: Path) -> None:
    """A link to a missing file and one to a missing heading are both reported."""
    shutil.copy(PROPERTIES, tmp_path / "properties.md")
    doc = _doc(tmp_path, "[a](missing.md) [b](properties.md#no-such-heading) [c](properties.md)\n")
    assert broken_links(doc) == ["missing.md", "properties.md#no-such-heading"]


# Where docs are cited outside markdown links (in code, CLI output, docstrings and
# prose): a page's path under docs/, alone, with ``#anchor`` or with ``, "Section"``.
CITING_DIRS = ("asynclookup", "spec", "reference", "docs", "tests", "bench", "docgen")
CITING_SUFFIXES = (".py", ".pyi", ".md", ".c", ".json", ".toml")
CITED = re.compile(
    r"\bdocs/(?P<page>[\w.-]+\.md)"
    r"""(?:#(?P<anchor>[\w-]+)|,? \(?(?:"(?P<dq>[^"`]+)"|'(?P<sq>[^'`]+)'))?"""
)
OUTSIDE_BRIEF = re.compile(r"\bPROTOCOL\.md\b")


def citing_files() -> list[Path]:
    """Every file of the repository that may cite a doc: code, docs, tests, the README."""
    found = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for folder in CITING_DIRS:
        found += sorted(
            p for p in (ROOT / folder).rglob("*")
            if p.is_file() and p.suffix in CITING_SUFFIXES and "__pycache__" not in p.parts
        )
    return found


def _headings_and_leads(page: Path) -> list[str]:
    """The headings of a page and its bold leads (``**Asking again is harmless.**``)."""
    text = page.read_text("utf-8")
    return [*re.findall(r"^#+ (.*)$", text, re.MULTILINE),
            *re.findall(r"\*\*([^*\n]+?)\*\*", text)]


def broken_citations(path: Path, root: Path = ROOT) -> list[str]:
    """The citations of a page of docs/ in a file whose page, anchor or section is missing."""
    bad = []
    for m in CITED.finditer(path.read_text(encoding="utf-8")):
        page = root / "docs" / m["page"]
        cited = " ".join(m[0].split())
        if not page.exists():
            bad.append(cited)
            continue
        section = m["dq"] or m["sq"]
        if m["anchor"] and m["anchor"] not in {_slug(h) for h in _headings_and_leads(page)}:
            bad.append(cited)
        elif section:
            wanted = " ".join(section.split()).lower()
            if not any(wanted in " ".join(h.split()).lower() for h in _headings_and_leads(page)):
                bad.append(cited)
    return bad


def test_no_file_cites_the_brief_outside_the_repository() -> None:
    """No file cites the design brief's file, not in the repository (docs/protocol.md is)."""
    citing = [str(p.relative_to(ROOT)) for p in citing_files()
              if OUTSIDE_BRIEF.search(p.read_text(encoding="utf-8"))]
    assert citing == []


@pytest.mark.parametrize("path", citing_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_doc_paths_exist(path: Path) -> None:
    """Every page of docs/ this file cites exists, with the anchor or section it names."""
    assert broken_citations(path) == []


def test_a_planted_broken_citation_is_found(tmp_path: Path) -> None:
    """A missing page, a missing anchor and a missing section are reported; good ones not."""
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "protocol.md", tmp_path / "docs" / "protocol.md")
    d = "docs"  # the planted citations are built, so that this file cites no bad one
    code = tmp_path / "planted.py"
    code.write_text(
        f'"""See {d}/missing.md, {d}/protocol.md#no-such-heading and\n'
        f"{d}/protocol.md, 'No such section'; {d}/protocol.md#the-races,\n"
        f'{d}/protocol.md, "Asking again\nis harmless" and {d}/protocol.md are fine."""\n',
        encoding="utf-8",
    )
    assert broken_citations(code, tmp_path) == [
        f"{d}/missing.md",
        f"{d}/protocol.md#no-such-heading",
        f"{d}/protocol.md, 'No such section'",
    ]


def test_a_planted_citation_of_the_brief_is_found() -> None:
    """The brief's file name is caught in a docstring; docs/protocol.md is not."""
    brief = "PROTOCOL" + ".md"  # spelt in two parts, so that this file does not cite it
    assert OUTSIDE_BRIEF.search(f'"""the property of {brief}, number 6"""')
    assert not OUTSIDE_BRIEF.search('"""the property of docs/protocol.md"""')


# -- the synopsis of fuzz -------------------------------------------------------------


def _subcommand(name: str) -> argparse.ArgumentParser:
    """The parser of one ``asynclookup`` subcommand."""
    for action in cli_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise AssertionError("asynclookup has no subcommands")


def synopsis_problems(text: str, command: argparse.ArgumentParser) -> list[str]:
    """How a synopsis differs from the parser: options missing or unknown, other choices."""
    shown = dict(re.findall(r"(--[\w-]+)(?: ([\w|]+\|[\w|]+))?", text))
    options = {s: a for a in command._actions for s in a.option_strings if s.startswith("--")}
    options.pop("--help")
    problems = [f"{o} is not in the synopsis" for o in sorted(set(options) - set(shown))]
    problems += [f"{o} is not an option" for o in sorted(set(shown) - set(options))]
    for option, action in sorted(options.items()):
        listed = shown.get(option)
        if action.choices is not None and listed and listed.split("|") != list(action.choices):
            problems.append(f"{option} shows {listed}, its choices are {list(action.choices)}")
    return problems


def _fuzz_synopsis() -> str:
    text = (ROOT / "docs" / "oracle.md").read_text("utf-8")
    section = text[text.index("## Running it\n"):]
    return section[section.index("```text\n"):section.index("\n```\n")]


def test_the_fuzz_synopsis_names_every_option() -> None:
    """docs/oracle.md's synopsis of fuzz names every option of its parser, with its choices."""
    assert synopsis_problems(_fuzz_synopsis(), _subcommand("fuzz")) == []


def test_a_planted_stale_synopsis_is_found() -> None:
    """An option left out, one that does not exist and a wrong choice are each reported."""
    planted = (_fuzz_synopsis().replace(" [--json]", " [--no-such-option]")
               .replace("stepped|threaded", "stepped|threaded|eager"))
    assert synopsis_problems(planted, _subcommand("fuzz")) == [
        "--json is not in the synopsis",
        "--no-such-option is not an option",
        "--mode shows stepped|threaded|eager, its choices are ['stepped', 'threaded']",
    ]


def _subcommands() -> list[str]:
    return [a for action in cli_parser()._actions
            if isinstance(action, argparse._SubParsersAction) for a in action.choices]


MARKUP = re.compile(r"``|:[a-z]+:`")  # reStructuredText: ``literal``, :role:`target`


def test_the_markup_pattern_finds_literals_and_roles() -> None:
    """The pattern the help test uses finds a ``literal`` and a :role:, not plain text."""
    assert MARKUP.findall("the ``asynclookup`` command, :func:`main`") == ["``", "``", ":func:`"]
    assert MARKUP.findall("asynclookup fuzz: 10:30, `--impl`") == []


@pytest.mark.parametrize("command", ["", *_subcommands()])
def test_help_shows_no_docstring_markup(command: str) -> None:
    """``asynclookup [COMMAND] --help`` is plain text: no ``literal`` or :role: markup."""
    shown = (_subcommand(command) if command else cli_parser()).format_help()
    assert MARKUP.findall(shown) == []


def test_readme_first_screen_says_what_it_is_and_how_to_start() -> None:
    """The README's first 25 lines name the project and both set-up commands."""
    first_screen = " ".join(
        " ".join((ROOT / "README.md").read_text("utf-8").splitlines()[:25]).split()
    )
    assert "async lookup protocol" in first_screen
    assert "make fuzz" in first_screen and "make test" in first_screen


def test_readme_says_ci_runs_make_test() -> None:
    """The README says .ci/run runs make test, and .ci/run does."""
    assert ".ci/run" in (ROOT / "README.md").read_text("utf-8")
    assert "make test" in (ROOT / ".ci" / "run").read_text("utf-8")
