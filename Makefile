# make run   start the webhook locally on the shipped policies (fresh dev certificates)
# make test  install everything and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

run: $(VENV)/.installed
	PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/run-local.sh

test: $(VENV)/.installed
	$(BIN)/pytest

bench: $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) certs .pytest_cache *.egg-info
