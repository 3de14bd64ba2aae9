# SPDX-License-Identifier: Apache-2.0
"""The monitoring files (docker/monitoring/) against a real rdmagw.

A pair of rdmagw processes on 127.0.0.1 (TCP transport: one with a listener,
one serving an echo target in this process) carries a little traffic, so the
series labelled by listener, peer and worker exist; then:

- every metric name in every alert expression and every dashboard query
  (and the dashboard's variable queries) is one the live /metrics output
  has, as a sample name (histograms as _bucket/_sum/_count);
- every label matcher names a label those series carry, and an equality
  match (or each word of a `a|b|c` regex match) a value they carry; every
  label an expression groups by, a legend or an annotation names is one of
  theirs or a scrape target label;
- `promtool check rules` accepts the rules, `promtool test rules` runs their
  unit tests (rdmagw-alerts.test.yaml: input series, the alerts that must and
  must not fire), `promtool check metrics` accepts both live outputs, and
  promtool also parses every dashboard query (as recording rules, with
  Grafana's variables substituted);
- the dashboard's structure: valid JSON, a Prometheus `datasource` variable
  every panel uses, unique panel ids, every query panel with targets that
  have an expression, no overlapping panels, nothing fetched from elsewhere;
- every alert has `for`, a severity, a summary and a description whose links
  (docker/monitoring/README.md#alert, docs/*.md) exist.

promtool (Debian's prometheus package) missing fails the tests: run
tools/dev/install-deps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from container_support import DOCKER, REPO, RDMAGW_BIN, free_port

MONITORING = DOCKER / "monitoring"
ALERTS = MONITORING / "rdmagw-alerts.yaml"
ALERT_TESTS = MONITORING / "rdmagw-alerts.test.yaml"
DASHBOARD = MONITORING / "rdmagw-dashboard.json"
README = MONITORING / "README.md"

START_TIMEOUT = 15.0
PROMTOOL_TIMEOUT = 60

# Labels Prometheus attaches to every series of a scrape target.
TARGET_LABELS = {"job", "instance"}
# Series Prometheus makes itself for every scrape; no /metrics has them.
SCRAPE_SERIES = {"up"}
SEVERITIES = {"critical", "warning", "info"}
# The dashboard's rows (docker/monitoring/README.md).
DASHBOARD_ROWS = {"Traffic", "Sessions and transports", "Failures", "Latency", "RDMA", "Resources and limits"}

# PromQL words that are not metric names: aggregation operators (not
# followed by "(" when a `by` clause comes first), keywords, set and
# grouping operators, and the number literals.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "offset", "bool", "atan2", "inf", "nan",
}
PROMQL_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
    "floor", "histogram_quantile", "holt_winters", "hour", "idelta", "increase", "irate", "label_join",
    "label_replace", "last_over_time", "ln", "log10", "log2", "max_over_time", "min_over_time", "minute",
    "month", "predict_linear", "present_over_time", "quantile_over_time", "rate", "resets", "round", "scalar",
    "sgn", "sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "time",
    "timestamp", "vector", "year",
} | {w for w in PROMQL_WORDS if w not in {"by", "without", "on", "ignoring", "and", "or", "unless", "offset",
                                            "bool", "inf", "nan"}}

IDENT = r"[A-Za-z_:][A-Za-z0-9_:]*"
STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\''
MATCHER = re.compile(rf'({IDENT})\s*(=~|!~|!=|=)\s*({STRING})')
SELECTOR = re.compile(rf'(?<![\w:.])({IDENT})?\s*\{{([^{{}}]*)\}}')
GROUPING = re.compile(r'\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)')


# ---------------------------------------------------------------------------
# PromQL, as far as these checks need it


def _substitute_grafana(expr: str) -> str:
    """Grafana's variables replaced by values a query may have at run time."""
    for var, value in (("$__rate_interval", "5m"), ("$__range", "6h"), ("$__interval", "1m")):
        expr = expr.replace(var, value)
    return expr.replace("${datasource}", "prometheus").replace("$job", "rdmagw").replace("$instance", ".*")


