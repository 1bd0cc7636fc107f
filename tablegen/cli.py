"""``tablegen`` command line: live certified computations (compute, eps0-max, compose, rdp).

Mirrors the library one-to-one: ``tablegen compute`` is ``engine.eps_bounds`` (with
``--delta``) or ``engine.delta_bounds`` (with ``--eps``); ``tablegen eps0-max`` is
``engine.eps0_max``; ``tablegen compose`` is ``compose.eps`` (``--rounds-max``:
``compose.rounds_max``, ``--eps0-max``: ``compose.eps0_max``), ``compose-sequence`` is
``compose.eps_sequence``; ``tablegen rdp`` is ``engine.rdp_bounds``.  Bad input exits with status 2
and a one-line message, no traceback.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from lookup.answer import gaussian as gaussian_answer
from lookup.answer.api import parse_number as _number
from lookup.answer.params import ascii_number_type, click_options, mechanism_option, parse_params
from lookup.cli.extras import CommandGroup
from lookup.cli.output import emit
from lookup.format import PROTOCOLS
from tablegen import __version__
from tablegen.limits import EPS0_MIN_TEXT

MECHANISM = click.option("--mechanism", required=True, callback=mechanism_option,
                         help="generic, generic-closed-form, krr, blh, olh, rappor, oue, hr, laplace, finite, joint, "
                         "parallel; compute also binary-sum, histogram (--p) and gaussian (--sigma); any case")
AFTER_PARAMS = [
    click.option("--p", "noise_p", type=str, default=None, help="binary-sum / histogram: Bernoulli noise parameter"),
    click.option("--n", "n", required=True, type=str, help="number of users (1e6 accepted)"),
    click.option("--json", "as_json", is_flag=True, help="print one JSON object"),
]

ASCII_FLOAT, ASCII_INT = ascii_number_type(float), ascii_number_type(int)  # numbers in ASCII digits only


SAMPLE_RATE = click.option("--sample-rate", type=str, default=None,
                           help="probability in [1e-12, 1] that each user takes part in a round (Poisson; default 1)")
INPUTS = click.option("--inputs", type=click.Choice(gaussian_answer.INPUTS), default=None,
                      help=gaussian_answer.INPUTS_HELP)


def _sample_rate(text: str | None) -> float:
    """--sample-rate as a float in (0, 1] (1 when not given); ValueError naming --sample-rate."""
    from tablegen import validate

    return 1.0 if text is None else validate.sample_rate("--sample-rate", _number("--sample-rate", text))


def mechanism_options(func: Any) -> Any:
    """--mechanism, its parameters (lookup/answer/params.py), --p, --n and --json."""
    for option in reversed(AFTER_PARAMS):
        func = option(func)
    return MECHANISM(click_options(func))


def _fail(exc: ValueError) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(2)


def writable_file(option: str, path: str) -> None:
    """Refuse, before any computation, a file ``path`` that cannot be written: its directory
    missing or not writable, or ``path`` itself a directory (``ValueError`` naming ``option``)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise ValueError(f"{option} {path!r} is a directory; give a file name")
    if not folder.is_dir():
        raise ValueError(f"{option} {path!r}: the directory {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path!r}: the directory {str(folder)!r} is not writable")


@click.group(cls=CommandGroup)
@click.version_option(__version__)
def main() -> None:
    """Certified privacy amplification by shuffling: compute, build tables, verify, export."""


@main.command()
@mechanism_options
@click.option("--eps0", type=str, default=None, help=f"local privacy parameter, {EPS0_MIN_TEXT}")
@click.option("--delta", type=str, default=None, help="target delta in (0, 1): returns the certified eps")
@click.option("--eps", type=str, default=None, help="target eps >= 0: returns the certified delta")
@click.option("--no-lower", is_flag=True, help="skip the lower bound")
@SAMPLE_RATE
@click.option("--sigma", type=str, default=None, help="gaussian: the noise's standard deviation, in units of the "
              "input range, in [0.2, 50]")
@INPUTS
def compute(mechanism: str, n: str, as_json: bool, eps0: str | None, delta: str | None, eps: str | None,
            no_lower: bool, noise_p: str | None, sample_rate: str | None, sigma: str | None, inputs: str | None,
            **raw: Any) -> None:
    """Certified eps for --delta (or certified delta for --eps), with the lower bound."""
    from tablegen.engine import delta_bounds, eps_bounds
    from tablegen.mechanisms import get_mechanism
    from tablegen.mechanisms.subsample import subsampled

    if sample_rate is not None and mechanism in ("generic-closed-form", *PROTOCOLS):
        _fail(ValueError(f"mechanism {mechanism!r} takes no --sample-rate (subsampled rounds are certified for the "
                         "eps0-LDP mechanisms)"))
    if mechanism in PROTOCOLS:
        if eps0 is not None:
            _fail(ValueError(f"mechanism {mechanism!r} takes no --eps0 (its privacy comes from --p, the Bernoulli "
                             "noise parameter)"))
        return _compute_protocol(mechanism, n, noise_p, delta, eps, as_json)
    if mechanism == "gaussian" or sigma is not None:
        return _compute_gaussian(mechanism, n, sigma, inputs, delta, eps, not no_lower, as_json,
                                 eps0=eps0, p=noise_p, sample_rate=sample_rate, **raw)
    try:
        _not_gaussian(mechanism, inputs)
        if mechanism != "generic-closed-form":
            get_mechanism(mechanism)  # an unknown name first, with the closest known one
        if (delta is None) == (eps is None):
            raise ValueError("give exactly one of --delta (returns eps) or --eps (returns delta)")
        if noise_p is not None:
            raise ValueError(f"mechanism {mechanism!r} takes no --p (--p is the noise of the binary-sum and "
                             "histogram protocols)")
        if eps0 is None:
            raise ValueError(f"mechanism {mechanism!r} needs --eps0, the local privacy parameter ({EPS0_MIN_TEXT})")
        params = parse_params(raw)
        e0, users, q = _number("eps0", eps0), _number("n", n), _sample_rate(sample_rate)
        target = subsampled(get_mechanism(mechanism), q) if mechanism != "generic-closed-form" else None
        if target is None:
            result = _closed_form(e0, users, delta, params)
        elif delta is not None:
            b = eps_bounds(target, eps0=e0, n=users, delta=_number("delta", delta), lower=not no_lower, **params)
            result = {"eps": b.upper, "eps_lower": b.lower, "certified": True, **b.detail}
        else:
            b = delta_bounds(target, eps0=e0, n=users, eps=_number("eps", eps), lower=not no_lower, **params)
            result = {"delta": b.upper, "delta_lower": b.lower, "certified": True, **b.detail}
    except ValueError as exc:
        _fail(exc)
    result.update(mechanism=mechanism, eps0=e0, n=int(users), **_plain(params),
                  **({"sample_rate": q} if sample_rate is not None else {}))
    emit(result, as_json)


