"""Actor processes on this machine: started with a token that binds their actor id, and without the
current folder on `sys.path`."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

# The actor process's entry point. `python -m` and `-c` put the current folder first on sys.path,
# where a folder named like an installed package (envs/, gailkit/) would be imported in its place:
# the actor drops that entry and imports what the learner's installation has.
_ACTOR_MAIN = "import sys; del sys.path[0]; from gailkit.cli import main; sys.exit(main())"


def spawn_actor(connect: str, actor_id: int, key_file: str, code_env: str | None) -> subprocess.Popen:
    """`gailkit actor --connect ...` as a child of this process; `proc.actor_id` and `proc.token` are set.
    The token travels in the environment (not argv, which other users can read) and must come back in
    the actor's HELLO for it to get `actor_id`."""
    cmd = [
        sys.executable,
        "-c",
        _ACTOR_MAIN,
        "actor",
        "--connect",
        connect,
        "--actor-id",
        str(actor_id),
        "--parent-pid",
        str(os.getpid()),
    ]
    if key_file:
        cmd += ["--key-file", str(key_file)]
    if code_env:
        cmd += ["--env", code_env]  # the user typed this code env: the actor may load it
    token = secrets.token_hex(16)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", GAILKIT_ACTOR_TOKEN=token)
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
    proc.actor_id, proc.token = actor_id, token  # type: ignore[attr-defined]
    return proc