def _without_strings(expr: str) -> str:
    return re.sub(STRING, '""', expr)


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads: identifiers that are not PromQL
    words, not followed by "(" (a function), outside label matchers, ranges,
    grouping label lists and strings."""
    text = _without_strings(_substitute_grafana(expr))
    text = re.sub(r"\{[^{}]*\}", "{}", text)           # label matchers
    text = re.sub(r"\[[^\[\]]*\]", "[]", text)          # ranges, subqueries
    text = GROUPING.sub(r"\1 ()", text)                 # by (a, b), on (...), group_left (...)
    names = set()
    for m in re.finditer(rf"(?<![\w:.$]){IDENT}", text):
        word = m.group(0)
        if word in PROMQL_WORDS:
            continue
        if re.match(r"\s*\(", text[m.end():]):
            assert word in PROMQL_FUNCTIONS, f"unknown function {word!r} in {expr!r}"
            continue
        names.add(word)
    return names


def grouping_labels(expr: str) -> set[str]:
    text = _without_strings(_substitute_grafana(expr))
    return {label.strip() for m in GROUPING.finditer(text) for label in m.group(2).split(",") if label.strip()}


def selectors(expr: str) -> list[tuple[str | None, list[tuple[str, str, str]]]]:
    """(metric name or None, [(label, op, value)]) for each `{...}` in expr."""
    out = []
    for m in SELECTOR.finditer(expr):
        name = m.group(1)
        if name in PROMQL_WORDS or name in PROMQL_FUNCTIONS:
            name = None
        matchers = [(lm.group(1), lm.group(2), json.loads(lm.group(3)) if lm.group(3)[0] == '"' else lm.group(3)[1:-1])
                    for lm in MATCHER.finditer(m.group(2))]
        out.append((name, matchers))
    return out


def template_labels(text: str) -> set[str]:
    """Labels a Grafana legend ({{peer}}) or an alert template ({{ $labels.peer }}) names."""
    return set(re.findall(r"\{\{\s*\$labels\.(\w+)", text)) | set(re.findall(r"\{\{\s*(\w+)\s*\}\}", text))


def test_metric_name_extraction_finds_names_and_only_names():
    """The parser the other tests rely on: it must find a misspelt metric."""
    expr = ('sum by (job, instance, peer) (rate(rdmagw_sesions_total{reason=~"a|b", job="x"}[5m] offset 10m))'
            ' / on (instance) group_left sum(rdmagw_x_bucket) > 0.5 and histogram_quantile(0.9, '
            'sum by (le) (rate(rdmagw_stream_open_seconds_bucket[$__rate_interval]))) '
            'or min_over_time((sum by (peer) (up))[1h:1m]) unless vector(1) > bool 1e-3')
    assert metric_names(expr) == {"rdmagw_sesions_total", "rdmagw_x_bucket", "rdmagw_stream_open_seconds_bucket",
                                  "up"}
    assert grouping_labels(expr) == {"job", "instance", "peer", "le"}
    assert selectors(expr)[0] == ("rdmagw_sesions_total", [("reason", "=~", "a|b"), ("job", "=", "x")])
    with pytest.raises(AssertionError, match="unknown function"):
        metric_names("rte(rdmagw_ready[5m])")


# ---------------------------------------------------------------------------
# The files


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert rules and all("alert" in r for r in rules), "rdmagw-alerts.yaml: alerting rules only"
    return rules


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def query_panels(d: dict) -> list[dict]:
    return [p for p in d["panels"] if p["type"] not in ("row", "text")]


def dashboard_queries(d: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    out = [(f"panel {p['id']} {p['title']!r} target {t['refId']}", t["expr"])
           for p in query_panels(d) for t in p["targets"]]
    for var in d["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)
            assert m, f"variable {var['name']}: expected label_values(SELECTOR, LABEL), got {query!r}"
            out.append((f"variable {var['name']}", f"group by ({m.group(2)}) ({m.group(1)})"))
    return out


def all_queries() -> list[tuple[str, str, str]]:
    """(where, PromQL, text naming labels: legend or annotations)."""
    out = [(f"alert {r['alert']}", r["expr"], " ".join(r.get("annotations", {}).values())) for r in alert_rules()]
    legends = {}
    for p in query_panels(dashboard()):
        for t in p["targets"]:
            legends[f"panel {p['id']} {p['title']!r} target {t['refId']}"] = t.get("legendFormat", "")
    out += [(where, expr, legends.get(where, "")) for where, expr in dashboard_queries(dashboard())]
    return out


# ---------------------------------------------------------------------------
# A live rdmagw pair


class EchoServer:
    """An echo target on a free loopback port, in a thread of this process."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                try:
                    while data := conn.recv(65536):
                        conn.sendall(data)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(timeout=5)


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def parse_samples(text: str) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of each sample line of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(rf"({IDENT})(?:\{{(.*)\}})?\s+\S+$", line)
        assert m, f"unparsable /metrics line: {line!r}"
        labels = {k: json.loads(v) for k, v in re.findall(rf'({IDENT})=("(?:[^"\\]|\\.)*")', m.group(2) or "")}
        out.append((m.group(1), labels))
    return out


