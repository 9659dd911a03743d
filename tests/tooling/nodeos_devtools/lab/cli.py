"""`nodeos-lab`: boot, drive and tear down the VM lab from the console.

Exit codes: 0 ok, 1 operation failed / environment lacks something, 2 bad input.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from nodeos.errors import EXIT_BAD_INPUT, EXIT_FAILED, BadInput, NodeosError
from nodeos_devtools.lab import image as image_mod
from nodeos_devtools.lab.image_spdk import describe, read_record
from nodeos_devtools.lab.lab import Lab
from nodeos_devtools.lab.plan import MAX_DRIVES, MAX_HOSTS, MAX_STORAGE


def _run(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except NodeosError as e:
        msg = f"nodeos-lab: error: {e.message}"
        if e.field:
            msg += f" [field: {e.field}]"
        if e.allowed is not None:
            msg += f" (allowed: {e.allowed})"
        click.echo(msg, err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("nodeos-lab: interrupted", err=True)
        sys.exit(EXIT_FAILED)


def _lab(ctx: click.Context) -> Lab:
    return _run(lambda: Lab(ctx.obj["name"]))


name_option = click.option(
    "--name",
    "-n",
    default="default",
    show_default=True,
    envvar="NODEOS_LAB_NAME",
    help="Which lab (several can run).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@name_option
@click.pass_context
def cli(ctx: click.Context, name: str) -> None:
    """The nodeos VM lab: storage VMs (s1..) and GPU-node VMs (h1..) on a private network."""
    ctx.obj = {"name": name}


class _Count(click.ParamType):
    """An integer whose range error exits 2 through the same path as every bad input."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not an integer", param, ctx)


