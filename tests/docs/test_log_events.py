# SPDX-License-Identifier: Apache-2.0
"""Every event rdmagw logs has a row in docs/logging.md, and every row there
is an event the code logs, at the level the row says.

The C++ sources under proxy/, common/ and config/ (*.cc, *.h) are scanned,
comments left out, for the calls that write a log line:

- log::debug(...), log::info(...), log::warn(...), log::error(...): the event
  is the string literal that is the first argument, or each branch of a
  `cond ? "a" : "b"` there; the level is the function's.
- log::Line(LEVEL, "event"): the event is the second argument, as above; the
  level is `Level::kX`, or both of `cond ? Level::kX : Level::kY`, and is
  unknown for any other expression.
- LocalStream::fail("event", by, failure, ...) (proxy/local/local_stream.cc):
  a call named fail whose third argument is a metrics::StreamFailure
  (`StreamFailure` or `failure_of(` in it). fail() logs info for
  StreamFailure::kReset and warn for any other, so the level is info for
  kReset, warn for another (and both levels of `cond ? kX : kY`), and
  unknown for any other expression.

A row's Level column names the levels ("warn or error" for several): where
the scan knows the level of every call site, exactly those; where it does
not know some, at least those it knows.

A call whose event is not such a literal (the event is a variable, or built
at run time) cannot be checked against the catalogue: the set of those is
pinned in DYNAMIC_EVENT_SITES, so that a new one fails here and is looked at.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("proxy", "common", "config")
CATALOGUE = REPO / "docs" / "logging.md"
LEVELS = ("debug", "info", "warn", "error")
EVENT_NAME = re.compile(r"[a-z][a-z0-9_]*")

# Call sites whose event is not a literal, as (file, the call as written with
# its spaces collapsed). LocalStream::fail() logs the event its callers name
# (those calls are scanned instead), at info or warn.
DYNAMIC_EVENT_SITES = {
    ("proxy/local/local_stream.cc", "log::info(event)"),
    ("proxy/local/local_stream.cc", "log::warn(event)"),
}
# The level rule for fail() above rests on this line of LocalStream::fail.
FAIL_LEVEL_RULE = "why == metrics::StreamFailure::kReset ? log::info(event) : log::warn(event)"

# Comments, raw strings, string literals and character literals, leftmost
# first. A ' after a (hex) digit is a digit separator (1'000), not a literal.
TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?\*/)"""
    r"""|(?P<raw>R"(?P<delim>[^()\\\s"]{0,16})\(.*?\)(?P=delim)")"""
    r"""|(?P<string>"(?:\\.|[^"\\\n])*")"""
    r"""|(?P<char>(?<![0-9A-Fa-f])'(?:\\.|[^'\\\n])+')""",
    re.S,
)
CALL = re.compile(r"\blog::(?P<fn>debug|info|warn|error|Line)\s*\(|(?<![\w:])(?P<fail>fail)\s*\(")
# A string literal once masked: its quotes kept, its contents S.
LIT = r'"S*"'
LITERAL_EVENT = re.compile(rf"\s*{LIT}\s*|[^?]*\?\s*{LIT}\s*:\s*{LIT}\s*")
LEVEL_CONST = r"(?:log::)?Level::k(Debug|Info|Warn|Error)"
LEVEL_EXPR = re.compile(rf"\s*{LEVEL_CONST}\s*|[^?]*\?\s*{LEVEL_CONST}\s*:\s*{LEVEL_CONST}\s*")
FAILURE_CONST = r"(?:metrics::)?StreamFailure::k(\w+)"
FAILURE_EXPR = re.compile(rf"\s*{FAILURE_CONST}\s*|[^?]*\?\s*{FAILURE_CONST}\s*:\s*{FAILURE_CONST}\s*")
# `std::string_view event`: a parameter, i.e. the declaration of fail().
PARAMETER = re.compile(r"\s*(?:const\s+)?[\w:<>]+[\s&*]+\w+\s*")