def _not_gaussian(mechanism: str, inputs: str | None) -> None:
    """ValueError where --inputs (gaussian's) comes with another mechanism."""
    if inputs is not None:
        raise ValueError(f"--inputs is a parameter of mechanism 'gaussian', not of {mechanism!r}")


def _gaussian_only(mechanism: str, others: dict[str, Any], who: str, why: str) -> None:
    """ValueError where --sigma comes with another mechanism, or gaussian with an option of the others
    (``others``: option name -> value, None where not given), named."""
    if mechanism != "gaussian":
        raise ValueError(f"--sigma is the noise of mechanism 'gaussian', not of {mechanism!r}")
    given = sorted(name for name, value in others.items() if value is not None)
    if given:
        raise ValueError(f"{who} takes no --{given[0].replace('_', '-')} ({why})")


def _compute_gaussian(mechanism: str, n: str, sigma: str | None, inputs: str | None, delta: str | None,
                      eps: str | None, lower: bool, as_json: bool, **others: Any) -> None:
    """gaussian: x + N(0, sigma^2), x in [0, 1] or {0, 1}, by the analysis of bits
    (tablegen.engine.gaussian; it answers both, docs/soundness.md); the options of the other mechanisms
    are refused by name."""
    from tablegen.engine import gaussian

    try:
        _gaussian_only(mechanism, others, "mechanism 'gaussian'", "its privacy comes from --sigma, the noise's "
                       "standard deviation")
        if (delta is None) == (eps is None):
            raise ValueError("give exactly one of --delta (returns eps) or --eps (returns delta)")
        if sigma is None:
            raise ValueError("mechanism 'gaussian' needs --sigma, the noise's standard deviation in [0.2, 50]")
        users, noise = _number("n", n), _number("sigma", sigma)
        if delta is not None:
            b = gaussian.eps_bounds(noise, users, _number("delta", delta), lower=lower)
            result = {"eps": b.upper, "eps_lower": b.lower}
        else:
            b = gaussian.delta_bounds(noise, users, _number("eps", eps), lower=lower)
            result = {"delta": b.upper, "delta_lower": b.lower}
    except ValueError as exc:
        _fail(exc)
    emit({**result, "certified": True, **b.detail, "mechanism": "gaussian", "sigma": noise,
          "inputs": gaussian_answer.checked_inputs(inputs), "n": int(users)}, as_json)


def _calibrate_gaussian(eps: str, delta: str, n: str, rounds: str | None, inputs: str | None, as_json: bool) -> None:
    """The smallest certified sigma of the Gaussian (inputs in [0, 1] or bits: one analysis): one round by the engine
    (``tablegen.engine.gaussian.sigma_min``), T > 1 rounds composed (``compose.sigma_min``)."""
    from tablegen.compose.budget import RTOL
    from tablegen.engine import gaussian

    try:
        e, d, users = _number("eps", eps), _number("delta", delta), _number("n", n)
        if rounds is None or _number("rounds", rounds) == 1:
            sigma, total = gaussian.sigma_min(e, d, users, rtol=RTOL), 1
            found = {"rtol": RTOL, "route": "one round (engine)"}
        else:
            from tablegen import compose

            total = compose.checked_rounds(_number("rounds", rounds))
            noise = compose.sigma_min(rounds=total, eps=e, delta=d, n=users, rtol=RTOL)
            sigma, found = noise.sigma, {"eps_spent": noise.eps, "rtol": noise.rtol,
                                         "route": "T rounds composed (privacy-loss distributions)"}
    except ImportError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except ValueError as exc:
        _fail(exc)
    emit({"sigma": sigma, "certified": True, "mechanism": "gaussian",
          "inputs": gaussian_answer.checked_inputs(inputs), "eps": e, "delta": d,
          "n": int(users), "rounds": total, **found}, as_json)


