"""A TCP proxy that adds latency, a bandwidth cap and loss stalls between hosts.

    python bench/netproxy.py --listen 10.77.0.1:6000 --to 10.77.0.1:5555 --rtt-ms 10 --mbit 100 --loss 0.001

This kernel has no `netem` qdisc, and no registry package offers delay and a bandwidth cap together
(Debian's `trickle` only caps bandwidth, through LD_PRELOAD; toxiproxy is not packaged), so this is
a small asyncio proxy of our own. Each direction of each connection delays every chunk by half the
round trip, sends at most `--mbit` megabits per second, and with probability `--loss` per chunk
stalls it for 200 ms more, as TCP's retransmission after a lost segment would (a TCP proxy cannot
lose bytes). Run it inside a host's namespace (`hosts.Hosts.popen`) between actors and the learner.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

RETRANSMIT_S = 0.2


async def _pump(reader, writer, delay_s: float, bytes_per_s: float, loss: float, rng: random.Random) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def send() -> None:
        free_at = 0.0  # when the capped link is free again
        while True:
            due, chunk = await queue.get()
            if chunk is None:
                break
            now = time.monotonic()
            start = max(due, free_at)
            if bytes_per_s:
                free_at = start + len(chunk) / bytes_per_s
                start = free_at
            if start > now:
                await asyncio.sleep(start - now)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while chunk := await reader.read(65536):
            stall = RETRANSMIT_S if loss and rng.random() < loss else 0.0
            queue.put_nowait((time.monotonic() + delay_s + stall, chunk))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0.0, None))
    await sender


async def serve(listen: str, to: str, rtt_ms: float, mbit: float, loss: float, seed: int = 0) -> None:
    host, port = listen.rsplit(":", 1)
    to_host, to_port = to.rsplit(":", 1)
    rng = random.Random(seed)
    delay, rate = rtt_ms / 2000.0, mbit * 1e6 / 8

    async def handle(client_reader, client_writer) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(to_host, int(to_port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pump(client_reader, server_writer, delay, rate, loss, rng),
            _pump(server_reader, client_writer, delay, rate, loss, rng),
            return_exceptions=True,
        )

    server = await asyncio.start_server(handle, host, int(port))
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True, help="HOST:PORT to accept on")
    p.add_argument("--to", required=True, help="HOST:PORT to forward to")
    p.add_argument("--rtt-ms", type=float, default=0.0, help="added round trip, split between the directions")
    p.add_argument("--mbit", type=float, default=0.0, help="bandwidth cap per direction (0: none)")
    p.add_argument("--loss", type=float, default=0.0, help="chance per chunk of a 200 ms stall")
    a = p.parse_args()
    asyncio.run(serve(a.listen, a.to, a.rtt_ms, a.mbit, a.loss))


if __name__ == "__main__":
    main()
