"""The plan docs/architecture.md draws, held against the code's imports (bench/architecture.py):
no import circles in lookup or tablegen, no import running back up between its rooms, and lookup imports
nothing of tablegen at module load."""

from __future__ import annotations

import ast
import subprocess
import sys

from bench.architecture import ROOT, circles, floors, graph, rooms

# lookup's rooms from the ground up: a room imports only rooms before it
LOOKUP_ROOMS = ("lookup.format", "lookup.chord", "lookup.trust", "lookup.device", "lookup.store", "lookup.table",
                "lookup.answer", "lookup.service", "lookup.cli")


def test_lookup_has_no_import_circles() -> None:
    assert circles(graph("lookup")) == []
    assert circles(rooms(graph("lookup"), "lookup")) == []


def test_tablegen_has_no_import_circles() -> None:
    """Between modules and between rooms (engine, mechanisms, protocols, compose, ...): the registry
    names the protocols and the compositions their bases without importing back up."""
    assert circles(graph("tablegen")) == []
    assert circles(rooms(graph("tablegen"), "tablegen")) == []


def test_no_import_runs_back_up_between_lookups_rooms() -> None:
    between = rooms(graph("lookup"), "lookup")
    assert set(between) == set(LOOKUP_ROOMS)
    up = [(a, b) for a, targets in between.items() for b in targets if LOOKUP_ROOMS.index(b) >= LOOKUP_ROOMS.index(a)]
    assert up == []


def test_floors_stand_above_what_they_import() -> None:
    edges = graph("lookup")
    level = floors(edges)
    assert all(level[a] > level[b] for a, targets in edges.items() for b in targets)


def test_lookup_imports_no_tablegen_at_load() -> None:
    code = ("import sys, lookup, lookup.trust, lookup.device, lookup.table, lookup.cli, lookup.service.app; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tablegen'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_format_is_standard_library_only() -> None:
    """lookup/format.py, which both sides and the standard-library device reader import."""
    tree = ast.parse((ROOT / "lookup" / "format.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