class Rdmagw:
    def __init__(self, name: str, config: str, directory: Path, admin_port: int):
        self.name = name
        self.admin_port = admin_port
        path = directory / f"{name}.yaml"
        path.write_text(config)
        self.log_path = directory / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(RDMAGW_BIN), "--config", str(path)], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited {self.proc.returncode}:\n{self.log_text()}"
            try:
                if http_get(self.admin_port, "/ready", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"{self.name} not ready within {START_TIMEOUT} s:\n{self.log_text()}")

    def metrics(self) -> str:
        status, text = http_get(self.admin_port, "/metrics")
        assert status == 200, f"{self.name} GET /metrics: {status} {text}"
        return text

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log.close()


@pytest.fixture(scope="module")
def live_metrics(tmp_path_factory) -> dict[str, str]:
    """/metrics of both sides of a pair that carried traffic: {"client": text, "server": text}."""
    if not os.access(RDMAGW_BIN, os.X_OK):
        pytest.fail(f"{RDMAGW_BIN} is not built: run tools/dev/build (or set RDMAGW_BIN)")
    directory = tmp_path_factory.mktemp("monitoring")
    echo = EchoServer()
    target = f"tcp:127.0.0.1:{echo.port}"
    server_tunnel, listen_port = free_port(), free_port()
    server_admin, client_admin = free_port(), free_port()
    procs = []
    try:
        procs.append(Rdmagw("server", f"""node: host-b
admin: 127.0.0.1:{server_admin}
workers: 1
tunnel: {{address: 127.0.0.1, tcp_port: {server_tunnel}, transport: tcp}}
targets: ["{target}"]
shutdown_timeout_ms: 1000
""", directory, server_admin))
        procs.append(Rdmagw("client", f"""node: host-a
admin: 127.0.0.1:{client_admin}
workers: 1
tunnel: {{address: 127.0.0.1, tcp_port: {free_port()}, transport: tcp}}
peers:
  - {{name: host-b, address: 127.0.0.1, tcp_port: {server_tunnel}}}
listeners:
  - {{name: echo, listen: "tcp:127.0.0.1:{listen_port}", peer: host-b, target: "{target}"}}
shutdown_timeout_ms: 1000
""", directory, client_admin))
        for p in procs:
            p.wait_ready()
        payload = os.urandom(16384)
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", listen_port), timeout=10) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                got = b""
                while chunk := s.recv(65536):
                    got += chunk
            assert got == payload, f"echo through the pair returned {len(got)} of {len(payload)} bytes"
        yield {"client": procs[1].metrics(), "server": procs[0].metrics()}
    finally:
        for p in reversed(procs):
            p.stop()
        echo.close()


@pytest.fixture(scope="module")
def live_series(live_metrics) -> dict[str, list[dict[str, str]]]:
    """Sample name -> the label sets of its series, over both sides."""
    series: dict[str, list[dict[str, str]]] = {}
    for text in live_metrics.values():
        for name, labels in parse_samples(text):
            series.setdefault(name, []).append(labels)
    # The traffic made the labelled series this test relies on.
    for name, label, value in (("rdmagw_listener_received_bytes_total", "listener", "echo"),
                               ("rdmagw_sessions", "peer", "host-b"), ("rdmagw_sessions", "peer", "host-a")):
        assert any(s.get(label) == value for s in series.get(name, [])), \
            f"no {name}{{{label}={value!r}}} after traffic: {series.get(name)}"
    return series


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run tools/dev/install-deps (it installs Debian's prometheus package, "
                    "which has promtool)")
    return path


