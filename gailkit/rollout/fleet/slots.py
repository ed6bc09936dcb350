"""`Round`: one round's fragment slots, whoever fills them (ZeroMQ peers, Ray actors).

Both fleets hand out the same slots and need the same bookkeeping: which slots still need a
fragment (a slot whose actor died, refused, or sent a bad or stale fragment goes back to the front),
the fragments in (decoded and checked against the run's `FragmentSpec`, in slot order), and what
the round cost (wait, slowest sample, fragments per second, bytes per fragment). How a slot reaches
an actor, and when an actor counts as dead, stays with each fleet.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable

from gailkit.core.fragments import Fragment, FragmentSpec
from gailkit.rollout import wire


class Round:
    def __init__(self, n_slots: int, spec: FragmentSpec, version: int, max_lag: int = 0, busy: Iterable[int] = ()):
        held = set(busy)
        self.n_slots, self.spec, self.version, self.oldest = n_slots, spec, version, version - max_lag
        self.pending: collections.deque[int] = collections.deque(s for s in range(n_slots) if s not in held)
        self.results: dict[int, Fragment] = {}
        self.start = time.monotonic()
        self.received_bytes = 0

    @property
    def done(self) -> bool:
        return len(self.results) == self.n_slots

    def take(self) -> int | None:
        """The next slot to hand out, or None."""
        return self.pending.popleft() if self.pending else None

    def give_back(self, slot: int | None) -> None:
        """`slot` needs a fragment again (first in line); a slot already filled stays filled."""
        if slot is not None and slot not in self.results and slot not in self.pending:
            self.pending.appendleft(slot)

    def wants(self, slot: int | None, version: int) -> bool:
        """Whether a fragment of weights `version` for `slot` can still fill it (not stale, not filled)."""
        return slot is not None and self.oldest <= version <= self.version and slot not in self.results

    def accept(self, slot: int, body: bytes, actor_id: int, version: int) -> Fragment:
        """Decode and check a fragment body, then fill `slot` with it; `wire.ProtocolError` or
        `fragments.BadFragment` when it does not fit (the slot is then still open)."""
        frag = wire.decode_fragment(body, actor_id, version)
        self.spec.check(frag)
        self.results[slot] = frag
        self.received_bytes += len(body)
        return frag

    def fragments(self) -> list[Fragment]:
        return [self.results[s] for s in range(self.n_slots)]

    def stats(self) -> dict[str, float]:
        wait = time.monotonic() - self.start
        return {
            "actors/wait_s": wait,
            "actors/sample_s": max(f.sample_seconds for f in self.results.values()),
            "actors/fragments_per_s": self.n_slots / wait,
            "actors/fragment_mb": self.received_bytes / self.n_slots / 2**20,
        }
