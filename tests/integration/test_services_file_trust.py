# SPDX-License-Identifier: Apache-2.0
"""The services file (docs/configuration.md, `services.file`) says where
every Service connection goes and whether it is tunnelled, so rdmagw reads
it only if root or rdmagw's own user alone can have written it: the file
owned by one of them and writable by neither group nor others; every
directory on its path owned by them and writable by no one else unless
sticky (as /tmp); every symlink on the way owned by them. Any other file is
refused like a malformed one (`reason="not trusted: ..."`): logged,
counted, shown in /stats, and the last table read stays in use. A chmod or
chown alone makes it read again.

A file that would send connections to this host (loopback, 0.0.0.0/8) or
to addresses no Service or pod holds (link-local, multicast, broadcast),
or whose names hold control bytes, is refused whole.

One rdmagw (running as root) per test, with `services: {file: ...}` and no
listener: /stats and /services show what it read. "Another user" is uid
65534, for real (setpriv) where it writes a file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from admin_client import admin_json, admin_request, parse_metrics
from clients import free_port, require_root_and, wait_for
from conftest import Sidecar

NOBODY = 65534
CLUSTER_IP = "10.96.0.10"


def content(names: list[str], address: str = "10.77.0.2", port: int = 8000, cluster_ip: str = CLUSTER_IP,
            namespace: str = "default") -> str:
    """A services file (format rdmagw-services/1) with one Service per name,
    each with one ready endpoint `address`:`port`."""
    services = [{"namespace": namespace, "name": name, "cluster_ips": [cluster_ip] if i == 0 else [],
                 "ports": [{"name": "echo", "port": 80, "endpoints": [
                     {"address": address, "port": port, "state": "ready", "rdmagw": True,
                      "node": "n1", "pod": f"{name}-pod"}]}]}
                for i, name in enumerate(names)]
    return json.dumps({"format": "rdmagw-services/1", "api": {"reachable": True, "since": "2026-11-28T04:00:00Z"},
                       "services": services})


def write_as_agent(path: Path, text: str, mode: int = 0o644, uid: int = 0) -> None:
    """As rdmagw-k8s writes: a new file (`mode`, owned by `uid`) renamed over
    the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.chown(tmp, uid, uid)
    os.rename(tmp, path)


# Run as uid 65534 (setpriv): writes argv[2] to argv[1] + ".tmp" and renames
# it over argv[1], as an agent would.
_WRITE_AS_OTHER = """
import os, sys
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(sys.argv[2])
os.chmod(tmp, 0o644)
os.rename(tmp, sys.argv[1])
"""


def write_as_other_user(path: Path, text: str) -> None:
    r = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c",
         _WRITE_AS_OTHER, str(path), text], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"uid {NOBODY} could not write {path}: {r.stderr}"
    assert os.stat(path).st_uid == NOBODY


