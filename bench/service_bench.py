"""``python -m bench service --load``: the HTTP service under real traffic, on 127.0.0.1.

``lookup serve`` (default table and settings) in a subprocess; in this process an asyncio load
generator (keep-alive connections, one per client, HTTP/1.1 written by hand so that the
generator costs little CPU beside the server):

* load: ``--clients`` (32) clients for ``--duration`` (120 s), each waiting 0.5-1.5 s between
  questions (as locust's ``between(0.5, 1.5)``).  Each client is an application with its own
  mechanism and eps0 (off the grid, inside the table), asking at it over and over with n and
  delta varying; its mix: 70% such in-range questions (one in ten on grid points), 10% live
  questions beyond the table (eps0 in 8-12), 10% bad requests, 10% /healthz.  Reported: the
  status counts of each kind, the in-range latency percentiles, the refined fraction, the
  server's RSS over time, and on a sample of in-range answers their ratio to the engine's
  certified value at the same point, computed here afterwards (and that no answer is below the
  engine's certified lower bound);
* slow: 260 connections trickling one byte every 2 s and 256 silent ones, while a probe asks
  table questions and /healthz (the status counts and latency percentiles of the probe).

Figures depend on the machine: the shared 2-core development machine is busy with other work,
so they are an upper bound on what an idle one shows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

INSIDE = [("krr", {"k": 10}), ("krr", {"k": 100}), ("generic", {}), ("olh", {}), ("rappor", {}), ("hr", {}),
          ("krr", {"k": 2}), ("laplace", {})]
TINY = 1e-4  # below this eps, slack is reported as an absolute excess
BAD = ["mechanism=krr&k=10&eps0=-1&n=1e6&delta=1e-8", "mechanism=nope&eps0=1&n=1e6&delta=1e-8",
       "mechanism=krr&k=10&n=1e6&delta=1e-8", "mechanism=krr&k=10&eps0=1&n=2.5&delta=1e-8",
       "mechanism=krr&k=10&eps0=1&n=1e6&delta=1e-8&live=", "mechanism=generic&eps0=5e-324&n=1&delta=5e-324"]


def start_server(extra: list[str]) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "lookup.cli", "serve", "--port", "0", "--no-access-log",
                                *extra], stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if line.startswith("serving "):
            host, port = line.split()[1].rsplit(":", 1)
            threading.Thread(target=process.stderr.read, daemon=True).start()  # never let the pipe fill
            for _ in range(600):  # its live workers started (as a readiness probe would wait)
                with urllib.request.urlopen(f"http://{host}:{port}/healthz") as response:
                    if json.loads(response.read()).get("workers_ready"):
                        break
                time.sleep(0.1)
            return process, f"{host}:{port}"
    raise RuntimeError("the server did not start")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


class Client:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, address: str) -> None:
        self.host, self.port = address.rsplit(":", 1)
        self.reader: Any = None
        self.writer: Any = None

    async def get(self, target: str) -> tuple[int, dict[str, str], bytes]:
        for attempt in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, int(self.port))
            try:
                self.writer.write(f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
                head = await self.reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = await self.reader.readexactly(int(headers.get("content-length", 0)))
                if headers.get("connection") == "close":
                    self.close()
                return int(lines[0].split()[1]), headers, body
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt:
                    raise
        raise AssertionError

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def query(mechanism: str, params: dict[str, Any], **numbers: float) -> str:
    return "&".join([f"mechanism={mechanism}", *(f"{k}={v}" for k, v in {**params, **numbers}.items())])


async def client(address: str, seed: int, until: float, table: Any, out: dict[str, Any]) -> None:
    rng = random.Random(seed)
    mechanism, params = INSIDE[seed % len(INSIDE)]
    eps0 = round(math.exp(rng.uniform(math.log(0.1), math.log(6.0))), 4)  # the application's own eps0
    conn = Client(address)
    while time.monotonic() < until:
        await asyncio.sleep(rng.uniform(0.5, 1.5))
        roll = rng.random()
        if roll < 0.7:
            kind, on_grid = "inside", rng.random() < 0.1
            if on_grid:
                point = {"eps0": float(rng.choice(table.eps0[:-10])), "n": int(rng.choice(table.n[:-20])),
                         "delta": float(rng.choice(table.delta))}
            else:
                point = {"eps0": eps0, "n": int(math.exp(rng.uniform(math.log(1e3), math.log(1e8)))),
                         "delta": float(f"{math.exp(rng.uniform(math.log(1e-11), math.log(1e-4))):.3g}")}
            target = "/v1/eps?" + query(mechanism, params, **point)
        elif roll < 0.8:
            kind, point = "live", None
            target = "/v1/eps?" + query(mechanism, params, eps0=round(rng.uniform(8.05, 12), 3), n=10**6, delta=1e-8)
        elif roll < 0.9:
            kind, point, target = "bad", None, "/v1/eps?" + rng.choice(BAD)
        else:
            kind, point, target = "health", None, "/healthz"
        start = time.perf_counter()
        try:
            status, headers, body = await conn.get(target)
        except (ConnectionError, asyncio.IncompleteReadError):
            out["status"][kind, "closed"] += 1
            continue
        seconds = time.perf_counter() - start
        out["status"][kind, status] += 1
        out["times"].setdefault(kind, []).append(seconds)
        if status == 503 and "retry-after" not in headers:
            out["status"][kind, "503 without Retry-After"] += 1
        if kind == "inside":
            out["latency"].append(seconds)
            out["slowest"].append((seconds, status, target))
            if status == 200:
                answer = json.loads(body)
                out["refined"][answer.get("refined", True) is not False] += 1
                out["answers"].append((mechanism, params, point, answer))
    conn.close()


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    if not values:
        return "none"
    pick = [values[min(len(values) - 1, int(q * len(values)))] * 1000 for q in (0.5, 0.9, 0.99)]
    return f"p50 {pick[0]:.1f} ms, p90 {pick[1]:.1f} ms, p99 {pick[2]:.1f} ms, max {values[-1] * 1000:.1f} ms"


def against_live(answers: list[tuple[str, dict, dict, dict]], sample: int) -> list[str]:
    """Ratios of sampled in-range answers to the engine's certified eps at the same point, and
    whether any is below the engine's certified lower bound (computed here, after the load).
    Where the engine's eps is below ``TINY`` a ratio says nothing (eps goes to 0; the chord
    between grid deltas is far above it relatively, never absolutely): the largest absolute
    excess is reported there instead."""
    from tablegen.engine import eps_bounds

    rng = random.Random(7)
    ratios, excess, below, lower_checked = [], [0.0], 0, 0
    for mechanism, params, point, answer in rng.sample(answers, min(sample, len(answers))):
        bounds = eps_bounds(mechanism, eps0=point["eps0"], n=point["n"], delta=point["delta"], **params)
        if bounds.upper >= TINY:
            ratios.append(answer["eps"] / bounds.upper - 1)
        else:
            excess.append(answer["eps"] - bounds.upper)
        if bounds.lower is not None:
            lower_checked += 1
            below += answer["eps"] < bounds.lower
    ratios.sort()
    return [f"- slack against the engine's certified eps on {len(ratios)} sampled answers with eps >= {TINY:g}: "
            f"median {100 * ratios[len(ratios) // 2]:+.2f}%, max {100 * ratios[-1]:+.2f}%, min {100 * ratios[0]:+.2f}%;"
            f" {len(excess) - 1} more with eps < {TINY:g}, at most {max(excess):.2g} above it; below the engine's "
            f"certified lower bound: {below} of {lower_checked}"]


def load(args: argparse.Namespace) -> list[str]:
    from lookup.api import default_table

    table = default_table()
    process, address = start_server([])
    try:
        out: dict[str, Any] = {"status": Counter(), "latency": [], "refined": Counter(), "answers": [],
                               "slowest": [], "times": {}}
        rss: list[tuple[float, float]] = []

        async def main() -> None:
            start = time.monotonic()
            until = start + args.duration
            tasks = [asyncio.create_task(client(address, seed, until, table, out)) for seed in range(args.clients)]
            while time.monotonic() < until:
                rss.append((time.monotonic() - start, rss_mb(process.pid)))
                await asyncio.sleep(min(10.0, args.duration / 6))
            await asyncio.gather(*tasks)

        asyncio.run(main())
        rss.append((args.duration, rss_mb(process.pid)))
        with urllib.request.urlopen(f"http://{address}/metrics") as response:
            kept = {line.split()[0]: line.split()[1] for line in response.read().decode().splitlines()
                    if line.startswith(("lookup_slices", "lookup_slice_hits", "lookup_live_timeouts",
                                        "lookup_background_timeouts"))}
    finally:
        process.terminate()
        process.wait(60)
    status = out["status"]
    lines = [f"load: {args.clients} clients, {args.duration:g} s, 0.5-1.5 s between questions, 127.0.0.1, default "
             f"table and settings (2 live workers, 1 background worker); load generator on the same shared 2-core "
             "machine"]
    for kind in ("inside", "live", "bad", "health"):
        counts = ", ".join(f"{code}: {n}" for (k, code), n in sorted(status.items(), key=str) if k == kind)
        lines.append(f"- {kind}: {counts}; {percentiles(out['times'].get(kind, []))}")
    refined = out["refined"]
    lines.append(f"- in-range latency: {percentiles(out['latency'])}")
    slowest = sorted(out["slowest"])[-3:]
    lines.append("- slowest in-range: " + "; ".join(f"{1000 * t:.0f} ms {code} {url}" for t, code, url in slowest))
    lines.append(f"- refined (slice, refinement or within max_slack): {refined[True]} of "
                 f"{refined[True] + refined[False]} ({100 * refined[True] / max(1, sum(refined.values())):.1f}%)")
    lines.append("- at the end: " + ", ".join(f"{k} {v}" for k, v in kept.items()))
    lines.append("- server RSS (MB) at " + ", ".join(f"{t:.0f} s: {m:.0f}" for t, m in rss))
    return [*lines, *against_live(out["answers"], args.sample)]


async def slow_clients(address: str, probes: int) -> tuple[Counter, list[float], int]:
    host, port = address.rsplit(":", 1)
    silent = [await asyncio.open_connection(host, int(port)) for _ in range(256)]
    trickling = [await asyncio.open_connection(host, int(port)) for _ in range(260)]
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    stop = asyncio.Event()

    async def trickle() -> None:
        i = 0
        while not stop.is_set():
            for _, writer in trickling:
                if not writer.is_closing():
                    writer.write(request[i % len(request):i % len(request) + 1])
            i += 1
            await asyncio.sleep(2)

    task = asyncio.create_task(trickle())
    conn, status, times = Client(address), Counter(), []
    for i in range(probes):
        target = "/healthz" if i % 2 else "/v1/eps?mechanism=krr&k=10&eps0=1.37&n=31000&delta=3e-8&max_slack=none"
        start = time.perf_counter()
        code, _, _ = await conn.get(target)
        times.append(time.perf_counter() - start)
        status[code] += 1
        await asyncio.sleep(0.05)
    stop.set()
    await task
    closed = 0
    for reader, writer in [*silent, *trickling]:
        try:
            closed += await asyncio.wait_for(reader.read(100), 0.5) == b""
        except ConnectionError:  # reset: closed by the server while the client still wrote
            closed += 1
        except TimeoutError:
            pass
        writer.close()
    conn.close()
    return status, times, closed


def slow(args: argparse.Namespace) -> list[str]:
    process, address = start_server([])
    try:
        status, times, closed = asyncio.run(slow_clients(address, args.probes))
    finally:
        process.terminate()
        process.wait(60)
    return [f"slow clients: 256 silent + 260 trickling (a byte every 2 s) connections, header deadline 5 s; a probe "
            f"asks {args.probes} questions 50 ms apart (table answers and /healthz)",
            f"- probe: {', '.join(f'{k}: {v}' for k, v in sorted(status.items()))}; {percentiles(times)}",
            f"- closed by the server by the end: {closed} of 516"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench service", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--load", action="store_true", help="run the load and slow-client parts")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--duration", type=float, default=120.0, help="seconds of load")
    p.add_argument("--sample", type=int, default=40, help="answers compared with the engine afterwards")
    p.add_argument("--probes", type=int, default=400, help="probe questions during the slow-client part")
    p.add_argument("--quick", action="store_true", help="8 clients for 15 s, 10 sampled, 100 probes")
    args = p.parse_args(argv)
    if args.quick:
        args.clients, args.duration, args.sample, args.probes = 8, 15.0, 10, 100
    if not args.load:
        p.error("say --load (the only part)")
    print("\n".join(load(args)), flush=True)
    print("\n".join(slow(args)), flush=True)


if __name__ == "__main__":
    main()
