"""nodeos: firmware and daemon of an NVMe-over-Fabrics storage appliance."""

__version__ = "0.7.0"