def _compute_protocol(mechanism: str, n: str, noise_p: str | None, delta: str | None, eps: str | None,
                      as_json: bool) -> None:
    """binary-sum / histogram (Balcer-Cheu, arXiv:1911.06879, section 3) with noise parameter --p."""
    from tablegen.protocols import accounting

    try:
        if (delta is None) == (eps is None):
            raise ValueError("give exactly one of --delta (returns eps) or --eps (returns delta)")
        if noise_p is None:
            raise ValueError(f"mechanism {mechanism!r} needs --p, the Bernoulli noise parameter in (0, 1)")
        users, p = _number("n", n), _number("p", noise_p)
        if delta is not None:
            upper, lower = accounting.eps_bounds(mechanism, delta=_number("delta", delta), n=users, p=p)
            result = {"eps": upper, "eps_lower": lower, "certified": True}
        else:
            upper, lower = accounting.delta_bounds(mechanism, eps=_number("eps", eps), n=users, p=p)
            result = {"delta": upper, "delta_lower": lower, "certified": True}
    except ValueError as exc:
        _fail(exc)
    emit({**result, "mechanism": mechanism, "n": int(users), "p": p}, as_json)


@main.command()
@click.option("--mechanism", required=True,
              type=click.Choice([*PROTOCOLS, "gaussian"], case_sensitive=False))
@click.option("--eps", required=True, type=str, help="target eps > 0")
@click.option("--delta", required=True, type=str, help="target delta in (0, 1)")
@click.option("--n", required=True, type=str, help="number of users")
@click.option("--rounds", type=str, default=None, help="gaussian: rounds T the (eps, delta) covers (default 1)")
@INPUTS
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def calibrate(mechanism: str, eps: str, delta: str, n: str, rounds: str | None, inputs: str | None,
              as_json: bool) -> None:
    """Least noise certified (eps, delta)-DP: the largest p of a protocol, beside the paper's p, or the
    smallest sigma of the Gaussian (over --rounds T rounds composed)."""
    from tablegen.protocols import accounting

    if mechanism.lower() == "gaussian":
        return _calibrate_gaussian(eps, delta, n, rounds, inputs, as_json)
    try:
        _not_gaussian(mechanism, inputs)
        if rounds is not None:
            raise ValueError(f"calibrate of mechanism {mechanism!r} takes no --rounds (a protocol is calibrated for "
                             "one round; --rounds is for mechanism 'gaussian')")
        e, d, users = _number("eps", eps), _number("delta", delta), _number("n", n)
        p = accounting.calibrate(mechanism, eps=e, delta=d, n=users)
    except ValueError as exc:
        _fail(exc)
    paper = accounting.paper_p(mechanism, eps=e, delta=d, n=int(users))
    emit({"p": p, "certified": True, "paper_p": paper, "noise_reduction": (1 - paper) / (1 - p),
           "mechanism": mechanism, "eps": e, "delta": d, "n": int(users)}, as_json)


@main.command()
@click.option("--mechanism", required=True, type=click.Choice(PROTOCOLS, case_sensitive=False))
@click.option("--n", required=True, type=str, help="number of users")
@click.option("--d", "domain", type=ASCII_INT, default=10, show_default=True, help="histogram: domain size")
@click.option("--eps", type=str, default=None, help="calibrate p for this eps (with --delta)")
@click.option("--delta", type=str, default=None, help="calibrate p for this delta (with --eps)")
@click.option("--p", "noise_p", type=str, default=None, help="noise parameter instead of calibrating")
@click.option("--seed", type=ASCII_INT, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def simulate(mechanism: str, n: str, domain: int, eps: str | None, delta: str | None, noise_p: str | None,
             seed: int, as_json: bool) -> None:
    """Run a protocol on synthetic data (Zipf-like values) and report its error."""
    import numpy as np

    from tablegen.protocols import accounting
    from tablegen.protocols import simulate as protocol

    try:
        users = int(_number("n", n))
        if users < 1 or domain < 1:
            raise ValueError(f"n and d must be >= 1, got n={users}, d={domain}")
        if noise_p is not None:
            p = _number("p", noise_p)
        elif eps is not None and delta is not None:
            p = accounting.calibrate(mechanism, eps=_number("eps", eps), delta=_number("delta", delta), n=users)
        else:
            raise ValueError("give --p, or --eps and --delta to calibrate it")
        accounting.check(mechanism, 0.0, users, p)
    except ValueError as exc:
        _fail(exc)
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, domain + 1)
    if mechanism == "histogram":
        x = rng.choice(domain, size=users, p=weights / weights.sum())
        messages = protocol.shuffle(protocol.histogram_randomizer(x, domain, p, rng), rng)
        error = np.abs(protocol.histogram_analyzer(messages, users, domain, p) - np.bincount(x, minlength=domain)
                       / users).max()
    else:
        x = (rng.random(users) < 0.3).astype(np.int64)
        messages = protocol.shuffle(protocol.binary_randomizer(x, p, rng), rng)
        error = abs(protocol.binary_analyzer(messages, users, p) - x.mean())
    emit({"mechanism": mechanism, "n": users, "d": domain, "p": p, "messages": int(messages.size),
           "max_abs_error": float(error), "paper_bound_beta_0.05": float(protocol.paper_error_bound(users, p, 0.05))},
          as_json)


