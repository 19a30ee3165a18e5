# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check bench perf recall clean install lock mutate

# Installs come from the lock (requirements/*.txt: exact versions with hashes), so a fresh clone
# gets what the last green run had; the ranges in pyproject.toml say what the code supports.
$(STAMP): pyproject.toml requirements/test.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements/test.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python requirements/verify.py requirements/test.txt
	touch $(STAMP)

install: $(STAMP)

# Refresh every lock to the newest versions pyproject.toml allows (then `make test` says whether
# they work; the change lands with the lock). bench.txt is the superset, resolved first; the
# others are held to its versions so every lock agrees.
LOCK := $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes
lock: $(STAMP)
	$(LOCK) --upgrade pyproject.toml requirements/build.in --extra test --extra bench -o requirements/bench.txt
	$(LOCK) -c requirements/bench.txt pyproject.toml requirements/build.in --extra test -o requirements/test.txt
	$(LOCK) -c requirements/bench.txt pyproject.toml requirements/build.in -o requirements/runtime.txt
	$(LOCK) -c requirements/bench.txt pyproject.toml requirements/build.in --extra postgres -o requirements/postgres.txt

demo: $(STAMP)
	$(BIN)/memory-worker demo

CHROMIUM := /usr/bin/chromium
# pytest-xdist: the suite on two processes. Most of its time is spent waiting on workers,
# brokers and browsers it starts, so two halve the wall time even on two cores; each process
# has its own embedded Redis, PostgreSQL database and temporary folders.
TEST_PROCESSES ?= 2

test: $(STAMP)
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	@test -x $(CHROMIUM) || echo "note: no $(CHROMIUM): the browser tests are skipped (apt-get install -y chromium runs them)"
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(TEST_PROCESSES)

# The inner loop while developing: lint, types, and the tests that start no worker, browser
# or supervisor (`make test` runs everything).
check: $(STAMP)
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(TEST_PROCESSES) -m "not pipeline and not slow and not faults and not browser and not processes"

bench: $(STAMP)
	$(BIN)/python benchmarks/write_path.py
	$(BIN)/python benchmarks/read_path.py
	$(BIN)/python -m benchmarks.recall_path
	$(BIN)/python benchmarks/backlog_drain.py
	$(BIN)/python benchmarks/page_abuse.py

# Regenerate docs/recall.md: LoCoMo through the write path, every ranking and embedder, the
# router's neighbour floor per embedder, and a message's recall beside a busy write path (~10 min).
recall: $(STAMP)
	$(BIN)/python benchmarks/locomo_recall.py --conversations 1-10 --embedders e5,hashing --router-floor --recall-under-load --docs docs/recall.md

# Regenerate docs/performance.md and its plot from one run of both benchmarks.
perf: $(STAMP)
	$(BIN)/pip install --quiet --require-hashes -r requirements/bench.txt
	$(BIN)/python -m benchmarks.report

# Mutation testing of the privacy core (docs/mutation.md): the audience rule, the reader's filter,
# the audience SQL, recall and the write guards, each mutant against the fast tests that reach it
# ([tool.mutmut] in pyproject.toml). Slow (~30 min on two cores); resumes where it stopped.
MUTANTS := 'memory_worker.core.audience.*' 'memory_worker.reader.cache_loader.x_visible_index*' \
	'memory_worker.storage.read_path.x__context_statement*' 'memory_worker.storage.read_path.x_context*' \
	'memory_worker.storage.read_path.x_room_or_member*' 'memory_worker.storage.read_path.x__open_rows_statement*' \
	'memory_worker.storage.read_path.x_open_rows*' 'memory_worker.storage.read_path.x_visible_open_rows*' \
	'memory_worker.reader.recall.*' 'memory_worker.write.guards.*'
mutate: $(STAMP)
	$(BIN)/mutmut run $(MUTANTS)
	$(BIN)/mutmut results

# Stop every embedded redis-server this checkout started (its pid file lives under
# .memory_worker/), checking the pid is a redis-server still, then remove the state.
clean:
	@for pidfile in $$(find .memory_worker -name redis.pid 2>/dev/null); do \
		pid=$$(cat "$$pidfile"); \
		if grep -qs redis-server /proc/$$pid/cmdline; then \
			kill "$$pid" && echo "stopped the embedded redis-server $$pid ($$pidfile)"; \
		fi; \
	done
	rm -rf $(VENV) .memory_worker memory_worker.db .pytest_cache artefacts
