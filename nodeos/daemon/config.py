"""nodeosd's configuration: a TOML file (optional; absent means defaults) with flags on top.

Keys (file) / flags:
  state_dir        --state-dir        /var/lib/nodeos
  api_socket       --api-socket       /run/nodeos/api.sock
  peer_listen      --peer-listen      (unset: no peer listener)  HOST:PORT
  dataplane        --dataplane        auto | kernel | spdk | none
  spdk_socket      --spdk-socket      /var/tmp/spdk.sock
  storage_address  --storage-address  list; default: the node's non-loopback addresses
  node_name        --node-name        the host name
  log_level        --log-level        info
  metrics_listen   --metrics-listen   HOST:PORT or "off"; default: the peer address's host
                                      (else 127.0.0.1) on port 9810, never a storage address
  metrics_volume_labels_max           1000: above it volume series are summed (one label value)
  net_config       --net-config       the network profile to sample for metrics (unset: none)
  lease_s                             2.0: a primary's lease (1-60 s); the leader's value rules
                                      (docs/operations.md, "Failover")
  raft_tick_ms                        100: the Raft tick (20-1000 ms): heartbeats every tick,
                                      an election after 10-20 idle ticks; raise it only where a
                                      node can stall for seconds (emulated hardware: the lab)
  replace_after_s                     600: a replica whose node is down this long is re-placed
                                      elsewhere and copied in full (1-604800 s; the leader's rules)
  rest_listen      --rest-listen      HOST:PORT of the HTTPS REST endpoint (unset: off); a
                                      management address, never a storage address (docs/api.md)
  rest_cert, rest_key                 an operator's certificate and key for it (unset: the
                                      node's certificate from the cluster CA)
  mdns                                true: advertise the discovery controller over mDNS on the
                                      storage interfaces (TP8009; docs/network.md)
  mdns_management                     false: never on a management interface; true where storage
                                      and management share one network (the lab)
  update_keyring                      /etc/rauc/keyring.pem: the certificates update bundles must
                                      be signed with (`nodeos cluster upgrade`, docs/operations.md)
"""

from __future__ import annotations

import socket
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nodeos import validate
from nodeos.errors import BadInput

DEFAULT_CONFIG = "/etc/nodeos/nodeosd.toml"
DATAPLANES = ("auto", "kernel", "spdk", "none")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass
class Config:
    state_dir: str = "/var/lib/nodeos"
    api_socket: str = "/run/nodeos/api.sock"
    peer_listen: str | None = None
    dataplane: str = "auto"
    spdk_socket: str = "/var/tmp/spdk.sock"
    storage_address: list[str] = field(default_factory=list)
    node_name: str = ""
    log_level: str = "info"
    metrics_listen: str | None = None
    metrics_volume_labels_max: int = 1000
    net_config: str | None = None
    lease_s: float = 2.0
    raft_tick_ms: int = 100
    replace_after_s: float = 600.0
    rest_listen: str | None = None
    rest_cert: str | None = None
    rest_key: str | None = None
    mdns: bool = True
    mdns_management: bool = False
    update_keyring: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load(path: str | None, overrides: dict[str, Any]) -> tuple[Config, str]:
    """Read the file (if present) and apply non-None overrides; returns (config, source note)."""
    data: dict[str, Any] = {}
    note = "defaults"
    p = Path(path or DEFAULT_CONFIG)
    if p.exists():
        try:
            data = tomllib.loads(p.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"config file {p} is not valid TOML: {exc}", field="config") from None
        except OSError as exc:
            raise BadInput(f"config file {p} cannot be read: {exc}", field="config") from None
        note = str(p)
    elif path and path != DEFAULT_CONFIG:
        # An explicitly named file that is missing is a mistake; the unit's default may be absent.
        raise BadInput(f"config file {p} does not exist", field="config")
    known = set(Config.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise BadInput(f"unknown key(s) in {p}: {', '.join(unknown)}", field="config", allowed=sorted(known))
    merged = {**data, **{k: v for k, v in overrides.items() if v is not None and v != ()}}
    if isinstance(merged.get("storage_address"), str):
        merged["storage_address"] = [merged["storage_address"]]
    cfg = Config(**merged)
    check(cfg)
    if not cfg.node_name:
        cfg.node_name = socket.gethostname()
    return cfg, note


def check(cfg: Config) -> None:
    validate.choice(cfg.dataplane, DATAPLANES, "dataplane")
    validate.choice(cfg.log_level, LOG_LEVELS, "log_level")
    for key in ("state_dir", "api_socket", "spdk_socket"):
        v = getattr(cfg, key)
        if not isinstance(v, str) or not v:
            raise BadInput(f"{key} must be a non-empty path", field=key)
    if len(cfg.api_socket.encode()) > 107:
        raise BadInput("api_socket path is longer than a unix socket allows (107 bytes)", field="api_socket")
    if cfg.peer_listen is not None:
        validate.host_port(cfg.peer_listen, "peer_listen")
    if not isinstance(cfg.storage_address, list) or not all(isinstance(a, str) for a in cfg.storage_address):
        raise BadInput("storage_address must be a list of IP addresses", field="storage_address")
    import ipaddress

    for a in cfg.storage_address:
        try:
            ipaddress.ip_address(a)
        except ValueError:
            raise BadInput(f"storage_address {a!r} is not an IP address", field="storage_address") from None
    if cfg.metrics_listen not in (None, "off"):
        host = validate.host_port(cfg.metrics_listen, "metrics_listen")[0]
        if host in cfg.storage_address:  # metrics stay off the storage network
            raise BadInput(
                f"metrics_listen {host} is a storage address: use a management address (or off)",
                field="metrics_listen",
            )
    if cfg.rest_listen is not None:
        host = validate.host_port(cfg.rest_listen, "rest_listen")[0]
        if host in cfg.storage_address:  # the API stays off the storage network
            raise BadInput(
                f"rest_listen {host} is a storage address: use a management address", field="rest_listen"
            )
    if (cfg.rest_cert is None) != (cfg.rest_key is None):
        raise BadInput(
            "rest_cert and rest_key go together", field="rest_cert" if cfg.rest_key else "rest_key"
        )
    for key in ("mdns", "mdns_management"):
        if not isinstance(getattr(cfg, key), bool):
            raise BadInput(f"{key} must be true or false", field=key, allowed=[True, False])
    lease = cfg.lease_s
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 1 <= lease <= 60:
        raise BadInput("lease_s must be a number of seconds in [1, 60]", field="lease_s", allowed="1-60")
    tick = cfg.raft_tick_ms
    if type(tick) is not int or not 20 <= tick <= 1000:
        raise BadInput(
            "raft_tick_ms must be an integer number of milliseconds in [20, 1000]",
            field="raft_tick_ms",
            allowed="20-1000",
        )
    from nodeos.storage.replace import ReplacePolicy

    ReplacePolicy(after_s=cfg.replace_after_s)  # BadInput names replace_after_s
    n = cfg.metrics_volume_labels_max
    if type(n) is not int or not 0 <= n <= 100_000:
        raise BadInput(
            "metrics_volume_labels_max must be an integer in [0, 100000]", field="metrics_volume_labels_max"
        )
    if cfg.net_config is not None and (not isinstance(cfg.net_config, str) or not cfg.net_config):
        raise BadInput("net_config must be a path to a network profile", field="net_config")
    if cfg.node_name:
        validate.name(cfg.node_name, "node_name")
