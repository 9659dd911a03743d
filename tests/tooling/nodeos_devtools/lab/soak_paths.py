"""The soak's GPU node keeps learning the paths of the volumes it runs fio on.

A volume's paths move while the host uses it: a drain, a power-off or a pulled drive re-places
a replica, and the new node exports the volume where the host never connected. A host that
connected once loses its I/O when its last old path goes (seed 8, step 29: fio `error 5`), which
is why docs/operations.md ("Failover: host settings") tells hosts to keep discovering: persistent
discovery controllers with the autoconnect rule, or nvme-stas. The soak models that host: every
PERIOD_S, off the soak's own thread (an action may take minutes), it asks discovery at every
storage VM that is up and connects each path of a watched volume it does not have yet.

Only the watched volumes (not a connect-all): a revoke must find the host gone from the others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from nodeos_devtools.lab import soak_io
from nodeos_devtools.lab.lab import Lab

PERIOD_S = 15.0


class PathWatch:
    def __init__(
        self, lab: Lab, host: str, vias: Callable[[], list[str]], log: Callable[[str], None]
    ) -> None:
        self.lab, self.host, self.vias, self.log = lab, host, vias, log
        self._watched: set[str] = set()
        # Held for a whole round: unwatch() returns only once no connect of that NQN is under way,
        # so the disconnect that follows it is not undone by the watch.
        self._round = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = 0  # paths the watch connected (the soak's report counts them)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="soak-paths", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._round:
            self._watched.clear()
        if self._thread is not None:
            self._thread.join(timeout=300)

    def watch(self, nqn: str) -> None:
        with self._round:
            self._watched.add(nqn)

    def unwatch(self, nqn: str) -> None:
        with self._round:
            self._watched.discard(nqn)

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_S):
            with self._round:
                for nqn in sorted(self._watched):
                    try:
                        self._refresh(nqn)
                    except Exception as e:  # a VM going down mid-round: the next round asks again
                        self.log(f"paths of {nqn}: {type(e).__name__}: {str(e)[:200]}")

    def _refresh(self, nqn: str) -> None:
        have = soak_io.connected_paths(self.lab, self.host, nqn)
        for addr, port in soak_io.paths(self.lab, self.host, nqn, self.vias()):
            if (addr, port) in have:
                continue
            r = soak_io.connect_path(self.lab, self.host, nqn, addr, port)
            if r.rc == 0:
                self.connected += 1
                self.log(f"host learned a path of {nqn}: {addr}:{port}")
