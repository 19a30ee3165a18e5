# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help demo test check fmt bench perf recall clean install lock mutate exam screenshot

# `make help` lists every target with the `##` note on its line.
help: ## this list
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)$$/  \1\t\2/' | expand -t 12

# Installs come from the lock (requirements/*.txt: exact versions with hashes), so a fresh clone
# gets what the last green run had; the ranges in pyproject.toml say what the code supports.
# The pip a new venv comes with installs uv from its own lock (requirements/uv.txt), and uv
# installs the lock as it is: every dependency is in it, so no resolver runs (--no-deps), and
# `uv pip check` says whether anything a package needs is missing. uv fetches and installs in
# parallel: about 5 s against pip's 28 s here, most of a fresh clone's install. It compiles the
# bytecode as pip does (--compile-bytecode): without it every process the suite starts compiled
# what it imported, and a fresh clone's suite took a minute longer.
# The installers run quiet (uv lists every package it installs); a line before each step says
# what is happening, so a fresh clone's minute is not a minute of silence.
UV_PIP = $(BIN)/uv pip install --python $(BIN)/python --quiet --no-deps --compile-bytecode
$(STAMP): pyproject.toml requirements/test.txt requirements/uv.txt
	@echo "install 1/4: a virtual environment in $(VENV)/"
	@$(PY) -m venv $(VENV)
	@echo "install 2/4: the installer, uv, from requirements/uv.txt"
	@$(BIN)/pip install --quiet --no-deps --require-hashes -r requirements/uv.txt
	@echo "install 3/4: $$(grep -c '^[A-Za-z0-9]' requirements/test.txt) locked packages from requirements/test.txt (a minute or so on a fresh clone)"
	@$(UV_PIP) --require-hashes -r requirements/test.txt
	@echo "install 4/4: memory_worker itself, then a check that nothing drifted from the lock"
	@$(UV_PIP) --no-build-isolation -e .
	@$(BIN)/uv pip check --python $(BIN)/python --quiet
	@$(BIN)/python requirements/verify.py requirements/test.txt
	@touch $(STAMP)
	@echo "installed: $(VENV)/ is ready"

install: $(STAMP) ## build .venv from the lock (the other targets do it first)

# Refresh every lock to the newest versions pyproject.toml allows (then `make test` says whether
# they work; the change lands with the lock). bench.txt is the superset, resolved first; the
# others are held to its versions so every lock agrees.
LOCK := $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes
lock: $(STAMP) ## move every lock in requirements/ to the newest versions pyproject.toml allows
	$(LOCK) --upgrade pyproject.toml requirements/build.in --extra test --extra bench -o requirements/bench.txt
	$(LOCK) -c requirements/bench.txt pyproject.toml requirements/build.in --extra test -o requirements/test.txt
	$(LOCK) -c requirements/bench.txt pyproject.toml requirements/build.in -o requirements/runtime.txt
	$(LOCK) -c requirements/bench.txt pyproject.toml requirements/build.in --extra postgres -o requirements/postgres.txt
	$(LOCK) -c requirements/bench.txt requirements/uv.in -o requirements/uv.txt

demo: $(STAMP) ## the main job end to end on a fresh machine: no servers, no API key
	$(BIN)/memory-worker demo

# The README's picture: Dan's page from a fresh demo's store, in Debian's Chromium.
screenshot: $(STAMP) ## regenerate docs/page.png, the README's picture, from the demo's store
	$(BIN)/memory-worker demo > /dev/null
	$(BIN)/python docs/screenshot.py

CHROMIUM := /usr/bin/chromium
# pytest-xdist: the suite on three processes. Most of its time is spent waiting on workers,
# brokers and browsers it starts, so even on two cores a third process fills the waits (the
# whole suite 245 s against 305 s with two on the same machine); each process has its own
# embedded Redis, PostgreSQL database and temporary folders.
TEST_PROCESSES ?= 3

# Coverage ([tool.coverage] in pyproject.toml): the suite's own processes, combined. The floor
# holds over the pure core and the two paths, a little below the figure measured when it was
# set (97.8 %). CONTRIBUTING.md says how to move it.
COVERED := 'memory_worker/core/*,memory_worker/write/*,memory_worker/reader/*'
COVERAGE_FLOOR ?= 97

# mypy runs beside the suite (its output printed after it): the suite mostly waits on the
# processes it starts, and a fresh clone's mypy (no cache) takes 10 s of CPU it can have then.
test: $(STAMP) ## everything CI runs: lint, types, the whole suite, coverage with its floor
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	@test -x $(CHROMIUM) || echo "note: no $(CHROMIUM): the browser tests are skipped (apt-get install -y chromium runs them)"
	$(BIN)/mypy > $(VENV)/mypy.out 2>&1 & types=$$!; \
	$(BIN)/pytest -q -n $(TEST_PROCESSES) --cov --cov-report=; tests=$$?; \
	wait $$types; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.out; \
	test $$tests -eq 0 -a $$typed -eq 0
	$(BIN)/coverage report --include=$(COVERED) --skip-covered --fail-under=$(COVERAGE_FLOOR)

