"""The SPDK data plane: nvmf_tgt/spdk_tgt driven over its JSON-RPC socket."""
