#!/usr/bin/env bash
# Create (or refresh) a virtual environment of the project from nothing.
#   scripts/setup.sh                 .venv: gailkit on today's stack (gymnasium 1.x, SB3 2.x, numpy 2)
#                                    with the extras test, ray, sumo, mujoco, minari, video, wandb, atari
#   scripts/setup.sh imitation       .venv-imitation: gailkit with the imitation and mujoco extras (imitation
#                                    pins gymnasium 0.29 and SB3 2.2), for the interop tests
#   GAILKIT_VENV   where the venv lives (default .venv, or .venv-imitation)
#   GAILKIT_TORCH  the torch requirement to install (default: torch==2.13.0, the CPU build, when no
#                  NVIDIA GPU is visible; plain "torch" (a CUDA build) when nvidia-smi sees one)
set -euo pipefail
cd "$(dirname "$0")/.."
flavour="${1:-main}"
case "$flavour" in
  main) venv="${GAILKIT_VENV:-.venv}"; extras="test,ray,sumo,mujoco,minari,video,wandb,atari" ;;
  imitation) venv="${GAILKIT_VENV:-.venv-imitation}"; extras="test,imitation,mujoco" ;;
  *) echo "setup: unknown flavour '$flavour' (main or imitation)" >&2; exit 2 ;;
esac
py="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
fi
pip=("$venv/bin/python" -m pip install -q)

if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  if [ -n "${GAILKIT_TORCH:-}" ]; then
    torch_req="$GAILKIT_TORCH"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    torch_req="torch"
  else
    torch_req="torch==2.13.0"
  fi
  echo "setup: installing $torch_req into $venv"
  "${pip[@]}" "$torch_req"
fi

# Reinstall the project only when its requirements changed.
stamp="$venv/.gailkit-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing gailkit[$extras] into $venv"
  "${pip[@]}" -e ".[$extras]"
  echo "$want" > "$stamp"
fi
