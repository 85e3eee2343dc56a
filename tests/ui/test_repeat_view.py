"""The repeat's box and its speedup-against-F plot (ui/repeat_view.py), from a real
session's table (RepeatSession.table: predicted, and measured on the CPU)."""
from __future__ import annotations

import math

import workbench as wb
from workbench.testing.simulators import cartpole
from workbench.ui.repeat_view import repeat_box_html, speedup_figure


def test_table_and_speedup_figure():
    s = wb.RepeatSession(cartpole(256, 8))
    t = s.table(measure=False)
    assert list(t["step"]) == ["unfused", "fuse steps x1", "fuse steps x2", "fuse steps x4",
                               "fuse steps x8"]
    assert t["speedup_predicted"].iloc[0] == 1.0 and t["speedup_predicted"].is_monotonic_increasing
    assert all(math.isnan(v) for v in t["measured_ms"])
    fig = speedup_figure(t)
    assert [d["name"] for d in fig["data"]] == ["predicted"]
    assert fig["data"][0]["x"] == [1, 2, 4, 8] and fig["layout"]["xaxis"]["type"] == "log"
    s.measure(None, repeats=1)
    s.measure(8, repeats=1)
    t = s.table(measure=False)
    fig = speedup_figure(t)
    measured = fig["data"][0]
    assert measured["name"] == "measured" and measured["y"][-1] > 0
    assert measured["y"][0] is None                    # F=1 not measured: a gap


def test_box_is_collapsible_and_escaped():
    b = wb.GraphBuilder("<step>")
    x = b.input("x<&>", (4,))
    b.output(x * 2.0, "y")
    r = wb.repeat(b.build(), 9, {"x<&>": "y"})
    box = repeat_box_html(r)
    assert box.startswith('<details class="wb-repeat"><summary><span class="wb-repeat-label">'
                          'repeat &lt;step&gt; \u00d79 \u00b7 unfused: 9 calls</span>')
    assert "fuse steps \u00d74: 3 calls" in repeat_box_html(r, 4)
    assert "<&>" not in box and "x&lt;&amp;&gt;" in box and box.endswith("</pre></details>")
