"""Signalised intersections on the SUMO simulator, through TraCI.

`TrafficLight-v0`: one intersection (4 one-lane approaches). `TrafficGrid-v0`: a 2x2 grid, one
agent controlling all four lights with one flattened `Discrete(2 ** 4)` action (bit i: the green
of light i). Networks come from SUMO's `netgenerate`; demand (flows between fringe edges, rates
drawn per episode) from the reset seed, which also seeds SUMO.

Observation, per light: for each incoming lane, queue (halting vehicles / lane capacity),
density (vehicles / capacity) and mean speed / speed limit; then the current green as one-hot
(2) and time in that green / `max_green_obs`. Action: the green each light should show next
(0: north-south, 1: east-west); the env inserts `yellow_time` seconds of yellow on a change and
holds a green for at least `min_green` seconds. One step is `delta_time` simulated seconds. The
reward (reported, never trained on) is minus the total waiting time of vehicles on incoming
lanes. `info`: `throughput` (vehicles arrived so far), `mean_travel_time` (of those), and
`expert_action` when SUMO's own controller drives (`controller="actuated"` or `"fixed"`).

Each env owns its SUMO process (own port, own temp folder); `close()` ends it, and so does
garbage collection or interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path

import gymnasium as gym
import numpy as np

GREENS = (0, 2)  # netgenerate's programs: 0 green NS, 1 yellow, 2 green EW, 3 yellow
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _sumo_bin(name: str) -> str:
    try:
        import sumo

        path = Path(sumo.SUMO_HOME) / "bin" / name
        if path.is_file():
            return str(path)
    except ImportError:
        pass
    found = shutil.which(name)
    if found is None:
        raise gym.error.DependencyNotInstalled("SUMO is not installed: pip install 'gailkit[sumo]'")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TrafficLightEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        grid: int = 1,
        delta_time: int = 5,
        yellow_time: int = 3,
        min_green: int = 10,
        episode_seconds: int = 600,
        demand: tuple[float, float] = (0.02, 0.08),
        controller: str = "agent",
        max_green_obs: float = 60.0,
        render_mode: str | None = None,
    ):
        if controller not in ("agent", "actuated", "fixed"):
            raise ValueError(f"controller must be agent, actuated or fixed, got {controller!r}")
        self.grid, self.delta_time, self.yellow_time, self.min_green = grid, delta_time, yellow_time, min_green
        self.episode_seconds, self.demand, self.controller = episode_seconds, tuple(demand), controller
        self.max_green_obs, self.render_mode = max_green_obs, render_mode
        self.n_lights = grid * grid
        self.lane_count = 4  # incoming one-lane approaches per light
        per_light = self.lane_count * 3 + len(GREENS) + 1
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n_lights * per_light,), np.float32)
        self.action_space = gym.spaces.Discrete(len(GREENS) ** self.n_lights)
        self._dir: Path | None = None
        self._proc: subprocess.Popen | None = None
        self.conn = None
        _LIVE.add(self)

    # -- SUMO lifecycle -----------------------------------------------------------------------

    def _network(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="gailkit-sumo-"))
        net = self._dir / "net.xml"
        if not net.exists():
            tls_type = "actuated" if self.controller == "actuated" else "static"
            grid_args = (
                ["--grid.x-number", "1", "--grid.y-number", "1"]
                if self.grid == 1
                else ["--grid.number", str(self.grid)]
            )
            subprocess.run(
                [
                    _sumo_bin("netgenerate"),
                    "--grid",
                    *grid_args,
                    "--grid.length",
                    "200",
                    "--grid.attach-length",
                    "200",
                    "--default.lanenumber",
                    "1",
                    "--default-junction-type",
                    "traffic_light",
                    "--tls.default-type",
                    tls_type,
                    "--no-turnarounds",
                    "true",
                    "-o",
                    str(net),
                ],
                check=True,
                capture_output=True,
                env=dict(os.environ, SUMO_HOME=str(Path(_sumo_bin("sumo")).parents[1])),
            )
        return net

    def _routes(self, rng: np.random.Generator) -> Path:
        import sumolib

        net = sumolib.net.readNet(str(self._network()))
        # vehicles enter on edges leaving the fringe nodes and leave on edges into them
        fringe_in = sorted(e.getID() for e in net.getEdges() if e.getFromNode().getType() != "traffic_light")
        fringe_out = sorted(e.getID() for e in net.getEdges() if e.getToNode().getType() != "traffic_light")
        lines = ["<routes>", '  <vType id="car" accel="2.6" decel="4.5" length="5" maxSpeed="13.9"/>']
        for o in fringe_in:
            rate = float(rng.uniform(*self.demand))  # vehicles per second entering here, this episode
            dests = [d for d in fringe_out if _reverse(d) != o] or fringe_out  # no U-turns
            for d in dests:
                lines.append(
                    f'  <flow id="{o}_{d}" type="car" from="{o}" to="{d}" begin="0" end="{self.episode_seconds}" '
                    f'probability="{rate / len(dests):.5f}" departLane="best" departSpeed="max"/>'
                )
        lines.append("</routes>")
        path = self._dir / "routes.xml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def _start(self, rng: np.random.Generator) -> None:
        import traci

        self._stop_sumo()
        routes = self._routes(rng)
        port = _free_port()
        cmd = [
            _sumo_bin("sumo"),
            "-n",
            str(self._network()),
            "-r",
            str(routes),
            "--remote-port",
            str(port),
            "--seed",
            str(int(rng.integers(2**31))),
            "--no-step-log",
            "true",
            "--no-warnings",
            "true",
            "--time-to-teleport",
            "-1",
            "--waiting-time-memory",
            "1000",
            "--step-length",
            "1",
        ]
        self._proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, SUMO_HOME=str(Path(_sumo_bin("sumo")).parents[1])),
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self.conn = traci.connect(port, numRetries=0, label=f"gailkit-{id(self)}-{port}", proc=self._proc)
                break
            except Exception:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self._stop_sumo()
                    raise RuntimeError("SUMO did not start") from None
                time.sleep(0.05)
        self.lights = sorted(self.conn.trafficlight.getIDList())
        self.in_lanes = {
            t: sorted(set(self.conn.trafficlight.getControlledLanes(t)))[: self.lane_count] for t in self.lights
        }
        self.links = {t: self.conn.trafficlight.getControlledLinks(t) for t in self.lights}
        self.phase_states = {
            t: [p.state for p in self.conn.trafficlight.getAllProgramLogics(t)[0].phases] for t in self.lights
        }

    def _stop_sumo(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close(wait=False)
            except Exception:  # the connection may already be broken; the process is killed below
                pass
            self.conn = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        self._stop_sumo()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __del__(self):
        self.close()

    # -- the MDP ------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._start(self.np_random)
        self.green = {t: 0 for t in self.lights}
        self.since_change = {t: 0 for t in self.lights}
        self.yellow_left = {t: 0 for t in self.lights}
        self.departed: dict[str, float] = {}
        self.travel_times: list[float] = []
        if self.controller == "agent":
            for t in self.lights:
                self.conn.trafficlight.setPhase(t, GREENS[0])
                self.conn.trafficlight.setPhaseDuration(t, 1e6)
        return self._observe(), {}

    def _decode(self, action) -> list[int]:
        a = int(action)
        if not 0 <= a < self.action_space.n:
            raise ValueError(f"action {a} outside {self.action_space}")
        return [(a >> i) & 1 for i in range(self.n_lights)]

    def _sumo_green(self, t: str) -> int:
        phase = self.conn.trafficlight.getPhase(t)
        return 0 if phase in (0, 1) else 1

    def step(self, action):
        wanted = self._decode(action) if self.controller == "agent" else None
        for _ in range(self.delta_time):
            if wanted is not None:
                for i, t in enumerate(self.lights):
                    self._control(t, wanted[i])
            self.conn.simulationStep()
            if wanted is None:  # SUMO's program drives: follow its greens the way the agent's are kept
                for t in self.lights:
                    g = self._sumo_green(t)
                    self.since_change[t] = 0 if g != self.green[t] else self.since_change[t] + 1
                    self.green[t] = g
            now = self.conn.simulation.getTime()
            for v in self.conn.simulation.getDepartedIDList():
                self.departed[v] = now
            for v in self.conn.simulation.getArrivedIDList():
                self.travel_times.append(now - self.departed.pop(v, now))
        waiting = sum(self.conn.lane.getWaitingTime(lane) for t in self.lights for lane in self.in_lanes[t])
        truncated = self.conn.simulation.getTime() >= self.episode_seconds
        info = {
            "throughput": len(self.travel_times),
            "mean_travel_time": float(np.mean(self.travel_times)) if self.travel_times else 0.0,
        }
        if self.controller != "agent":
            info["expert_action"] = sum(self._sumo_green(t) << i for i, t in enumerate(self.lights))
        return self._observe(), -float(waiting), False, truncated, info

    def _control(self, t: str, want: int) -> None:
        tl = self.conn.trafficlight
        if self.yellow_left[t] > 0:
            self.yellow_left[t] -= 1
            if self.yellow_left[t] == 0:
                tl.setPhase(t, GREENS[self.green[t]])
                tl.setPhaseDuration(t, 1e6)
                self.since_change[t] = 0
            return
        self.since_change[t] += 1
        if want != self.green[t] and self.since_change[t] >= self.min_green:
            tl.setPhase(t, GREENS[self.green[t]] + 1)  # the yellow after the current green
            tl.setPhaseDuration(t, 1e6)
            self.green[t] = want
            self.yellow_left[t] = self.yellow_time

    def _observe(self) -> np.ndarray:
        lane = self.conn.lane
        parts = []
        for t in self.lights:
            for ln in self.in_lanes[t]:
                capacity = max(1.0, lane.getLength(ln) / 7.5)
                speed_limit = max(0.1, lane.getMaxSpeed(ln))
                n = lane.getLastStepVehicleNumber(ln)
                parts += [
                    min(1.0, lane.getLastStepHaltingNumber(ln) / capacity),
                    min(1.0, n / capacity),
                    min(1.0, lane.getLastStepMeanSpeed(ln) / speed_limit) if n else 1.0,
                ]
            parts += [1.0 if self.green[t] == g else 0.0 for g in range(len(GREENS))]
            parts.append(min(1.0, self.since_change[t] / self.max_green_obs))
        return np.asarray(parts, dtype=np.float32)

    # -- experts ------------------------------------------------------------------------------

    def max_pressure_action(self) -> int:
        """Each light takes the green whose movements have the largest queue in minus queue out."""
        lane = self.conn.lane
        action = 0
        for i, t in enumerate(self.lights):
            pressures = []
            for g in GREENS:
                state = self.phase_states[t][g]
                p = 0
                for idx, links in enumerate(self.links[t]):
                    if idx < len(state) and state[idx] in "Gg":
                        for in_lane, out_lane, _ in links:
                            p += lane.getLastStepHaltingNumber(in_lane) - lane.getLastStepHaltingNumber(out_lane)
                pressures.append(p)
            action |= int(np.argmax(pressures)) << i
        return action


def _reverse(edge_id: str) -> str:
    """netgenerate names edges FROMTO: the reverse of `left0A0` is `A0left0`."""
    for i in range(1, len(edge_id)):
        a, b = edge_id[:i], edge_id[i:]
        if a[-1].isdigit() and not b[0].isdigit():
            return b + a
    return edge_id


@atexit.register
def _close_all() -> None:
    for env in list(_LIVE):
        env.close()