def _closed_form(eps0: float, n: float, delta: str | None, params: dict[str, Any]) -> dict[str, Any]:
    from tablegen import limits, validate
    from tablegen.mechanisms.generic import closed_form_eps

    if delta is None:
        raise ValueError("generic-closed-form answers --delta only (Theorem 3.1 gives eps)")
    if params:
        raise ValueError(f"generic-closed-form takes no parameters, got {sorted(params)}")
    e0 = limits.minimum_eps0(eps0)
    users = validate.integer_at_least("n", n, 1)
    d = validate.open_unit("delta", _number("delta", delta))
    return {"eps": closed_form_eps(e0, users, d), "eps_lower": None, "certified": True,
            "analysis": "Feldman-McMillan-Talwar (arXiv:2012.12803) Theorem 3.1 closed form (reference)"}


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters for the output: integral numbers as int, the matrix left out."""
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in params.items() if k != "matrix"}


@main.command("eps0-max")
@mechanism_options
@click.option("--eps", required=True, type=str, help="target eps > 0")
@click.option("--delta", required=True, type=str, help="target delta in (0, 1)")
def eps0_max_command(mechanism: str, n: str, as_json: bool, eps: str, delta: str, **raw: Any) -> None:
    """Largest eps0 whose certified shuffled eps is <= --eps: the local budget you may spend."""
    from tablegen.engine import eps0_max

    try:
        value = eps0_max(mechanism, eps=_number("eps", eps), n=_number("n", n), delta=_number("delta", delta),
                         **parse_params(raw))
    except ValueError as exc:
        _fail(exc)
    emit({"eps0": value, "certified": True, "mechanism": mechanism, "eps": float(eps), "n": int(float(n)),
           "delta": float(delta)}, as_json)


@main.command("compose")
@mechanism_options
@click.option("--eps0", type=str, default=None, help=f"local privacy parameter per round, {EPS0_MIN_TEXT}")
@click.option("--rounds", type=str, default=None, help="number of identical rounds T (integer >= 1)")
@click.option("--delta", required=True, type=str, help="total delta in (0, 1)")
@click.option("--eps", type=str, default=None, help="total eps budget (with --rounds-max or --eps0-max)")
@click.option("--rounds-max", is_flag=True, help="how many rounds fit in --eps (needs --eps0)")
@click.option("--eps0-max", is_flag=True, help="largest eps0 per round for --rounds within --eps")
@click.option("--compare", is_flag=True, help="also basic and advanced composition of the single-round eps")
@SAMPLE_RATE
@click.option("--sigma", type=str, default=None, help="gaussian: the noise's standard deviation, in [0.2, 50]")
@INPUTS
def compose_command(mechanism: str, n: str, as_json: bool, eps0: str | None, rounds: str | None, delta: str,
                    eps: str | None, rounds_max: bool, eps0_max: bool, compare: bool, noise_p: str | None,
                    sample_rate: str | None, sigma: str | None, inputs: str | None, **raw: Any) -> None:
    """Certified eps of T shuffled rounds composed (privacy-loss distributions), or the budget's inverse;
    with --sample-rate q each user takes part in each round with probability q (docs/composition.md)."""
    if mechanism == "gaussian" or sigma is not None:
        return _compose_gaussian(mechanism, n, sigma, rounds, delta, eps, rounds_max, inputs, as_json, eps0=eps0,
                                 p=noise_p, sample_rate=sample_rate, eps0_max=eps0_max or None,
                                 compare=compare or None, **raw)
    try:
        _not_gaussian(mechanism, inputs)
        args = _compose_arguments(mechanism, n, eps0, rounds, delta, eps, rounds_max, eps0_max, noise_p, raw)
        if sample_rate is not None:
            args["sample_rate"] = _sample_rate(sample_rate)
        result = _composed(mechanism, args, rounds_max, eps0_max, compare)
    except ImportError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except ValueError as exc:
        _fail(exc)
    emit({**result, "certified": True, "mechanism": mechanism, **_plain(args)}, as_json)


def _compose_gaussian(mechanism: str, n: str, sigma: str | None, rounds: str | None, delta: str, eps: str | None,
                      rounds_max: bool, inputs: str | None, as_json: bool, **others: Any) -> None:
    """T rounds of the shuffled Gaussian, inputs in [0, 1] or bits (``compose.eps``), or with --rounds-max
    how many fit in --eps (``compose.rounds_max``); the other questions and options refused by name."""
    from tablegen import compose

    try:
        _gaussian_only(mechanism, others, "compose of mechanism 'gaussian'", "T rounds at --sigma: --rounds, or "
                       "--rounds-max with --eps; the smallest sigma for T rounds is tablegen calibrate --mechanism "
                       "gaussian --rounds T")
        if sigma is None:
            raise ValueError("compose of mechanism 'gaussian' needs --sigma, the noise's standard deviation in "
                             "[0.2, 50]")
        if (rounds is None) != rounds_max:
            raise ValueError("compose of mechanism 'gaussian' needs exactly one of --rounds (returns eps) and "
                             "--rounds-max (with --eps: returns how many rounds fit)")
        if (eps is not None) != rounds_max:
            raise ValueError("--eps is the budget of --rounds-max: give both or neither")
        noise, users, d = _number("sigma", sigma), _number("n", n), _number("delta", delta)
        if rounds_max:
            budget = _number("eps", eps)
            b = compose.rounds_max("gaussian", n=users, eps=budget, delta=d, sigma=noise)
            result = {"rounds_max": b.rounds, "eps_spent": b.eps, "at_least": b.capped, "eps": budget}
        else:
            total = compose.checked_rounds(_number("rounds", rounds))
            result = {"eps": compose.gaussian_eps(sigma=noise, n=users, rounds=total, delta=d).eps, "rounds": total}
    except ValueError as exc:
        _fail(exc)
    emit({**result, "certified": True, "mechanism": "gaussian", "inputs": gaussian_answer.checked_inputs(inputs),
          "sigma": noise, "n": int(users), "delta": d}, as_json)


def _compose_arguments(mechanism: str, n: str, eps0: str | None, rounds: str | None, delta: str, eps: str | None,
                       rounds_max: bool, eps0_max: bool, noise_p: str | None, raw: dict[str, Any]) -> dict[str, Any]:
    """Parsed numbers and parameters of ``tablegen compose``; ValueError naming what is missing."""
    if noise_p is not None:
        raise ValueError(f"compose takes no --p (protocol {mechanism!r} is not composed here)")
    if rounds_max and eps0_max:
        raise ValueError("give at most one of --rounds-max and --eps0-max")
    need = {"eps0": not eps0_max, "rounds": not rounds_max, "eps": rounds_max or eps0_max}
    given = {"eps0": eps0, "rounds": rounds, "eps": eps}
    for name, required in need.items():
        if required and given[name] is None:
            raise ValueError(f"this question needs --{name}")
        if not required and given[name] is not None:
            raise ValueError(f"--{name} is not used by this question (it is the answer or not needed)")
    numbers = {name: _number(name, text) for name, text in given.items() if text is not None}
    if "rounds" in numbers:
        from tablegen.compose import checked_rounds

        numbers["rounds"] = checked_rounds(numbers["rounds"])
    from tablegen import validate

    return {**numbers, "n": validate.integer_at_least("n", _number("n", n), 1), "delta": _number("delta", delta),
            **parse_params(raw)}


def _composed(mechanism: str, args: dict[str, Any], rounds_max: bool, eps0_max: bool, compare: bool) -> dict[str, Any]:
    from tablegen import compose
    from tablegen.compose import baselines

    if rounds_max:
        b = compose.rounds_max(mechanism, **args)
        return {"rounds_max": b.rounds, "eps_spent": b.eps, "at_least": b.capped}
    if eps0_max:
        return {"eps0": compose.eps0_max(mechanism, **args)}
    out: dict[str, Any] = {"eps": compose.eps(mechanism, **args).eps}
    q = args.get("sample_rate", 1.0)
    single = {k: v for k, v in args.items() if k != "sample_rate"}
    if compare:
        from tablegen.mechanisms import get_mechanism
        from tablegen.mechanisms.subsample import subsampled

        target = subsampled(get_mechanism(mechanism), q)
        out.update(basic=baselines.basic_eps(target, **single), advanced=baselines.advanced_eps(target, **single))
    if q < 1:
        out["baseline"] = {"eps": baselines.subsampling_lemma_eps(mechanism, **args), "certified": False,
                           "analysis": "subsampling lemma on a round of floor(q n) users, optimal composition "
                                       "(not certified by us: docs/composition.md)"}
    return out


@main.command("compose-sequence")
@click.option("--rounds", "rounds_json", required=True,
              help='JSON list (or a file holding it) of rounds: [{"mechanism": "krr", "k": 10, "eps0": 1, '
                   '"n": 1e6, "times": 300}, {"mechanism": "gaussian", "sigma": 2, "n": 1e5, "times": 10}, ...]')
@click.option("--delta", required=True, type=str, help="total delta in (0, 1)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def compose_sequence_command(rounds_json: str, delta: str, as_json: bool) -> None:
    """Certified eps of a sequence of different shuffled rounds (mechanism, eps0 or the Gaussian's sigma, n
    per round)."""
    try:
        from tablegen import compose

        rounds = _rounds_from_json(rounds_json)
        c = compose.eps_sequence(rounds, delta=_number("delta", delta))
    except ImportError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except ValueError as exc:
        _fail(exc)
    emit({"eps": c.eps, "rounds": c.rounds, "delta": c.delta, "certified": True, "kinds": len(rounds)}, as_json)


def _rounds_from_json(text: str) -> list[Any]:
    """Rounds from a JSON list given inline or in a file; ValueError naming the bad entry."""
    from pathlib import Path

    from tablegen.compose import Round

    source = Path(text).read_text() if not text.lstrip().startswith("[") and Path(text).is_file() else text
    try:
        entries = json.loads(source)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError("rounds must be a JSON list of objects (inline or a file), e.g. "
                         '[{"mechanism": "krr", "k": 10, "eps0": 1, "n": 1e6, "times": 30}]') from None
    if not isinstance(entries, list):
        raise ValueError("rounds must be a JSON list of objects")
    out = []
    for i, entry in enumerate(entries):
        privacy = "sigma" if isinstance(entry, dict) and entry.get("mechanism") == "gaussian" else "eps0"
        if not isinstance(entry, dict) or not {"mechanism", privacy, "n"} <= set(entry):
            raise ValueError(f"rounds[{i}] needs mechanism, eps0 (gaussian: sigma) and n (times and sample_rate "
                             f"optional), got {entry!r}")
        params = {k: v for k, v in entry.items() if k not in ("mechanism", "eps0", "n", "times", "sample_rate")}
        out.append(Round(str(entry["mechanism"]), entry.get("eps0"), entry["n"], params, entry.get("times", 1),
                         entry.get("sample_rate", 1.0)))
    return out


@main.command("rdp")
@mechanism_options
@click.option("--eps0", required=True, type=str, help=f"local privacy parameter, {EPS0_MIN_TEXT}")
@click.option("--orders", type=str, default=None, help="Rényi orders > 1, comma-separated (default: dp-accounting's)")
@click.option("--rounds", type=str, default="1", help="number of identical rounds T (RDP adds up)")
@click.option("--delta", type=str, default=None, help="also eps at this delta through dp-accounting's RDP conversion")
@click.option("--no-lower", is_flag=True, help="skip the lower bound")
def rdp_command(mechanism: str, n: str, as_json: bool, eps0: str, orders: str | None, rounds: str, delta: str | None,
                no_lower: bool, noise_p: str | None, **raw: Any) -> None:
    """Certified Rényi DP of T shuffled rounds at each order (docs/renyi.md), with the lower bound."""
    from tablegen.engine import rdp_bounds

    try:
        if noise_p is not None:
            raise ValueError(f"rdp takes no --p (protocol {mechanism!r} has no Rényi reduction here)")
        alphas = None if orders is None else [_number("orders", x) for x in orders.split(",")]
        r = rdp_bounds(mechanism, eps0=_number("eps0", eps0), n=_number("n", n), orders=alphas,
                       rounds=_number("rounds", rounds), lower=not no_lower, **parse_params(raw))
        result = {"orders": list(r.orders), "rdp": list(r.rdp), "rdp_lower": None if r.rdp_lower is None else
                  list(r.rdp_lower), "rounds": r.rounds, "certified": True, "mechanism": mechanism,
                  "eps0": float(eps0), "n": int(float(n)), **_plain(parse_params(raw)), **r.detail}
        if delta is not None:
            result.update(_eps_via_rdp(r.orders, r.rdp, _number("delta", delta)))
    except ValueError as exc:
        _fail(exc)
    emit(result, as_json)


def _eps_via_rdp(orders: Any, rdp: Any, delta: float) -> dict[str, Any]:
    """eps at ``delta`` from the RDP curve by dp-accounting's conversion (Canonne-Kamath-Steinke 2020,
    Proposition 12, minimised over the orders), or which extra it needs."""
    from tablegen import validate

    delta = validate.open_unit("delta", delta)
    try:
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
    except ImportError:
        return {"delta": delta, "eps_via_rdp": None,
                "eps_via_rdp_note": 'needs the dp-accounting package: pip install "shuffle-eps[compose]"'}
    eps, order = compute_epsilon(list(orders), list(rdp), delta)
    return {"delta": delta, "eps_via_rdp": float(eps), "eps_via_rdp_order": float(order),
            "eps_via_rdp_note": "dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon of the certified RDP "
                                "(conversion in dp-accounting's floating point)"}


@main.command()
@click.option("--spec", "spec_path", required=True, help="grid spec, e.g. workflows/default.toml")
@click.option("--out", required=True, help="table to write, e.g. data/default.zarr")
@click.option("--scheduler", default=None, help="tcp://HOST:PORT or tls://HOST:PORT of a dask scheduler (default: a "
              "local cluster); workers need only shuffle-eps installed (docs/cluster.md)")
@click.option("--tls-ca-file", default=None, help="--scheduler tls://: the cluster's CA certificate (PEM; default: "
              "dask's distributed.comm.tls.ca-file)")
@click.option("--tls-cert", default=None, help="--scheduler tls://: this client's certificate (PEM; default: dask's "
              "distributed.comm.tls.client.cert)")
@click.option("--tls-key", default=None, help="--scheduler tls://: this client's private key (PEM), unless it is in "
              "--tls-cert's file")
@click.option("--workers", type=ASCII_INT, default=None, help="local cluster worker processes (default: all cores; "
              "0: compute in this process without dask)")
@click.option("--fresh", is_flag=True, help="discard an unfinished build of --out and start over")
@click.option("--no-progress", is_flag=True, help="no progress bar")
@click.option("--dry-run", is_flag=True, help="print cells, estimated core-hours and store size; write nothing")
@click.option("--sample", type=ASCII_INT, default=8, show_default=True, help="--dry-run: slices to time")
@click.option("--cores", type=ASCII_INT, default=100, show_default=True,
              help="--dry-run: cores to size the wall time for")
@click.option("--budget", type=ASCII_FLOAT, default=90.0, show_default=True,
              help="--dry-run: seconds spent timing the sample (on --workers local processes, default all cores)")
@click.option("--json", "as_json", is_flag=True, help="--dry-run: print the figures as JSON")
@click.option("--sign-key", default=None, help="Ed25519 private key (PEM) to sign the published table with")
def build(spec_path: str, out: str, scheduler: str | None, tls_ca_file: str | None, tls_cert: str | None,
          tls_key: str | None, workers: int | None, fresh: bool, no_progress: bool, dry_run: bool, sample: int,
          cores: int, budget: float, as_json: bool, sign_key: str | None) -> None:
    """Fill a zarr table of certified eps over a grid spec (resumable; published atomically)."""
    from tablegen import build as builder
    from tablegen.spec import load_spec

    try:
        if workers is not None and workers < 0:
            raise ValueError(f"--workers must be >= 0, got {workers}")
        if dry_run and (sample < 1 or cores < 1 or not budget > 0):
            raise ValueError(f"--sample and --cores must be >= 1 and --budget > 0, got --sample {sample} --cores "
                             f"{cores} --budget {budget:g}")
        spec = load_spec(spec_path)
        if dry_run:
            from tablegen.dryrun import dry_run as size

            log = (lambda _: None) if as_json else click.echo
            figures = size(spec, out, sample=sample, cores=cores, log=log, budget=budget, processes=workers or None)
            if as_json:
                click.echo(json.dumps(figures))
            return
        security = builder.client_security(scheduler, tls_ca_file, tls_cert, tls_key)
        builder.build(spec, out, scheduler=scheduler, workers=workers, progress=not no_progress, fresh=fresh,
                      log=click.echo, sign_key=sign_key, security=security)
    except ValueError as exc:
        _fail(exc)
    except builder.BuildFailed as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except builder.BuildInterrupted as stop:
        click.echo(f"error: {stop}", err=True)
        sys.exit(128 + stop.signum)  # the shell's convention for a process stopped by a signal


@main.command()
@click.argument("path", metavar="TABLE")
@click.option("--key", "key_file", required=True, help="Ed25519 private key (PEM): openssl genpkey -algorithm ed25519")
@click.option("--full", is_flag=True, help="first recompute every slice (tablegen verify --full): a table that is "
              "not shipped, built or fully verified here is signed only after this")
def sign(path: str, key_file: str, full: bool) -> None:
    """Sign a published table or a device file this machine vouches for (shipped, built or fully
    verified here; --full verifies it first): readers trusting the key answer from it."""
    from lookup.store.signing import NotVouched, sign_vouched
    from lookup.store.table import TableError

    try:
        if full and Path(path).is_dir():
            from tablegen.verify import verify as check

            problems = check(path, sample=0, full=True)
            if problems:
                raise ValueError(f"verify --full failed, not signed: {problems[0]}")
        click.echo(f"signed: {sign_vouched(path, key_file)}")
    except NotVouched as exc:
        _fail(exc)
    except (OSError, TableError, ValueError) as exc:
        _fail(ValueError(f"cannot sign {path}: {exc}"))
    except ImportError:
        _fail(ValueError('signing needs the cryptography package: pip install "shuffle-eps[sign]"'))


@main.command()
@click.argument("store_path", metavar="STORE")
@click.option("--sample", type=ASCII_INT, default=0, show_default=True,
              help="random (mechanism, eps0) slices to recompute live")
@click.option("--seed", type=ASCII_INT, default=0, show_default=True, help="seed for the sample")
@click.option("--full", is_flag=True, help="recompute every slice; if all are equal, record the table as verified "
              "here (a table nothing else vouches for is then answered from: docs/trust.md)")
def verify(store_path: str, sample: int, seed: int, full: bool) -> None:
    """Check a table's SHA-256 manifest, chunk checksums and invariants; recompute --sample slices."""
    from tablegen.verify import verify as check

    if sample < 0:
        _fail(ValueError(f"--sample must be >= 0, got {sample}"))
    problems = check(store_path, sample=sample, seed=seed, full=full)
    for problem in problems:
        click.echo(f"FAIL {problem}", err=True)
    if problems:
        sys.exit(1)
    done = "every slice recomputed and equal; recorded as verified here" if full else \
        f"{sample} slices recomputed and equal"
    click.echo(f"{store_path}: manifest, checksums and invariants OK; {done}")


