"""/openapi.json is precise enough to fuzz: schemathesis (the ``test`` extra) against the real
server over 127.0.0.1, positive and negative data, every check but one, a bounded number of
examples per operation; any server error, undocumented status or media type, response outside
its schema, schema-violating request accepted, or 405 without Allow fails the test.

The check left out, positive_data_acceptance, asks every schema-valid query to be answered 200;
which combinations the engine answers (weights summing to 1, a domain small enough to build its
matrix, live=false off the table's grid) is not expressible in JSON Schema, so those are 400s
naming the parameter, which the other checks still hold to the documented error schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_lookup_serve import get

pytest.importorskip("schemathesis")


def test_schemathesis_finds_nothing(start_server: Any, tmp_path: Path) -> None:
    base = start_server("--queue", "64", "--live-timeout", "120").base
    result = subprocess.run([sys.executable, "-m", "schemathesis.cli", "run", f"{base}/openapi.json", "--checks",
                             "all", "--exclude-checks",
                             "positive_data_acceptance", "--mode", "all", "--max-examples", "12",
                             "--generation-deterministic", "--request-timeout", "150", "--max-response-time", "120",
                             "--no-color"],  # live answers of extreme queries take seconds on a busy machine
                            capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:]
    metrics = get(f"{base}/metrics")[1].decode()
    answered = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("lookup_requests_total") and 'status="200"' in line)
    assert answered >= 50  # fuzzed valid queries answered, not only refused
    assert 'status="500"' not in metrics


def test_the_schema_names_every_mechanism_the_engine_answers() -> None:
    from lookup.service import app
    from lookup.service.app import openapi
    from tablegen.compose import MAX_ROUNDS
    from tablegen.limits import CATEGORIES_MAX, EPS0_LIMIT
    from tablegen.mechanisms import MECHANISMS

    assert app.CATEGORIES_MAX == CATEGORIES_MAX and app.NUMBERS["eps0"][1]["maximum"] == EPS0_LIMIT
    assert app.ROUNDS_MAX == MAX_ROUNDS
    schema = json.loads(json.dumps(openapi()))
    branches = schema["paths"]["/v1/eps"]["get"]["parameters"][0]["schema"]["oneOf"]
    described = {b["properties"]["mechanism"]["const"]: b for b in branches}
    assert set(described) == {*MECHANISMS, "generic-closed-form", "gaussian"}
    assert set(described["gaussian"]["required"]) == {"mechanism", "sigma", "n", "delta"}
    for name, mechanism in MECHANISMS.items():
        params = set(described[name]["properties"]) - {"mechanism", "eps0", "n", "delta", "live", "max_slack", "rounds",
                                                             "sample_rate"}
        assert params == set(mechanism.params), name
        required = {p for p, spec in mechanism.params.items() if spec.required}
        assert set(described[name]["required"]) == {"mechanism", "eps0", "n", "delta", *required}, name
