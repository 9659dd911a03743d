from nodeos.lab.lab import Lab
from nodeos.lab.qga import ExecResult

__all__ = ["ExecResult", "Lab"]
