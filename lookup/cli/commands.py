"""``lookup`` command line: eps, delta, eps0-max and info from a table (live off the grid).

Bad input exits with status 2 and one line naming the parameter; a query the table cannot
answer with live computation off (``--no-live``) exits with status 3 and says what the table
covers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

import lookup
from lookup.answer import gaussian
from lookup.answer.api import (
    EPS0_MIN_TEXT,
    MAX_SLACK,
    MAX_SLACK_EPS0,
    finite,
    json_ready,
    mechanism_name,
    parse_max_slack,
    parse_number,
)
from lookup.answer.params import HELP, ascii_number_type, click_options, parse_params, query_arguments
from lookup.cli.extras import CommandGroup
from lookup.cli.output import emit
from lookup.format import PROTOCOLS
from lookup.service.settings import Settings
from lookup.service.settings import options as settings_fields
from lookup.store.table import TableError
from lookup.trust.origin import ENV_KEYS, trusted_key_files, trusted_keys

ASCII_FLOAT, ASCII_INT = ascii_number_type(float), ascii_number_type(int)  # numbers in ASCII digits only


def query_options(func: Any) -> Any:
    """--mechanism, its parameters (lookup/answer/params.py), --n, --table, --no-live, --max-slack and --json."""
    options = [
        click.option("--n", required=True, type=str, help="number of users (1e6 accepted)"),
        click.option("--table", default=None, help="table store or device file (default: the shipped table)"),
        click.option("--no-live", is_flag=True, help="never compute live: fail off the grid instead"),
        click.option("--max-slack", type=str, default=None,
                     help=f"refine table answers whose slack estimate is above this with the engine (default "
                          f"{MAX_SLACK:g}, {MAX_SLACK_EPS0:g} for eps0-max; 'none': table only)"),
        click.option("--json", "as_json", is_flag=True, help="print one JSON object"),
        click.option("--trusted-key", "trusted_key", multiple=True,
                     help="Ed25519 public key (PEM) whose signed tables are trusted; once one is given, only "
                          "shipped or signed tables are answered from (repeatable; also $SHUFFLE_EPS_TRUSTED_KEYS)"),
        click.option("--unverified", is_flag=True,
                     help='answer from a table nothing vouches for, labelled "certified": false (docs/trust.md)'),
    ]
    for option in reversed(options):
        func = option(func)
    func = click_options(func)
    return click.option("--mechanism", required=True, help="e.g. krr, generic, blh, olh, rappor, oue, hr, laplace, "
                        "joint, parallel (off the table: computed live); gaussian (--sigma, live)")(func)


def gaussian_options(func: Any) -> Any:
    """--eps0 (every mechanism but gaussian), --sigma and --inputs (gaussian: lookup/answer/gaussian.py)."""
    options = [
        click.option("--eps0", type=str, default=None, help=f"local privacy parameter, {EPS0_MIN_TEXT} (required but "
                     "for gaussian)"),
        click.option("--sigma", type=str, default=None, help=f"gaussian: the noise's standard deviation, in units of "
                     f"the input range, in {gaussian.SIGMA_RANGE} (answered live)"),
        click.option("--inputs", type=click.Choice(gaussian.INPUTS), default=None, help=gaussian.INPUTS_HELP),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(cls=CommandGroup)
@click.version_option(lookup.__version__)
def main() -> None:
    """Instant certified shuffle-model privacy numbers from precomputed tables."""


@main.command()
@query_options
@gaussian_options
@click.option("--delta", required=True, type=str, help="target delta in (0, 1)")
@click.option("--rounds", type=str, default=None, help="T identical rounds composed (needs 'shuffle-eps[compose]')")
@click.option("--sample-rate", type=str, default=None,
              help="with --rounds: probability in [1e-12, 1] that each user takes part in a round (live; default 1)")
def eps(mechanism: str, n: str, table: str | None, no_live: bool, max_slack: str | None, as_json: bool,
        eps0: str | None, delta: str, rounds: str | None, sample_rate: str | None, **raw: Any) -> None:
    """Certified eps at (eps0, n, delta), of --rounds T rounds composed if given (gaussian: at (sigma, n, delta))."""
    _query("eps", mechanism, {"eps0": eps0, "n": n, "delta": delta, "rounds": rounds, "sample-rate": sample_rate},
           table, no_live, max_slack, as_json, raw)


@main.command()
@query_options
@gaussian_options
@click.option("--eps", "eps_", required=True, type=str, help="target eps >= 0")
def delta(mechanism: str, n: str, table: str | None, no_live: bool, max_slack: str | None, as_json: bool,
          eps0: str | None, eps_: str, **raw: Any) -> None:
    """Certified delta at (eps0, n, eps) (gaussian: at (sigma, n, eps))."""
    _query("delta", mechanism, {"eps0": eps0, "n": n, "eps": eps_}, table, no_live, max_slack, as_json, raw)


@main.command("eps0-max")
@query_options
@click.option("--eps", "eps_", required=True, type=str, help="target eps > 0")
@click.option("--delta", required=True, type=str, help="target delta in (0, 1)")
def eps0_max(mechanism: str, n: str, table: str | None, no_live: bool, max_slack: str | None, as_json: bool,
             eps_: str, delta: str, **raw: Any) -> None:
    """Largest eps0 (local budget) whose certified eps at (n, delta) is <= --eps."""
    _query("eps0_max", mechanism, {"eps": eps_, "n": n, "delta": delta}, table, no_live, max_slack, as_json, raw)


def _query(kind: str, mechanism: str, numbers: dict[str, str | None], table: str | None, no_live: bool,
           max_slack: str | None, as_json: bool, raw: dict[str, Any]) -> None:
    """Answer ``lookup.<kind>`` for text arguments and print it (the three query commands)."""
    keys = raw.pop("trusted_key", ())
    unverified = raw.pop("unverified", False)

    def run() -> dict[str, Any]:
        trusted_keys(list(keys), "--trusted-key")  # at once, whatever table answers (a private key: exit 2)
        trusted_keys(trusted_key_files(), f"${ENV_KEYS}")
        if keys:  # read by lookup.trust.origin when the table is opened
            os.environ[ENV_KEYS] = os.pathsep.join([*keys, *filter(None, [os.environ.get(ENV_KEYS)])])
        arguments = {**query_arguments(numbers, raw), **gaussian_arguments(raw)}
        opened = lookup.open_table(table, verified=False) if unverified else table  # lookup.trust.origin: provenance
        answer = getattr(lookup, kind)(mechanism, table=opened, live=not no_live,
                                       max_slack=parse_max_slack(max_slack, kind), **arguments)
        if answer.refuted:  # the answer is the engine's; the table is refused from now on
            click.echo(f"warning: the table was refused: {answer.refuted}", err=True)
        rounds, rate = arguments.get("rounds"), arguments.get("sample_rate")
        out = json_ready(kind, answer, int(rounds) if rounds is not None else None)
        return out if rate is None else {**out, "sample_rate": rate}

    _answer(run, as_json)


def gaussian_arguments(raw: dict[str, Any]) -> dict[str, Any]:
    """--sigma (a number in ASCII digits) and --inputs where given (gaussian's; refused by name for
    the other mechanisms by ``lookup.eps``)."""
    sigma, inputs = raw.pop("sigma", None), raw.pop("inputs", None)
    return {**({"sigma": parse_number("sigma", sigma)} if sigma is not None else {}),
            **({"inputs": inputs} if inputs is not None else {})}


@main.command()
@click.option("--mechanism", required=True, type=click.Choice(PROTOCOLS, case_sensitive=False))
@click.option("--eps", "eps_", required=True, type=str, help="target eps > 0")
@click.option("--delta", required=True, type=str, help="target delta in (0, 1)")
@click.option("--n", required=True, type=str, help="number of users")
@click.option("--table", default=None, help="calibration table (default: the shipped one)")
@click.option("--no-live", is_flag=True, help="never compute live: fail off the grid instead")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--unverified", is_flag=True,
              help='answer from a table nothing vouches for, labelled "certified": false (docs/trust.md)')
def calibrate(mechanism: str, eps_: str, delta: str, n: str, table: str | None, no_live: bool, as_json: bool,
              unverified: bool) -> None:
    """Largest certified p (least noise) of a shuffled-histogram protocol, rounded toward more noise."""
    def run() -> dict[str, Any]:
        a = lookup.calibrate(mechanism, eps=parse_number("eps", eps_), n=parse_number("n", n),
                             delta=parse_number("delta", delta), table=table, live=not no_live,
                             verified=not unverified)
        return {"p": a.value, "certified": bool(a.certified), "source": a.source, "corner": a.corner}

    _answer(run, as_json)


def settings_options(func: Any) -> Any:
    """The ``lookup serve`` options, one per field of ``lookup.service.settings.Settings`` that
    names one (its option, help and default there), each passed under the field's name."""
    types = {"int": ASCII_INT, "float": ASCII_FLOAT, "bool": None, "str": None, "str | None": None}
    for name, kind, option, default, help_text in reversed(settings_fields()):
        shown = {"show_default": True} if default is not None else {}
        typed = {"type": types[kind]} if types[kind] is not None else {}
        func = click.option(option, name, default=default, help=help_text, **typed, **shown)(func)
    return func