@main.command("build-calibration")
@click.option("--spec", "spec_path", required=True, help="axes of eps, n, delta, e.g. workflows/protocols.toml")
@click.option("--out", required=True, help="table to write, e.g. data/protocols.zarr")
@click.option("--progress/--no-progress", default=True, show_default=True, help="progress bar on stderr")
@click.option("--fresh", is_flag=True, help="discard an unfinished build of --out and start over")
def build_calibration(spec_path: str, out: str, progress: bool, fresh: bool) -> None:
    """Table of the calibrated p of the binary-sum and histogram protocols (published atomically;
    an interrupted build resumes, computing only the missing (protocol, eps) slices)."""
    from tablegen.calibration import build_calibration as build_table

    try:
        result = build_table(spec_path, out, progress=progress, fresh=fresh)
    except ValueError as exc:
        _fail(exc)
    if result["without_p"] is None:
        click.echo(f"{result['out']} is up to date: computed 0 of {result['skipped']} slices")
        return
    click.echo(f"published {result['out']}: {result['cells']} cells ({result['without_p']} without a certified p); "
               f"computed {result['computed']} slices, {result['skipped']} already finished")


@main.command()
@click.option("--device", is_flag=True, required=True, help="write a compact device file (the only format)")
@click.option("--mechanism", required=True, callback=mechanism_option,
              help="mechanism family, e.g. krr, generic, laplace")
