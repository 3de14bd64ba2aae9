# SPDX-License-Identifier: Apache-2.0
"""Reading a systemd unit file the simple way, for the packaging tests and
tests/docker/e2e/test_deb.py (which reads the unit the package installed)."""

from __future__ import annotations


def unit_values(text: str) -> dict[str, list[str]]:
    """KEY -> its values, in order, for the unit file's lines (every section)."""
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        values.setdefault(key.strip(), []).append(value.strip())
    return values
