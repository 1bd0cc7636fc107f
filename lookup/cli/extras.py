"""Optional dependencies: a command that needs an extra the installation lacks says which one.

The base install (numpy, zarr, click, scipy) answers lookups, live computations and
``tablegen compute``; the distributed table build and verification need ``[build]``, plots
``[plot]``, composition of rounds ``[compose]``.  ``CommandGroup`` turns the
``ModuleNotFoundError`` of a missing optional module into one line naming the extra to
install (exit status 1) instead of a traceback.
"""

from __future__ import annotations

from typing import Any

import click

# top-level module -> the extra of shuffle-eps that installs it ("" for the base install)
EXTRAS = {
    "dask": "build", "distributed": "build", "xarray": "build", "tqdm": "build", "crc32c": "build",
    "matplotlib": "plot", "dp_accounting": "compose", "starlette": "serve", "uvicorn": "serve",
    "pebble": "serve", "cryptography": "sign",
    "numpy": "", "zarr": "", "scipy": "",
}
MISSING_EXTRA = 1  # exit status


def missing_dependency(err: ModuleNotFoundError, command: str = "this command") -> str | None:
    """One line saying what to install for ``err``; None if the module is not a dependency."""
    module = (err.name or "").partition(".")[0]
    if module not in EXTRAS:
        return None
    package = f"shuffle-eps[{EXTRAS[module]}]" if EXTRAS[module] else "shuffle-eps"
    return f"{command} needs the Python package {module!r}, which is not installed: pip install '{package}'"


class CommandGroup(click.Group):
    """A click group whose commands report a missing optional dependency in one line."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as err:
            name = " ".join(filter(None, [ctx.command_path, ctx.invoked_subcommand]))
            message = missing_dependency(err, f"`{name}`")
            if message is None:
                raise
            click.echo(f"error: {message}", err=True)
            ctx.exit(MISSING_EXTRA)