@main.command()
@settings_options
def serve(**given: Any) -> None:
    """Serve GET /v1/eps, /v1/delta, /v1/eps0-max, /v1/info, /healthz and /metrics (needs the serve extra:
    pip install 'shuffle-eps[serve]')."""
    from lookup.service.serve import PortInUse, run  # a missing serve extra: one line from CommandGroup, status 1

    try:
        settings = Settings(**{name: value for name, value in given.items() if value is not None}).check()
    except ValueError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    try:
        run(settings)
    except PortInUse as err:  # bad input: the address given is taken
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    except (TableError, OSError, ValueError) as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(3)


@main.command()
@click.argument("kind", type=click.Choice(["eps-vs-n", "eps-vs-eps0", "privacy-curve", "eps0-max", "slack"]))
@click.option("--mechanisms", default="krr k=10,generic", show_default=True,
              help="rows 'family [param=value ...]' separated by ';' (or ',' if no value has commas); "
                   "the first one for single-row kinds")
@click.option("--eps0", type=ASCII_FLOAT, default=None, help="eps-vs-n, privacy-curve")
@click.option("--n", type=ASCII_FLOAT, default=None, help="eps-vs-eps0, privacy-curve")
@click.option("--delta", type=ASCII_FLOAT, default=None, help="eps-vs-n, eps-vs-eps0, eps0-max, slack")
@click.option("--eps", "eps_", type=ASCII_FLOAT, default=None, help="eps0-max: target eps")
@click.option("--table", default=None, help="table store (default: the shipped table)")
@click.option("--out", required=True, help="image to write (.png or .svg)")
def plot(kind: str, mechanisms: str, eps0: float | None, n: float | None, delta: float | None, eps_: float | None,
         table: str | None, out: str) -> None:
    """Plot certified curves from a table (needs matplotlib: pip install 'shuffle-eps[plot]')."""
    from lookup.cli import plot as plots
    from tablegen.cli import writable_file

    def run() -> dict[str, Any]:
        writable_file("--out", out)  # before anything is computed: nothing half-written
        rows = [_row(text) for text in _rows(mechanisms)]
        t = lookup.open_table(table)
        needed = {"eps-vs-n": ("eps0", "delta"), "eps-vs-eps0": ("n", "delta"), "privacy-curve": ("eps0", "n"),
                  "eps0-max": ("eps", "delta"), "slack": ("delta",)}[kind]
        given = {"eps0": eps0, "n": n, "delta": delta, "eps": eps_}
        missing = [name for name in needed if given[name] is None]
        if missing or not rows:
            raise ValueError(f"{kind} needs --{', --'.join(missing or ['mechanisms'])}")
        if kind == "eps-vs-n":
            plots.eps_vs_n(rows, eps0=eps0, delta=delta, table=t, out=out)
        elif kind == "eps-vs-eps0":
            plots.eps_vs_eps0(rows, n=int(n), delta=delta, table=t, out=out)
        elif kind == "privacy-curve":
            plots.privacy_curve(*rows[0], eps0=eps0, n=int(n), table=t, out=out)
        elif kind == "eps0-max":
            plots.eps0_max_vs_n(rows, eps=eps_, delta=delta, table=t, out=out)
        else:
            plots.slack_map(*rows[0], delta=delta, table=t, out=out)
        return {"wrote": out}

    _answer(run, False)


