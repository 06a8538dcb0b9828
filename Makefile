# The two entry points of the README: `make fuzz` (the main job) and `make test`.
# Both create .venv when it is missing and install into it what they need:
# fuzz the package alone (its one dependency is Hypothesis), test, lint,
# typecheck, crosshair and bench the dev extras too.  Each install leaves a stamp.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# HypoFuzz's own venv (pyproject.toml's hypofuzz extra says why it is separate)
HYPOFUZZ_VENV ?= .venv-hypofuzz

.PHONY: install install-run hypofuzz-env fuzz test lint typecheck crosshair bench clean

# The package alone: what `make fuzz` runs.
$(BIN)/.installed-run: pyproject.toml asynclookup/modelcheck/_cvisited.c  # the C kernel is built at install
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# The package and the dev extras (pytest, mypy, ruff, CrossHair, xdist, redis):
# everything else.  It holds the package too, so it stamps both.
$(BIN)/.installed: pyproject.toml asynclookup/modelcheck/_cvisited.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@ $(BIN)/.installed-run

install-run: $(BIN)/.installed-run

install: $(BIN)/.installed

$(HYPOFUZZ_VENV)/.installed: pyproject.toml
	test -x $(HYPOFUZZ_VENV)/bin/python || $(PYTHON) -m venv $(HYPOFUZZ_VENV)
	$(HYPOFUZZ_VENV)/bin/python -m pip install -q --upgrade pip
	$(HYPOFUZZ_VENV)/bin/python -m pip install -q -e '.[hypofuzz]'
	touch $@

hypofuzz-env: $(HYPOFUZZ_VENV)/.installed

fuzz: install-run
	$(BIN)/asynclookup model-check --keys 1 --requests 2
	$(BIN)/asynclookup model-check --keys 2 --requests 1
	$(BIN)/asynclookup fuzz --mode stepped --examples 300
	$(BIN)/asynclookup fuzz --mode threaded --examples 150
	$(BIN)/asynclookup fuzz --tier fs --examples 60

lint: install
	$(BIN)/ruff check asynclookup docgen tests bench

typecheck: install
	$(BIN)/mypy --strict asynclookup docgen tests bench

test: install hypofuzz-env
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup  # two workers (the two cores); a module marked xdist_group stays on one
	$(MAKE) --no-print-directory typecheck lint

crosshair: install
	$(BIN)/python -m pytest -q tests/test_spec_crosshair.py

# The quick benchmarks; docs/benchmarks.md gives every command and its figures.
bench: install
	$(BIN)/python bench/manager.py
	$(BIN)/python bench/tiers.py

clean:
	rm -rf $(VENV) $(HYPOFUZZ_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
