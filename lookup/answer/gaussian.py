"""The shuffled Gaussian (``gaussian``: each user reports x + N(0, sigma^2), x in [0, 1] or in {0, 1}).

It is not an eps0-LDP randomizer: it has no eps0, it is not in the engine's registry and the zarr
tables have no rows of it, so ``lookup.eps`` and ``lookup.delta`` hand it here (``lookup/answer/api.py``).
An eps query is answered from a sigma device file (format 3: ``tablegen export --device --mechanism
gaussian``; the one ``table`` names, else the shipped ``data/gaussian.sheps``) where it covers the query
and its slack is within max_slack or nothing live can answer (``device_file``, ``device_eps``,
``lookup.device.DeviceTable.eps_sigma``); every other answer is the engine's,
``tablegen.engine.gaussian`` (imported only when an answer is computed), cached as
``lookup/answer/live.py`` caches live answers; T rounds composed (``rounds``) are
``tablegen.compose.gaussian_eps``'s (the ``compose`` extra), cached as composed answers are.  Its
parameters have the names of ``tablegen compute``: ``sigma``, the noise's standard deviation in
units of the input range, in [SIGMA_MIN, SIGMA_MAX], and ``inputs``: ``unit`` (x in [0, 1], the
default) or ``bits`` (x in {0, 1}).  Both are answered by the analysis of bits (``ANALYSED``): the pair
(0, 1) is the worst pair of the blanket bound for inputs in [0, 1], and datasets of bits are datasets
of [0, 1], so its lower bounds hold for both (docs/soundness.md, "The worst pair of inputs in [0, 1]").
"""

from __future__ import annotations

import math
import os
from typing import Any

from lookup.answer import live as live_engine
from lookup.format import SIGMA_MAX, SIGMA_MIN

NAME = "gaussian"
PARAMS = ("sigma", "inputs")  # its parameters (no other mechanism takes them)
INPUTS = ("unit", "bits")
DEFAULT_INPUTS = "unit"
ANALYSED = "bits"  # the inputs of the engine's analysis and of the sigma files' row: it answers both INPUTS
ROW = {"inputs": ANALYSED}  # that row, as sigma files and the answer caches name it
INPUTS_HELP = ("gaussian: what users hold, unit x in [0, 1] (the default) or bits x in {0, 1}: the same certified "
               "numbers (the pair (0, 1) is the worst pair, docs/soundness.md)")  # --inputs of both CLIs
SIGMA_RANGE = f"[{SIGMA_MIN:g}, {SIGMA_MAX:g}]"
SIGMA_ALLOWED = f"in {SIGMA_RANGE} (the noise's standard deviation, in units of the input range)"  # api.DOMAIN
NOT_TAKEN = ("eps0", "sample_rate")  # numbers the other mechanisms take and gaussian refuses (the page hides them)


def page_params() -> list[dict[str, Any]]:
    """gaussian's parameters as the page's form lists a mechanism's (lookup/service/page.py): sigma,
    required, in place of eps0 (``replaces``); ``inputs`` fixed at unit (``fixed``: stated, not asked),
    its help saying why bits needs no question of its own."""
    return [{"name": "sigma", "help": f"the noise's standard deviation, in units of the input range, in {SIGMA_RANGE}",
             "default": None, "required": True, "replaces": "eps0"},
            {"name": "inputs", "help": "each user holds x in [0, 1]; bits (x in {0, 1}) get the same certified "
             "numbers: the pair (0, 1) is the worst pair", "default": DEFAULT_INPUTS, "required": False,
             "fixed": True}]


def foreign(mechanism: str, params: dict[str, Any]) -> None:
    """ValueError where a mechanism other than gaussian is given gaussian's parameters."""
    given = [name for name in PARAMS if params.get(name) is not None]
    if given and mechanism != NAME:
        raise ValueError(f"{given[0]} is a parameter of mechanism {NAME!r}, not of {mechanism!r}")


def checked(kind: str, params: dict[str, Any], others: dict[str, Any]) -> None:
    """Refuses, by name, what a gaussian question does not take: eps0_max, ``others`` given (eps0,
    sample_rate: not None; rounds is taken), another mechanism's parameters, ``inputs`` not in INPUTS
    (``checked_inputs``; both are answered by ``ROW``), and a missing sigma (its range is ``DOMAIN``'s
    check in lookup/answer/api.py, with the other numbers)."""
    if kind == "eps0_max":
        raise ValueError(f"mechanism {NAME!r} has no eps0 (it is not an eps0-LDP randomizer): eps0_max is not "
                         "answered for it (the smallest sigma for a target eps is not answered yet)")
    if others.get("eps0") is not None:
        raise ValueError(f"mechanism {NAME!r} takes no eps0 (it is not an eps0-LDP randomizer: its privacy comes "
                         f"from sigma, the noise's standard deviation, in {SIGMA_RANGE})")
    if others.get("sample_rate") is not None:
        raise ValueError(f"sample_rate is not supported for mechanism {NAME!r} yet: its rounds are composed with "
                         "every user taking part in each round (no subsampled round of it is certified)")
    extra = sorted(name for name, value in params.items() if name not in PARAMS and value is not None)
    if extra:
        raise ValueError(f"mechanism {NAME!r} takes no {extra[0]} (its parameters: sigma, inputs)")
    checked_inputs(params.get("inputs"))
    if params.get("sigma") is None:
        raise ValueError(f"mechanism {NAME!r} needs sigma, the noise's standard deviation in units of the input "
                         f"range, in {SIGMA_RANGE}")


