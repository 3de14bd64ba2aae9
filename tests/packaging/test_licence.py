# SPDX-License-Identifier: Apache-2.0
"""The licence is declared once (LICENSE, Apache-2.0) and every source file
says so: a file added without the SPDX line fails here, not in a review."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPDX = "SPDX-License-Identifier: Apache-2.0"
SOURCE_SUFFIXES = {".cc", ".c", ".h", ".py", ".sh", ".cmake"}


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / p for p in out.decode().split("\0") if p]


def is_source(path: Path) -> bool:
    if "corpus" in path.parts or "regressions" in path.parts:
        return False  # fuzz inputs
    if path.suffix in SOURCE_SUFFIXES or path.name == "CMakeLists.txt" or path.name.endswith(("Dockerfile",
                                                                                              "Containerfile")):
        return True
    if path.suffix == "" and path.is_file():
        with path.open("rb") as f:
            return f.read(2) == b"#!"  # a script without a suffix
    return False


def test_licence_is_apache_2():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    copyright_text = (REPO / "packaging/copyright").read_text()
    assert "License: Apache-2.0" in copyright_text and "License: none" not in copyright_text


def test_every_source_file_carries_the_spdx_line_at_its_top():
    sources = [p for p in tracked() if is_source(p)]
    assert len(sources) > 200, "the walk found the tree"
    missing = [str(p.relative_to(REPO)) for p in sources
               if SPDX not in "".join(p.read_text(errors="replace").splitlines(keepends=True)[:3])]
    assert not missing, f"without '{SPDX}' in their first 3 lines: {missing}"
