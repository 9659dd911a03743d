"""Message framing and request/reply plumbing shared by the CLI, the daemon and peers."""