@click_options
@click.option("--eps0", "eps0", type=str, default=None,
              help="the deployment's eps0, comma-separated (e.g. 1.37 or 0.5,1.37); required unless cutting")
@click.option("--n-min", type=str, default=None, help="smallest n to answer (computed: default 1e2)")
@click.option("--n-max", type=str, default=None, help="largest n to answer (computed: default 1e9)")
@click.option("--delta", type=str, default=None,
              help="deltas to answer, comma-separated, stored exactly (required unless cutting)")
@click.option("--max-slack", type=str, default=None,
              help="largest relative step of eps between two stored n (default 0.005); cutting: refuse above it")
@click.option("--no-lower", is_flag=True, help="computed: store no lower bounds (NaN)")
@click.option("--cut", is_flag=True,
              help="cut an existing table (--table, default the shipped one) instead of computing")
@click.option("--table", default=None, help="source table to cut (implies --cut)")
@click.option("--sigma", type=str, default=None,
              help="gaussian: the noise's standard deviations stored, comma-separated, in [0.2, 50] (a sigma axis, "
              "format 3; one privacy profile per sigma and n, 0.1-11 s each)")
@click.option("--per-decade", type=ASCII_INT, default=None, help="gaussian: n values per decade (default 2)")
@click.option("--processes", type=ASCII_INT, default=1, show_default=True,
              help="gaussian: processes computing the profiles")
