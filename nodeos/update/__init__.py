"""Signed A/B update bundles (docs/image.md "Updates"): build, verify, read the slots.

RAUC does the crypto and the slot writing; this package decides what RAUC cannot know (the
architecture, downgrades) and names the reason a bundle is refused.
"""
