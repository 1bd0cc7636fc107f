"""Print where the package index today serves other versions than .ci/constraints.txt pins.

Reads pip's installation report (``pip install --dry-run --report FILE``, resolved without the
constraints) and compares each package's version with the pinned one.  Drift is reported, not
fatal: CI tests the pinned set; ``bash .ci/refresh-constraints`` moves the pins on purpose after a
green run in a fresh venv with what the index serves.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(constraints: Path) -> dict[str, str]:
    pins = {}
    for line in constraints.read_text().splitlines():
        name, _, version = line.split("#")[0].strip().partition("==")
        if version:
            pins[canonical(name)] = version.strip()
    return pins


def drift(report: Path, constraints: Path) -> list[str]:
    pins = pinned(constraints)
    served = {canonical(item["metadata"]["name"]): item["metadata"]["version"]
              for item in json.loads(report.read_text())["install"]}
    served.pop("shuffle-eps", None)
    changed = [f"{name} {pins[name]} -> {served[name]}" for name in sorted(served)
               if name in pins and pins[name] != served[name]]
    return changed + [f"{name} new: {served[name]}" for name in sorted(set(served) - set(pins))]


if __name__ == "__main__":
    lines = drift(Path(sys.argv[1]), Path(sys.argv[2]))
    if lines:
        print(f"dependency drift: the index serves {len(lines)} other version(s) than .ci/constraints.txt "
              "(CI tested the pins; refresh on purpose with: bash .ci/refresh-constraints)")
        print("\n".join(f"  {line}" for line in lines))
    else:
        print("dependency drift: none (the index serves the pinned versions)")
