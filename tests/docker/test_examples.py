"""The deployment examples: docker/compose.yaml with docker/examples/*.yaml,
and docker/kubernetes/pod.yaml.  No engine or cluster runs them here, so
what would break them silently is checked: each rdmagw configuration passes
`rdmagw --check`, and the settings that must agree across files (the uid the
redirect exempts and the uid the sidecar runs as, the redirect port and the
transparent listener, the addresses, the capabilities) do.

Parsing the YAML needs PyYAML (Debian: python3-yaml), which tools/dev/install-deps
does not install: without it those checks are skipped, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from container_support import DOCKER, SIDECAR_UID, run

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

    # Compose's `!reset` tag (compose.no-rdma.yaml) stands for "drop this value".
    Loader.add_constructor("!reset", lambda loader, node: None)
    with open(path) as f:
        return list(yaml.load_all(f, Loader=Loader))


def check_config(rdmagw_bin, path: Path) -> str:
    proc = run([rdmagw_bin, "--check", "--config", path])
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
        assert capabilities(s["cap_add"]) == {"IPC_LOCK"} and capabilities(s["cap_drop"]) == {"ALL"}
        assert s["ulimits"]["memlock"] in (-1, {"soft": -1, "hard": -1})
        assert "/dev/infiniband:/dev/infiniband" in s["devices"]
        assert "seccomp=unconfined" in s["security_opt"], "io_uring is blocked by the default profile"
        source, target, *_ = s["volumes"][0].split(":")
        assert (DOCKER / source).resolve() == EXAMPLES / f"{host}.yaml" and target == "/etc/rdmagw/rdmagw.yaml"
        assert cfg["tunnel"]["address"] == address[host], f"{host}.yaml tunnel.address"

    (peer,) = a_cfg["peers"]
    assert peer["address"] == address["host-b"] and peer["tcp_port"] == b_cfg["tunnel"]["tcp_port"]

    init = services["init-a"]
    assert init["network_mode"] == "service:host-a" and init["user"].split(":")[0] == "0"
    assert init["entrypoint"] == ["/usr/local/bin/init.sh"]
    assert capabilities(init["cap_add"]) == {"NET_ADMIN", "NET_RAW"} and capabilities(init["cap_drop"]) == {"ALL"}
    env = init["environment"]
    assert env["RDMAGW_UID"] == str(SIDECAR_UID)
    assert int(env["RDMAGW_REDIRECT_PORT"]) == transparent_port(a_cfg)
    assert env["RDMAGW_CAPTURE"].split() == route_matches(a_cfg)
    assert services["rdmagw-a"]["depends_on"]["init-a"]["condition"] == "service_completed_successfully"


def test_compose_no_rdma_override_names_existing_sidecars():
    (compose,) = load(DOCKER / "compose.yaml")
    (override,) = load(DOCKER / "compose.no-rdma.yaml")
    for name, service in override["services"].items():
        assert "devices" in compose["services"][name], name
        assert service == {"devices": None}  # !reset


def pod_documents():
    docs = {d["kind"]: d for d in load(DOCKER / "kubernetes" / "pod.yaml")}
    assert set(docs) == {"ConfigMap", "Pod"}
    return docs["ConfigMap"], docs["Pod"]


def test_pod_configmap_passes_rdmagw_check(rdmagw_bin, tmp_path):
    configmap, _ = pod_documents()
    path = tmp_path / "rdmagw.yaml"
    path.write_text(configmap["data"]["rdmagw.yaml"])
    check_config(rdmagw_bin, path)


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

    # The device comes from the eRDMA device plugin; pinned memory is charged
    # to the container, so its memory limit must cover workers x slab_size.
    limits = sidecar["resources"]["limits"]
    assert limits["aliyun/erdma"] == 1
    slab_mib = int(re.fullmatch(r"(\d+)MiB", config["tunnel"]["rdma"]["slab_size"]).group(1))
    limit_mib = int(re.fullmatch(r"(\d+)Mi", limits["memory"]).group(1))
    assert limit_mib > config["workers"] * slab_mib


def load_text(text: str) -> dict:
    return yaml_module().safe_load(text)
