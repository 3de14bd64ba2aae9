# SPDX-License-Identifier: Apache-2.0
"""docs/security.md's table of attackers by mode names, in each row, the tests
that show it (`tests/integration/FILE.py::NAME`, or `NAME` alone for another
test of the file named last in that cell). Every test it names exists, and
every row names at least one: a renamed or deleted test fails here instead of
leaving the table pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "security.md"
TESTS = REPO / "tests" / "integration"
HEADING = "## Who can do what, by mode"


def table_rows() -> list[str]:
    text = DOC.read_text()
    start = text.index(HEADING)
    end = text.index("\n## ", start + len(HEADING))
    rows = [line for line in text[start:end].splitlines() if line.startswith("| **")]
    assert rows, f"no rows under {HEADING!r}"
    return rows


def citations(cell: str) -> list[tuple[str, str | None]]:
    """(file, test or None) for each backquoted name in the last cell."""
    out: list[tuple[str, str | None]] = []
    current = None
    for name in re.findall(r"`([^`]+)`", cell):
        file, _, test = name.partition("::")
        if file.endswith(".py"):
            current = file
            out.append((file, test or None))
        else:
            assert current, f"{name!r} names no file before it in: {cell}"
            out.append((current, name))
    return out


def test_every_row_names_tests_that_exist():
    for row in table_rows():
        cell = row.rstrip(" |").rsplit("|", 1)[1]
        cited = citations(cell)
        assert cited, f"a row names no test: {row}"
        for file, test in cited:
            path = TESTS / file
            assert path.is_file(), f"{file} (in: {row[:60]}...) is not in tests/integration"
            if test:
                assert re.search(rf"^def {re.escape(test)}\(", path.read_text(), re.M), \
                    f"{file}::{test} (in: {row[:60]}...) does not exist"
