"""New demos from old: without actions, subsampled; and which expert return a set of demos carries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from gailkit.core import obs as obs_tree
from gailkit.core.errors import DemoError
from gailkit.data.demos.core import Demos, episode_columns


def strip_actions(d: Demos) -> Demos:
    """The same demos without actions (what learning from observation starts from)."""
    return dataclasses.replace(
        d, acts=None, meta=dataclasses.replace(d.meta, source=f"{d.meta.source or '?'} (actions stripped)")
    )


def subsample(d: Demos, episodes: int, every: int, seed: int) -> Demos:
    """GAIL's protocol (Ho & Ermon 2016): `episodes` whole episodes drawn at random, then every
    `every`-th transition of each from a random offset (`every=1`: the whole episodes). The result has no episode structure (each
    kept transition is its own row; `whole_episodes` is false), so its rewards sum to no return; the
    source's expert return is kept in the metadata and marked as the source's."""
    if episodes < 1 or every < 1:
        raise DemoError(f"--episodes {episodes} and --every {every} must be >= 1")
    bounds = d.episode_bounds()
    whole = [e for e in range(len(bounds) - 1) if d.step[bounds[e]] == 0 and d.dones[bounds[e + 1] - 1]]
    if len(whole) < episodes:
        raise DemoError(f"{d.meta.path}: {len(whole)} whole episodes, fewer than --episodes {episodes}")
    rng = np.random.default_rng(seed)
    rows = []
    for e in sorted(rng.choice(whole, episodes, replace=False)):
        start, end = int(bounds[e]), int(bounds[e + 1])
        rows.append(np.arange(start + int(rng.integers(0, min(every, end - start))), end, every))
    idx = np.concatenate(rows)
    terminated, truncated = d.terminated[idx], d.truncated[idx]
    if every == 1:  # whole episodes: their structure (and returns) stay
        episode_id, step = d.episode_id[idx], d.step[idx]
    else:
        episode_id, step = episode_columns(np.ones(len(idx), bool))  # each kept row stands alone
    src = Path(d.meta.path).name if d.meta.path else "the source file"
    meta = dataclasses.replace(
        d.meta,
        source=f"{d.meta.source or src} ({episodes} episodes, every {every} transitions, seed {seed})",
        expert_return_of=d.meta.expert_return_of or (src if d.meta.expert_return is not None else None),
    )
    return Demos(
        obs=obs_tree.take(d.obs, idx),
        acts=None if d.acts is None else d.acts[idx],
        next_obs=obs_tree.take(d.next_obs, idx),
        terminated=terminated,
        truncated=truncated,
        episode_id=episode_id,
        step=step,
        rews=None if d.rews is None else d.rews[idx],
        meta=meta,
    )


def expert_reference(d: Demos) -> tuple[float | None, str]:
    """`(return, source)`: the expert policy's return when the demos carry it (source "expert
    policy", and which file's when it was carried over), else the mean return of whole episodes
    ("demos"), else `(None, "unknown")`: loose or subsampled transitions carry no episode return."""
    if d.meta.expert_return is not None:
        of = f", of {d.meta.expert_return_of}" if d.meta.expert_return_of else ""
        return float(d.meta.expert_return), "expert policy" + of
    returns = d.episode_returns()
    if returns is not None and len(returns):
        return float(returns.mean()), "demos"
    return None, "unknown"
