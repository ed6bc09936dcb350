# The README's two commands: `make run` (main job on the shipped demos) and `make test`.
# Both create .venv and install everything on first use (see scripts/setup.sh).
VENV ?= .venv
PY := $(VENV)/bin/python
GAILKIT := $(VENV)/bin/gailkit

.PHONY: setup run test bench-demos

setup:
	@bash scripts/setup.sh

run: setup
	$(GAILKIT) demos inspect data/
	$(GAILKIT) demos record --expert experts/cartpole.zip --episodes 5 --out runs/demo/cartpole.arrow
	$(GAILKIT) demos inspect runs/demo/cartpole.arrow

test: setup
	$(PY) -m pytest -q

bench-demos: setup
	$(PY) bench/demo_load.py