@dataclass(frozen=True)
class Site:
    file: str
    line: int
    levels: frozenset[str] | None  # None: the scan cannot tell

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Source:
    path: str
    text: str  # comments blanked out, positions kept
    masked: str  # as text, with every literal's contents replaced by S
    literals: dict[int, str]  # start offset -> the literal's contents, as written (escapes kept)

    def line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1


def load(path: Path) -> Source:
    raw = path.read_text(errors="replace")
    text, masked, literals, last = [], [], {}, 0
    for m in TOKEN.finditer(raw):
        text.append(raw[last:m.start()])
        masked.append(raw[last:m.start()])
        token = m.group(0)
        if m.group("comment"):
            blank = re.sub(r"[^\n]", " ", token)
            text.append(blank)
            masked.append(blank)
        else:
            text.append(token)
            if m.group("string"):
                literals[m.start()] = token[1:-1]
                masked.append('"' + "S" * (len(token) - 2) + '"')
            else:  # a raw string or a char: nothing to read in it, no brackets to count
                masked.append(re.sub(r"[^\n]", "C", token))
        last = m.end()
    text.append(raw[last:])
    masked.append(raw[last:])
    return Source(str(path.relative_to(REPO)), "".join(text), "".join(masked), literals)


def split_call(masked: str, open_paren: int) -> tuple[list[tuple[int, int]], int]:
    """The spans of the top-level arguments of the call whose ( is at
    open_paren, and the offset of its closing )."""
    depth, start, args = 0, open_paren + 1, []
    for i in range(open_paren, len(masked)):
        c = masked[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append((start, i))
                return args, i
        elif c == "," and depth == 1:
            args.append((start, i))
            start = i + 1
    raise AssertionError(f"unbalanced brackets after offset {open_paren}")


@dataclass
class Scan:
    events: dict[str, list[Site]]
    dynamic: dict[tuple[str, str], Site]  # (file, call) -> where


def scan() -> Scan:
    events: dict[str, list[Site]] = defaultdict(list)
    dynamic: dict[tuple[str, str], Site] = {}
    files = sorted(p for d in SOURCE_DIRS for p in (REPO / d).rglob("*") if p.suffix in (".cc", ".h") and p.is_file())
    for path in files:
        src = load(path)
        for m in CALL.finditer(src.masked):
            open_paren = m.end() - 1
            args, close = split_call(src.masked, open_paren)
            arg_text = [src.masked[a:b] for a, b in args]
            fn = m.group("fn") or "fail"
            if fn == "fail":
                if len(args) < 3 or not re.search(r"StreamFailure|failure_of\(", arg_text[2]):
                    continue  # another class's fail(): not a log line
                if PARAMETER.fullmatch(arg_text[0]):
                    continue  # its declaration or definition
                event_arg = args[0]
                failure = FAILURE_EXPR.fullmatch(arg_text[2])
                levels = frozenset("info" if g == "Reset" else "warn" for g in failure.groups() if g) if failure else None
            elif fn == "Line":
                if len(args) < 2:
                    continue
                event_arg = args[1]
                level = LEVEL_EXPR.fullmatch(arg_text[0])
                levels = frozenset(g.lower() for g in level.groups() if g) if level else None
            else:
                event_arg = args[0]
                levels = frozenset({fn})
            site = Site(src.path, src.line_of(m.start()), levels)
            names = [v for pos, v in src.literals.items() if event_arg[0] <= pos < event_arg[1]]
            if LITERAL_EVENT.fullmatch(src.masked[event_arg[0]:event_arg[1]]) and all(
                    EVENT_NAME.fullmatch(n) for n in names):
                for name in names:
                    events[name].append(site)
            else:
                call = " ".join(src.text[m.start():close + 1].split())
                call = re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", call))
                dynamic[(src.path, call)] = site
    return Scan(dict(events), dynamic)


def catalogue_rows() -> list[tuple[str, list[str]]]:
    """(event, the levels its row names) for each row of the table under
    ## Events, in the order of the file."""
    text = CATALOGUE.read_text()
    section = re.search(r"^## Events\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, f"{CATALOGUE.relative_to(REPO)} has no '## Events' section"
    rows = []
    for line in section.group(1).splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|([^|]*)\|", line)
        if m:
            rows.append((m.group(1), [level.strip().strip("`") for level in m.group(2).split(" or ")]))
    return rows


def catalogue() -> dict[str, list[str]]:
    return dict(catalogue_rows())


SCAN = scan()


def where(sites: list[Site]) -> str:
    return ", ".join(str(s) for s in sites)


def test_the_scan_finds_the_events():
    assert len(SCAN.events) > 60, f"only {len(SCAN.events)} events found: the scan is broken"
    # Spot checks of each form the scan reads.
    assert {"shutdown_requested", "shutdown_forced"} <= SCAN.events.keys()  # a ternary of literals
    assert SCAN.events["takeover_channel_taken"][0].levels == {"warn", "error"}  # log::Line
    assert "stream_refused" in SCAN.events and "stream_failed" in SCAN.events  # fail()


def test_events_whose_name_is_not_a_literal_are_the_known_ones():
    found = set(SCAN.dynamic)
    new = {f"{SCAN.dynamic[k]}: {k[1]}" for k in found - DYNAMIC_EVENT_SITES}
    assert not new, (f"log calls whose event is not a literal name: {sorted(new)}; log a literal "
                     "[a-z][a-z0-9_]* event (or list the site in DYNAMIC_EVENT_SITES if its callers "
                     "name the event, and scan those)")
    gone = DYNAMIC_EVENT_SITES - found
    assert not gone, f"DYNAMIC_EVENT_SITES lists calls no longer in the code: {sorted(gone)}"
    body = " ".join((REPO / "proxy/local/local_stream.cc").read_text().split())
    assert FAIL_LEVEL_RULE in body, "LocalStream::fail chooses its level differently: update the scan's rule"


def test_the_catalogue_has_one_row_per_event_in_alphabetical_order():
    names = [name for name, _ in catalogue_rows()]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"docs/logging.md has more than one row for {twice}"
    assert names == sorted(names), "docs/logging.md: the rows are not in alphabetical order"


def test_every_event_in_the_code_is_catalogued():
    rows = catalogue()
    missing = sorted(set(SCAN.events) - set(rows))
    assert not missing, ("events logged but not in docs/logging.md; add a row to docs/logging.md for each: "
                         + "; ".join(f"{e} ({where(SCAN.events[e])})" for e in missing))


def test_every_catalogued_event_is_in_the_code():
    stale = sorted(set(catalogue()) - set(SCAN.events))
    assert not stale, f"docs/logging.md has rows for events the code no longer logs: {stale}"


def test_each_row_names_the_levels_the_code_logs_the_event_at():
    wrong = []
    for name, row_levels in catalogue().items():
        bad = [lv for lv in row_levels if lv not in LEVELS]
        if bad:
            wrong.append(f"{name}: {bad} is not a level (debug, info, warn, error; several: 'warn or error')")
            continue
        sites = SCAN.events.get(name)
        if not sites:
            continue  # the stale-row test says so
        known = set().union(*(s.levels for s in sites if s.levels is not None))
        undetermined = any(s.levels is None for s in sites)
        listed = set(row_levels)
        # Where every site's level is known the row names exactly those;
        # else at least those the scan can tell.
        if not known <= listed or (not undetermined and listed != known):
            order = " or ".join(lv for lv in LEVELS if lv in known)
            wrong.append(f"{name}: the row says {' or '.join(row_levels)}, the code logs {order} ({where(sites)})")
    assert not wrong, "docs/logging.md, level column:\n" + "\n".join(wrong)