@INPUTS
@click.option("--out", required=True, help="device file to write")
@click.option("--json", "as_json", is_flag=True, help="print the report as one JSON object")
def export(device: bool, mechanism: str, eps0: str | None, n_min: str | None, n_max: str | None, delta: str | None,
           max_slack: str | None, no_lower: bool, cut: bool, table: str | None, sigma: str | None,
           per_decade: int | None, processes: int, inputs: str | None, out: str, as_json: bool, **raw: Any) -> None:
    """Write the device file of one deployment: computed with the slice engine at its eps0 and
    deltas exactly, n from --n-min to --n-max spaced so that two stored n are within --max-slack
    (float32, eps rounded up, lower bounds down); or, with --cut/--table, one family of a table
    cut to the deployment.  Reports size, axes, worst slack and time."""
    from lookup.store.table import TableError
    from tablegen.export import GAUSSIAN_PER_DECADE, MAX_SLACK, export_deployment, export_device, export_gaussian

    def numbers(name: str, text: str | None) -> list[float] | None:
        return None if text is None else [_number(name, part.strip()) for part in text.split(",")]

    start = time.perf_counter()
    try:
        writable_file("--out", out)
        params = parse_params(raw)
        low = None if n_min is None else _number("n_min", n_min)
        high = None if n_max is None else _number("n_max", n_max)
        slack = MAX_SLACK if max_slack is None else _number("max_slack", max_slack)
        if mechanism == "gaussian" or sigma is not None:
            _gaussian_only(mechanism, {"eps0": eps0, "max_slack": max_slack, "table": table, "cut": cut or None,
                                       **params}, "export of mechanism 'gaussian'",
                           "it is computed over --sigma, --n-min to --n-max and --delta")
            for name, value, top in (("per_decade", per_decade, 50), ("processes", processes, 64)):
                if value is not None and not 1 <= value <= top:
                    raise ValueError(f"--{name.replace('_', '-')} must be an integer in [1, {top}], got {value}")
            if sigma is None or delta is None:  # its one row, inputs bits, answers both inputs (docs/device-format.md)
                raise ValueError("export of mechanism 'gaussian' needs --sigma and --delta (comma-separated values)")
            result = export_gaussian(out, sigma=numbers("sigma", sigma) or [], delta=numbers("delta", delta) or [],
                                     n_min=1e3 if low is None else low, n_max=1e6 if high is None else high,
                                     lower=not no_lower, per_decade=per_decade or GAUSSIAN_PER_DECADE,
                                     workers=processes,
                                     log=lambda line: click.echo(line, err=True))
        elif inputs is not None:
            _not_gaussian(mechanism, inputs)
        elif per_decade is not None or processes != 1:
            raise ValueError("--per-decade and --processes are for mechanism 'gaussian' (another mechanism's n axis "
                             "is refined to --max-slack)")
        elif cut or table is not None:
            if no_lower:
                raise ValueError("--no-lower applies to a computed file; a cut keeps the table's lower bounds")
            result = export_device(out, mechanism, params, table, eps0=numbers("eps0", eps0), n_min=low,
                                   n_max=high, delta=numbers("delta", delta))
            if max_slack is not None and result["worst_slack"] > slack:
                Path(out).unlink()
                raise ValueError(f"the cut's worst slack {result['worst_slack']:.3%} is above --max-slack "
                                 f"{slack:g}: export without --cut/--table to compute the deployment's n axis")
        else:
            for name, value in (("eps0", eps0), ("delta", delta)):
                if value is None:
                    raise ValueError(f"give the deployment's --{name} (comma-separated values), or --cut to cut "
                                     "the shipped table")
            result = export_deployment(out, mechanism, params, eps0=numbers("eps0", eps0) or [],
                                       delta=numbers("delta", delta) or [], n_min=1e2 if low is None else low,
                                       n_max=1e9 if high is None else high, max_slack=slack, lower=not no_lower)
    except (TableError, ValueError) as exc:
        _fail(exc)
    result["seconds"] = round(time.perf_counter() - start, 3)
    if as_json:
        click.echo(json.dumps(result))
        return
    shape = result["shape"]
    at = result["worst_slack_at"]
    first = "sigma" if "sigma" in result else "eps0"  # the first axis (gaussian: sigma, format 3)
    click.echo(f"wrote {result['file']}: {result['bytes']} bytes ({result['bytes'] / 1024:.1f} KiB), "
               f"{shape[0]} x {shape[1]} x {shape[2]} x {shape[3]} (rows x {first} x n x delta)"
               + (f", computed in {result['seconds']:.1f} s" if result.get("computed") else ""))
    click.echo(f"rows: {', '.join(result['rows'])}")
    click.echo(f"{first}: {', '.join(f'{v:g}' for v in result[first])}")
    kind = "stored" if result.get("computed") else "grid"
    click.echo(f"n: {result['n'][0]:g} to {result['n'][-1]:g} ({len(result['n'])} {kind} values)")
    click.echo(f"delta: {', '.join(f'{v:g}' for v in result['delta'])}")
    if at is None:
        click.echo("worst slack: none (a single n)")
    else:
        click.echo(f"worst slack: {result['worst_slack']:.2%} (an answer between {kind} n can be this far above the "
                   f"value at the next larger n; at {at['mechanism']} {first} {at[first]:g}, n {at['n']:g} to "
                   f"{at['n_next']:g}, delta {at['delta']:g}); where eps < {result['slack_floor']:g} at the larger n, "
                   f"at most {result['worst_excess_below_floor']:.3g} above it")


if __name__ == "__main__":  # pragma: no cover
    main()
