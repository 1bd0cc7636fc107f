"""The command lines: ``lookup`` (``commands``) and the kit both CLIs share (``extras``: the
command group, ``output``: how answers print, ``plot``)."""

from lookup.cli.commands import main

__all__ = ["main"]
