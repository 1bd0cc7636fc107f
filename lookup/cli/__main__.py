"""``python -m lookup.cli``: the ``lookup`` command."""

from lookup.cli.commands import main

main()
