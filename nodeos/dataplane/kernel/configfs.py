"""The configfs edge: the only code that touches /sys/kernel/config/nvmet.

Kept tiny so everything above it is plain decisions. Errors carry the path and the
kernel's errno text, because configfs answers most mistakes with a bare EINVAL/EBUSY.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from nodeos.errors import EnvironmentProblem, OperationFailed
from nodeos.sysfs import read_attr

NVMET_ROOT = Path("/sys/kernel/config/nvmet")


class ConfigFs:
    def __init__(self, root: Path = NVMET_ROOT) -> None:
        self.root = Path(root)

    def usable(self) -> bool:
        return (self.root / "subsystems").is_dir() and (self.root / "ports").is_dir()

    def require(self) -> None:
        if not self.usable():
            raise EnvironmentProblem(
                f"{self.root} is not available: load the nvmet module (modprobe nvmet) "
                "and mount configfs (mount -t configfs none /sys/kernel/config)"
            )

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def exists(self, *parts: str) -> bool:
        return os.path.lexists(self.path(*parts))

    def listdir(self, *parts: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(*parts)))
        except FileNotFoundError:
            return []

    def mkdir(self, *parts: str) -> None:
        p = self.path(*parts)
        try:
            os.mkdir(p)
        except FileExistsError:
            pass
        except OSError as e:
            raise self._fail("create", p, e) from None

    def rmdir(self, *parts: str) -> None:
        p = self.path(*parts)
        try:
            os.rmdir(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._fail("remove", p, e) from None

    def read(self, *parts: str) -> str:
        p = self.path(*parts)
        try:
            return p.read_text().strip()
        except OSError as e:
            raise self._fail("read", p, e) from None

    def read_or(self, default: str, *parts: str) -> str:
        return read_attr(self.path(*parts), default)

    def write(self, value: str, *parts: str, secret: bool = False) -> None:
        p = self.path(*parts)
        try:
            # configfs wants the whole value in one write() call.
            fd = os.open(p, os.O_WRONLY)
            try:
                os.write(fd, value.encode())
            finally:
                os.close(fd)
        except OSError as e:
            shown = "<secret>" if secret else repr(value)
            raise self._fail(f"write {shown} to", p, e) from None

    def link(self, target: tuple[str, ...], *parts: str) -> None:
        p = self.path(*parts)
        if os.path.lexists(p):
            return
        try:
            os.symlink(self.path(*target), p)
        except FileExistsError:
            pass
        except OSError as e:
            raise self._fail("link", p, e) from None

    def unlink(self, *parts: str) -> None:
        p = self.path(*parts)
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._fail("unlink", p, e) from None

    @staticmethod
    def _fail(what: str, path: Path, e: OSError) -> OperationFailed:
        name = errno.errorcode.get(e.errno or 0, str(e.errno))
        return OperationFailed(f"nvmet configfs: could not {what} {path}: {name} ({e.strerror})")
