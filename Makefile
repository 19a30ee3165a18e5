# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench perf recall clean install

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/memory-worker demo

CHROMIUM := /usr/bin/chromium

test: $(STAMP)
	$(BIN)/ruff check --quiet .
	@test -x $(CHROMIUM) || echo "note: no $(CHROMIUM): the browser tests are skipped (apt-get install -y chromium runs them)"
	$(BIN)/mypy
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/write_path.py
	$(BIN)/python benchmarks/read_path.py
	$(BIN)/python -m benchmarks.recall_path
	$(BIN)/python benchmarks/backlog_drain.py

# Regenerate docs/recall.md: LoCoMo through the write path, every ranking and embedder (~5 min).
recall: $(STAMP)
	$(BIN)/python benchmarks/locomo_recall.py --conversations 1-10 --embedders hashing,e5 --docs docs/recall.md

# Regenerate docs/performance.md and its plot from one run of both benchmarks.
perf: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m benchmarks.report

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
