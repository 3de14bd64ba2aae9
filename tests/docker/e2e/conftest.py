# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the podman end-to-end tests.  tests/docker/e2e/run prepares
everything they use (images, podman settings, podman-compose) and exports
where it is; run directly, without it, every test fails and says so."""

from __future__ import annotations

import os
import shutil

import pytest

from e2e_support import AGENT_IMAGE, APP_IMAGE, BASE_IMAGE, COMPOSE, IMAGE, podman


@pytest.fixture(scope="session", autouse=True)
def prepared():
    missing = [name for name, value in (("RDMAGW_E2E_IMAGE", IMAGE), ("RDMAGW_E2E_APP_IMAGE", APP_IMAGE),
                                        ("RDMAGW_E2E_AGENT_IMAGE", AGENT_IMAGE),
                                        ("RDMAGW_E2E_BASE_IMAGE", BASE_IMAGE), ("RDMAGW_E2E_COMPOSE", COMPOSE),
                                        ("CONTAINERS_CONF", os.environ.get("CONTAINERS_CONF")))
               if not value]
    if missing:
        pytest.fail(f"{', '.join(missing)} not set: run these tests through tests/docker/e2e/run, "
                    "which builds the images and sets podman up")
    if os.geteuid() != 0 or shutil.which("podman") is None:
        pytest.fail("needs root and podman (tests/docker/e2e/run installs it)")
    for image in (IMAGE, APP_IMAGE, AGENT_IMAGE):
        podman("image", "exists", image)
