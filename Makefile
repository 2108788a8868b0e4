# The two commands the README promises: `make demo` and `make test`.
#
# Both run inside a project virtual environment (.venv), so they work with any
# Python >= 3.10, Debian's and Ubuntu's own /usr/bin/python3 included (PEP 668 forbids
# installing into those). PYTHON picks the interpreter that creates the venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: venv install install-demo tools demo test test-fast durations cpu-profile lint unit matrix bench clean distclean

# A venv needs the interpreter's venv module and ensurepip; Debian ships them as
# python3-venv (python3.X-venv). Install it from Debian when it is missing.
$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { \
		echo "llog needs Python >= 3.10; $(PYTHON) is $$($(PYTHON) --version 2>&1)"; exit 1; }
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
		rm -rf $(VENV); \
		echo "$(PYTHON) cannot make a venv; installing Debian's venv package"; \
		SUDO=$$(command -v sudo >/dev/null 2>&1 && [ "$$(id -u)" != 0 ] && echo sudo); \
		VER=$$($(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'); \
		$$SUDO apt-get update -q && \
		{ $$SUDO apt-get install -y -q --no-install-recommends python$$VER-venv || \
		  $$SUDO apt-get install -y -q --no-install-recommends python3-venv; } && \
		$(PYTHON) -m venv $(VENV); \
	}
	@$(PIP) install -q --upgrade pip

venv: $(PY)

# The demo needs llog's runtime dependencies and its two local servers only.
install-demo: $(PY)
	$(PIP) install -q -e '.[demo]'

install: $(PY)
	$(PIP) install -q -e '.[dev,spark]'

# What the suite needs beyond Python packages, from Debian when missing: a JDK for the
# Spark tests and the Kafka Java client's (compiled from tests/java/), Maven to fetch that
# client from Maven Central, kcat (librdkafka's command-line client), Node.js and npm for
# kafkajs, faketime for the nemesis's clock-skewed broker, iproute2's `ip` for its network
# partitions. Go is not installed here: franz-go needs Go 1.26, newer than Debian's
# (tests/test_kafka_go.py fails with that message where it is missing).
tools:
	@missing=""; \
	command -v javac >/dev/null 2>&1 || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	command -v faketime >/dev/null 2>&1 || missing="$$missing faketime"; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	if [ -n "$$missing" ]; then \
		echo "installing from Debian:$$missing"; \
		SUDO=$$(command -v sudo >/dev/null 2>&1 && [ "$$(id -u)" != 0 ] && echo sudo); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@java -version 2>&1 | head -1

demo: install-demo
	$(PY) -m llog demo

LINT := $(PY) -m ruff check . && $(PY) -m mypy && $(PY) protocol/gen_vectors.py --check

lint: install
	$(LINT)

# The suite in two phases (tests/README.md): TEST_WORKERS pytest-xdist workers share
# the machine (the tests mostly wait on the servers and clients they start), then the
# tests marked `alone` (paused processes, session timeouts) run by themselves.
TEST_WORKERS ?= 4
REPORTS := .cache/test-reports
# Without PYTHONDONTWRITEBYTECODE: pytest keeps the test modules it rewrote for its
# assertions, or each of its processes rewrites all of them again (~11 CPU-s each).
PYTEST := env -u PYTHONDONTWRITEBYTECODE PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -p no:cacheprovider
# The files with tests marked `alone`: the second phase collects only them.
ALONE_FILES = $$(grep -l "mark.alone" tests/test_*.py)

# Byte-code compiled once up front: where PYTHONDONTWRITEBYTECODE is set, every broker,
# CLI and worker process the suite starts would compile llog's sources again (~0.4 s each).
# The clients' builds (tests/prepare.py: Maven, javac, Go, npm, Spark's class archive) run
# beside lint, which leaves a core idle; the tests then find them built. After lint, one
# collection writes the rewritten test modules every pytest process then reads (prepare
# is the longer of the two). Lint's failure still stops the run.
test: install tools
	$(PY) -m compileall -q llog compactor tests >/dev/null
	@mkdir -p $(REPORTS); $(PY) -m tests.prepare > $(REPORTS)/prepare.log 2>&1 & prepared=$$!; \
	$(LINT) || { kill $$prepared; exit 1; }; \
	$(PYTEST) --collect-only >/dev/null; \
	wait $$prepared; cat $(REPORTS)/prepare.log
	$(PYTEST) -n $(TEST_WORKERS) --dist worksteal -m "not alone" --durations=20 --junitxml=$(REPORTS)/parallel.xml
	$(PYTEST) -m alone --durations=5 --junitxml=$(REPORTS)/alone.xml $(ALONE_FILES)

# tests/README.md's durations table and tests/data/test_seconds.tsv (the parallel phase's
# order, tests/packing.py), from the last `make test`'s reports.
durations:
	$(PY) -m tests.durations
	$(PY) -m tests.durations --seconds

# make test with CPU-seconds per test, file and program (tests/cpu_profile.py).
cpu-profile: install
	$(PY) -m tests.cpu_profile $(REPORTS)/cpu.json -- $(MAKE) test

# The inner loop: the tests that start no server (tests/README.md), in under two minutes.
test-fast: install
	$(PYTEST) -n $(TEST_WORKERS) -m fast

# The Kafka compatibility matrix of docs/kafka.md and the schema-feature matrix of
# docs/schema-registry.md: run their tests, rewrite the tables.
matrix: install tools
	$(PYTEST) -n $(TEST_WORKERS) --dist worksteal $$($(PY) -c "from tests.compat_matrix import files; print(' '.join(files()))") tests/test_schema_features.py
	$(PY) -m tests.compat_matrix
	$(PY) -m tests.schema_matrix

unit: install
	$(PY) -m pytest -q -p no:cacheprovider tests/test_codec.py tests/test_golden_vectors.py tests/test_keys.py tests/test_config.py tests/test_partitioner.py

bench: install
	$(PY) bench/write_read.py --quick

clean:
	rm -rf build *.egg-info .mypy_cache .ruff_cache llog-data

distclean: clean
	rm -rf $(VENV)
