"""The import graph of a package, floor by floor, from the code's own imports (``ast``).

A module stands one floor above the highest module it imports (imports inside functions
included); floor 1 imports nothing of the package.  Also the graph between a package's
subpackages, its circles, and the imports that run back up (docs/architecture.md).

    python bench/architecture.py lookup
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(package: str, root: Path | None = None) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``package``."""
    root = root or ROOT
    base = root / package.replace(".", "/")
    found = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(path: Path, name: str, known: set[str], top_level_only: bool = False) -> set[str]:
    """The modules of ``known`` that the module ``name`` at ``path`` imports (a name imported from
    a package counts as its module where it is one, else as the package)."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:
        nodes = [n for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)]
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                out |= {_owner(alias.name, known)}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out |= {full if full in known else _owner(base, known)}
    out.discard(None)
    out.discard(name)
    return {m for m in out if m in known}


def _owner(dotted: str, known: set[str]) -> str | None:
    """The longest known module that ``dotted`` names or lies in."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def graph(package: str, root: Path | None = None, top_level_only: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    found = modules(package, root)
    known = set(found)
    return {name: imports(path, name, known, top_level_only) for name, path in found.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def floors(edges: dict[str, set[str]]) -> dict[str, int]:
    """Module -> floor (1 + the highest floor it imports); the graph must have no circles.  A
    package's ``__init__`` that only re-exports stands on the floor of what it hands on."""
    done: dict[str, int] = {}

    def floor(v: str) -> int:
        if v not in done:
            done[v] = 1 + max((floor(w) for w in edges.get(v, ())), default=0)
        return done[v]

    for v in edges:
        floor(v)
    return done


def rooms(edges: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The graph between the package's direct children (subpackages and top-level modules),
    the package's own ``__init__`` left out."""
    depth = len(package.split("."))

    def room(m: str) -> str | None:
        parts = m.split(".")
        return ".".join(parts[:depth + 1]) if len(parts) > depth else None

    out: dict[str, set[str]] = {}
    for m, targets in edges.items():
        a = room(m)
        if a is None:
            continue
        out.setdefault(a, set())
        out[a] |= {b for t in targets if (b := room(t)) is not None and b != a}
    return out


def report(package: str) -> str:
    edges = graph(package)
    lines = []
    loops = circles(edges)
    if loops:
        lines.append(f"{package}: circles: " + "; ".join(" -> ".join(c) for c in loops))
        return "\n".join(lines)
    level = floors(edges)
    lines.append(f"{package}: {len(edges)} modules on {max(level.values())} floors, no circles")
    for f in sorted(set(level.values()), reverse=True):
        lines.append(f"floor {f:2d}  " + "  ".join(sorted(m for m in level if level[m] == f)))
    between = rooms(edges, package)
    room_loops = circles(between)
    if room_loops:
        lines.append("rooms: circles: " + "; ".join(" -> ".join(c) for c in room_loops))
    else:
        room_level = floors(between)
        lines.append(f"{package}'s rooms on {max(room_level.values())} floors:")
        for f in sorted(set(room_level.values()), reverse=True):
            lines.append(f"floor {f:2d}  " + "  ".join(sorted(m for m in room_level if room_level[m] == f)))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    for package in argv or ["lookup", "tablegen"]:
        print(report(package))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
