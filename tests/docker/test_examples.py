# SPDX-License-Identifier: Apache-2.0
"""The deployment examples: docker/compose.yaml with docker/examples/*.yaml,
and docker/kubernetes/pod.yaml.  No engine or cluster runs them here, so
what would break them silently is checked: each rdmagw configuration passes
`rdmagw --check`, and the settings that must agree across files (the uid the
redirect exempts and the uid the sidecar runs as, the redirect port and the
transparent listener, the addresses, the capabilities, the admin address the
health checks ask and the one rdmagw listens on, the stop timeouts) do.
The health checks, probes and hook are run for real in test_health.py.

Parsing the YAML needs PyYAML (Debian: python3-yaml), which tools/dev/install-deps
does not install: without it those checks are skipped, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from container_support import (
    DEFAULT_ADMIN, DEFAULT_SHUTDOWN_TIMEOUT_MS, DOCKER, IMAGE_RDMAGWCTL, SIDECAR_UID, healthcheck, rdmagwctl_timeout, run,
    runtime_env, seconds)

EXAMPLES = DOCKER / "examples"


def yaml_module():
    try:
        import yaml
    except ImportError:
        pytest.skip("PyYAML not installed (apt-get install python3-yaml): cannot parse the example YAML")
    return yaml


def load(path: Path) -> list:
    yaml = yaml_module()

    class Loader(yaml.SafeLoader):
        pass

    with open(path) as f:
        return list(yaml.load_all(f, Loader=Loader))


def check_config(rdmagw_bin, path: Path) -> str:
    """rdmagw --check on `path`, with the key files it names (which exist in
    the container, not here) replaced by a private key file made here."""
    import base64
    import os
    import tempfile
    text = path.read_text()
    with tempfile.TemporaryDirectory() as work:
        key = os.path.join(work, "key")
        with open(key, "w") as f:
            f.write(base64.b64encode(os.urandom(32)).decode() + "\n")
        os.chmod(key, 0o400)
        text = re.sub(r"key_files: \[[^\]]*\]", f"key_files: [{key}]", text)
        checked = Path(work) / path.name
        checked.write_text(text)
        proc = run([rdmagw_bin, "--check", "--config", checked])
    assert proc.returncode == 0, f"{path} fails rdmagw --check:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("name", ["host-a.yaml", "host-b.yaml"])
def test_compose_example_configs_pass_rdmagw_check(rdmagw_bin, name):
    check_config(rdmagw_bin, EXAMPLES / name)


def transparent_port(config: dict) -> int:
    ports = [int(l["listen"].rsplit(":", 1)[1]) for l in config.get("listeners", [])
             if str(l["listen"]).startswith("transparent:")]
    assert len(ports) == 1, config
    return ports[0]


def route_matches(config: dict) -> list[str]:
    return [r["match"] for l in config.get("listeners", []) for r in l.get("routes", [])]


def capabilities(entry: list | None) -> set[str]:
    return {c.upper().removeprefix("CAP_") for c in entry or []}


def test_compose_file_wires_init_sidecar_and_app_into_each_hosts_namespace():
    (compose,) = load(DOCKER / "compose.yaml")
    services = compose["services"]
    a_cfg, = load(EXAMPLES / "host-a.yaml")
    b_cfg, = load(EXAMPLES / "host-b.yaml")
    address = {h: services[h]["networks"]["fabric"]["ipv4_address"] for h in ("host-a", "host-b")}

    for host, sidecar, cfg, app in (("host-a", "rdmagw-a", a_cfg, "app-a"), ("host-b", "rdmagw-b", b_cfg, "app-b")):
        for name in (sidecar, app):
            assert services[name]["network_mode"] == f"service:{host}", name
        s = services[sidecar]
        assert s["user"].split(":")[0] == str(SIDECAR_UID)
        assert "cap_add" not in s and capabilities(s["cap_drop"]) == {"ALL"}
        # RDMA's devices and memlock come from compose.rdma.yaml only.
        assert "devices" not in s and "ulimits" not in s
        # The shipped profile, never unconfined (io_uring is blocked by the
        # runtimes' defaults; tests/docker/e2e runs this file with it).
        assert "seccomp=./seccomp.json" in s["security_opt"], s["security_opt"]
        assert not [o for o in s["security_opt"] if "unconfined" in o]
        assert (DOCKER / "seccomp.json").is_file()
        source, target, *_ = s["volumes"][0].split(":")
        assert (DOCKER / source).resolve() == EXAMPLES / f"{host}.yaml" and target == "/etc/rdmagw/rdmagw.yaml"
        assert cfg["tunnel"]["address"] == address[host], f"{host}.yaml tunnel.address"
        # The key each configuration names is mounted there, from the one file both share.
        mounts = dict(v.split(":")[1::-1] for v in s["volumes"])
        (key_path,) = cfg["tunnel"]["auth"]["key_files"]
        assert cfg["tunnel"]["auth"]["mode"] == "psk" and mounts.get(key_path) == "./keys/fleet", s["volumes"]

    (peer,) = a_cfg["peers"]
    assert peer["address"] == address["host-b"] and peer["tcp_port"] == b_cfg["tunnel"]["tcp_port"]

    # The application waits for its sidecar's health check, which is the
    # image's (so the two cannot drift apart).
    assert services["app-a"]["depends_on"]["rdmagw-a"]["condition"] == "service_healthy"
    for sidecar, cfg in (("rdmagw-a", a_cfg), ("rdmagw-b", b_cfg)):
        check_compose_healthcheck(services[sidecar]["healthcheck"])
        admin = services[sidecar].get("environment", {}).get("RDMAGW_ADMIN", runtime_env()["RDMAGW_ADMIN"])
        assert admin == cfg.get("admin", DEFAULT_ADMIN), f"{sidecar}: rdmagwctl would ask another address"

    init = services["init-a"]
    assert init["network_mode"] == "service:host-a" and init["user"].split(":")[0] == "0"
    assert init["entrypoint"] == ["/usr/local/bin/init.sh"]
    assert capabilities(init["cap_add"]) == {"NET_ADMIN", "NET_RAW"} and capabilities(init["cap_drop"]) == {"ALL"}
    env = init["environment"]
    assert env["RDMAGW_UID"] == str(SIDECAR_UID)
    assert int(env["RDMAGW_REDIRECT_PORT"]) == transparent_port(a_cfg)
    assert env["RDMAGW_CAPTURE"].split() == route_matches(a_cfg)
    assert services["rdmagw-a"]["depends_on"]["init-a"]["condition"] == "service_completed_successfully"


COMPOSE_HEALTHCHECK_KEYS = {"test", "interval", "timeout", "retries", "start_period", "start_interval", "disable"}


def check_compose_healthcheck(check: dict):
    assert set(check) <= COMPOSE_HEALTHCHECK_KEYS, f"unknown healthcheck keys: {set(check) - COMPOSE_HEALTHCHECK_KEYS}"
    _, image_command = healthcheck()
    assert check["test"] == ["CMD", *image_command], "the compose health check must be the image's"
    for key in ("interval", "timeout", "start_period"):
        seconds(check[key])  # a valid duration
    assert 2 * rdmagwctl_timeout(image_command) < seconds(check["timeout"]) <= seconds(check["interval"])
    assert isinstance(check["retries"], int) and check["retries"] >= 2


def test_compose_rdma_overlay_gives_the_sidecars_devices_and_memlock_only():
    (compose,) = load(DOCKER / "compose.yaml")
    (overlay,) = load(DOCKER / "compose.rdma.yaml")
    assert set(overlay["services"]) == {"rdmagw-a", "rdmagw-b"} <= set(compose["services"])
    for name, service in overlay["services"].items():
        assert set(service) == {"devices", "ulimits", "cap_add"}, name
        assert "/dev/infiniband:/dev/infiniband" in service["devices"]
        assert service["ulimits"]["memlock"] in (-1, {"soft": -1, "hard": -1})
        assert capabilities(service["cap_add"]) == {"IPC_LOCK"}


def test_compose_holders_and_init_do_not_inherit_the_sidecar_health_check():
    (compose,) = load(DOCKER / "compose.yaml")
    for name in ("host-a", "host-b", "init-a"):
        assert compose["services"][name].get("healthcheck") == {"disable": True}, name


def test_compose_file_pulls_no_frontend_and_names_the_app_image_by_variable():
    text = (DOCKER / "compose.yaml").read_text()
    assert "${RDMAGW_APP_IMAGE:-redis:7-bookworm}" in text
    # podman's default network is 10.88.0.0/16: the example's must not overlap it.
    import ipaddress
    (compose,) = load(DOCKER / "compose.yaml")
    (subnet,) = [c["subnet"] for c in compose["networks"]["fabric"]["ipam"]["config"]]
    assert not ipaddress.ip_network(subnet).overlaps(ipaddress.ip_network("10.88.0.0/16")), subnet
    assert not (DOCKER / "Dockerfile").read_text().startswith("# syntax="), "a syntax line pulls a frontend image"


def pod_documents():
    docs = {d["kind"]: d for d in load(DOCKER / "kubernetes" / "pod.yaml")}
    assert set(docs) == {"ConfigMap", "Pod"}
    return docs["ConfigMap"], docs["Pod"]


def test_pod_configmap_passes_rdmagw_check(rdmagw_bin, tmp_path):
    configmap, _ = pod_documents()
    path = tmp_path / "rdmagw.yaml"
    path.write_text(configmap["data"]["rdmagw.yaml"])
    check_config(rdmagw_bin, path)


def test_the_services_configmap_passes_rdmagw_check(rdmagw_bin, tmp_path):
    (configmap,) = [d for d in load(DOCKER / "kubernetes" / "redis-service.yaml") if d["kind"] == "ConfigMap"]
    path = tmp_path / "rdmagw.yaml"
    path.write_text(configmap["data"]["rdmagw.yaml"])
    check_config(rdmagw_bin, path)


def test_the_agents_daemonset_uses_its_rbac_and_writes_where_sidecars_read():
    (daemonset,) = load(DOCKER / "kubernetes" / "rdmagw-k8s-daemonset.yaml")
    rbac = {d["kind"]: d for d in load(DOCKER / "kubernetes" / "rdmagw-k8s-rbac.yaml")}
    spec = daemonset["spec"]["template"]["spec"]
    account = rbac["ServiceAccount"]["metadata"]
    assert (spec["serviceAccountName"], daemonset["metadata"]["namespace"]) == (account["name"], account["namespace"])
    (container,) = spec["containers"]
    (mount,) = container["volumeMounts"]
    (volume,) = spec["volumes"]
    assert mount["name"] == volume["name"] and volume["hostPath"]["path"] == mount["mountPath"] == "/run/rdmagw-k8s"
    output = container["args"][container["args"].index("--output") + 1]
    table = container["args"][container["args"].index("--table") + 1]
    (configmap,) = [d for d in load(DOCKER / "kubernetes" / "redis-service.yaml") if d["kind"] == "ConfigMap"]
    # The sidecars map the table; the JSON file is for people and tools.
    assert output == "/run/rdmagw-k8s/services.json"
    assert table == load_text(configmap["data"]["rdmagw.yaml"])["services"]["file"] == "/run/rdmagw-k8s/services.table"
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_pod_init_sidecar_and_configmap_agree():
    configmap, pod = pod_documents()
    spec = pod["spec"]
    (init,) = spec["initContainers"]
    containers = {c["name"]: c for c in spec["containers"]}
    sidecar, app = containers["rdmagw"], containers["app"]
    config = load_text(configmap["data"]["rdmagw.yaml"])

    assert init["command"] == ["/usr/local/bin/init.sh"] and init["image"] == sidecar["image"]
    sc = init["securityContext"]
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert capabilities(sc["capabilities"]["add"]) == {"NET_ADMIN", "NET_RAW"}
    assert capabilities(sc["capabilities"]["drop"]) == {"ALL"}
    env = {e["name"]: e["value"] for e in init["env"]}

    sc = sidecar["securityContext"]
    assert sc["runAsUser"] == SIDECAR_UID == int(env["RDMAGW_UID"]) and sc["runAsNonRoot"] is True
    assert capabilities(sc["capabilities"]["add"]) == {"IPC_LOCK"}
    assert sc["seccompProfile"]["type"] in ("Unconfined", "Localhost"), "io_uring is blocked by RuntimeDefault"
    assert app["securityContext"]["runAsUser"] != SIDECAR_UID, "the app's traffic would bypass the redirect"
    assert int(env["RDMAGW_REDIRECT_PORT"]) == transparent_port(config)
    assert env["RDMAGW_CAPTURE"].split() == route_matches(config)

    # The ConfigMap is mounted where the entrypoint reads it, readable by 1337.
    sidecar_env = {e["name"]: e["value"] for e in sidecar.get("env", [])}
    config_path = Path(sidecar_env.get("RDMAGW_CONFIG", "/etc/rdmagw/rdmagw.yaml"))
    (mount,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == str(config_path.parent)]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert config_path.name in configmap["data"]
    assert volume["configMap"]["defaultMode"] & 0o004, "not world-readable"

    # The key comes from a Secret, readable by the sidecar's group only
    # (fsGroup), mounted where key_files says.
    assert config["tunnel"]["auth"]["mode"] == "psk"
    (key_path,) = config["tunnel"]["auth"]["key_files"]
    (mount,) = [m for m in sidecar["volumeMounts"] if key_path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["defaultMode"] & 0o077 == 0o040, "a key readable beyond the group"
    assert spec["securityContext"]["fsGroup"] == SIDECAR_UID

    # The device comes from the eRDMA device plugin; pinned memory is charged
    # to the container, so its memory limit must cover workers x slab_size.
    limits = sidecar["resources"]["limits"]
    assert limits["aliyun/erdma"] == 1
    slab_mib = int(re.fullmatch(r"(\d+)MiB", config["tunnel"]["rdma"]["slab_size"]).group(1))
    limit_mib = int(re.fullmatch(r"(\d+)Mi", limits["memory"]).group(1))
    assert limit_mib > config["workers"] * slab_mib


def load_text(text: str) -> dict:
    return yaml_module().safe_load(text)


# Fields of the Kubernetes v1 Probe and LifecycleHandler: a misspelt one would
# be dropped by a lenient client and the probe silently not be what it seems.
PROBE_KEYS = {"exec", "httpGet", "tcpSocket", "grpc", "initialDelaySeconds", "periodSeconds", "timeoutSeconds",
              "successThreshold", "failureThreshold", "terminationGracePeriodSeconds"}
HANDLER_KEYS = {"exec", "httpGet", "tcpSocket", "sleep"}


def exec_command(handler: dict) -> list[str]:
    assert set(handler["exec"]) == {"command"}, handler
    command = handler["exec"]["command"]
    assert isinstance(command, list) and all(isinstance(w, str) for w in command), command
    return command


def test_pod_probes_and_prestop_run_rdmagwctl_in_the_sidecar():
    """The admin endpoint is on the pod's loopback: probes must be exec, ask
    the address the ConfigMap gives rdmagw, and fit their timeouts."""
    configmap, pod = pod_documents()
    config = load_text(configmap["data"]["rdmagw.yaml"])
    sidecar = {c["name"]: c for c in pod["spec"]["containers"]}["rdmagw"]
    env = {e["name"]: e["value"] for e in sidecar.get("env", [])}
    assert env.get("RDMAGW_ADMIN", runtime_env()["RDMAGW_ADMIN"]) == config.get("admin", DEFAULT_ADMIN)

    commands = {}
    for name in ("readinessProbe", "livenessProbe"):
        probe = sidecar[name]
        assert set(probe) <= PROBE_KEYS, f"{name}: unknown keys {set(probe) - PROBE_KEYS}"
        assert "httpGet" not in probe and "tcpSocket" not in probe, f"{name} would go to the pod IP"
        command = commands[name] = exec_command(probe)
        assert command[0] == IMAGE_RDMAGWCTL, command
        # rdmagwctl's --timeout bounds the connect and again the answer.
        assert 2 * rdmagwctl_timeout(command) < probe["timeoutSeconds"] <= probe.get("periodSeconds", 10)
        assert all(isinstance(v, int) and v > 0 for k, v in probe.items() if k.endswith(("Seconds", "Threshold")))
    assert commands["readinessProbe"][-1] == "ready"
    # /ready fails during a drain; liveness must not, or the kubelet restarts
    # a draining sidecar.  test_health.py runs both against a drained rdmagw.
    assert "ready" not in commands["livenessProbe"], commands["livenessProbe"]
    assert sidecar["livenessProbe"]["failureThreshold"] >= 2

    lifecycle = sidecar["lifecycle"]
    assert set(lifecycle) == {"preStop"} and set(lifecycle["preStop"]) <= HANDLER_KEYS
    hook = exec_command(lifecycle["preStop"])
    assert hook[0] == IMAGE_RDMAGWCTL and "drain" in hook and "--wait" in hook, hook
    wait_timeout = float(hook[hook.index("--wait-timeout") + 1])
    # The grace period covers the hook's wait, the drain after SIGTERM, and a
    # request's worst case (connect + answer) on top.
    shutdown = config.get("shutdown_timeout_ms", DEFAULT_SHUTDOWN_TIMEOUT_MS) / 1000
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert wait_timeout + shutdown + 2 * rdmagwctl_timeout(hook) <= grace, (wait_timeout, shutdown, grace)
