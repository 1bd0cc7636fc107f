"""One privacy budget for a year of shuffled telemetry and a DP-SGD model on the same users.

    pip install 'shuffle-eps[compose]'
    python examples/shuffle_and_dpsgd.py            # the figures of docs/accounting.md
    python examples/shuffle_and_dpsgd.py --json

Every day each of n users sends one k-RR report (eps0) through a shuffler; the same users' data
also trains a model with DP-SGD (Poisson sampling q, noise multiplier sigma, ``steps`` steps).
Both go into one dp-accounting accountant: the shuffled rounds as ``ShuffledRoundEvent`` (certified
by tablegen), DP-SGD as dp-accounting's own ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``.
The neighbouring relation is REPLACE_SPECIAL (one user's data replaced by a special record): the
shuffled rounds are certified for substitution, and dp-accounting accounts the sampled Gaussian
under it exactly as under add/remove.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from dp_accounting import GaussianDpEvent, NeighboringRelation, PoissonSampledDpEvent
from dp_accounting.privacy_accountant import PrivacyAccountant

from tablegen import compose


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=10, help="k-RR alphabet size")
    p.add_argument("--eps0", type=float, default=1.0, help="local eps0 of each daily report")
    p.add_argument("--n", type=int, default=10**6, help="users (every one reports every day)")
    p.add_argument("--days", type=int, default=365, help="daily shuffled rounds")
    p.add_argument("--steps", type=int, default=1000, help="DP-SGD steps")
    p.add_argument("--sigma", type=float, default=1.0, help="DP-SGD noise multiplier")
    p.add_argument("--q", type=float, default=0.01, help="DP-SGD Poisson sampling rate")
    p.add_argument("--delta", type=float, default=1e-8, help="total delta")
    p.add_argument("--json", action="store_true", help="one JSON object")
    return p.parse_args()


def budget(route: str, args: argparse.Namespace) -> dict[str, Any]:
    """eps of telemetry alone, DP-SGD alone and both together at ``args.delta`` through one route."""
    telemetry = (compose.ShuffledRoundEvent("krr", args.eps0, args.n, {"k": args.k}), args.days)
    sgd = (PoissonSampledDpEvent(args.q, GaussianDpEvent(args.sigma)), args.steps)

    def eps(*events: tuple[Any, int]) -> float:
        acc: PrivacyAccountant
        if route == "pld":
            acc = compose.ShufflePLDAccountant(NeighboringRelation.REPLACE_SPECIAL)
        else:
            acc = compose.ShuffleRDPAccountant(neighboring_relation=NeighboringRelation.REPLACE_SPECIAL)
        for event, count in events:
            acc.compose(event, count)
        return float(acc.get_epsilon(args.delta))

    start = time.perf_counter()
    alone = {"telemetry": eps(telemetry), "dpsgd": eps(sgd)}
    both = eps(telemetry, sgd)
    basic = sum(alone.values())
    return {"route": route, "eps": both, "eps_telemetry_alone": alone["telemetry"], "eps_dpsgd_alone": alone["dpsgd"],
            # shares of the budget: each part's eps alone over their sum (basic composition's eps at 2 delta;
            # at delta it takes each part at delta / 2, larger still)
            "share_telemetry": alone["telemetry"] / basic, "share_dpsgd": alone["dpsgd"] / basic,
            # what each part adds to the total on top of the other
            "telemetry_adds": both - alone["dpsgd"], "dpsgd_adds": both - alone["telemetry"],
            "basic_composition": basic, "seconds": round(time.perf_counter() - start, 2)}


def main() -> None:
    args = parse()
    rows = [budget(route, args) for route in ("pld", "rdp")]
    if args.json:
        print(json.dumps({"delta": args.delta, "routes": rows}))
        return
    print(f"{args.days} daily shuffled {args.k}-RR rounds (eps0 = {args.eps0}, n = {args.n}) + {args.steps} "
          f"DP-SGD steps (sigma = {args.sigma}, q = {args.q}), delta = {args.delta:g} in total")
    for r in rows:
        print(f"  {r['route']}: eps = {r['eps']:.4f} | alone: telemetry {r['eps_telemetry_alone']:.4f} "
              f"({100 * r['share_telemetry']:.1f}%), DP-SGD {r['eps_dpsgd_alone']:.4f} ({100 * r['share_dpsgd']:.1f}%) "
              f"| telemetry adds {r['telemetry_adds']:.4f}, DP-SGD adds {r['dpsgd_adds']:.4f} | {r['seconds']} s")


if __name__ == "__main__":
    main()
