"""A provisioning document (TOML, already decoded) checked whole into a Plan: pure.

Every refusal is the house's one error shape (nodeos.errors.BadInput: code `bad_input`, the
field at fault as a path into the document, the values allowed), raised before anything on the
machine is touched: a configuration with one bad field is applied not at all. The network part
is `nodeos net`'s own model (nodeos.net.model), so an interface, address, route or MTU means
the same in both places. No secret is ever part of a Plan: a join token is named (a file or a
systemd credential), read only when the join runs.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import struct
from typing import Any, Literal

import msgspec

from nodeos import validate
from nodeos.errors import BadInput
from nodeos.net import model as net

FORMAT_VERSION = 1
DEFAULT_PEER_PORT = 7100
METRICS_PORT = 9810

TOP_KEYS = (
    "version",
    "hostname",
    "network",
    "management_address",
    "storage_addresses",
    "peer_port",
    "ntp",
    "ssh",
    "labels",
    "cluster",
)
NETWORK_KEYS = ("interfaces",)
SSH_KEYS = ("authorized_keys",)
CLUSTER_KEYS = ("action", "address", "token_file", "token_credential")
CLUSTER_ACTIONS = ("init", "join")

HOSTNAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
HOSTNAME_ALLOWED = "1-63 letters, digits and '-', starting and ending with a letter or digit"
_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DNS_NAME_RE = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*\.?")
NTP_ALLOWED = "1-16 servers, each an IP address or a DNS name (at most 253 characters)"
NTP_MAX = 16
SSH_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
SSH_ALLOWED = (
    "public keys only, one per entry: TYPE BASE64 [COMMENT] with TYPE one of "
    + ", ".join(SSH_KEY_TYPES)
    + " (no options, no private keys)"
)
SSH_KEYS_MAX = 256
CREDENTIAL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,254}")
CREDENTIAL_ALLOWED = "a systemd credential name: letters, digits, '.', '_', '@', '-' (1-255)"
TOKEN_FILE_ALLOWED = "a path to a file holding the join token (relative: to the configuration's place)"
LABEL_ALLOWED = 'a table of KEY = "VALUE": KEY 1-63 of [a-z0-9._/-], VALUE 1-63 of [A-Za-z0-9._-]'
LABELS_MAX = 64
IFACE_ALLOWED = {
    "name": "an interface name, 1-15 characters of [A-Za-z0-9_.:@-]",
    "addresses": 'a list of addresses with prefix length, e.g. ["192.0.2.11/24"]',
    "addresses[]": "an address with prefix length, e.g. 192.0.2.11/24 or 2001:db8::11/64",
    "routes[]": "a table {dst = NETWORK, gateway = IP, metric = 0-4294967295}",
    "routes": "a list of {dst = NETWORK, gateway = IP, metric = 0-4294967295}",
    "dst": "a network, e.g. 198.51.100.0/24 or 0.0.0.0/0",
    "gateway": "an IP address",
    "metric": "0-4294967295",
}


class Interface(msgspec.Struct, frozen=True):
    name: str
    mtu: int | None = None
    addresses: tuple[str, ...] = ()
    routes: tuple[net.RouteSpec, ...] = ()
    up: bool = True


class ClusterPlan(msgspec.Struct, frozen=True):
    action: Literal["init", "join"]
    address: str | None = None  # join: HOST:PORT of a member's peer listener
    token_file: str | None = None  # join: the token's file (absolute, resolved from the source)
    token_credential: str | None = None  # join: or the systemd credential holding it


class Plan(msgspec.Struct, frozen=True):
    """What the node should be: nothing here is a secret (it is recorded and shown)."""

    hostname: str | None = None
    interfaces: tuple[Interface, ...] = ()
    management_address: str | None = None
    management_interface: str | None = None
    storage_addresses: tuple[str, ...] = ()
    peer_listen: str | None = None
    ntp: tuple[str, ...] = ()
    ssh_keys: tuple[str, ...] = ()
    labels: dict[str, str] = {}
    cluster: ClusterPlan | None = None

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


def _bad(message: str, field: str, allowed: Any) -> BadInput:
    return BadInput(message, field=field, allowed=allowed)


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    """A key as a field path names it: quoted when it is empty or has dots, spaces..."""
    return key if _PLAIN_KEY.fullmatch(key) else '"' + key.replace('"', '\\"') + '"'


def _unknown(table: dict[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
    extra = sorted(set(table) - set(allowed))
    if extra:
        fld = f"{prefix}{_key(extra[0])}"
        raise _bad(f"{fld} is not a key of this table", fld, list(allowed))


def _table(value: Any, field: str, allowed: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"{field} must be a table", field, allowed)
    return value


def _list(value: Any, field: str, allowed: Any, most: int) -> list[Any]:
    if not isinstance(value, list):
        raise _bad(f"{field} must be a list", field, allowed)
    if len(value) > most:
        raise _bad(f"{field} has {len(value)} entries; the limit is {most}", field, allowed)
    return value


def hostname(value: Any, field: str = "hostname") -> str:
    if not isinstance(value, str) or not HOSTNAME_RE.fullmatch(value):
        raise _bad(f"{field} {value!r} is not a host name", field, HOSTNAME_ALLOWED)
    return value


def ip(value: Any, field: str, allowed: Any) -> str:
    try:
        return str(ipaddress.ip_address(value if isinstance(value, str) else ""))
    except ValueError:
        raise _bad(f"{field} {value!r} is not an IP address", field, allowed) from None


def ntp_server(value: Any, field: str) -> str:
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            if len(value) <= 253 and DNS_NAME_RE.fullmatch(value):
                return value
    raise _bad(f"{field} {value!r} is neither an IP address nor a DNS name", field, NTP_ALLOWED)


def ssh_key(value: Any, field: str) -> str:
    """An OpenSSH public key line, normalised to `TYPE BASE64 [COMMENT]`."""
    if not isinstance(value, str) or "\n" in value or "\r" in value or "\0" in value:
        raise _bad(f"{field} must be one public key on one line", field, SSH_ALLOWED)
    parts = value.strip().split(None, 2)
    if len(parts) < 2 or parts[0] not in SSH_KEY_TYPES:
        what = "a private key" if "PRIVATE KEY" in value else "not a public key of a known type"
        raise _bad(f"{field} is {what}", field, SSH_ALLOWED)
    try:
        blob = base64.b64decode(parts[1], validate=True)
        (n,) = struct.unpack_from(">I", blob)
        inner = blob[4 : 4 + n].decode("ascii")
    except (binascii.Error, ValueError, struct.error, UnicodeDecodeError):
        inner = ""
    if inner != parts[0]:
        raise _bad(f"{field}: the key data is not a {parts[0]} key (damaged?)", field, SSH_ALLOWED)
    return " ".join(parts)


def labels(value: Any, field: str = "labels") -> dict[str, str]:
    from nodeos.storage.storage_map import LABEL_KEY, LABEL_VALUE

    t = _table(value, field, LABEL_ALLOWED)
    if len(t) > LABELS_MAX:
        raise _bad(f"{field} has {len(t)} labels; the limit is {LABELS_MAX}", field, LABEL_ALLOWED)
    for k, v in t.items():
        if not LABEL_KEY.match(k):
            raise _bad(f"label key {k!r} is not allowed", f"{field}.{_key(k)}", LABEL_ALLOWED)
        if not isinstance(v, str) or not LABEL_VALUE.match(v):
            raise _bad(f"label {k} = {v!r}: the value is not allowed", f"{field}.{_key(k)}", LABEL_ALLOWED)
    return dict(sorted(t.items()))


def _interfaces(value: Any) -> tuple[Interface, ...]:
    """`nodeos net`'s [[interfaces]], through its own parser; the field gets its `network.`
    prefix and, where the net model leaves it out, the allowed values."""
    fld = "network.interfaces"
    items = _list(value, fld, "[[network.interfaces]] tables: name, mtu, addresses, routes, up", 64)
    try:
        # Profile `none`: no QoS and no MTU by default (an interface without `mtu` keeps its own).
        cfg = net.parse_config({"interfaces": items, "qos": {"profile": "none"}})
    except BadInput as exc:
        inner = exc.field or "interfaces"
        field = f"network.{inner}"
        allowed = exc.allowed if exc.allowed is not None else _iface_allowed(inner)
        raise _bad(exc.message.replace(inner, field, 1), field, allowed) from None
    return tuple(
        Interface(
            name=i.name,
            mtu=i.mtu,
            addresses=i.addresses or (),
            routes=i.routes or (),
            up=i.up,
        )
        for i in cfg.interfaces
    )


def _iface_allowed(field: str) -> str:
    last = re.sub(r"\[\d+\]$", "[]", field.rsplit(".", 1)[-1])
    return IFACE_ALLOWED.get(last) or IFACE_ALLOWED.get(
        last.removesuffix("[]"), "[[network.interfaces]] tables: name, mtu, addresses, routes, up"
    )


def _cluster(value: Any, where: str) -> ClusterPlan:
    t = _table(value, "cluster", list(CLUSTER_KEYS))
    if "token" in t:
        raise _bad(
            "cluster.token: a join token is never written in the configuration (it would be shown "
            "and recorded); name its file or its systemd credential",
            "cluster.token",
            ["token_file", "token_credential"],
        )
    _unknown(t, CLUSTER_KEYS, "cluster.")
    action = validate.choice(t.get("action"), CLUSTER_ACTIONS, "cluster.action")
    if action == "init":
        for k in ("address", "token_file", "token_credential"):
            if k in t:
                raise _bad(f'cluster.{k} goes with action = "join", not init', f"cluster.{k}", ["action"])
        return ClusterPlan(action="init")
    if "address" not in t:
        raise _bad("cluster.address is required to join", "cluster.address", "HOST:PORT of a member")
    validate.host_port(t["address"], "cluster.address")
    has_file, has_cred = "token_file" in t, "token_credential" in t
    if has_file == has_cred:
        raise _bad(
            "a join needs its token from exactly one of cluster.token_file and cluster.token_credential",
            "cluster.token_file",
            ["token_file", "token_credential"],
        )
    if has_cred:
        cred = t["token_credential"]
        if not isinstance(cred, str) or not CREDENTIAL_RE.fullmatch(cred):
            raise _bad(
                f"cluster.token_credential {cred!r} is not allowed",
                "cluster.token_credential",
                CREDENTIAL_ALLOWED,
            )
        return ClusterPlan(action="join", address=t["address"], token_credential=cred)
    path = t["token_file"]
    if not isinstance(path, str) or not path or "\0" in path or path.endswith("/"):
        raise _bad(
            f"cluster.token_file {path!r} is not a file path", "cluster.token_file", TOKEN_FILE_ALLOWED
        )
    if not path.startswith("/"):
        path = f"{where.rstrip('/')}/{path}" if where else path
    return ClusterPlan(action="join", address=t["address"], token_file=path)


def parse(doc: dict[str, Any], where: str = "") -> Plan:
    """The Plan a document asks for, or BadInput naming the first field at fault.

    `where`: the directory a relative `cluster.token_file` is read from (the config's own)."""
    _unknown(doc, TOP_KEYS, "")
    version = doc.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise _bad(
            f"version {version!r} is not a provisioning format this node reads", "version", [FORMAT_VERSION]
        )
    name = hostname(doc["hostname"]) if "hostname" in doc else None
    ifaces: tuple[Interface, ...] = ()
    if "network" in doc:
        nt = _table(doc["network"], "network", list(NETWORK_KEYS))
        _unknown(nt, NETWORK_KEYS, "network.")
        ifaces = _interfaces(nt.get("interfaces", []))
    owned = {a.split("/")[0]: i.name for i in ifaces for a in i.addresses}
    addr_allowed = sorted(owned) or "an address given in [[network.interfaces]]"
    mgmt = None
    if "management_address" in doc:
        mgmt = ip(doc["management_address"], "management_address", addr_allowed)
        if mgmt not in owned:
            raise _bad(
                f"management_address {mgmt} is on none of the interfaces", "management_address", addr_allowed
            )
    storage: list[str] = []
    if "storage_addresses" in doc:
        items = _list(doc["storage_addresses"], "storage_addresses", addr_allowed, 16)
        for i, a in enumerate(items):
            fld = f"storage_addresses[{i}]"
            a = ip(a, fld, addr_allowed)
            if a not in owned:
                raise _bad(f"{fld} {a} is on none of the interfaces", fld, addr_allowed)
            if a == mgmt:
                raise _bad(
                    f"{fld} {a} is the management address: storage and management stay apart",
                    fld,
                    [x for x in addr_allowed if x != mgmt]
                    if isinstance(addr_allowed, list)
                    else addr_allowed,
                )
            if a in storage:
                raise _bad(f"{fld} {a} is listed twice", fld, addr_allowed)
            storage.append(a)
    peer = None
    if "peer_port" in doc:
        port = doc["peer_port"]
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise _bad(f"peer_port {port!r} is not a port", "peer_port", "1-65535")
        if not storage:
            raise _bad(
                "peer_port needs storage_addresses (peers listen on the first)",
                "storage_addresses",
                addr_allowed,
            )
    if storage:
        first = storage[0]
        port = doc.get("peer_port", DEFAULT_PEER_PORT)
        peer = f"[{first}]:{port}" if ":" in first else f"{first}:{port}"
    ntp = tuple(
        ntp_server(s, f"ntp[{i}]")
        for i, s in enumerate(_list(doc.get("ntp", []), "ntp", NTP_ALLOWED, NTP_MAX))
    )
    keys: tuple[str, ...] = ()
    if "ssh" in doc:
        st = _table(doc["ssh"], "ssh", list(SSH_KEYS))
        _unknown(st, SSH_KEYS, "ssh.")
        items = _list(st.get("authorized_keys", []), "ssh.authorized_keys", SSH_ALLOWED, SSH_KEYS_MAX)
        keys = tuple(dict.fromkeys(ssh_key(k, f"ssh.authorized_keys[{i}]") for i, k in enumerate(items)))
    lab = labels(doc["labels"]) if "labels" in doc else {}
    cluster = _cluster(doc["cluster"], where) if "cluster" in doc else None
    return Plan(
        hostname=name,
        interfaces=ifaces,
        management_address=mgmt,
        management_interface=owned.get(mgmt) if mgmt else None,
        storage_addresses=tuple(storage),
        peer_listen=peer,
        ntp=ntp,
        ssh_keys=keys,
        labels=lab,
        cluster=cluster,
    )
