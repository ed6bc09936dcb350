"""Separate network hosts on this machine: network namespaces joined by a bridge, each with its own address.

    with Hosts(3) as hosts:                      # host 0 at 10.77.0.1, host 1 at .2, host 2 at .3
        learner = hosts.popen(0, ["gailkit", "train", ..., "--listen", f"tcp://{hosts.address(0)}:5555"])
        hosts.cut(1); hosts.restore(1)           # take host 1's link down and up again
        hosts.kill_host(2)                       # every process in host 2 killed

Needs root (`ip netns`, veth pairs). The namespaces, veth pairs and bridge are named after this
process (`gk<pid>h<i>`), live only in namespaces made here (the machine's own interfaces and
addresses are never touched), and are removed on exit, on an exception, on SIGTERM and at interpreter exit,
whatever happened. `available()` says in one line why they cannot be made here.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

SUBNET = "10.77.0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def available() -> str:
    """'' when namespaces can be made here, else one line saying why."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"gk{os.getpid()}probe"
    try:
        r = _ip("netns", "add", name, check=False)
        if r.returncode != 0:
            return f"ip netns add failed: {r.stderr.strip()[:200]}"
        _ip("netns", "del", name, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"ip netns: {e}"
    return ""


class Hosts:
    """`n` hosts on one bridge (in a namespace of its own), host i at `SUBNET.(i + 1)/24`."""

    def __init__(self, n: int):
        self.n, self.tag = n, f"gk{os.getpid()}"
        self.switch = f"{self.tag}sw"
        self.names = [f"{self.tag}h{i}" for i in range(n)]
        self.procs: list[tuple[int, subprocess.Popen]] = []
        self._up = False

    def address(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def __enter__(self) -> Hosts:
        atexit.register(self.close)
        if threading.current_thread() is threading.main_thread():  # SIGTERM unwinds too, so teardown runs
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        try:
            _ip("netns", "add", self.switch)
            self._in(self.switch, "ip", "link", "add", "br0", "type", "bridge")
            self._in(self.switch, "ip", "link", "set", "br0", "up")
            for i, ns in enumerate(self.names):
                _ip("netns", "add", ns)
                outer, inner = f"{self.tag}s{i}", f"{self.tag}e{i}"
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("link", "set", outer, "netns", self.switch)
                _ip("link", "set", inner, "netns", ns)
                self._in(self.switch, "ip", "link", "set", outer, "master", "br0", "up")
                self._in(ns, "ip", "link", "set", inner, "name", "eth0")
                self._in(ns, "ip", "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
                self._in(ns, "ip", "link", "set", "eth0", "up")
                self._in(ns, "ip", "link", "set", "lo", "up")
            self._up = True
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _in(self, ns: str, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=True, timeout=30
        )

    def popen(self, i: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start `argv` on host i (its own process group, so `kill_host` reaches its children)."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.names[i], *argv], start_new_session=True, **kwargs)
        self.procs.append((i, proc))
        return proc

    def cut(self, i: int) -> None:
        """Host i's link down (its processes live on, unreachable)."""
        self._in(self.switch, "ip", "link", "set", f"{self.tag}s{i}", "down")

    def restore(self, i: int) -> None:
        self._in(self.switch, "ip", "link", "set", f"{self.tag}s{i}", "up")

    def kill_host(self, i: int) -> None:
        """Every process on host i killed with SIGKILL: those started here (their process groups) and every
        other one inside its namespace (daemons such as a Ray node's, which leave their process group)."""
        for host, proc in self.procs:
            if host == i and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        for _ in range(3):  # a daemon may fork while it dies
            pids = _ip("netns", "pids", self.names[i], check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            if not pids:
                break

    def close(self) -> None:
        for i in range(self.n):
            self.kill_host(i)
        for ns in [*self.names, self.switch]:
            _ip("netns", "del", ns, check=False)  # its veth ends go with it
        self._up = False
