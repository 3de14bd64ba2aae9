# SPDX-License-Identifier: Apache-2.0
"""The services table (docs/kubernetes.md, "The services table"): what
rdmagw-k8s writes (its Go writer, `--table-from`) is what rdmagw maps, and
one rdmagw reading the table routes by the same Services as one parsing
the JSON file it came from; a table that fails its checks (a changed byte,
cut short, another version) is refused like a malformed file, the last
one kept; a good one after it is read.

No API server: the agent converts a file written here. Each rdmagw runs
as root with `services: {file: ...}` and no listener: /stats and /services
show what it read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import integration

from admin_client import admin_json  # noqa: E402
from clients import free_port, require_root_and, wait_for  # noqa: E402


def services_file(endpoint_port: int = 6380, reachable: bool = False) -> dict:
    """Two Services (one headless), every endpoint state, a name that is
    not ASCII, and the agent's words about an unreachable API server."""
    ep = {"address": "10.0.1.1", "port": endpoint_port, "state": "ready", "node": "n\u00e9", "pod": "redis-0",
          "rdmagw": True}
    api = {"reachable": reachable, "since": "2026-11-29T10:00:00Z"}
    if not reachable:
        api["error"] = "Get \"https://10.96.0.1:443/readyz\": dial tcp: connection refused"
    return {"format": "rdmagw-services/1", "api": api, "services": [
        {"namespace": "default", "name": "redis", "cluster_ips": ["10.96.0.10", "10.96.0.11"],
         "ports": [{"name": "redis", "port": 6379, "endpoints": [
             ep, {**ep, "address": "10.0.1.2", "state": "not-ready", "rdmagw": False, "pod": "redis-1"},
             {**ep, "address": "10.0.1.3", "state": "terminating", "pod": "redis-2"}]},
                   {"port": 26379, "endpoints": [{**ep, "port": 26379}]}]},
        {"namespace": "db", "name": "pg", "cluster_ips": [],
         "ports": [{"name": "sql", "port": 5432, "endpoints": [{**ep, "address": "10.0.2.1", "port": 5432}]}]}]}


def write_renamed(path: Path, data: bytes) -> None:
    """As rdmagw-k8s writes: a new 0644 file renamed over the old one."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


@pytest.fixture
def work():
    """A directory under /tmp (sticky, root's), 0755 and root's: trusted."""
    require_root_and((), "the services table test")
    if not os.path.exists(integration.RDMAGW_BIN):
        pytest.fail(f"no rdmagw at {integration.RDMAGW_BIN}: build it first (tools/dev/build)")
    d = Path(tempfile.mkdtemp(prefix="rdmagw-table-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def convert(agent_bin: str, work: Path, content: dict, name: str = "services.table") -> bytes:
    source = work / "source.json"
    source.write_text(json.dumps(content))
    out = work / ("." + name + ".new")
    r = subprocess.run([agent_bin, "--table-from", str(source), "--table", str(out)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    out.unlink()
    return data


def reader(procs: list, work: Path, name: str, path: Path):
    config = work / f"{name}.yaml"
    admin = free_port()
    config.write_text(integration.render_config(name, tunnel_port=free_port(), admin_port=admin,
                                                extra_lines=[f"services: {{file: {path}}}"]))
    sc = integration.Sidecar(name, config, work / f"{name}.log", integration.RDMAGW_BIN)
    sc.admin_port = admin
    procs.append(sc)
    return sc.start()


def status(sc) -> dict:
    return admin_json(sc.admin_port, "/stats")["services"]


def loaded(sc, loads: int) -> dict:
    st = wait_for(lambda: (s := status(sc))["loads"] >= loads and s, 5, f"load #{loads}")
    assert st["loads"] == loads and st["error"] == "", st
    return st


def test_a_table_from_the_agent_routes_as_the_json_it_came_from_and_a_bad_one_keeps_the_last(
        agent_bin, work, procs):
    content = services_file()
    json_path, table_path = work / "services.json", work / "services.table"
    write_renamed(json_path, json.dumps(content).encode())
    write_renamed(table_path, convert(agent_bin, work, content))
    by_json = reader(procs, work, "json", json_path)
    by_table = reader(procs, work, "table", table_path)
    for sc in (by_json, by_table):
        loaded(sc, 1)
    assert by_table.wait_log(lambda l: "event=services_loaded" in l and "format=table" in l, 5), by_table.tail()
    assert by_json.wait_log(lambda l: "event=services_loaded" in l and "format=json" in l, 5), by_json.tail()

    # Everything /services shows, and the status but for the file's name.
    same = ("loaded", "services", "endpoints", "api", "loads", "load_failures", "error")
    a, b = admin_json(by_json.admin_port, "/services"), admin_json(by_table.admin_port, "/services")
    assert a["table"] == b["table"]
    assert {k: a["services"][k] for k in same} == {k: b["services"][k] for k in same}
    assert b["services"]["services"] == 2 and b["services"]["endpoints"] == 5
    assert b["services"]["api"]["error"] == content["api"]["error"]
    redis = b["table"][0]
    assert redis["cluster_ips"] == ["10.96.0.10", "10.96.0.11"]
    assert [e["state"] for e in redis["ports"][0]["endpoints"]] == ["ready", "not-ready", "terminating"]
    assert redis["ports"][0]["endpoints"][0]["node"] == "n\u00e9"

    good = table_path.read_bytes()
    # A byte changed after writing, a table cut short, another version:
    # each refused with its reason, the first table kept.
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x01
    other_version = bytearray(good)
    other_version[8] = 3
    for failures, (data, why) in enumerate(
            ((bytes(flipped), "checksum does not match"),
             (good[:len(good) // 2], "cut short, or written in place?"),
             (bytes(other_version), "table version 3, not 2")), start=1):
        write_renamed(table_path, data)
        st = wait_for(lambda: (s := status(by_table))["load_failures"] >= failures and s, 5, why)
        assert why in st["error"] and st["loads"] == 1 and st["services"] == 2, st
        assert admin_json(by_table.admin_port, "/services")["table"] == a["table"]
        assert by_table.wait_log(lambda l: "event=services_load_failed" in l and why in l, 5), by_table.tail()

    # A good table again: read, and routed by (the endpoints' new port).
    changed = services_file(endpoint_port=7000, reachable=True)
    write_renamed(table_path, convert(agent_bin, work, changed))
    st = loaded(by_table, 2)
    assert st["api"]["reachable"] is True
    ports = [e["port"] for e in admin_json(by_table.admin_port, "/services")["table"][0]["ports"][0]["endpoints"]]
    assert ports == [7000, 7000, 7000]