def checked_inputs(inputs: Any) -> str:
    """``inputs`` (DEFAULT_INPUTS where None), ValueError naming it where it is not one of INPUTS."""
    inputs = DEFAULT_INPUTS if inputs is None else inputs
    if inputs not in INPUTS:
        raise ValueError(f"inputs must be one of {', '.join(INPUTS)} (what each user holds), got inputs={inputs!r}")
    return inputs


_DEVICE: dict[tuple[str, float], Any] = {}  # sigma device files read, by (path, mtime)


SHIPPED = "gaussian.sheps"  # the shipped sigma file (data/, or lookup/_data/ in a wheel): docs/tables.md


def device_file(table: Any) -> Any:
    """The sigma device file (``lookup.device.DeviceTable``) that answers gaussian for ``table``, read as
    its gaussian row ``ROW`` with its trust checks (``read_device``: shipped, built here, or
    signed by a trusted key): ``table`` itself where it is a path to a sigma file; the shipped one
    (``SHIPPED``) where ``table`` is None or a path to anything else (a table store, an eps0 device
    file: they have no gaussian rows); None where ``table`` is an opened ``Table`` (the service's,
    which answers gaussian live) or the shipped file is absent.  A sigma file that is refused
    (tampered, untrusted, another mechanism's) raises TableError, never answered live in its place
    unnoticed."""
    from lookup.device.files import DeviceFileError, axis_of, read_device, read_header
    from lookup.store.table import TableError, shipped_table

    if table is not None and not isinstance(table, (str, os.PathLike)):
        return None
    candidates = [] if table is None or not os.path.isfile(table) else [table]
    for path in [*map(os.path.realpath, candidates), str(shipped_table(SHIPPED))]:
        if not os.path.isfile(path):
            continue
        try:
            if axis_of(read_header(path)) != "sigma":
                continue
            key = (path, os.stat(path).st_mtime)
            if key not in _DEVICE:
                _DEVICE[key] = read_device(path, expect=(NAME, ROW))
        except DeviceFileError as err:
            if "bad magic" in str(err):  # not a device file: a table's own error path refuses it
                continue
            raise TableError(str(err)) from None
        return _DEVICE[key]
    return None


def device_eps(device: Any, point: dict[str, float]) -> tuple[float, float, float] | None:
    """(certified eps, lower bound, slack) of the sigma device file ``device`` at ``point`` (sigma, n, delta):
    sigma and n rounded down and the delta chord for the eps (``DeviceTable.eps_sigma``), all three rounded
    up for the lower bound (``DeviceTable.sigma_lower``), the slack their ratio less 1 (NaN without a lower
    bound); None where the file does not cover the query."""
    try:
        value = device.eps_sigma(ROW, point["sigma"], point["n"], point["delta"])
    except ValueError as err:
        if "does not cover" in str(err):
            return None
        raise
    lower = device.sigma_lower(ROW, point["sigma"], point["n"], point["delta"])
    return value, lower, value / lower - 1 if lower > 0 else math.nan


def no_live(live: bool, missing: str = "no sigma device file answers for this table: the zarr tables have no rows of "
            "it; lookup eps without --table reads the shipped data/gaussian.sheps") -> str:
    """Why a gaussian question is refused without live computation (the message of a TableError);
    ``missing``: why no table answers it."""
    why = ("live computation is off (--no-live, live=False)" if not live
           else "the engine (tablegen) is not installed")
    return f"mechanism {NAME!r} is answered live only ({missing}) and {why}"


def bounds(kind: str, point: dict[str, float]) -> tuple[float, float]:
    """(certified eps or delta, its lower bound or NaN) at ``point`` (sigma, n and delta for eps, eps for
    delta) from ``tablegen.engine.gaussian``, cached; a value read back from the disk cache is
    believed once one engine evaluation certifies it again (the certified delta at that eps)."""
    sigma, n = point["sigma"], int(point["n"])

    def compute() -> list[float]:
        from tablegen.engine import gaussian as engine

        b = (engine.eps_bounds(sigma, n, point["delta"]) if kind == "eps"
             else engine.delta_bounds(sigma, n, point["eps"]))
        return [b.upper, math.nan if b.lower is None else b.lower]

    def recertified(value: float) -> bool:
        from tablegen.engine import gaussian as engine

        eps, delta = (value, point["delta"]) if kind == "eps" else (point["eps"], value)
        return engine.delta_bounds(sigma, n, eps, lower=False).upper <= delta

    answer = live_engine.cached(f"{NAME}_{kind}", NAME, point, ROW, compute, recertified)
    return answer[0], answer[1]


def composed(point: dict[str, float]) -> float:
    """Certified eps of ``point["rounds"]`` rounds composed at (sigma, n, delta), all the rounds together:
    ``tablegen.compose.gaussian_eps`` (its certified profile made a PLD and self-composed,
    docs/composition.md), cached as ``lookup/answer/live.py`` caches composed answers: a value read
    back from disk is vouched for by its HMAC alone (a composition has no one-evaluation check)."""
    def compute() -> list[float]:
        from tablegen import compose

        return [compose.gaussian_eps(sigma=point["sigma"], n=int(point["n"]), rounds=int(point["rounds"]),
                                     delta=point["delta"]).eps]

    return live_engine.cached(f"{NAME}_composed_eps", NAME, point, ROW, compute, lambda value: True)[0]
