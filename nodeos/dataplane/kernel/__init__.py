"""The kernel data plane: Linux nvmet via configfs, LVM thin pools on the NVMe drives."""

from nodeos.dataplane.kernel.backend import KernelDataPlane

__all__ = ["KernelDataPlane"]