@cli.command()
@click.option(
    "--storage", "-s", type=_Count(), default=1, show_default=True, help=f"Storage VMs (1..{MAX_STORAGE})."
)
@click.option(
    "--drives", "-d", type=_Count(), default=2, show_default=True, help=f"NVMe drives each (1..{MAX_DRIVES})."
)
@click.option(
    "--hosts", "-g", type=_Count(), default=1, show_default=True, help=f"GPU-node VMs (0..{MAX_HOSTS})."
)
@click.option(
    "--drive-size", type=_Count(), default=1024, show_default=True, help="MiB per drive (64..65536)."
)
@click.option("--qemu", "qemu_bin", default=None, help="QEMU binary (default qemu-system-x86_64).")
@click.option(
    "--kernel", type=click.Path(path_type=Path), default=None, help="Boot this kernel instead of the image's."
)
@click.option(
    "--cluster", is_flag=True, help="Form the storage VMs into one cluster (s1 inits, the others join)."
)
@click.option(
    "--label", "labels", multiple=True, metavar="VM:KEY=VALUE",
    help="Label a member once formed (repeat; default with --cluster: s1 rack=a, s2 rack=b, ...).",
)  # fmt: skip
@click.option("--no-labels", is_flag=True, help="With --cluster: no labels at all.")
@click.option(
    "--boot",
    default="kernel",
    show_default=True,
    help="kernel: the image's kernel, shared root; disk: storage VMs boot their own A/B disk.",
)
@click.option(
    "--provision",
    "provision",
    multiple=True,
    metavar="VM=FILE",
    help="A storage VM's provisioning file, handed over as its systemd credential (repeat).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_context
def up(ctx: click.Context, storage: int, drives: int, hosts: int, drive_size: int,
       qemu_bin: str | None, kernel: Path | None, cluster: bool, labels: tuple[str, ...],
       no_labels: bool, boot: str, provision: tuple[str, ...], as_json: bool) -> None:  # fmt: skip
    """Build/refresh the image if needed, boot the VMs, return when all are ready (and clustered)."""
    lab = _lab(ctx)
    if no_labels and labels:
        _run(lambda: _raise(BadInput("--no-labels and --label exclude each other", field="label")))
    specs = [] if no_labels else (list(labels) if labels else None)
    st = _run(
        lambda: lab.up(
            storage, drives, hosts, drive_size_mib=drive_size, qemu_bin=qemu_bin, kernel=kernel,
            cluster=cluster, labels=specs, boot=boot, provision=list(provision),
        )
    )  # fmt: skip
    _print_status(st, as_json)


def _raise(err: Exception) -> None:
    raise err


def _print_status(st: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    click.echo(f"lab {st['lab']}: {st['subnet']} in netns {st['netns']}, {st['accel'].upper()}")
    click.echo(f"{'VM':<5} {'ROLE':<8} {'ADDRESS':<16} {'STATE':<8} DRIVES")
    for v in st["vms"]:
        drives = " ".join(d + (" (unplugged)" if d in v.get("unplugged", ()) else "") for d in v["drives"])
        click.echo(f"{v['name']:<5} {v['role']:<8} {v['address']:<16} {v['state']:<8} {drives}")
        if v.get("crash"):
            click.echo(f"      crashed: {v['crash']} (console: {v['console']})")
    c = st.get("cluster")
    if c:
        if c.get("error"):
            click.echo(f"cluster: unknown ({c['error'][:200]})")
            return
        click.echo(
            f"cluster {c['cluster_id']}: leader {c['leader']}, term {c['term']} (seen from {c['seen_from']})"
        )
        for m in c["members"]:
            lbl = ",".join(f"{k}={v}" for k, v in sorted(c["labels"].get(m["name"], {}).items()))
            click.echo(
                f"  {m['name'] or '?':<5} id {m['node_id']:<20} {m['raft']:<8} {m['address'] or ''} {lbl}"
            )


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Names, addresses and state of the lab's VMs."""
    lab = _lab(ctx)
    _print_status(_run(lab.status), as_json)


@cli.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.option(
    "--timeout", type=float, default=600.0, show_default=True, help="Seconds before the command is killed."
)
@click.argument("vm")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def exec_(ctx: click.Context, timeout: float, vm: str, argv: tuple[str, ...]) -> None:
    """Run a command inside VM (`exec s1 -- nvme list`); its exit code is ours."""
    lab = _lab(ctx)
    data = None if sys.stdin.isatty() else sys.stdin.buffer.read()

    def out(b: bytes) -> None:
        sys.stdout.buffer.write(b)
        sys.stdout.flush()

    def err(b: bytes) -> None:
        sys.stderr.buffer.write(b)
        sys.stderr.flush()

    sys.exit(_run(lambda: lab.exec_stream(vm, list(argv), out, err, timeout=timeout, input=data or None)))


@cli.command()
@click.argument("file")
@click.argument("dest", metavar="VM:PATH")
@click.pass_context
def copy(ctx: click.Context, file: str, dest: str) -> None:
    """Put FILE into VM at PATH (through its guest agent), e.g. a bundle: `copy b.raucb s1:/root/b.raucb`."""
    lab = _lab(ctx)
    vm, sep, path = dest.partition(":")
    if not sep or not vm:
        _run(lambda: _raise(BadInput(f"{dest!r} is not VM:PATH", field="dest", allowed="VM:/absolute/path")))
    n = _run(lambda: lab.copy(file, vm, path))
    click.echo(f"{vm}:{path}: {n} bytes")


def _vm_command(name: str, method: str, doc: str) -> None:
    @click.argument("vm")
    @click.pass_context
    def cmd(ctx: click.Context, vm: str) -> None:
        lab = _lab(ctx)
        _run(lambda: getattr(lab, method)(vm))

    cmd.__doc__ = doc
    cli.command(name=name)(cmd)


_vm_command("kill", "kill", "Power VM off abruptly (its drives keep their contents).")
_vm_command("start", "start", "Boot VM again with the same drives; returns when it is ready.")
_vm_command("cut", "cut", "Cut VM off the lab network.")
_vm_command("heal", "heal", "Put VM back on the lab network.")


def _drive_command(name: str, method: str, doc: str) -> None:
    @click.argument("vm")
    @click.argument("serial")
    @click.pass_context
    def cmd(ctx: click.Context, vm: str, serial: str) -> None:
        lab = _lab(ctx)
        _run(lambda: getattr(lab, method)(vm, serial))

    cmd.__doc__ = doc
    cli.command(name=name)(cmd)


_drive_command("unplug", "unplug", "Pull NVMe drive SERIAL out of running VM (PCIe hot-unplug).")
_drive_command("plug", "plug", "Put unplugged drive SERIAL back into running VM.")


@cli.command()
@click.argument("vm")
@click.argument("serial")
@click.option(
    "--critical-warning", "bits", type=_Count(), required=True,
    help="SMART critical warning bits, 0-255 (4: reliability degraded; 0 clears).",
)  # fmt: skip
@click.pass_context
def smart(ctx: click.Context, vm: str, serial: str, bits: int) -> None:
    """Make drive SERIAL of running VM report a SMART critical warning (a failing drive)."""
    lab = _lab(ctx)
    _run(lambda: lab.smart_warning(vm, serial, bits))


@cli.command()
@click.argument("vm")
@click.pass_context
def logs(ctx: click.Context, vm: str) -> None:
    """VM's serial console (kernel and systemd messages)."""
    lab = _lab(ctx)
    click.echo(_run(lambda: lab.logs(vm)), nl=False)


@cli.command()
@click.pass_context
def down(ctx: click.Context) -> None:
    """Stop every VM, remove the namespace, taps, drives and state."""
    lab = _lab(ctx)
    _run(lab.down)
    click.echo(f"lab {lab.name}: down")


@cli.command(name="list")
def list_() -> None:
    """Labs that are up."""
    for n in Lab().all_names():
        click.echo(n)


@cli.command()
@click.option("--raw", is_flag=True, help="Also the raw GPT/UEFI disk image for bare metal.")
@click.option("--bundle", is_flag=True, help="Also a signed update bundle; its path is the last line.")
@click.option("--key", default=None, type=click.Path(dir_okay=False), help="Signing key file (PEM).")
@click.option("--cert", default=None, type=click.Path(dir_okay=False), help="Signing certificate file (PEM).")
@click.option("--json", "as_json", is_flag=True)
def image(raw: bool, bundle: bool, key: str | None, cert: str | None, as_json: bool) -> None:
    """Build or refresh the appliance image (cached by a key of its inputs). --bundle signs with
    --key/--cert, or with the lab's test key (made on first use under the cache) without them."""
    if (key or cert) and not bundle:
        raise click.UsageError("--key and --cert sign a bundle: give --bundle too")
    if bundle:  # a bad key file is said before minutes of building, not after
        from nodeos.update.build import operator_key

        _run(lambda: operator_key(key, cert))
    img = _run(lambda: image_mod.build_image(raw=raw))
    out = {"key": img.key, "dir": str(img.dir), "kernel": str(img.kernel), "initrd": str(img.initrd),
           "rootfs": str(img.rootfs), "raw": str(img.raw) if img.raw.exists() else None,
           "data plane": describe(read_record(img.dir))}  # fmt: skip
    if bundle:
        from nodeos_devtools.lab.bundle import build_bundle

        out["bundle"] = str(_run(lambda: build_bundle(img, key=key, cert=cert)))
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            click.echo(f"{k}: {v}")
        if bundle:
            click.echo(out["bundle"])  # the last line: what a script takes (`| tail -n1`)


@cli.command()
@click.option("--keep", is_flag=True, help="Leave the lab up at the end.")
@click.option(
    "--by-hand", is_flag=True, help="Export with LVM and nvmet configfs directly instead of through nodeosd."
)
@click.pass_context
def demo(ctx: click.Context, keep: bool, by_hand: bool) -> None:
    """End to end: s1's nodeosd exports a drive-backed volume over TCP and RDMA, h1 verifies data;
    then s1..s3 as one cluster serve a 3-replica volume as one multipath device (not --by-hand)."""
    from nodeos_devtools.lab.demo import KernelTargetExporter, run_demo

    # No exporter: the product path, with the cluster part (run_demo picks nodeosd's console).
    exporter = KernelTargetExporter() if by_hand else None
    _run(lambda: run_demo(ctx.obj["name"], keep=keep, exporter=exporter))


@cli.command()
@click.option("--seed", type=_Count(), required=True, help="The seed: the same seed, the same actions.")
@click.option("--minutes", type=float, required=True, help="Minutes of actions (then heal, check, clean).")
@click.option("--lab", "lab_name", default=None, help="Soak this cluster lab; default: boot one.")
@click.option("--hog", is_flag=True, help="Run a CPU hog process on the host beside the lab.")
@click.option("--steps", type=_Count(), default=None, help="Stop after this step (a replay).")
@click.option(
    "--faults", default="power,cut,kill,drive", show_default=True, help="Faults, comma-separated, or none."
)
@click.option(
    "--bound-scale", type=float, default=1.0, show_default=True, help="Multiply every bound (a slow host)."
)
@click.option("--keep", is_flag=True, help="Leave the lab it booted up at the end.")
@click.option("--dry-run", is_flag=True, help="Print the seed's actions (--steps, default 50), boot nothing.")
@click.option("--json", "as_json", is_flag=True, help="The report (or the plan) as JSON.")
def soak(seed: int, minutes: float, lab_name: str | None, hog: bool, steps: int | None, faults: str,
         bound_scale: float, keep: bool, dry_run: bool, as_json: bool) -> None:  # fmt: skip
    """A seeded fault soak of the whole appliance (docs/lab.md, "The soak"): volumes made,
    changed and deleted through the console while VMs lose power, network or their daemon and a
    drive is pulled, fio with verify running on the GPU node; exit 0 only with no violation."""
    from nodeos_devtools.lab import soak as soak_mod
    from nodeos_devtools.lab import soak_lab, soak_plan

    seed, minutes, steps, kinds, bound_scale = _run(
        lambda: soak_plan.check_args(seed, minutes, steps, faults, bound_scale)
    )
    if dry_run:
        lab = _run(lambda: Lab(lab_name)) if lab_name else None
        shape = _run(lambda: soak_mod.lab_shape(lab)) if lab is not None else soak_plan.DEFAULT_SHAPE
        actions = _run(lambda: soak_plan.plan(seed, shape, steps or 50, kinds))
        if as_json:
            click.echo(json.dumps([a.to_json() for a in actions], indent=1))
        else:
            click.echo("\n".join(a.describe() for a in actions))
        return
    report = _run(lambda: soak_lab.soak_lab(seed, minutes, lab_name, hog=hog, steps=steps, faults=kinds,
                                            bound_scale=bound_scale, keep=keep))  # fmt: skip
    click.echo(json.dumps(report.to_json(), indent=1) if as_json else report.render())
    sys.exit(0 if report.ok else EXIT_FAILED)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.UsageError as e:
        # Bad command-line input is bad input: exit 2 with click's message naming the option.
        e.show()
        sys.exit(EXIT_BAD_INPUT)
    except click.exceptions.Abort:
        sys.exit(EXIT_FAILED)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except BadInput as e:  # pragma: no cover - _run handles these
        click.echo(f"nodeos-lab: error: {e.message}", err=True)
        sys.exit(EXIT_BAD_INPUT)
