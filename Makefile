# earthmem: the README's two commands are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
DATA ?= data
export DAGSTER_HOME ?= $(CURDIR)/$(DATA)/dagster_home

.PHONY: setup run test pytest ci-tests clients clients-test fuzz lint typecheck check bench bench-quick bench-prepare bench-large lock serve dagster clean

# pytest-xdist: one worker process per core (PYTEST_WORKERS=0: one process), each test module
# on one worker (its module fixtures are built once), the longest first; the session builds are
# shared by the workers (tests/conftest.py)
PYTEST_WORKERS ?= auto
PYTEST_DIST := --dist loadscope --no-loadscope-reorder
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) $(PYTEST_DIST)

$(BIN)/uv:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==0.13.9

$(BIN)/earthmem: pyproject.toml requirements.lock $(BIN)/uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $(BIN)/earthmem

# Bytecode is compiled once, here, for the installed packages (--compile-bytecode above) and for
# our own modules (compileall: only what changed). Where PYTHONDONTWRITEBYTECODE is set (as on
# our CI machines) Python never writes it itself, so without this every process the tests, the
# ingest and the servers start would compile every module it imports from source again.
setup: $(BIN)/earthmem  ## create .venv from the lock file
	$(BIN)/python -m compileall -q -j 0 store pipelines api cli tests bench

run: setup  ## build the demo sample area, ingest it through Dagster, answer example queries
	$(BIN)/python -m cli.demo --data $(DATA)

test: setup  ## lint, type-check and run the test suite (offline; outside clients if installed)
	$(BIN)/ruff check store pipelines api cli tests bench
	$(BIN)/ruff format --check store pipelines api cli tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not bench_smoke"

pytest: setup  ## the test suite without the outside clients (make clients-test runs those; make ci-tests both)
	$(BIN)/pytest -q $(PYTEST_PARALLEL) --durations=15 -m "not clients and not fuzz and not bench_smoke"

CLIENTS := tests/clients
EARTHMEM_FUZZ_SECONDS ?= 900
CI_FUZZ_SECONDS ?= 120

# One pytest-xdist run of the suite and the outside clients: the workers share out both (run
# separately, one worker idled at the end of each); schemathesis gets CI_FUZZ_SECONDS in all.
# Two workers a core: the suite waits on the servers, clients and subprocesses it starts for
# much of its time. All its processes together used 1,036 CPU-s (user + sys) in a 2-worker run,
# against 2 x 1,053 s of worker time in the last quiet 2-worker CI: a core was idle about half
# the time.
CI_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
ci-tests: setup clients  ## what .ci/run runs: the test suite and the outside clients against live servers
	EARTHMEM_FUZZ_SECONDS=$(CI_FUZZ_SECONDS) $(BIN)/pytest -q -n $(CI_WORKERS) $(PYTEST_DIST) --durations=25 -m "not bench_smoke and not client_matrix"

$(CLIENTS)/node_modules/.package-lock.json: $(CLIENTS)/package.json $(CLIENTS)/package-lock.json
	cd $(CLIENTS) && npm ci --no-audit --no-fund

clients: $(CLIENTS)/node_modules/.package-lock.json  ## install the pinned outside clients (MCP Inspector CLIs, node 22)

clients-test: setup clients  ## the outside clients against a live server: Inspector CLI over stdio/HTTP, schemathesis
	EARTHMEM_FUZZ_SECONDS=$(EARTHMEM_FUZZ_SECONDS) $(BIN)/pytest -v -rA $(PYTEST_PARALLEL) -m "clients or fuzz" $(CLIENTS)

fuzz: setup  ## a longer schemathesis run (EARTHMEM_FUZZ_SECONDS, default 900) against a live server
	EARTHMEM_FUZZ_SECONDS=$(EARTHMEM_FUZZ_SECONDS) $(BIN)/pytest -v -rA -s -m fuzz $(CLIENTS)

lint: setup
	$(BIN)/ruff check store pipelines api cli tests bench
	$(BIN)/ruff format --check store pipelines api cli tests bench

typecheck: setup
	$(BIN)/mypy

bench: setup  ## run every benchmark and write bench/RESULTS.md
	$(BIN)/python -m bench.run

# The smoke run of every bench (minutes of CPU) is left out of `make test` and CI to keep CI short.
bench-quick: setup  ## every bench's --quick variant runs and reports its rows (tests/bench, bench_smoke)
	$(BIN)/pytest -q -p no:cacheprovider -m bench_smoke tests/bench

bench-prepare: setup  ## build what the default bench caches (demo area, the ingest bench's 1,000-scene store), once
	$(BIN)/python -m bench.bench_ingest --prepare

bench-large: setup  ## the large benches (recall at 10^6 items on SQLite) -> bench/RESULTS-large.md
	$(BIN)/python -m bench.run --large

lock: $(BIN)/uv  ## re-resolve requirements.lock from pyproject.toml
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra bench --python-version 3.11 -o requirements.lock

serve: setup
	$(BIN)/earthmem serve --data $(DATA)

dagster: setup  ## the Dagster UI on http://127.0.0.1:3000 (Ctrl-C or SIGTERM stops all of it)
	exec deploy/dagster-dev.sh $(BIN) $(CURDIR)/$(DATA)

clean:
	rm -rf $(DATA) .pytest_cache .mypy_cache .ruff_cache
