"""The bench tool: its sections' blocks in the results file are replaced, not appended; the dispatcher
lists the sections and refuses an unknown one."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import common
from bench.__main__ import PRINT_ONLY, SECTIONS, main, record_printed

BEFORE = """# Results

## engine

<!-- bench engine/query -->
old query
<!-- /bench engine/query -->

notes kept between runs

## lookup

<!-- bench lookup/cli -->
old cli
<!-- /bench lookup/cli -->

## protocols

Not recorded yet.

## docs

Pages.
"""


def test_record_replaces_its_block_and_adds_new_ones_in_their_section(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text(BEFORE)
    common.record(path, "engine", "query", ["new query", "", "| a |"])
    common.record(path, "engine", "slice", ["first slice"])
    common.record(path, "engine", "slice", ["second slice"])
    common.record(path, "protocols", "noise", ["noise"])
    common.record(path, "rdp", "all", ["rdp"])
    assert path.read_text() == """# Results

## engine

<!-- bench engine/query -->
new query

| a |
<!-- /bench engine/query -->

<!-- bench engine/slice -->
second slice
<!-- /bench engine/slice -->

notes kept between runs

## lookup

<!-- bench lookup/cli -->
old cli
<!-- /bench lookup/cli -->

## protocols

Not recorded yet.

<!-- bench protocols/noise -->
noise
<!-- /bench protocols/noise -->

## docs

Pages.

## rdp

<!-- bench rdp/all -->
rdp
<!-- /bench rdp/all -->
"""


def test_a_quick_run_prints_and_records_nothing_unless_asked(tmp_path: Path, capsys) -> None:
    parts = {"one": lambda args: ["| figure |"], "two": lambda args: ["other"]}
    path = tmp_path / "RESULTS.md"
    for argv in (["--quick"], ["--quick", "--only", "two", "--results", str(path)]):
        args = common.parser("demo", "Demo.", parts).parse_args(argv)
        common.run("demo", parts, args, argv)
    assert capsys.readouterr().out == "| figure |\n\nother\nother\n"
    text = path.read_text()
    assert text.startswith("## demo\n\n<!-- bench demo/two -->\n`python -m bench demo --quick --only two --results ")
    assert text.endswith("\n\nother\n<!-- /bench demo/two -->\n") and "figure" not in text


def test_dispatcher_lists_every_section_and_refuses_unknown_ones(capsys) -> None:
    assert main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(SECTIONS) and {"engine", "table", "lookup", "compose", "protocols", "docs"} <= set(listed)
    assert main(["nope"]) == 2
    assert "unknown section 'nope'" in capsys.readouterr().err


def test_every_section_module_has_parts_and_a_parser() -> None:
    import importlib

    for name, (module, _) in SECTIONS.items():
        if name in PRINT_ONLY:  # they print, the dispatcher records
            continue
        section = importlib.import_module(module)
        assert section.PARTS and all(callable(part) for part in section.PARTS.values())
        args = common.parser(name, section.__doc__, section.PARTS).parse_args(["--quick"])
        assert isinstance(args, argparse.Namespace) and args.only == list(section.PARTS)


def test_a_section_that_only_prints_is_recorded_as_one_block(tmp_path: Path, capsys) -> None:
    path = tmp_path / "RESULTS.md"
    record_printed("rdp", lambda argv: print("| rdp figure |", *argv), ["--x"], path)
    record_printed("rdp", lambda argv: print("not recorded"), ["--quick"], path)
    assert capsys.readouterr().out == "| rdp figure | --x\nnot recorded\n"
    text = path.read_text()
    assert text.startswith("## rdp\n\n<!-- bench rdp/all -->\n`python -m bench rdp --x`: ")
    assert text.endswith("\n\n| rdp figure | --x\n<!-- /bench rdp/all -->\n")
