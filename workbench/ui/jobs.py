"""Long app actions (Measure, Tune) on a worker thread, with Cancel.

The kernel's main thread stays free while a job runs, so clicks in the graph view and
the Cancel button reach Python at once (before, they queued until the action ended).
While it runs the app disables every control that could change the session; the
job's progress callback raises :class:`Cancelled` once Cancel was pressed, between
two compiled kernels or two timed runs, so the session never records a half-done
measurement (``Session.measure`` stores its result only when it returns).

:class:`BackgroundJobs` is the app's side, a part of :class:`~.app.WorkbenchApp`: it
starts and cancels a job, locks the controls while it runs, and shows its progress.

Example::

    >>> job = Job("measuring", app.measure, on_done=print)   # doctest: +SKIP
    >>> job.start(); job.cancel(); job.join()                # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable

from ..errors import WorkbenchError
from .progress_phases import SCALE, PhasedProgress, Shown


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
        # set when run() has returned and on_done begins: the controls come back during
        # on_done, so a click may arrive while the thread still lives (see wait_done)
        self.finishing = threading.Event()
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
            self.finishing.set()
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


class BackgroundJobs:
    """Measure and Tune on a worker thread, as the app's buttons run them; uses the
    app's ``session``, ``buttons`` and other controls, progress bar and message line
    (``_job`` and ``_job_lock`` are set when the app is built)."""

    def start(self, action: str) -> Job | None:
        """Run ``measure`` or ``tune`` on a worker thread (what the buttons do): the app
        stays responsive, shows progress and a Cancel button, and disables every control
        that would change the session until it ends. Returns the job (``job.join()``
        waits), or None when refused (another is running)."""
        if action not in ("measure", "tune"):
            raise WorkbenchError(f"unknown background action {action!r}: measure or tune")
        with self._job_lock:
            if self._job is not None and self._job.running:
                self._set_message(f"busy {self._job.label}: wait for it, or press Cancel",
                                  refused=True)
                return None
            label = "measuring" if action == "measure" else "tuning"
            self._job = Job(label, getattr(self, action), self._job_done)
            self._lock_controls(True)
            self._set_message(f"{label} step {self.session.position}… (the app stays "
                              "usable; Cancel stops it)")
            return self._job.start()

    def cancel(self) -> None:
        """Stop the running Measure or Tune at its next kernel or timed run."""
        job = self._job
        if job is None or not job.running:
            self._set_message("nothing to cancel", refused=True)
            return
        # (said before the job is told: the job's own last word, "... cancelled", is
        # set on its thread and must not be overwritten by this one)
        self._set_message(f"cancelling {job.label}…")
        self.buttons["Cancel"].disabled = True
        job.cancel()

    def _job_done(self, job: Job) -> None:
        # on the worker thread: the action already showed its result or refusal
        self._lock_controls(False)
        if job.error is not None:    # not a WorkbenchError: a bug, said in one line
            self._set_message(f"{job.label} failed: {type(job.error).__name__}: "
                              f"{job.error}", refused=True)

    def _check_not_busy(self) -> None:
        job = self._job
        if job is not None and job.running and threading.current_thread() is not job.thread:
            # the job has ended and is giving the controls back (a click on one already
            # re-enabled can land here): wait for that, instead of refusing the click
            if job.finishing.is_set():
                job.join(timeout=30)
            if job.running:
                raise WorkbenchError(f"busy {job.label}: wait for it to end, or press "
                                     "Cancel")

    def _lock_controls(self, busy: bool) -> None:
        """Disable (and afterwards restore) every control that changes the session."""
        controls = [c for k, c in self.buttons.items() if k != "Cancel"] + [
            self.search, self.planner, self.matmuls, self.overlay, self.export_path,
            self.edge, self.scheme, self.mapping, self.collapse_toggle, self.transforms.list_button,
            self.transforms.apply_button, self.transforms.goto_button]
        if busy:
            self._enabled_before = [c for c in controls if not c.disabled]
            for c in controls:
                c.disabled = True
            self.add_class("wb-busy")
        else:
            for c in getattr(self, "_enabled_before", []):
                c.disabled = False
            self._enabled_before = []
            self._update_scheme_controls()
            self.remove_class("wb-busy")
        self.buttons["Cancel"].disabled = not busy
        self.buttons["Cancel"].layout.display = "" if busy else "none"

    # -- progress ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _busy(self, label: str, phases=None):
        """The progress bar shown while the body runs; with ``phases`` (a
        progress_phases tuple) one monotone bar across them, each named."""
        self._phases = PhasedProgress(phases) if phases else None
        self.progress.value, self.progress.max = 0, SCALE if phases else 1
        self.progress.description = label
        self.progress.layout.display = ""
        try:
            yield
        finally:
            self.progress.layout.display = "none"
            self._phases = None

    def _enter_phase(self, name: str) -> None:
        """A phase that reports no events of its own begins (the NumPy reference)."""
        if getattr(self, "_phases", None) is not None:
            self._show_progress(self._phases.enter(name))

    def _show_progress(self, shown: Shown) -> None:
        # (the words before the bar: who watches the value reads the phase it is in)
        self.progress.description = shown.text
        self.progress.tooltip = shown.label
        self.progress.value = shown.value

    def _on_progress(self, done: int, total: int, label: str) -> None:
        if self._job is not None:
            self._job.check()    # Cancel pressed: stop here (raises Cancelled)
        if getattr(self, "_phases", None) is not None:
            self._show_progress(self._phases.event(done, total, label))
        else:
            self.progress.max = max(1, total)
            self.progress.value = done
            self.progress.description = f"{done}/{total}"
            self.progress.tooltip = label
        if self._chain_progress:
            self._chain_progress(done, total, label)