@pytest.fixture
def files():
    """A directory for the services file under /tmp (sticky, root's), mode
    0755, owned by root: trusted; removed after the test."""
    require_root_and(("setpriv",), "services file trust test")
    d = Path(tempfile.mkdtemp(prefix="rdmagw-trust-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def reader(sidecar):
    """reader(path) starts an rdmagw whose services.file is `path`."""

    def start(path: Path) -> Sidecar:
        sc = sidecar("svc", tunnel_port=free_port(), admin_port=free_port(),
                     extra_lines=[f"services: {{file: {path}}}"])
        return sc.start()

    return start


def status(sc: Sidecar) -> dict:
    return admin_json(sc.admin_port, "/stats")["services"]


def table(sc: Sidecar) -> list[str]:
    """The names of the Services in the table in use."""
    return [s["name"] for s in admin_json(sc.admin_port, "/services")["table"]]


def loaded(sc: Sidecar, loads: int, names: list[str], what: str) -> dict:
    """Waits for load number `loads`, then checks its table is `names`."""
    st = wait_for(lambda: (s := status(sc))["loads"] >= loads and s, 5, f"load #{loads}: {what}")
    assert st["loads"] == loads and st["error"] == "" and st["services"] == len(names), st
    assert table(sc) == names
    return st


def refused(sc: Sidecar, failures: int, why: str, kept: list[str]) -> dict:
    """Waits for failure number `failures`, checks its error says `why` and
    the table `kept` is still in use, and that it was logged."""
    st = wait_for(lambda: (s := status(sc))["load_failures"] >= failures and s, 5, f"refusal #{failures}: {why}")
    assert st["load_failures"] == failures, st
    assert why in st["error"], st
    assert st["loaded"] is True and st["services"] == len(kept), st
    assert table(sc) == kept
    line = sc.wait_log(lambda l: "event=services_load_failed" in l and why in l, 5)
    assert line, sc.tail()
    metrics = parse_metrics(admin_request(sc.admin_port, "/metrics").text)
    assert metrics['rdmagw_services_file_loads_total{result="failed"}'] == failures
    return st


def test_the_file_must_be_owned_by_root_and_writable_by_no_one_else(files, reader):
    path = files / "services.json"
    write_as_agent(path, content(["one"]))
    sc = reader(path)
    loaded(sc, 1, ["one"], "a root-owned 0644 file")

    # Writable by others: refused, "one" stays; a chmod alone reads it again.
    write_as_agent(path, content(["two"]), mode=0o666)
    st = refused(sc, 1, f"not trusted: {path} is writable by group or others (mode 0666)", ["one"])
    assert 'kept="the last table read"' in sc.log_text()
    assert st["table_file"] == str(path)
    os.chmod(path, 0o644)
    loaded(sc, 2, ["two"], "chmod 0644")
    # A chmod alone makes it untrusted too (the table read stays).
    os.chmod(path, 0o664)
    refused(sc, 2, f"not trusted: {path} is writable by group or others (mode 0664)", ["two"])
    os.chmod(path, 0o644)
    loaded(sc, 3, ["two"], "chmod 0644 again")

    # Owned by another user: refused; a chown alone reads it again.
    write_as_agent(path, content(["three"]), uid=NOBODY)
    refused(sc, 3, f"not trusted: {path} is owned by uid {NOBODY}", ["two"])
    os.chown(path, 0, 0)
    loaded(sc, 4, ["three"], "chown root")
    os.chown(path, NOBODY, NOBODY)
    refused(sc, 4, f"not trusted: {path} is owned by uid {NOBODY}", ["three"])
    os.chown(path, 0, 0)
    loaded(sc, 5, ["three"], "chown root again")


def test_a_file_another_user_wrote_in_a_directory_anyone_may_write_is_refused(files, reader):
    shared = files / "shared"
    shared.mkdir(mode=0o755)
    path = shared / "services.json"
    write_as_agent(path, content(["one"]))
    sc = reader(path)
    loaded(sc, 1, ["one"], "a root-owned file in a 0755 directory")

    # The directory writable by anyone, without the sticky bit: another user
    # replaces root's file with one of its own, for real.
    os.chmod(shared, 0o777)
    write_as_other_user(path, content(["evil"]))
    st = refused(sc, 1, "not trusted: ", ["one"])
    assert (f"directory {shared} is writable by group or others (mode 0777)" in st["error"]
            or f"{path} is owned by uid {NOBODY}" in st["error"]), st

    # Fixed: the directory closed, the file written again by root.
    os.chmod(shared, 0o755)
    write_as_agent(path, content(["two"]))
    loaded(sc, 2, ["two"], "the directory 0755 and root's file")

    # A root-owned file in a sticky directory anyone may write in (as /tmp):
    # others cannot replace or remove root's entries there, so it is read.
    os.chmod(shared, 0o1777)
    write_as_agent(path, content(["three"]))
    loaded(sc, 3, ["three"], "root's file in a 1777 directory")

    # A directory owned by another user: its owner could replace the file.
    os.chmod(shared, 0o755)
    os.chown(shared, NOBODY, NOBODY)
    write_as_agent(path, content(["four"]))
    refused(sc, 2, f"not trusted: directory {shared} is owned by uid {NOBODY}", ["three"])
    os.chown(shared, 0, 0)
    write_as_agent(path, content(["five"]))
    loaded(sc, 4, ["five"], "the directory root's again")


def link_over(path: Path, to: Path, uid: int) -> None:
    """Replaces `path` with a symlink to `to` owned by `uid`."""
    link = path.with_name(path.name + ".link")
    os.symlink(to, link)
    os.lchown(link, uid, uid)
    os.rename(link, path)


def test_a_symlink_another_user_owns_on_the_path_is_refused(files, reader):
    path = files / "services.json"
    write_as_agent(path, content(["one"]))
    sc = reader(path)
    loaded(sc, 1, ["one"], "a regular file")

    # A root-owned symlink to a good file is trusted (as the ..data links of
    # a mounted ConfigMap are).
    write_as_agent(files / "two.json", content(["two"]))
    link_over(path, files / "two.json", 0)
    loaded(sc, 2, ["two"], "a root-owned symlink")

    # A root-owned symlink into a directory others may write in: the
    # directories where the path leads count as much as those it names.
    opened = files / "open"
    opened.mkdir()
    write_as_agent(opened / "four.json", content(["four"]))
    os.chmod(opened, 0o777)
    link_over(path, opened / "four.json", 0)
    refused(sc, 1, f"not trusted: directory {opened} is writable by group or others (mode 0777)", ["two"])

    # The path replaced by a symlink (to a good file) that uid 65534 owns:
    # whoever placed it chose what is read.
    write_as_agent(files / "three.json", content(["three"]))
    link_over(path, files / "three.json", NOBODY)
    refused(sc, 2, f"not trusted: {path} is a symlink owned by uid {NOBODY}", ["two"])

    # Fixed: the symlink chowned to root. Read again, as after a chown of
    # the file itself.
    os.lchown(path, 0, 0)
    loaded(sc, 3, ["three"], "the symlink chowned to root")


def test_addresses_that_are_no_services_or_pods_refuse_the_file(files, reader):
    path = files / "services.json"
    write_as_agent(path, content(["one"]))
    sc = reader(path)
    loaded(sc, 1, ["one"], "a good file")
    bad = [
        # Service traffic landing on rdmagw's own admin endpoint.
        (content(["admin"], "127.0.0.1", sc.admin_port), "127.0.0.1 is loopback: not an address a Service or pod holds"),
        # The cloud's metadata service.
        (content(["metadata"], "169.254.169.254", 80), "169.254.169.254 is link-local (169.254.0.0/16)"),
        (content(["zero"], "0.0.0.0", 8000), "0.0.0.0 is unspecified (0.0.0.0/8)"),
        (content(["multicast"], "224.0.0.1", 8000), "224.0.0.1 is multicast (224.0.0.0/4)"),
        (content(["broadcast"], "255.255.255.255", 8000), "255.255.255.255 is broadcast"),
        (content(["loopback-vip"], cluster_ip="127.0.0.53"), "127.0.0.53 is loopback"),
        (content(["esc"], namespace="default\x1b[31m"), "holds a control byte"),
    ]
    for failures, (text, why) in enumerate(bad, start=1):
        write_as_agent(path, text)
        refused(sc, failures, why, ["one"])
    write_as_agent(path, content(["two"]))
    loaded(sc, 2, ["two"], "a good file again")


def test_following_the_advice_on_a_directory_reads_the_file_again(files, reader):
    """The refusal of a file in a directory others may write in says "chmod
    go-w it": done, the file (unchanged, root's) is read again, as after a
    chmod of the file itself."""
    shared = files / "shared"
    shared.mkdir(mode=0o755)
    path = shared / "services.json"
    write_as_agent(path, content(["one"]))
    sc = reader(path)
    loaded(sc, 1, ["one"], "a root-owned file in a 0755 directory")
    os.chmod(shared, 0o777)
    write_as_agent(path, content(["two"]))  # root's own file: only the directory is wrong
    refused(sc, 1, f"not trusted: directory {shared} is writable by group or others (mode 0777), "
                   "who could replace the file: chmod go-w it", ["one"])
    os.chmod(shared, 0o755)
    loaded(sc, 2, ["two"], "chmod go-w of the directory")
