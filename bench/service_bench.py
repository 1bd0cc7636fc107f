"""``python -m bench service --load``: the HTTP service under real traffic, on 127.0.0.1.

``lookup serve`` (default table and settings, plus ``--server-args``) in a subprocess; in this
process an asyncio load generator (keep-alive connections, one per client, HTTP/1.1 written by
hand so that the generator costs little CPU beside the server):

* load: ``--clients`` (32) clients for ``--duration`` (120 s), each waiting 0.5-1.5 s between
  questions (as locust's ``between(0.5, 1.5)``), in one of two mixes (``--mix``):

  - ``issue47`` (the default; the traffic of issue 47): 60% ``random`` in-range questions at
    random off-grid points (a mechanism of ``INSIDE``, eps0 log-uniform in 0.1-6 off the grid, n
    log-uniform in 1e3-1e8, delta log-uniform in 1e-11-1e-4 to 3 digits), each asked once; 15%
    ``repeated``: twenty fixed deployment questions (drawn the same way from a seeded RNG) asked
    again and again; 10% ``live`` questions beyond the table (eps0 in 8.05-12); 5% ``bad`` input;
    5% ``rounds`` (``&rounds=365`` at a random in-range point; a 400 where delta is too small to
    certify for 365 rounds, e.g. laplace eps0 0.6126 n 404359 delta 2.73e-11); 5% ``page`` (``/``
    or ``/openapi.json``);
  - ``apps`` (the earlier mix): each client an application with its own mechanism and eps0 (off
    the grid, inside the table), asking at it over and over with n and delta varying: 70% such
    ``inside`` questions (one in ten on grid points), 10% live, 10% bad, 10% ``health``.

  Reported: each kind's status counts and latency percentiles; for the in-range kinds, each and
  together, the refined fraction and, on a sample stratified by kind (``--sample``), the answers
  against the engine's certified bounds at the same point, computed here afterwards: the fraction
  within 2% of its certified eps, the ratio's percentiles, the answers below its certified lower
  bound and those whose eps_lower is above its certified eps (both must be 0); for the repeated
  questions the refined fraction at the first, second and later askings; the server's refinement,
  slice, queue and error metrics at the end; the RSS and PSS of the server over time and of its
  worker processes (its descendants) at most (PSS counts a page shared by k processes 1/k: the
  table's rows, mapped by all of them, ``lookup/service/shared.py``);
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
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bench import common

INSIDE = [("krr", {"k": 10}), ("krr", {"k": 100}), ("generic", {}), ("olh", {}), ("rappor", {}), ("hr", {}),
          ("krr", {"k": 2}), ("laplace", {})]
TINY = 1e-4  # below this eps, slack is reported as an absolute excess (within 2%: at most 2% of TINY above)
BAD = ["mechanism=krr&k=10&eps0=-1&n=1e6&delta=1e-8", "mechanism=nope&eps0=1&n=1e6&delta=1e-8",
       "mechanism=krr&k=10&n=1e6&delta=1e-8", "mechanism=krr&k=10&eps0=1&n=2.5&delta=1e-8",
       "mechanism=krr&k=10&eps0=1&n=1e6&delta=1e-8&live=", "mechanism=generic&eps0=5e-324&n=1&delta=5e-324"]
EPS0 = (0.1, 6.0)  # the in-range questions' eps0 (log-uniform), inside the default table's 0.05-8
ISSUE47 = {"random": 0.60, "repeated": 0.15, "live": 0.10, "bad": 0.05, "rounds": 0.05, "page": 0.05}
APPS = {"inside": 0.7, "live": 0.1, "bad": 0.1, "health": 0.1}
METRICS = ("lookup_refine", "lookup_slice", "lookup_live_queue", "lookup_background", "lookup_answer_slack",
           "lookup_server_errors")  # the /metrics lines printed at the end (those the server has)
Ask = tuple[str, dict[str, Any], dict[str, float]]  # an in-range eps question: mechanism, its parameters, numbers
Question = tuple[str, str, Ask | None]  # kind, request target, the in-range eps question (else None)


READY: dict[str, float] = {}  # seconds from the start of the server to "serving", and to /healthz 200


def start_server(extra: list[str]) -> tuple[subprocess.Popen, str]:
    """``lookup serve`` started, returned the moment ``/healthz`` says ready (200; 503 "starting"
    while it warms up), as a load balancer or Kubernetes readiness probe would send traffic."""
    began = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "lookup.cli", "serve", "--port", "0", "--no-access-log",
                                *extra], stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        if line.startswith("serving "):
            host, port = line.split()[1].rsplit(":", 1)
            READY["serving"] = time.monotonic() - began
            threading.Thread(target=process.stderr.read, daemon=True).start()  # never let the pipe fill
            for _ in range(6000):  # polled every 10 ms: the load starts at once
                try:
                    with urllib.request.urlopen(f"http://{host}:{port}/healthz") as response:
                        if response.status == 200:
                            break
                except urllib.error.HTTPError as err:  # 503 "starting"
                    err.close()
                time.sleep(0.01)
            READY["ready"] = time.monotonic() - began
            return process, f"{host}:{port}"
    raise RuntimeError("the server did not start")


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (NaN once it is gone)."""
    return _proc_mb(f"/proc/{pid}/status", "VmRSS:")


