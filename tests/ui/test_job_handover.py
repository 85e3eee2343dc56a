"""A click on a control the moment a background Measure gives it back is acted on, not
refused as "busy" (found by the browser test of Measure's progress bar: Fuse pressed
right after Measure ended was refused while the job's thread, still giving the controls
back, lived on; the status line then fell back to "step 0"). Real session, real C
compiler, real worker thread. (A click during the Measure itself is still refused:
tests/ui/test_app_fixes.py.)"""
from __future__ import annotations

import threading
import time

import workbench as wb

LAYERNORM = "sample_graphs/layernorm.json"


def test_a_click_as_the_controls_come_back_waits_for_the_job_to_end():
    app = wb.open(LAYERNORM, backend="cpu", display=False)
    app.auto("rules")                             # one kernel: a short Measure
    app.repeats = 2
    given_back = threading.Event()
    hand_back = app._job_done

    def slow_hand_back(job):
        # the controls come back first; the rest of the hand-over (the scheme and
        # mapping drop-downs, on a big graph) takes a while
        hand_back(job)
        given_back.set()
        time.sleep(0.5)

    app._job_done = slow_hand_back
    job = app.start("measure")
    assert job is not None
    assert given_back.wait(120) and not app.buttons["Fuse"].disabled
    assert job.running                            # (the thread is still handing back)
    plan = app.undo()                             # what the user's click does now
    assert plan is not None and app.message.startswith("undo: step 0"), app.message
    assert not job.running and len(plan.groups) == 9

