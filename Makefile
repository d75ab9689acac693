# `make test` sets itself up on a fresh machine: a venv, the project with its test extras, pytest.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test test-fast install web demo demo-screen demo-screen-128 bench bench-gpu clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

# onnxruntime-web from the npm registry, once, into dreamcade/web/node_modules: the runtime that
# `dreamcade export --web` copies into a web folder (docs/web.md)
web:
	cd dreamcade/web && npm ci --no-audit --no-fund

test: $(VENV)/.installed
	$(PY) -m pytest -q

# everything but the tests marked slow (demo, learning, SIGKILL runs)
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow"

# record Breakout, build, train the demo preset (about 15 minutes on 2 CPU cores), measure, play
demo: $(VENV)/.installed
	$(PY) demo.py $(ARGS)

# SuperTux from the screen: install it if missing, a bot plays it under Xvfb, record screen, build,
# train the screen-demo preset (under an hour on 2 CPU cores), measure, export, play
demo-screen: $(VENV)/.installed
	$(PY) demo.py --screen $(ARGS)

# the screen demo at the size of the screen (128x72, two stages: docs/recipe.md#screen-size)
demo-screen-128: $(VENV)/.installed
	$(PY) demo.py --screen --preset screen-128 $(ARGS)

# every benchmark in turn (about 9 minutes); run it with nothing else running
bench: $(VENV)/.installed
	$(PY) -m bench.store
	$(PY) -m bench.loader
	$(PY) -m bench.model
	$(PY) -m bench.play --frames 300
	$(PY) -m bench.recorder --seconds 30

# on a CUDA machine: the GPU-marked tests and the GPU speed figures, one table (under 5 minutes);
# without CUDA it says so and exits 0
bench-gpu: $(VENV)/.installed
	$(PY) -m bench.gpu

clean:
	rm -rf $(VENV) .pytest_cache
