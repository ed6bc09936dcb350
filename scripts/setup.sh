#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment from nothing.
#   GAILKIT_VENV   where the venv lives (default .venv)
#   GAILKIT_TORCH  the torch requirement to install (default: torch==2.13.0, the CPU build, when no
#                  NVIDIA GPU is visible; plain "torch" (a CUDA build) when nvidia-smi sees one)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GAILKIT_VENV:-.venv}"
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
  echo "setup: installing $torch_req"
  "${pip[@]}" "$torch_req"
fi

# Reinstall the project only when its requirements changed.
stamp="$venv/.gailkit-setup"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing gailkit and its dependencies"
  "${pip[@]}" -e ".[test,ray,sumo]"
  echo "$want" > "$stamp"
fi
