"""``lookup serve`` under load, on loopback: keep-alive table throughput, and table-answer latency
while clients force live computations.

    python bench/serve_bench.py [--seconds 10] [--clients 16] [--live-clients 8] [--http h11|httptools]

The server is started as ``lookup serve --no-access-log`` on a free port (the shipped table).  The
client is this script: asyncio, one keep-alive HTTP/1.1 connection per client, each sending GET
requests back to back and reading each answer (status line, Content-Length body) before the
next.  Phase 1: ``--clients`` connections asking table answers (grid points of krr k=10, varied);
requests/s over ``--seconds``.  Phase 2: ``--live-clients`` connections asking off-grid
questions (each one new: live or refined work, most refused 503 once the queue is full) while 4
connections ask table answers; the table answers' latency percentiles, the status counts of the
live clients, and the server's peak RSS (its own process and its workers).  Phase 3 (with
``--soak S``): for S seconds, ``--clients`` connections of which 40% of the requests are bad (unknown
mechanism, k = -3, non-numbers, out of domain, unknown parameter) and the rest table answers,
beside ``--live-clients`` connections forcing live work; the status counts (no 5xx but 503 allowed)
and the server's RSS sampled every 10 s.  Client and server share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BAD_QUERIES = ["/v1/eps?mechanism=nope&eps0=1&n=1e6&delta=1e-8",
               "/v1/eps?mechanism=krr&k=-3&eps0=1&n=1e6&delta=1e-8",
               "/v1/eps?mechanism=krr&k=10&eps0=abc&n=1e6&delta=1e-8",
               "/v1/eps?mechanism=krr&k=10&eps0=1&n=1e6&delta=2",
               "/v1/eps?mechanism=krr&k=10&eps0=1&n=1e6&delta=1e-8&colour=red"]
TABLE_QUERIES = [f"/v1/eps?mechanism=krr&k=10&eps0={e}&n={n}&delta=1e-8&max_slack=none"
                 for e in (0.5, 1, 2, 4) for n in ("1e4", "1e5", "1e6")]


async def client(port: int, paths: list[str], stop: float, latencies: list[float],
                 statuses: collections.Counter) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.perf_counter() < stop:
            path = paths[i % len(paths)] if paths else live_path()
            i += 1
            start = time.perf_counter()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
            statuses[status] += 1
            if b"connection: close" in head.lower():
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
    finally:
        writer.close()


def live_path() -> str:
    """A new off-grid question each time (no cache hit): a live or refined computation."""
    eps0 = round(random.uniform(0.6, 3.9), 6)
    n = random.randint(10**4, 10**7)
    return f"/v1/eps?mechanism=krr&k=10&eps0={eps0}&n={n}&delta=1e-8"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1e3 if values else float("nan")


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its children, MiB (from /proc)."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def children(pid: int) -> list[int]:
    try:
        direct = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return direct + [g for c in direct for g in children(c)]


async def phase(port: int, groups: list[tuple[int, list[str]]], seconds: float) -> list[tuple[list, Any]]:
    stop = time.perf_counter() + seconds
    results = [([], collections.Counter()) for _ in groups]
    tasks = [client(port, paths, stop, results[g][0], results[g][1])
             for g, (count, paths) in enumerate(groups) for _ in range(count)]
    await asyncio.gather(*tasks)
    return results


def soak(port: int, pid: int, args: argparse.Namespace) -> None:
    """Phase 3: bad requests (40%), table answers and live work together, RSS sampled every 10 s."""
    mixed = [*TABLE_QUERIES, *TABLE_QUERIES[:3], *BAD_QUERIES * 2]  # 15 good, 10 bad: 40% bad
    samples: list[float] = []

    async def run() -> list[tuple[list, Any]]:
        async def sample() -> None:
            while True:
                samples.append(rss_mib(pid))
                await asyncio.sleep(10)

        sampler = asyncio.create_task(sample())
        try:
            return await phase(port, [(args.clients, mixed), (args.live_clients, [])], args.soak)
        finally:
            sampler.cancel()

    (ml, ms), (ll, ls) = asyncio.run(run())
    print(f"soak {args.soak:.0f} s: {args.clients} connections (40% bad requests): statuses {dict(ms)}, "
          f"p99 {pct(ml, 0.99):.2f} ms; {args.live_clients} live clients: statuses {dict(ls)}")
    print(f"server RSS every 10 s (MiB): {', '.join(f'{v:.0f}' for v in samples)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--live-clients", type=int, default=8)
    parser.add_argument("--http", default="h11")
    parser.add_argument("--soak", type=float, default=0, help="seconds of phase 3 (0: skip it)")
    args = parser.parse_args()
    log = open(os.devnull, "w")
    server = subprocess.Popen([sys.executable, "-m", "lookup.cli", "serve", "--port", "0", "--no-access-log",
                               "--http", args.http], stderr=subprocess.PIPE, stdout=log, text=True)
    line = server.stderr.readline()
    port = int(line.split()[1].rsplit(":", 1)[1])
    subprocess.Popen(["cat"], stdin=server.stderr, stdout=log)  # drain the server's log
    time.sleep(3)  # the live workers start
    try:
        print(f"# lookup serve benchmark ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, http={args.http})")
        (lat, st), = asyncio.run(phase(port, [(args.clients, TABLE_QUERIES)], args.seconds))
        print(f"keep-alive table answers: {args.clients} connections, {sum(st.values()) / args.seconds:.0f} "
              f"requests/s, p50 {pct(lat, 0.5):.2f} ms, p99 {pct(lat, 0.99):.2f} ms, statuses {dict(st)}")
        peak = rss_mib(server.pid)
        (tl, ts), (ll, ls) = asyncio.run(phase(port, [(4, TABLE_QUERIES), (args.live_clients, [])], args.seconds))
        peak = max(peak, rss_mib(server.pid))
        print(f"table answers while {args.live_clients} clients force live work: {len(tl)} answers, "
              f"p50 {pct(tl, 0.5):.2f} ms, p99 {pct(tl, 0.99):.2f} ms, max {pct(tl, 1.0):.2f} ms, statuses {dict(ts)}")
        print(f"live clients: statuses {dict(ls)}, p50 {pct(ll, 0.5):.1f} ms")
        print(f"server RSS (process and workers) after the phases: {peak:.0f} MiB")
        if args.soak:
            soak(port, server.pid, args)
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
