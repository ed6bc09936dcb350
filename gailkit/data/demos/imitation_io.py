"""imitation's dataset folders (what `imitation.data.serialize.save` writes: HuggingFace datasets as
Arrow streams and a `state.json` naming them), read with pyarrow alone: the jsonpickle `infos`
column, which can run code, is never decoded, and no shard outside the folder is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gailkit.core import fsutil, limits, textparse
from gailkit.core.errors import DemoError, first_line
from gailkit.data.demos.arrow_read import nested_lists_to_numpy
from gailkit.data.demos.core import DemoMeta, Demos


def is_imitation_dataset(path: Path) -> bool:
    return path.is_dir() and (path / "dataset_info.json").is_file() and (path / "state.json").is_file()


def read_imitation_dataset(path: Path) -> Demos:
    try:
        state = textparse.loads_json(fsutil.read_regular(path / "state.json", 1 << 20))
        files = [path / f["filename"] for f in state["_data_files"]]
        if not files or not all(isinstance(f["filename"], str) for f in state["_data_files"]):
            raise ValueError("no data files listed")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DemoError(f"{path}: not a readable imitation dataset folder (state.json: {e})") from None
    tables = []
    for f in files:
        fsutil.check_regular(fsutil.inside(f, path, "state.json names "), "state.json names ")
        try:
            shard = pa.memory_map(str(f), "r").read_buffer()
            limits.check_ipc(shard, str(f))
            table = pa.ipc.open_stream(shard).read_all()
            table.validate(full=True)
            tables.append(table)
        except (pa.ArrowException, OSError) as e:
            raise DemoError(f"{f}: truncated or corrupt dataset shard ({first_line(e)})") from None
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    for name in ("obs", "terminal"):
        if name not in table.column_names:
            raise DemoError(f"{path}: dataset has no column '{name}' (has: {', '.join(table.column_names)})")
    obs_lists = table.column("obs").combine_chunks()
    if not (pa.types.is_list(obs_lists.type) or pa.types.is_large_list(obs_lists.type)):
        raise DemoError(
            f"{path}: column 'obs' is {obs_lists.type}, not a list per trajectory (Dict observations are read from "
            "imitation's pickles, not its dataset folders)"
        )
    obs_len = obs_lists.value_lengths().to_numpy(zero_copy_only=False)
    act_lists = table.column("acts").combine_chunks() if "acts" in table.column_names else None  # absent: no actions
    act_len = obs_len - 1 if act_lists is None else act_lists.value_lengths().to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(obs_len != act_len + 1)
    if len(bad):
        t = int(bad[0])
        raise DemoError(f"{path}: trajectory {t} has {obs_len[t]} obs for {act_len[t]} acts (needs acts + 1)")
    all_obs = nested_lists_to_numpy(obs_lists.flatten(), "obs", path)
    acts = None if act_lists is None else nested_lists_to_numpy(act_lists.flatten(), "acts", path)
    terminal = table.column("terminal").to_numpy(zero_copy_only=False).astype(bool)
    # Row r of trajectory t: obs index = offset_t + r; next_obs = offset_t + r + 1.
    obs_offsets = np.concatenate([[0], np.cumsum(obs_len)[:-1]])
    lengths = act_len.astype(np.int64)
    idx = (
        np.concatenate([np.arange(o, o + n) for o, n in zip(obs_offsets, lengths)])
        if len(lengths)
        else np.zeros(0, np.int64)
    )
    episode_id = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    step = idx - np.repeat(obs_offsets, lengths)
    last = np.zeros(len(idx), bool)
    last[np.cumsum(lengths)[lengths > 0] - 1] = True
    ep_terminal = np.repeat(terminal, lengths)
    rews = None
    if "rews" in table.column_names:
        rews = table.column("rews").combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    meta = DemoMeta(format="imitation-dataset", path=str(path))
    return Demos(
        obs=all_obs[idx],
        acts=acts,
        next_obs=all_obs[idx + 1],
        terminated=last & ep_terminal,
        truncated=last & ~ep_terminal,
        episode_id=episode_id,
        step=step,
        rews=rews,
        meta=meta,
    )