def _rows(text: str) -> list[str]:
    """Rows separated by ';', or by ',' when no ';' is given (then values may not hold commas)."""
    return [row for row in text.split(";" if ";" in text else ",") if row.strip()]


def _row(text: str) -> tuple[str, dict[str, Any]]:
    """'joint base=krr k=10 parts=2' -> ('joint', {'base': 'krr', 'k': 10, 'parts': 2})."""
    family, *pairs = text.split()
    family = mechanism_name(family)
    names = [pair.partition("=")[0] for pair in pairs]
    raw = dict(pair.partition("=")[::2] for pair in pairs)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"parameter {repeated[0]!r} given more than once in --mechanisms row {text.strip()!r}")
    unknown = sorted(set(raw) - set(HELP))
    if unknown:
        raise ValueError(f"unknown parameter {unknown[0]!r} in --mechanisms row {text.strip()!r} "
                         f"(allowed: {', '.join(HELP)})")
    return family, {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in parse_params(raw).items()}


@main.command()
@click.option("--table", default=None, help="table store (default: the shipped table)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def info(table: str | None, as_json: bool) -> None:
    """What a table covers: mechanisms, axis ranges, engine version, date."""
    _answer(lambda: lookup.open_table(table).coverage(), as_json)


@main.command("c-path")
def c_path() -> None:
    """Print the directory holding the C99 device reader (shuffle_eps_device.h/.c and the
    shuffle_eps_query.c example), in a source checkout or an installed wheel alike."""
    click.echo(Path(lookup.__file__).resolve().parent / "device" / "c")


def _answer(run: Any, as_json: bool) -> None:
    try:
        result = run()
    except TableError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(3)
    except ValueError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    except ModuleNotFoundError:
        raise  # the command group names the extra to install
    except ImportError as err:  # the compose extra not installed (tablegen.compose says which)
        click.echo(f"error: {err}", err=True)
        sys.exit(1)
    emit(finite(result), as_json)


if __name__ == "__main__":  # pragma: no cover
    main()
