from nodeos_devtools.lab.lab import Lab
from nodeos_devtools.lab.qga import ExecResult

__all__ = ["ExecResult", "Lab"]
