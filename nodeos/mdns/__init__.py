"""mDNS advertisement of the node's NVMe discovery controller (TP8009, issue 28).

`plan` decides, purely, which records the node should advertise on which interfaces;
`publisher` is the imperative shell that puts them on the wire (python-zeroconf, on a thread
and event loop of its own); `service` is the nodeosd service that gathers the facts, reconciles
and reports. docs/network.md, "mDNS advertisement".
"""