def run_promtool(promtool: str, *args: str, stdin: str | None = None, cwd: Path | None = None):
    return subprocess.run([promtool, *args], input=stdin, capture_output=True, text=True, cwd=cwd,
                          timeout=PROMTOOL_TIMEOUT)


# ---------------------------------------------------------------------------
# Against the live output


# Families rdmagw declares but samples only in a mode the live pair does not
# run: an alert on them is checked against the declaration (# TYPE).
MODE_ONLY_FAMILIES = {"rdmagw_certificate_expiry_seconds": "tunnel.auth.mode cert"}


def declared_families(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(rf"^# TYPE ({IDENT}) ", text, re.M)}


def test_every_metric_used_exists_in_live_metrics(live_series, live_metrics):
    declared = set().union(*(declared_families(t) for t in live_metrics.values()))
    for name in MODE_ONLY_FAMILIES:
        assert name in declared and name not in live_series, f"{name}: not declared, or sampled after all"
    missing, used = [], set()
    for where, expr, _ in all_queries():
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        used |= names
        missing += [f"{where}: {name}" for name in sorted(names) if name not in live_series
                    and name not in SCRAPE_SERIES and name not in MODE_ONLY_FAMILIES]
    assert not missing, "metrics not in the live /metrics output:\n" + "\n".join(missing)
    assert used - SCRAPE_SERIES, "no rdmagw metric used at all"


def test_every_label_used_exists_on_the_live_series(live_series):
    problems = []
    for where, expr, text in all_queries():
        names = metric_names(expr) - SCRAPE_SERIES
        known = set(TARGET_LABELS) | {"le"}
        for name in names:
            for labels in live_series.get(name, []):
                known |= labels.keys()
        for name, matchers in selectors(_substitute_grafana(expr)):
            series = live_series.get(name, []) if name else [s for n in names for s in live_series.get(n, [])]
            for label, op, value in matchers:
                if label in TARGET_LABELS:
                    continue
                values = {s[label] for s in series if label in s}
                if not values:
                    problems.append(f"{where}: {name or 'selector'} has no label {label!r}")
                    continue
                if op == "=":
                    wanted = [value]
                elif op == "=~" and re.fullmatch(r"[\w-]+(\|[\w-]+)*", value):
                    wanted = value.split("|")
                else:
                    wanted = []
                problems += [f"{where}: no {name}{{{label}={w!r}}}; live values: {sorted(values)}"
                             for w in wanted if w not in values]
        problems += [f"{where}: groups by {label!r}, which no series it reads has"
                     for label in sorted(grouping_labels(expr) - known)]
        problems += [f"{where}: names label {label!r} in a legend or annotation, which no series it reads has"
                     for label in sorted(template_labels(text) - known)]
    assert not problems, "\n".join(problems)


def test_promtool_check_metrics_accepts_the_live_output(live_metrics, promtool):
    for side, text in live_metrics.items():
        check = run_promtool(promtool, "check", "metrics", stdin=text)
        assert check.returncode == 0, f"promtool check metrics ({side}):\n{check.stdout}{check.stderr}"


# ---------------------------------------------------------------------------
# promtool on the files


def test_promtool_check_rules(promtool):
    check = run_promtool(promtool, "check", "rules", str(ALERTS))
    assert check.returncode == 0, f"promtool check rules:\n{check.stdout}{check.stderr}"
    assert f"SUCCESS: {len(alert_rules())} rules found" in check.stdout, check.stdout


def test_promtool_test_rules_exercises_the_alerts(promtool):
    """Input series in, the alerts that must (and must not) fire out."""
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    assert [str(MONITORING / f) for f in tests["rule_files"]] == [str(ALERTS)], tests["rule_files"]
    exercised = {case["alertname"] for test in tests["tests"] for case in test.get("alert_rule_test", [])
                 if case.get("exp_alerts")}
    assert len(exercised) >= 2, f"only {exercised} tested firing"
    assert exercised <= {r["alert"] for r in alert_rules()}, exercised
    result = run_promtool(promtool, "test", "rules", ALERT_TESTS.name, cwd=MONITORING)
    assert result.returncode == 0, f"promtool test rules:\n{result.stdout}{result.stderr}"


