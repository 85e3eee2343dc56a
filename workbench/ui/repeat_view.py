"""A repeat in the notebook: its collapsible box and the plot of speedup against F.

- :func:`repeat_box_html`: the repeat as an HTML ``<details>`` box, closed by default,
  its summary line the trip count and roles, the body's text inside (every name
  escaped);
- :func:`speedup_figure`: plotly.js figure JSON (as ``charts.py`` builds them, no plotly
  import) of the speedup over the unfused program against F, predicted and measured,
  from :meth:`workbench.RepeatSession.table`.

Example::

    >>> s = wb.RepeatSession(cartpole(4096, 256))               # doctest: +SKIP
    >>> fig = speedup_figure(s.table(measure=True))             # doctest: +SKIP
"""
from __future__ import annotations

import html
import math

from ..ir.printer import format_graph
from .charts import MEASURED, PREDICTED, _base_layout, finite


def repeat_label(r, steps_per_call: int | None = None) -> str:
    """The box's label: "repeat NAME ×256", and the step it runs in where fused
    ("· fuse steps ×16: 16 calls")."""
    label = f"repeat {r.name} \u00d7{r.trips}"
    if steps_per_call is None:
        return label + f" \u00b7 unfused: {r.trips} calls"
    return label + (f" \u00b7 fuse steps \u00d7{steps_per_call}: "
                    f"{-(-r.trips // steps_per_call)} calls")


def repeat_box_html(r, steps_per_call: int | None = None) -> str:
    """The repeat as a collapsible box: its label (:func:`repeat_label`), its roles,
    the body."""
    e = html.escape
    roles = [f"carry {len(r.carried)}", f"stacked in {len(r.stacked_inputs)}",
             f"stacked out {len(r.stacked_outputs)}",
             f"invariant {len(r.invariant_inputs)}", f"batch axis {r.batch_axis}"]
    return (f'<details class="wb-repeat"><summary><span class="wb-repeat-label">'
            f'{e(repeat_label(r, steps_per_call))}</span> &middot; {e(", ".join(roles))}'
            f"</summary><pre>{e(format_graph(r.body))}</pre></details>")


def speedup_figure(table) -> dict:
    """Speedup over unfused against F (log2 axis): the cost model's and the measured."""
    fused = table[table["steps_per_call"].notna()]
    xs = [int(f) for f in fused["steps_per_call"]]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "predicted",
             "x": xs, "y": finite(list(fused["speedup_predicted"])),
             "line": {"color": PREDICTED}}]
    if any(not math.isnan(v) for v in fused["speedup_measured"]):
        data.insert(0, {"type": "scatter", "mode": "lines+markers", "name": "measured",
                        "x": xs, "y": finite(list(fused["speedup_measured"])),
                        "line": {"color": MEASURED}})
    layout = _base_layout("fuse steps xF: speedup over one step per call", 320)
    layout["xaxis"] = {"title": {"text": "F (steps per kernel call)"}, "type": "log",
                       "dtick": math.log10(2)}
    layout["yaxis"] = {"title": {"text": "x unfused"}}
    return {"data": data, "layout": layout}
