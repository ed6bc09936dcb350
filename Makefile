# The README's two commands: `make run` (main job on the shipped demos) and `make test`.
# Both create .venv and install everything on first use (see scripts/setup.sh).
VENV ?= .venv
PY := $(VENV)/bin/python
GAILKIT := $(VENV)/bin/gailkit

.PHONY: setup run test bench-demos bench-gail bench-fleet bench-onnx

setup:
	@bash scripts/setup.sh

run: setup
	$(GAILKIT) train --env CartPole-v1 --demos data/

test: setup
	$(PY) -m pytest -q

bench-demos: setup
	$(PY) bench/demo_load.py

bench-gail: setup
	$(PY) bench/gail_vs_imitation.py --env CartPole-v1 --seeds 0 1 2 --steps 150000

bench-fleet: setup
	$(PY) bench/fleet_throughput.py

bench-onnx: setup
	$(PY) bench/onnx_latency.py
