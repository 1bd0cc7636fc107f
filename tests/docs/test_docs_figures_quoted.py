"""The figures the docs quote from a command are what the command prints now.

In README.md and docs/*.md, a shell command in a ```bash block of the form

    tablegen compose ... --json   # {"eps": 0.0610, "certified": true, ...}

or with the quoted output on the next line (``# {...}``), or split over lines with ``\\``, quotes part
of the command's JSON output. Each such command is run in this process (click's CliRunner on
``tablegen.cli.main`` / ``lookup.cli.commands.main``; an ``--out`` file goes to a temporary directory) and
every quoted value is compared with the output to the precision quoted:

* ``0.0610`` (no ellipsis): the output rounds to 0.0610 at the last quoted digit (3 significant
  digits here; ``19851`` and ``1000000`` exactly);
* ``0.00916...``: the output starts with those digits (it is truncated there);
* ``...`` as a value: any value, the key must exist; ``...`` as the last item of an object or a
  list: the rest is omitted; without it the object has exactly the quoted keys (a list, the
  quoted length);
* strings, ``true``, ``false``, ``null``: equal;
* ``(±0.1%: reason)`` after the quoted object: every quoted number within 0.1% of the output,
  for figures the docs say move with the versions of a dependency (dp-accounting's
  discretisation); the docs state the tolerance and its reason beside the figure.

Commands too slow for the check are listed in SKIP with the reason; every other documented
``tablegen``/``lookup`` command with ``--json`` must quote its output (or be listed in UNQUOTED),
so that no documented figure escapes the check. Figures the docs state in prose (timings and
other machine-dependent numbers) are marked there as measured, with date and machine.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# commands (as written in the docs, continuation lines joined) not run here, with the reason
SKIP: dict[str, str] = {}

# documented --json commands that quote no output, with the reason
UNQUOTED: dict[str, str] = {}

FENCE = re.compile(r"^\s*```(\w*)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
TOLERANCE = re.compile(r"\(±\s*(\d+(?:\.\d+)?)%")


# ---------------------------------------------------------------------------- the quoted output


class Anything:
    """``...`` as a value: any value."""

    def __repr__(self) -> str:
        return "..."


@dataclass
class Number:
    text: str      # as quoted, e.g. "0.0610" or "0.00916"
    prefix: bool   # quoted with a trailing "...": the output starts with these digits


@dataclass
class Container:
    items: Any            # dict (object) or list
    partial: bool = False  # ended with "...": the rest is omitted


@dataclass
class Parser:
    """Recursive descent over the quoted JSON-with-ellipses; ``end`` is where the value stops
    (prose may follow it in the comment)."""

    text: str
    pos: int = 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"{what} at column {self.pos} of {self.text!r}")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.skip()
        return self.text.startswith(token, self.pos)

    def take(self, token: str) -> None:
        if not self.peek(token):
            raise self.error(f"expected {token!r}")
        self.pos += len(token)

    def value(self) -> Any:
        self.skip()
        for word, value in (("...", Anything()), ("true", True), ("false", False), ("null", None)):
            if self.peek(word):
                self.pos += len(word)
                return value
        if self.peek("{"):
            return self.container("{", "}")
        if self.peek("["):
            return self.container("[", "]")
        if self.peek('"'):
            return self.string()
        match = NUMBER.match(self.text, self.pos)
        if not match:
            raise self.error("expected a value")
        self.pos = match.end()
        prefix = self.text.startswith("...", self.pos)
        self.pos += 3 * prefix
        return Number(match.group(), prefix)

    def string(self) -> str:
        self.skip()
        end = self.text.index('"', self.pos + 1)
        text, self.pos = self.text[self.pos:end + 1], end + 1
        return json.loads(text)

    def container(self, opening: str, closing: str) -> Container:
        self.take(opening)
        items: Any = {} if opening == "{" else []
        partial = False
        while not self.peek(closing):
            if partial:
                raise self.error("'...' (the omitted rest) must be the last item")
            if self.peek("...") and (opening == "{" or self.text[self.pos + 3:].lstrip().startswith(closing)):
                self.pos += 3
                partial = True
            elif opening == "{":
                key = self.string()
                self.take(":")
                items[key] = self.value()
            else:
                items.append(self.value())
            if not self.peek(closing):
                self.take(",")
        self.take(closing)
        return Container(items, partial)


def parse_quoted(text: str) -> Container:
    """The quoted object at the start of ``text`` (what follows it is prose)."""
    parser = Parser(text)
    if not parser.peek("{"):
        raise parser.error("expected '{'")
    return parser.value()


def _rounds_to(actual: float, quoted: Number, tolerance: float | None = None) -> bool:
    if tolerance is not None:  # a stated relative tolerance instead of the quoted digits
        return abs(actual - float(quoted.text)) <= tolerance * abs(float(quoted.text))
    want = Decimal(quoted.text)
    exponent = want.as_tuple().exponent
    got = Decimal(repr(actual))
    if quoted.prefix:  # truncated at the last quoted digit
        return got.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_DOWN) == want
    return any(got.quantize(Decimal(1).scaleb(exponent), rounding=mode) == want
               for mode in (ROUND_HALF_EVEN, ROUND_HALF_UP))


def mismatches(quoted: Any, actual: Any, where: str = "", tolerance: float | None = None) -> list[str]:
    """Each way ``actual`` (parsed JSON output) disagrees with ``quoted``; empty if it agrees
    (numbers within the relative ``tolerance`` where one is stated)."""
    label = where or "the output"
    if isinstance(quoted, Anything):
        return []
    if isinstance(quoted, Number):
        if isinstance(actual, bool) or not isinstance(actual, int | float):
            return [f"{label}: quoted {quoted.text}, output {actual!r}"]
        if not _rounds_to(actual, quoted, tolerance):
            how = ("is not within the stated tolerance of" if tolerance is not None
                   else "does not start with" if quoted.prefix else "does not round to")
            return [f"{label}: quoted {quoted.text}{'...' if quoted.prefix else ''}, output {actual!r} {how} it"]
        return []
    if isinstance(quoted, Container) and isinstance(quoted.items, dict):
        if not isinstance(actual, dict):
            return [f"{label}: quoted an object, output {actual!r}"]
        found = []
        for key, value in quoted.items.items():
            if key not in actual:
                found.append(f"{where}.{key}: quoted, not in the output" if where else f"{key!r}: not in the output")
            else:
                found += mismatches(value, actual[key], f"{where}.{key}" if where else key, tolerance)
        extra = sorted(set(actual) - set(quoted.items))
        if extra and not quoted.partial:
            found.append(f"{label}: keys not quoted {extra} (end the quote with '...' if they are left out on purpose)")
        return found
    if isinstance(quoted, Container):
        if not isinstance(actual, list):
            return [f"{label}: quoted a list, output {actual!r}"]
        if len(actual) < len(quoted.items) or (len(actual) != len(quoted.items) and not quoted.partial):
            return [f"{label}: quoted {len(quoted.items)} items, output has {len(actual)}"]
        return [m for i, q in enumerate(quoted.items) for m in mismatches(q, actual[i], f"{label}[{i}]", tolerance)]
    if type(quoted) is not type(actual) or quoted != actual:
        return [f"{label}: quoted {json.dumps(quoted)}, output {json.dumps(actual)}"]
    return []


# ------------------------------------------------------------------------- the documented commands


@dataclass
class Command:
    place: str             # "docs/composition.md:16"
    text: str              # the command as written (continuation lines joined)
    argv: list[str]
    quoted: Container | None = None
    problem: str | None = None  # a quoted output that does not parse
    tolerance: float | None = None  # a relative tolerance stated after the quote: "(±0.1%: ...)"

    def __str__(self) -> str:
        return f"{self.place}: {self.text}"


def split_comment(line: str) -> tuple[str, str | None]:
    """(command, text of its ``#`` comment or None), honouring shell quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), None


def bash_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, line) inside ```bash fences, continuation lines joined (numbered by their first)."""
    lines, inside, pending, start = [], False, "", 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            inside = not inside and fence.group(1) in ("bash", "sh", "shell", "console")
            continue
        if not inside:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append((start, pending + line.strip() if pending else line))
        pending = ""
    return lines


def collect(paths: list[Path]) -> list[Command]:
    """Every ``tablegen``/``lookup`` command with ``--json`` in the bash blocks of ``paths``."""
    found = []
    for path in paths:
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        lines = bash_lines(path)
        for i, (number, line) in enumerate(lines):
            text, comment = split_comment(line)
            try:
                argv = shlex.split(text)
            except ValueError:
                continue
            if not argv or argv[0] not in ("tablegen", "lookup") or "--json" not in argv:
                continue
            command = Command(f"{name}:{number}", " ".join(text.split()), argv)
            if not (comment or "").startswith("{") and i + 1 < len(lines):
                follow = lines[i + 1][1].strip()
                comment = follow[1:].strip() if follow.startswith("# {") else comment
            if comment and comment.startswith("{"):
                stated = TOLERANCE.search(comment)
                command.tolerance = float(stated.group(1)) / 100 if stated else None
                try:
                    command.quoted = parse_quoted(comment)
                except ValueError as err:
                    command.problem = str(err)
            found.append(command)
    return found


COMMANDS = collect(DOCS)
QUOTED = [c for c in COMMANDS if c.quoted is not None]


def test_the_docs_quote_outputs() -> None:
    """The collector finds the quoted commands (a change of format that hides them all fails here)."""
    assert len(QUOTED) >= 20, [str(c) for c in COMMANDS]
    assert {Path(c.place.split(":")[0]).name for c in QUOTED} >= {"README.md", "composition.md", "lookup.md",
                                                                   "protocols.md"}


def test_every_json_command_quotes_its_output() -> None:
    """A documented ``--json`` command quotes (part of) its output in the checked format, so the
    check covers it; quoted outputs parse; skip lists name documented commands only."""
    unparsed = [f"{c}: {c.problem}" for c in COMMANDS if c.problem]
    unquoted = [str(c) for c in COMMANDS if c.quoted is None and not c.problem and c.text not in UNQUOTED]
    placeholders = [str(c) for c in COMMANDS if "..." in c.argv]
    assert not unparsed, "quoted outputs that do not parse:\n" + "\n".join(unparsed)
    assert not unquoted, ("documented --json commands without a quoted output (add '# {\"key\": value, ...}' "
                          "or list them in UNQUOTED with the reason):\n" + "\n".join(unquoted))
    assert not placeholders, "commands with '...' in place of arguments cannot be run:\n" + "\n".join(placeholders)
    texts = {c.text for c in COMMANDS}
    assert set(SKIP) <= texts and set(UNQUOTED) <= texts, "SKIP / UNQUOTED name commands no doc has any more"


_OUTPUTS: dict[tuple[str, ...], Any] = {}


def _run(argv: list[str], tmp_path: Path) -> Any:
    """The JSON the command prints, run in this process (``--out`` redirected to ``tmp_path``)."""
    key = tuple(argv)
    if key in _OUTPUTS:
        return _OUTPUTS[key]
    from click.testing import CliRunner

    if argv[0] == "tablegen":
        from tablegen.cli import main
    else:
        from lookup.cli.commands import main
    args = list(argv[1:])
    for i, arg in enumerate(args[:-1]):
        if arg == "--out":
            args[i + 1] = str(tmp_path / Path(args[i + 1]).name)
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, f"exit status {result.exit_code}:\n{result.output}"
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    assert lines, f"no JSON object in the output:\n{result.output}"
    _OUTPUTS[key] = json.loads(lines[-1])
    return _OUTPUTS[key]


@pytest.mark.parametrize("command", QUOTED, ids=lambda c: c.place)
def test_quoted_output_is_current(command: Command, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if command.text in SKIP:
        pytest.skip(SKIP[command.text])
    for name in ("SHUFFLE_EPS_TABLE", "SHUFFLE_EPS_CACHE"):  # the docs' answers: shipped table, no disk cache
        monkeypatch.delenv(name, raising=False)
    output = _run(command.argv, tmp_path)
    stale = mismatches(command.quoted, output, tolerance=command.tolerance)
    assert not stale, (f"{command}\nquotes figures that are not what it prints now:\n  " + "\n  ".join(stale)
                       + f"\noutput: {json.dumps(output)}")


# --------------------------------------------------------------------------------- the check itself


@pytest.mark.parametrize(("quoted", "output"), [
    ('{"eps": 0.0610, "certified": true, ...}', {"eps": 0.061030534517889194, "certified": True, "k": 10}),
    ('{"eps": 0.00916..., "eps_lower": 0.00915..., ...}', {"eps": 0.0091634700199159, "eps_lower": 0.0091588785}),
    ('{"rounds_max": 19851, "delta": 1e-08, "n": 1000000}', {"rounds_max": 19851, "delta": 1e-08, "n": 1000000}),
    ('{"corner": {...}, "slack": ..., "shape": [1, 3, ...]}', {"corner": {"n": 1.0}, "slack": None,
                                                              "shape": [1, 3, 301, 4]}),
    ('{"advanced": 0.440} and prose after it', {"advanced": 0.43997256315903305}),
])
def test_agreeing_figures_pass(quoted: str, output: dict) -> None:
    assert mismatches(parse_quoted(quoted), output) == []


@pytest.mark.parametrize(("quoted", "output", "why"), [
    ('{"eps": 0.0611, ...}', {"eps": 0.061030534517889194}, "does not round to"),     # a stale figure
    ('{"rounds_max": 19855, ...}', {"rounds_max": 19851}, "does not round to"),
    ('{"eps": 0.00917..., ...}', {"eps": 0.0091634700199159}, "does not start with"),  # rounded, not truncated
    ('{"eps": 0.0610}', {"eps": 0.0610305, "k": 10}, "keys not quoted"),              # no '...': exact keys
    ('{"eps": 0.0610, "lower": ..., ...}', {"eps": 0.0610305}, "not in the output"),
    ('{"certified": true, ...}', {"certified": 1}, "quoted true"),
    ('{"shape": [1, 3, 301, 4], ...}', {"shape": [1, 3, 301, 5]}, "does not round to"),
    ('{"source": "table", ...}', {"source": "live"}, 'quoted "table"'),
])
def test_stale_figures_fail(quoted: str, output: dict, why: str) -> None:
    found = mismatches(parse_quoted(quoted), output)
    assert found and why in found[0], found


def test_collector_reads_the_doc_forms(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text('text\n```bash\ntablegen compute --n 1e6 --json   # {"eps": 0.0610, ...}\n'
                   "lookup eps --rounds 365 \\\n    --json\n"
                   '# {"eps": 0.0658, ...}   prose\n'
                   "tablegen compose-sequence --json --rounds '[{\"a\": 1}]'   # certified delta\n"
                   "```\n"
                   'tablegen compute --json   # {"eps": 1}   (outside a bash block: not collected)\n')
    lines = bash_lines(doc)
    assert [n for n, _ in lines] == [3, 4, 6, 7]
    assert split_comment(lines[3][1]) == ("tablegen compose-sequence --json --rounds '[{\"a\": 1}]'",
                                          "certified delta")
    assert shlex.split(lines[1][1]) == ["lookup", "eps", "--rounds", "365", "--json"]
    found = collect([doc])
    assert [(c.place, c.argv[:2]) for c in found] == [("doc.md:3", ["tablegen", "compute"]),
                                                      ("doc.md:4", ["lookup", "eps"]),
                                                      ("doc.md:7", ["tablegen", "compose-sequence"])]
    assert [mismatches(c.quoted, {"eps": 0.06578}) if c.quoted else None for c in found] == [
        ["eps: quoted 0.0610, output 0.06578 does not round to it"], [], None]


def test_a_stated_tolerance_is_read_and_holds(tmp_path: Path) -> None:
    """``(±0.1%: ...)`` after a quote: within 0.1% passes, beyond it fails, digits no longer matter."""
    doc = tmp_path / "doc.md"
    doc.write_text('```bash\ntablegen compose --json   # {"rounds_max": 19851, ...}   (±0.1%: dp-accounting)\n```\n')
    (command,) = collect([doc])
    assert command.tolerance == pytest.approx(0.001)
    assert mismatches(command.quoted, {"rounds_max": 19854}, tolerance=command.tolerance) == []
    found = mismatches(command.quoted, {"rounds_max": 19880}, tolerance=command.tolerance)
    assert found and "stated tolerance" in found[0]
    assert mismatches(command.quoted, {"rounds_max": 19854}) != []  # without it: the quoted digits
