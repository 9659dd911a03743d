"""`nodeos node update BUNDLE`: verify a signed update bundle, then have RAUC write it to the
other root slot (docs/operations.md "Update one node").

Runs on the node itself (the bundle is a file there) and needs no daemon: the checks are
nodeos/update/verify.py's, in order layout, signature (RAUC, against /etc/rauc/keyring.pem),
architecture, version. A refused bundle exits 2 naming the reason; nothing is written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click

from nodeos.cli.output import command_runner, json_option
from nodeos.errors import BadInput, OperationFailed

DEFAULT_STATE_DIR = "/var/lib/nodeos"
INSTALL_TIMEOUT_S = 3600.0


def _stage(bundle: Path, state_dir: Path) -> Path:
    """A root-only copy of the bundle that is both verified and installed: the operator's file
    could be replaced between the check and RAUC's own read (another validly signed but older or
    foreign bundle would then skip the version and architecture checks)."""
    d = state_dir / "update"
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    staged = d / "incoming.raucb"
    tmp = d / f".incoming.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out, open(bundle, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        os.replace(tmp, staged)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return staged


def _install(staged: Path) -> str:
    rauc = shutil.which("rauc")
    if rauc is None:
        raise OperationFailed("rauc is not installed on this node: the bundle was verified, nothing written")
    proc = subprocess.run(
        [rauc, "install", str(staged)], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip()[-800:]
        raise OperationFailed(f"rauc install failed (the running slot is untouched): {why}")
    return proc.stdout


@click.command("update")
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option(
    "--check", is_flag=True, help="Verify only: signature, hashes, architecture, version; write nothing."
)
@click.option("--allow-downgrade", is_flag=True, help="Accept a bundle older than the running release.")
@click.option(
    "--no-reboot", is_flag=True, help="Write the other slot, but do not reboot into it now (it boots next)."
)
@click.option(
    "--keyring",
    default=None,
    type=click.Path(dir_okay=False),
    help="Certificates bundles must be signed with (default: /etc/rauc/keyring.pem).",
)
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True, help="The node's state directory.")
@json_option
@command_runner
def node_update(
    bundle: str,
    check: bool,
    allow_downgrade: bool,
    no_reboot: bool,
    keyring: str | None,
    state_dir: str,
    as_json: bool,
) -> tuple[Any, Any]:
    """Update this node from BUNDLE (a file on this node): verify it, write it to the other root
    slot and reboot into it (unless --no-reboot). The slot boots once with a boot counter and is
    kept only after its health gate (nodeosd ready, back in its cluster); else the firmware boots
    the old slot again by itself.

    Refused, exit 2, nothing written: a bad signature, a truncated file, another architecture,
    an older release (unless --allow-downgrade)."""
    from nodeos.update import slots as slots_mod
    from nodeos.update import verify as v

    if not Path(bundle).exists():
        raise BadInput(f"{bundle} does not exist", field="bundle", allowed="a bundle file on this node")
    ring = keyring or v.DEFAULT_KEYRING
    # Verified before anything else happens: a refused bundle exits 2 having written nothing,
    # not even the staged copy below.
    verdict, extra = v.verify(bundle, keyring=ring, allow_downgrade=allow_downgrade)
    if check:
        out = {"bundle": bundle, "result": "verified", "written": False, **verdict.to_dict(), **extra}
        return out, _human
    slots = slots_mod.read_slots()
    if slots["slots"] is None:
        raise OperationFailed(
            f"the bundle is good, but {slots['slots_note']}; nothing written (--check verifies only)",
            field="slots",
        )
    staged = _stage(Path(bundle), Path(state_dir))
    try:  # the copy RAUC installs is verified again: it is what the checks must have seen
        verdict, extra = v.verify(staged, keyring=ring, allow_downgrade=allow_downgrade)
        log = _install(staged)
    finally:
        staged.unlink(missing_ok=True)
    after = slots_mod.read_slots()
    out = {"bundle": bundle, "result": "written", "written": True, **verdict.to_dict(), **extra, **after}
    out["rauc"] = log.strip().splitlines()[-3:]
    out["reboot"] = not no_reboot
    if not no_reboot:
        _reboot_soon()
    return out, _human


REBOOT_DELAY_S = 5


def _reboot_soon() -> None:
    """A reboot in a few seconds (a transient timer): this command's answer gets out first."""
    proc = subprocess.run(
        ["systemd-run", "--quiet", "--unit=nodeos-update-reboot", f"--on-active={REBOOT_DELAY_S}s",
         "--timer-property=AccuracySec=1s", "systemctl", "reboot"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise OperationFailed(
            f"the other slot is written, but the reboot could not be scheduled: {proc.stderr.strip()}; "
            "reboot to try it"
        )


def _human(d: dict[str, Any]) -> str:
    change = {"upgrade": "upgrade", "same": "same release", "downgrade": "DOWNGRADE"}[d["change"]]
    lines = [
        f"bundle     {d['bundle']}",
        f"verified   signature and hashes good; {d['arch']}; {d['version']}"
        f" (running {d['running']}: {change})",
        f"build      {d.get('build') or '-'}",
    ]
    if d["written"]:
        then = f"rebooting into it in {REBOOT_DELAY_S} s" if d.get("reboot") else "reboot to try it"
        lines.append(f"written    the other root slot; it boots next with a boot counter ({then})")
        for s in d.get("slots") or []:
            lines.append(f"slot       {s['name']} {s.get('version') or '-'} {s['state']}")
    else:
        lines.append("written    nothing (--check)")
    return "\n".join(lines)
