"""Where /metrics listens: the operator's choice, else the management address; never storage."""

from __future__ import annotations

import pytest

from nodeos.daemon import config as configmod
from nodeos.errors import BadInput
from nodeos.observe.service import DEFAULT_PORT, listen_address


def test_default_is_the_peer_host_else_loopback() -> None:
    assert listen_address({}, ("10.0.0.5", 7000)) == ("10.0.0.5", DEFAULT_PORT)
    assert listen_address({}, None) == ("127.0.0.1", DEFAULT_PORT)
    assert listen_address({"metrics_listen": "192.0.2.1:9999"}, None) == ("192.0.2.1", 9999)
    assert listen_address({"metrics_listen": "off"}, ("10.0.0.5", 7000)) is None


def test_a_storage_address_is_refused() -> None:
    with pytest.raises(BadInput) as e:
        listen_address({"metrics_listen": "10.1.0.1:9810", "storage_address": ["10.1.0.1"]}, None)
    assert e.value.field == "metrics_listen"
    # A default that would land on the storage network falls back to loopback.
    assert listen_address({"storage_address": ["10.1.0.1"]}, ("10.1.0.1", 7000)) == (
        "127.0.0.1",
        DEFAULT_PORT,
    )
    cfg = configmod.Config(metrics_listen="10.1.0.1:9810", storage_address=["10.1.0.1"])
    with pytest.raises(BadInput) as e:
        configmod.check(cfg)
    assert e.value.field == "metrics_listen"


@pytest.mark.parametrize(
    ("key", "value"),
    [("metrics_listen", "nope"), ("metrics_volume_labels_max", -1), ("metrics_volume_labels_max", "10")],
)
def test_bad_config_names_the_field(key: str, value: object) -> None:
    cfg = configmod.Config(**{key: value})  # type: ignore[arg-type]
    with pytest.raises(BadInput) as e:
        configmod.check(cfg)
    assert e.value.field == key


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_a_wildcard_peer_address_puts_metrics_on_loopback_not_everywhere(wildcard: str) -> None:
    assert listen_address({}, (wildcard, 7000)) == ("127.0.0.1", DEFAULT_PORT)
    # The operator may still choose every address, explicitly.
    assert listen_address({"metrics_listen": f"0.0.0.0:{DEFAULT_PORT}"}, (wildcard, 7000)) == (
        "0.0.0.0",
        DEFAULT_PORT,
    )
