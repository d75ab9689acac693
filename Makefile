# `make test` sets itself up on a fresh machine: a venv, the project with its test extras, pytest.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test install demo bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest -q

# record Breakout, build, train the demo preset (about 15 minutes on 2 CPU cores), measure, play
demo: $(VENV)/.installed
	$(PY) demo.py $(ARGS)

bench: $(VENV)/.installed
	$(PY) -m bench.store

clean:
	rm -rf $(VENV) .pytest_cache
