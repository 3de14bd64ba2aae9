# SPDX-License-Identifier: Apache-2.0
"""The manual pages (docs/man/, packaging/make-man): they are made from the
docs, render without a roff warning, and name every option the binaries'
--help names, so that the pages cannot fall behind the command lines.

Run: /usr/bin/python3 -m pytest tests/packaging -q -p no:cacheprovider
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("RDMAGW_BUILD_DIR") or REPO / "build")
BINARIES = {"rdmagw": BUILD_DIR / "bin" / "rdmagw", "rdmagwctl": BUILD_DIR / "bin" / "rdmagwctl"}
# troff cannot fit an unbreakable URL into the line: cosmetic, not an error.
HARMLESS = ("cannot adjust line", "cannot break line")


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("man")
    subprocess.run([str(REPO / "packaging" / "make-man"), str(out)], check=True, timeout=120)
    return {p.name.removesuffix(".gz"): gzip.decompress(p.read_bytes()).decode() for p in out.glob("*.gz")}


def test_the_three_pages_are_made(pages):
    assert sorted(pages) == ["rdmagw.8", "rdmagw.yaml.5", "rdmagwctl.8"]
    for name, roff in pages.items():
        title = name.rsplit(".", 1)
        assert re.search(rf'^\.TH "?{re.escape(title[0])}"? "?{title[1]}"?', roff, re.M), roff[:300]
        assert ".SH NAME" in roff and ".SH DESCRIPTION" in roff


@pytest.mark.parametrize("name", ["rdmagw.8", "rdmagwctl.8", "rdmagw.yaml.5"])
def test_each_page_renders_without_warnings(pages, name):
    result = subprocess.run(["groff", "-k", "-t", "-man", "-Tutf8", "-ww", "-z"], input=pages[name].encode(),
                            capture_output=True, timeout=60)
    assert result.returncode == 0
    warnings = [l for l in result.stderr.decode().splitlines()
                if l.strip() and not any(h in l for h in HARMLESS)]
    assert not warnings, "\n".join(warnings)


@pytest.mark.parametrize("binary", ["rdmagw", "rdmagwctl"])
def test_the_page_names_every_option_of_help(pages, binary):
    path = BINARIES[binary]
    assert path.exists(), f"{path} is missing: build first (tools/dev/build)"
    help_text = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=30).stdout
    # Not "rdmagw --check", which rdmagwctl's help cites.
    options = set(re.findall(r"(?<!rdmagw )(?<![\w-])(--[a-z][a-z-]+)", help_text))
    assert len(options) >= 5, help_text
    # Each as the tag of a paragraph of its own (OPTIONS, or COMMANDS for a
    # command's options), not merely mentioned somewhere.
    lines = pages[f"{binary}.8"].splitlines()
    tags = " ".join(lines[i + 1] for i, l in enumerate(lines[:-1]) if l.startswith(".TP"))
    tags = re.sub(r"\\f[A-Z]", "", tags).replace("\\-", "-")
    missing = sorted(o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", tags))
    assert not missing, f"{binary}.8 lacks {missing} (docs/man/{binary}.8.md)"


def test_the_configuration_page_holds_every_section_of_configuration_md(pages):
    doc = (REPO / "docs" / "configuration.md").read_text()
    sections = re.findall(r"^##+ (.+)$", doc, re.M)
    page = pages["rdmagw.yaml.5"]
    for section in sections:
        plain = section.replace("`", "")
        assert plain in page.replace("\\fB\\fC", "").replace("\\fR", "").replace("\\[", "["), section
    # Every key of the top-level table is a tagged paragraph, not a table row.
    assert ".TS" not in page