def pss_mb(pid: int) -> float:
    """A process's proportional share of resident memory in MB: each page shared by k processes
    (the table's rows mapped by the server and its workers, lookup/service/shared.py) counted 1/k (NaN once
    it is gone or where the kernel has no smaps_rollup)."""
    return _proc_mb(f"/proc/{pid}/smaps_rollup", "Pss:")


def _proc_mb(path: str, key: str) -> float:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return math.nan
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith(key)), math.nan)


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (the server's worker pools, their resource tracker), read from /proc."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        above = todo.pop()
        children = [child for child, of in parent.items() if of == above]
        found += children
        todo += children
    return found


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


def eps_target(ask: Ask, extra: str = "") -> str:
    mechanism, params, numbers = ask
    return "/v1/eps?" + query(mechanism, params, **numbers) + extra


def log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def random_n_delta(rng: random.Random) -> dict[str, float]:
    return {"n": int(log_uniform(rng, 1e3, 1e8)), "delta": float(f"{log_uniform(rng, 1e-11, 1e-4):.3g}")}


def random_point(rng: random.Random, grid: Any) -> Ask:
    """An in-range eps question: a mechanism of ``INSIDE``, eps0 off the table's ``grid``, n and delta."""
    mechanism, params = rng.choice(INSIDE)
    while abs(grid - (eps0 := round(log_uniform(rng, *EPS0), 4))).min() < 1e-9:
        pass
    return mechanism, params, {"eps0": eps0, **random_n_delta(rng)}


def deployment(grid: Any) -> list[Ask]:
    """Issue 47's twenty fixed deployment questions (the same in every client and run)."""
    rng = random.Random(47)
    return [random_point(rng, grid) for _ in range(20)]


def weighted(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def side_target(kind: str, rng: random.Random, mechanism: str, params: dict[str, Any]) -> str:
    """The target of a question the table does not answer: live, bad, page or health."""
    if kind == "live":
        return "/v1/eps?" + query(mechanism, params, eps0=round(rng.uniform(8.05, 12), 3), n=10**6, delta=1e-8)
    if kind == "bad":
        return "/v1/eps?" + rng.choice(BAD)
    return rng.choice(["/", "/openapi.json"]) if kind == "page" else "/healthz"


def issue47(table: Any, rng: random.Random, seed: int) -> Callable[[], Question]:
    """A client of issue 47's mix (``ISSUE47``; see the module docstring)."""
    fixed = deployment(table.eps0)

    def pick() -> Question:
        kind = weighted(rng, ISSUE47)
        if kind in ("random", "repeated"):
            ask = random_point(rng, table.eps0) if kind == "random" else rng.choice(fixed)
            return kind, eps_target(ask), ask
        if kind == "rounds":
            return kind, eps_target(random_point(rng, table.eps0), "&rounds=365"), None
        return kind, side_target(kind, rng, *rng.choice(INSIDE)), None

    return pick


def apps(table: Any, rng: random.Random, seed: int) -> Callable[[], Question]:
    """A client of the earlier mix (``APPS``): an application with its own mechanism and eps0."""
    mechanism, params = INSIDE[seed % len(INSIDE)]
    eps0 = round(log_uniform(rng, *EPS0), 4)

    def pick() -> Question:
        kind = weighted(rng, APPS)
        if kind != "inside":
            return kind, side_target(kind, rng, mechanism, params), None
        if rng.random() < 0.1:  # on grid points
            numbers = {"eps0": float(rng.choice(table.eps0[:-10])), "n": int(rng.choice(table.n[:-20])),
                       "delta": float(rng.choice(table.delta))}
        else:
            numbers = {"eps0": eps0, **random_n_delta(rng)}
        ask = (mechanism, params, numbers)
        return kind, eps_target(ask), ask

    return pick


MIXES = {"issue47": (ISSUE47, issue47), "apps": (APPS, apps)}


async def client(address: str, until: float, pick: Callable[[], Question], rng: random.Random,
                 out: dict[str, Any]) -> None:
    conn = Client(address)
    while time.monotonic() < until:
        await asyncio.sleep(rng.uniform(0.5, 1.5))
        kind, target, ask = pick()
        out["asked"][target] += 1
        asking = out["asked"][target]  # 1 for the first asking (of any client), in the order sent
        start = time.perf_counter()
        try:
            status, headers, body = await conn.get(target)
        except (ConnectionError, asyncio.IncompleteReadError):
            out["status"][kind, "closed"] += 1
            continue
        seconds = time.perf_counter() - start
        out["status"][kind, status] += 1
        out["times"][kind].append(seconds)
        if status == 503 and "retry-after" not in headers:
            out["status"][kind, "503 without Retry-After"] += 1
        if ask is not None:
            out["in_range"].append((seconds, status, target))
            out["in_range_at"].append((start - out["began"], seconds))
            if status == 200:
                out["answers"][kind].append((ask, json.loads(body), asking))
    conn.close()


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    if not values:
        return "none"
    pick = [quantile(values, q) * 1000 for q in (0.5, 0.9, 0.99)]
    return f"p50 {pick[0]:.1f} ms, p90 {pick[1]:.1f} ms, p99 {pick[2]:.1f} ms, max {values[-1] * 1000:.1f} ms"


def share(count: int, total: int) -> str:
    return f"{count} of {total} ({100 * count / max(1, total):.1f}%)"


def refined(answer: dict[str, Any]) -> bool:
    """Refined: a slice, a refinement or a table answer within max_slack (not labelled "refined": false)."""
    return answer.get("refined", True) is not False


class Check(NamedTuple):
    """One answer against the engine's certified bounds at its point."""

    excess: float  # answer / engine's eps - 1; where the engine's eps is below TINY, answer - engine's eps
    tiny: bool
    below: bool | None  # below the engine's certified lower bound (None: the engine gives none)
    false_lower: bool | None  # its eps_lower above the engine's certified eps (None: it carries none)
    label: str = ""  # the question and how it was answered (for the worst ones)

    @property
    def within(self) -> bool:  # within 2% of the engine's certified eps (absolutely, 2% of TINY, below TINY)
        return self.excess <= 0.02 * (TINY if self.tiny else 1)


def check(answer: dict[str, Any], upper: float, lower: float | None, target: str = "") -> Check:
    eps, eps_lower, tiny = answer["eps"], answer.get("eps_lower"), upper < TINY
    how = f"{target} -> {eps:.5g} ({answer.get('source')}, refined {refined(answer)}, slack {answer.get('slack')})"
    return Check(eps - upper if tiny else eps / upper - 1, tiny, None if lower is None else eps < lower,
                 None if eps_lower is None else eps_lower > upper, f"{how}, engine {upper:.5g}")


def stratified(groups: dict[str, list], size: int, rng: random.Random) -> dict[str, list]:
    """A sample of about ``size`` of the groups' items, each group in proportion (at least one of each)."""
    total = max(1, sum(map(len, groups.values())))
    return {k: rng.sample(v, min(len(v), max(1, round(size * len(v) / total)))) for k, v in groups.items() if v}


def against_engine(checks: list[Check]) -> str:
    """Where the engine's eps is below ``TINY`` a ratio says nothing (eps goes to 0; the chord between
    grid deltas is far above it relatively, never absolutely): the largest absolute excess is given."""
    ratios = sorted(c.excess for c in checks if not c.tiny)
    tiny = [c.excess for c in checks if c.tiny]
    lower = [c.below for c in checks if c.below is not None]
    carried = [c.false_lower for c in checks if c.false_lower is not None]
    text = f"within 2% of its certified eps {share(sum(c.within for c in checks), len(checks))}"
    if ratios:
        text += (f"; answer / certified eps - 1 (eps >= {TINY:g}): median {100 * quantile(ratios, 0.5):+.2f}%, "
                 f"p90 {100 * quantile(ratios, 0.9):+.2f}%, max {100 * ratios[-1]:+.2f}%, min {100 * ratios[0]:+.2f}%")
    if tiny:
        text += f"; {len(tiny)} with eps < {TINY:g}, at most {max(tiny):.2g} above it"
    return (f"{text}; below its certified lower bound: {sum(lower)} of {len(lower)}; eps_lower above its "
            f"certified eps: {sum(carried)} of {len(carried)}")


def _binary_against_blanket(sampled: dict[str, list]) -> list[str]:
    """The sample again with k-RR k = 2 held against the blanket bound, the analysis the table's k = 2 row
    still holds (the live engine certifies k = 2 at the exact worst case, 20-40% lower: issue 54)."""
    checks = []
    for rows in sampled.values():
        for ask, answer, _ in rows:
            mechanism, params, numbers = ask
            b = common.blanket_eps_bounds(mechanism, **numbers, **params)
            checks.append(check(answer, b.upper, b.lower, eps_target(ask)))
    return [f"- together, k-RR k = 2 held against the blanket bound its table row holds: {against_engine(checks)}"]


def in_range_report(answers: dict[str, list], sample: int) -> list[str]:
    """The refined fraction of each in-range kind and all together, and a sample stratified by kind
    against the engine's certified bounds at the same point (computed here, after the load)."""
    from tablegen.engine import eps_bounds

    sampled = stratified(answers, sample, random.Random(7))
    bounds: dict[str, Any] = {}  # the engine's, by question (the repeated ones are asked again and again)
    checks = {}
    for kind, rows in sampled.items():
        for ask, answer, _ in rows:
            mechanism, params, numbers = ask
            key = eps_target(ask)
            if key not in bounds:
                bounds[key] = eps_bounds(mechanism, **numbers, **params)
            checks.setdefault(kind, []).append(check(answer, bounds[key].upper, bounds[key].lower, key))
    groups = {kind: (rows, checks.get(kind, [])) for kind, rows in answers.items() if rows}
    if len(groups) > 1:
        rows, checked = zip(*groups.values(), strict=True)  # each kind's answers, each kind's checks
        groups["together"] = (sum(rows, []), sum(checked, []))
    lines = []
    for name, (rows, sampled_checks) in groups.items():
        lines.append(f"- {name}: refined {share(sum(refined(a) for _, a, _ in rows), len(rows))}; against the "
                     f"engine on {len(sampled_checks)} sampled: {against_engine(sampled_checks)}")
    lines += _binary_against_blanket(sampled)
    if answers.get("repeated"):
        lines.append(askings(answers["repeated"]))
    worst = sorted((c for c in sum(checks.values(), []) if not c.within), key=lambda c: c.excess)[-3:]
    return lines + [f"- beyond 2%: {c.label}" for c in worst]


def askings(rows: list[tuple[Ask, dict, int]]) -> str:
    """The repeated questions refined at their first, second and later askings (in the order sent)."""
    by_asking: dict[int, list[bool]] = defaultdict(list)
    later: dict[str, list[bool]] = defaultdict(list)  # each question's answers from its second asking on
    for ask, answer, asking in rows:
        by_asking[min(asking, 3)].append(refined(answer))
        if asking > 1:
            later[eps_target(ask)].append(refined(answer))
    first, second, third = (share(sum(by_asking[i]), len(by_asking[i])) for i in (1, 2, 3))
    return (f"- repeated, refined at the first asking {first}, the second {second}, later {third}; questions "
            f"refined at every asking from the second on: {sum(map(all, later.values()))} of {len(later)}")


def load(args: argparse.Namespace) -> list[str]:
    from lookup.answer.api import default_table

    table = default_table()
    weights, mix = MIXES[args.mix]
    process, address = start_server(shlex.split(args.server_args))
    out: dict[str, Any] = {"status": Counter(), "times": defaultdict(list), "in_range": [], "asked": Counter(),
                           "answers": {kind: [] for kind in weights}, "in_range_at": [], "began": time.perf_counter()}
    # seconds, the server's (RSS, PSS) MB, its descendants' (RSS, PSS) MB
    rss: list[tuple[float, tuple[float, float], list[tuple[float, float]]]] = []

    def sample_rss(seconds: float) -> None:
        workers = [(rss_mb(pid), pss_mb(pid)) for pid in descendants(process.pid)]
        rss.append((seconds, (rss_mb(process.pid), pss_mb(process.pid)), [w for w in workers if not math.isnan(w[0])]))

    async def main() -> None:
        out["began"] = time.perf_counter()  # the load starts the moment /healthz said ready
        start = time.monotonic()
        until = start + args.duration
        rngs = [random.Random(seed) for seed in range(args.clients)]
        tasks = [asyncio.create_task(client(address, until, mix(table, rng, seed), rng, out))
                 for seed, rng in enumerate(rngs)]
        while time.monotonic() < until:
            sample_rss(time.monotonic() - start)
            await asyncio.sleep(1.0)
        await asyncio.gather(*tasks)

    try:
        asyncio.run(main())
        sample_rss(args.duration)
        with urllib.request.urlopen(f"http://{address}/metrics") as response:
            metrics = [line for line in response.read().decode().splitlines() if not line.startswith("#")]
    finally:
        process.terminate()
        process.wait(60)
    workers = next((line.split()[-1] for line in metrics if line.startswith("lookup_live_workers ")), "?")
    lines = [f"load, mix {args.mix} ({', '.join(f'{100 * w:.0f}% {kind}' for kind, w in weights.items())}): "
             f"{args.clients} clients, {args.duration:g} s, 0.5-1.5 s between questions, 127.0.0.1, default table "
             f"and settings{f' + {args.server_args}' if args.server_args else ''} (live workers: {workers}); load "
             "generator on the same shared 2-core machine"]
    for kind in weights:
        counts = ", ".join(f"{code}: {n}" for (k, code), n in sorted(out["status"].items(), key=str) if k == kind)
        lines.append(f"- {kind}: {counts or 'none'}; {percentiles(out['times'][kind])}")
    lines.append(f"- started: serving after {READY['serving']:.1f} s, /healthz ready (200) after "
                 f"{READY['ready']:.1f} s; the load began then")
    lines.append(f"- in-range latency: {percentiles([t for t, _, _ in out['in_range']])}")
    windows = defaultdict(list)
    for at, seconds in out["in_range_at"]:
        windows[int(at // 10)].append(seconds)
    lines.append("- in-range latency by 10-s window from the first request (p50 / p99 ms): " + ", ".join(
        f"{10 * w}-{10 * w + 10} s {1000 * quantile(sorted(v), 0.5):.1f} / {1000 * quantile(sorted(v), 0.99):.1f}"
        for w, v in sorted(windows.items())))
    slowest = sorted(out["in_range"])[-3:]
    lines.append("- slowest in-range: " + "; ".join(f"{1000 * t:.0f} ms {code} {url}" for t, code, url in slowest))
    lines += in_range_report(out["answers"], args.sample)
    lines.append("- /metrics at the end:" + "".join(f"\n  {line}" for line in metrics if line.startswith(METRICS)))
    lines += memory_report(rss, max(1, round(min(10.0, args.duration / 6))))
    return lines


def memory_report(rss: list[tuple[float, tuple[float, float], list[tuple[float, float]]]], every: int) -> list[str]:
    """The server's RSS and PSS over time (one sample in ``every``), its worker processes' at most
    (PSS: pages shared by k processes, such as the table's mapped rows, counted 1/k each)."""
    def most(values: list[float]) -> float:
        return max((v for v in values if not math.isnan(v)), default=math.nan)

    shown = ", ".join(f"{t:.0f} s: {r:.0f} ({p:.0f})" for t, (r, p), _ in [*rss[:-1:every], rss[-1]])
    largest = [most([w[i] for _, _, ws in rss for w in ws]) for i in (0, 1)]
    together = [most([sum(w[i] for w in ws) for _, _, ws in rss]) for i in (0, 1)]
    return [f"- server RSS (PSS) MB at {shown}",
            f"- worker processes (the server's descendants), at most over the run (sampled each second): "
            f"{max(len(w) for _, _, w in rss)} processes, the largest RSS {largest[0]:.0f} MB (PSS {largest[1]:.0f} "
            f"MB), all together RSS {together[0]:.0f} MB (PSS {together[1]:.0f} MB)"]


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
    process, address = start_server(shlex.split(args.server_args))
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
    p.add_argument("--mix", choices=list(MIXES), default="issue47", help="the load's questions (see above)")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--duration", type=float, default=120.0, help="seconds of load")
    p.add_argument("--sample", type=int, default=200, help="in-range answers compared with the engine afterwards")
    p.add_argument("--probes", type=int, default=400, help="probe questions during the slow-client part")
    p.add_argument("--server-args", default="", help='more flags for lookup serve, e.g. "--live-workers 1"')
    p.add_argument("--quick", action="store_true", help="8 clients for 15 s, 20 sampled, 100 probes")
    p.add_argument("--no-slow", action="store_true", help="the load part only (no slow-client part)")
    args = p.parse_args(argv)
    if args.quick:
        args.clients, args.duration, args.sample, args.probes = 8, 15.0, 20, 100
    if not args.load:
        p.error("say --load (the only part)")
    print("\n".join(load(args)), flush=True)
    if not args.no_slow:
        print("\n".join(slow(args)), flush=True)


if __name__ == "__main__":
    main()