def test_promtool_parses_every_dashboard_query(promtool, tmp_path):
    """Grafana does not check a query until it runs it; promtool does, as a
    recording rule's expression."""
    queries = dashboard_queries(dashboard())
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"rdmagw_dashboard:query_{i}", "expr": _substitute_grafana(expr)}
        for i, (_, expr) in enumerate(queries)]}]}
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    check = run_promtool(promtool, "check", "rules", str(path))
    where = "\n".join(f"query_{i}: {w}" for i, (w, _) in enumerate(queries))
    assert check.returncode == 0, f"promtool on the dashboard's queries:\n{check.stdout}{check.stderr}\n{where}"


# ---------------------------------------------------------------------------
# Structure


def test_dashboard_structure():
    d = dashboard()
    assert isinstance(d.get("schemaVersion"), int) and d["schemaVersion"] >= 36, d.get("schemaVersion")
    assert d.get("uid") and d.get("title")
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables.get("datasource")
    assert ds and ds["type"] == "datasource" and ds["query"] == "prometheus", ds
    assert "instance" in variables and variables["instance"]["type"] == "query", variables.keys()
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, var

    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    rows = {p["title"] for p in d["panels"] if p["type"] == "row"}
    assert DASHBOARD_ROWS <= rows, f"rows missing: {DASHBOARD_ROWS - rows}"

    cells = {}
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, f"panel {p['id']}: {g}"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]} and {p['id']} overlap at {(x, y)}"
                cells[(x, y)] = p["id"]

    for p in query_panels(d):
        where = f"panel {p['id']} {p['title']!r}"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, f"{where}: {p['datasource']}"
        assert p.get("targets"), f"{where}: no targets"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), f"{where}: duplicate refIds {refs}"
        for t in p["targets"]:
            assert t.get("expr", "").strip(), f"{where} target {t['refId']}: no expr"
            assert t.get("datasource", p["datasource"]) == p["datasource"], f"{where} target {t['refId']}"
            # The variables must reach every series the query reads.
            for name, matchers in selectors(t["expr"]):
                got = {(label, op, value) for label, op, value in matchers}
                assert {("job", "=", "$job"), ("instance", "=~", "$instance")} <= got, \
                    f"{where} target {t['refId']}: {name} is not filtered by $job and $instance: {t['expr']}"
            bare = metric_names(t["expr"]) - {n for n, _ in selectors(t["expr"])}
            assert not bare, f"{where} target {t['refId']}: {bare} read without the $job/$instance filter"

    text = DASHBOARD.read_text()
    assert not re.search(r"https?://", text), "the dashboard must not load anything from elsewhere"


def test_alerts_are_complete_and_documented():
    readme = README.read_text()
    headings = {m.group(1) for m in re.finditer(r"^#+\s+(\S+)\s*$", readme, re.M)}
    problems = []
    for rule in alert_rules():
        name = rule["alert"]
        if "for" not in rule:
            problems.append(f"{name}: no `for`")
        if rule.get("labels", {}).get("severity") not in SEVERITIES:
            problems.append(f"{name}: severity {rule.get('labels', {}).get('severity')!r} not in {SEVERITIES}")
        ann = rule.get("annotations", {})
        for key in ("summary", "description"):
            if not ann.get(key, "").strip():
                problems.append(f"{name}: no {key}")
        description = ann.get("description", "")
        anchor = f"docker/monitoring/README.md#{name.lower()}"
        if anchor not in description:
            problems.append(f"{name}: description does not link {anchor}")
        if name not in headings:
            problems.append(f"{name}: no heading `{name}` in docker/monitoring/README.md")
        for path in re.findall(r"\b((?:docs|docker)/[\w./-]+\.md)", description):
            if not (REPO / path).is_file():
                problems.append(f"{name}: links {path}, which does not exist")
    assert not problems, "\n".join(problems)
