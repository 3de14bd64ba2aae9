# SPDX-License-Identifier: Apache-2.0
"""A small client of rdmagw's admin endpoint (docs/admin.md) for the tests."""

from __future__ import annotations

import http.client
import json


class AdminResponse:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self):
        return json.loads(self.body)


def admin_request(port: int, path: str, method: str = "GET", timeout: float = 5.0,
                  headers: dict[str, str] | None = None) -> AdminResponse:
    """One request to 127.0.0.1:port; the connection is closed afterwards.
    `headers` replace http.client's own (a "Host" given here is sent as is)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = dict(headers or {})
        if "Host" in headers:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders()
        else:
            conn.request(method, path, headers=headers)
        resp = conn.getresponse()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return AdminResponse(resp.status, headers, resp.read())
    finally:
        conn.close()


def admin_json(port: int, path: str, method: str = "GET"):
    r = admin_request(port, path, method)
    assert r.status == 200, f"{method} {path}: {r.status} {r.text}"
    return r.json()


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value}, for exact comparisons."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out
