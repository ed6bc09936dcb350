# The README's two commands: `make run` (main job on the shipped demos) and `make test`.
# Both create their virtual environments and install everything on first use (scripts/setup.sh).
VENV ?= .venv
VENV_IMITATION ?= .venv-imitation
PY := $(VENV)/bin/python
PY_IMITATION := $(VENV_IMITATION)/bin/python
GAILKIT := $(VENV)/bin/gailkit

.PHONY: setup setup-imitation run test test-main test-imitation lint bench-demos bench-gail bench-fleet bench-onnx

setup:
	@GAILKIT_VENV=$(VENV) bash scripts/setup.sh main

setup-imitation:
	@GAILKIT_VENV=$(VENV_IMITATION) bash scripts/setup.sh imitation

run: setup
	$(GAILKIT) train --env CartPole-v1 --demos data/ --run-dir runs/make-run
	$(GAILKIT) export runs/make-run --out exports/cartpole.onnx

# The whole suite on today's stack, then the imitation-interop tests beside imitation's own pins.
test: test-main test-imitation

test-main: setup lint
	$(PY) -m pytest -q

# Lint, format and types: ruff (rules and format in pyproject.toml) and mypy on the package.
lint: setup
	$(PY) -m ruff check gailkit tests bench envs
	$(PY) -m ruff format --check gailkit tests bench envs
	$(PY) -m mypy gailkit

test-imitation: setup-imitation
	$(PY_IMITATION) -m pytest -q -m imitation

bench-demos: setup-imitation
	$(PY_IMITATION) bench/demo_load.py

bench-gail: setup setup-imitation
	$(PY) bench/gail_vs_imitation.py --env CartPole-v1 --demos data/cartpole.arrow --seeds 0 1 2 --steps 150000 --eval-every-steps 10000 --eval-episodes 5

bench-fleet: setup
	$(PY) bench/fleet_throughput.py

bench-onnx: setup
	$(PY) bench/onnx_latency.py
