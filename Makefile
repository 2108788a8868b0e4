# The two commands the README promises: `make demo` and `make test`.
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install java demo test lint unit bench clean

install:
	$(PIP) install -q -e '.[dev,spark]'

# Spark's tests need a JVM; install one from Debian when the machine has none.
java:
	@command -v java >/dev/null 2>&1 || { \
		echo "installing a Java runtime for the Spark tests"; \
		SUDO=$$(command -v sudo >/dev/null 2>&1 && [ "$$(id -u)" != 0 ] && echo sudo); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q --no-install-recommends openjdk-17-jre-headless; \
	}
	@java -version 2>&1 | head -1

demo:
	$(PIP) install -q -e '.[dev]'
	$(PYTHON) -m llog demo

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy
	$(PYTHON) protocol/gen_vectors.py --check

test: install java lint
	$(PYTHON) -m pytest -q -p no:cacheprovider --durations=20

unit:
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/test_codec.py tests/test_golden_vectors.py tests/test_keys.py tests/test_config.py tests/test_partitioner.py

bench:
	$(PYTHON) bench/write_read.py --quick

clean:
	rm -rf build *.egg-info .mypy_cache .ruff_cache llog-data
