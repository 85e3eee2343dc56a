"""Long app actions (Measure, Tune) on a worker thread, with Cancel.

The kernel's main thread stays free while a job runs, so clicks in the graph view and
the Cancel button reach Python at once (before, they queued until the action ended).
While it runs the app disables every control that could change the session; the
job's progress callback raises :class:`Cancelled` once Cancel was pressed, between
two compiled kernels or two timed runs, so the session never records a half-done
measurement (``Session.measure`` stores its result only when it returns).

Example::

    >>> job = Job("measuring", app.measure, on_done=print)   # doctest: +SKIP
    >>> job.start(); job.cancel(); job.join()                # doctest: +SKIP
"""
from __future__ import annotations

import threading
from typing import Callable

from ..errors import WorkbenchError


class Cancelled(WorkbenchError):
    """The user pressed Cancel: the action stopped and changed nothing."""


class Job:
    """``run()`` on a daemon thread; ``on_done(job)`` runs on that thread at the end
    (after an error or a cancel too). ``check()`` (called from the progress callback)
    raises :class:`Cancelled` after :meth:`cancel`."""

    def __init__(self, label: str, run: Callable[[], object],
                 on_done: Callable[["Job"], None]):
        self.label = label
        self._run, self._on_done = run, on_done
        self._cancel = threading.Event()
        self.result: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"workbench {label}",
                                       daemon=True)

    def start(self) -> "Job":
        self.thread.start()
        return self

    def _main(self) -> None:
        try:
            self.result = self._run()
        except BaseException as e:   # reported by on_done: a thread has no caller
            self.error = e
        finally:
            self._on_done(self)

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        self._cancel.set()

    def check(self) -> None:
        """Raise Cancelled if cancel() was called (from the job's own thread only)."""
        if self._cancel.is_set() and threading.current_thread() is self.thread:
            raise Cancelled(f"{self.label} cancelled: nothing was recorded, the step is "
                            "as it was")

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