# The inner loop while developing: lint, types, and the tests that start no worker, browser
# or supervisor (`make test` runs everything), each property test drawing a quarter of its
# examples (tests/examples.py; `make test` draws them all). mypy runs beside the tests, as in `make test`:
# on a fresh clone (no cache) it took 37 s on its own before them, here.
CHECK_MARKS := "not pipeline and not slow and not faults and not browser and not processes"
check: $(STAMP) ## the inner loop: lint, types and the tests that start no worker or browser
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	$(BIN)/mypy > $(VENV)/mypy.check.out 2>&1 & types=$$!; \
	$(BIN)/pytest -q -n $(TEST_PROCESSES) -m $(CHECK_MARKS) --hypothesis-profile=check; tests=$$?; \
	wait $$types; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.check.out; \
	test $$tests -eq 0 -a $$typed -eq 0

fmt: $(STAMP) ## format and fix what ruff can (then `make check` says what is left)
	$(BIN)/ruff check --fix --quiet .
	$(BIN)/ruff format --quiet .

bench: $(STAMP) ## the write, read, recall, backlog and page benchmarks, printed
	$(BIN)/python benchmarks/write_path.py
	$(BIN)/python benchmarks/read_path.py
	$(BIN)/python -m benchmarks.recall_path
	$(BIN)/python benchmarks/backlog_drain.py
	$(BIN)/python benchmarks/page_abuse.py

# Regenerate docs/recall.md: LoCoMo through the write path, every ranking and embedder, the
# router's neighbour floor per embedder, and a message's recall beside a busy write path (~10 min).
recall: $(STAMP) ## regenerate docs/recall.md from LoCoMo (~10 min)
	$(BIN)/python benchmarks/locomo_recall.py --conversations 1-10 --embedders e5,hashing --router-floor --recall-under-load --docs docs/recall.md

# Regenerate docs/performance.md and its plot from one run of every benchmark it reports
# (benchmarks/report.py; `--only <section>` re-runs one section).
perf: $(STAMP) ## regenerate docs/performance.md and its plot from one run
	$(UV_PIP) --require-hashes -r requirements/bench.txt
	$(BIN)/python -m benchmarks.report

# The exams, large: the flow exam (10,000 random spells against a hostile model, every output
# read; ~10 min on two cores), its self-test (each structural guard removed in turn must be
# seen), both again under the group scope (MW_MEMORY_SCOPE=follow), the leak exam (plant
# and probe), and the integrity exam (minimal pairs: no fact lost or folded into another).
# `make test` runs each small; `memory-worker exam` records the verdict. With PG=<a PostgreSQL
# URL> (e.g. `make exam PG=postgresql+psycopg://postgres@127.0.0.1:5432/mw_exam`), the flow exam
# also runs 1,000 spells under each scope there, with switches in concurrent transactions, and
# its self-tests (it makes and drops a database per world on that server).
exam: $(STAMP) ## the flow exam (10,000 spells, both scopes) with its self-tests, the leak and integrity exams (~27 min)
	$(BIN)/python -m exams.flow.run --spells 10000
	$(BIN)/python -m exams.flow.run --self-test --self-test-worlds 20
	$(BIN)/python -m exams.flow.run --spells 10000 --group-scope
	$(BIN)/python -m exams.flow.run --self-test --self-test-worlds 20 --group-scope
	$(BIN)/python -m exams.leak.run
	$(BIN)/python -m exams.integrity.run
	$(BIN)/python -m exams.integrity.run --self-test
ifneq ($(PG),)
	$(BIN)/python -m exams.flow.run --spells 1000 --database-url '$(PG)'
	$(BIN)/python -m exams.flow.run --spells 1000 --group-scope --database-url '$(PG)'
	$(BIN)/python -m exams.flow.run --self-test --self-test-worlds 20 --database-url '$(PG)'
	$(BIN)/python -m exams.flow.run --self-test --self-test-worlds 20 --group-scope --database-url '$(PG)'
endif

# Mutation testing of the privacy core (docs/mutation.md): the audience rule, the reader's filter,
# the audience SQL, recall and the write guards, each mutant against the fast tests that reach it
# ([tool.mutmut] in pyproject.toml). Slow (~30 min on two cores); resumes where it stopped.
MUTANTS := 'memory_worker.core.audience.*' 'memory_worker.core.provenance.*' \
	'memory_worker.core.names.*' 'memory_worker.reader.cache_loader.x_visible_index*' \
	'memory_worker.storage.read_path.x__context_statement*' 'memory_worker.storage.read_path.x_context*' \
	'memory_worker.storage.read_path.x_room_or_member*' 'memory_worker.storage.read_path.x__open_rows_statement*' \
	'memory_worker.storage.read_path.x_open_rows*' 'memory_worker.storage.read_path.x_visible_open_rows*' \
	'memory_worker.reader.recall.*' 'memory_worker.write.guards.*'
mutate: $(STAMP) ## mutation testing of the privacy core (~30 min; resumes)
	$(BIN)/mutmut run $(MUTANTS)
	$(BIN)/mutmut results

# Stop every embedded redis-server this checkout started (its pid file lives under
# .memory_worker/), checking the pid is a redis-server still, then remove the state.
clean: ## stop any embedded Redis this checkout started; remove .venv and the state
	@for pidfile in $$(find .memory_worker -name redis.pid 2>/dev/null); do \
		pid=$$(cat "$$pidfile"); \
		if grep -qs redis-server /proc/$$pid/cmdline; then \
			kill "$$pid" && echo "stopped the embedded redis-server $$pid ($$pidfile)"; \
		fi; \
	done
	rm -rf $(VENV) .memory_worker memory_worker.db .pytest_cache artefacts .coverage .coverage.* htmlcov
