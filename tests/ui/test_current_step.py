"""Controls that always show the current step (issue 49, item 3), driven from Python
with a real session and the real C compiler: a refusal cleared by a later success, the
drop-downs back to the step after a refusal, the planner after Undo, only schemes the
plan accepts, export names from the model and Overwrite. What the browser shows of the
same is tests/browser/test_lab_defects.py."""
from __future__ import annotations

import pytest

import workbench as wb
from workbench.fusion import StitchScheme
from workbench.ui.current_step import allowed_schemes, export_name, planner_of, taken

LAYERNORM = "sample_graphs/layernorm.json"


@pytest.fixture
def ln_app():
    return wb.open(LAYERNORM, backend="cpu", display=False)


def test_a_refusal_is_cleared_by_a_later_success(ln_app):
    app = ln_app
    app.selected = ["n0"]
    assert app.set_scheme(None, "local") is None        # one op: no edge inside it
    assert app._status.refused and "no edge inside" in app.message
    app.selected = ["n1"]                              # a selection succeeds silently
    assert not app._status.refused
    assert app.message == "step 0 (load), 9 kernels"
    assert "wb-refused" not in app._message._dom_classes


def test_the_mapping_drop_down_returns_to_the_kernel_after_a_refusal(ln_app):
    app = ln_app
    app.auto("rules")
    app.selected = ["n0"]
    assert app.mapping.value == "auto"
    app.mapping.value = "warp"                         # chosen, then refused
    assert app.set_mapping(None, "diagonal") is None
    assert app._status.refused
    assert app.mapping.value == "auto"                 # what the kernel has


def test_after_undo_the_planner_drop_down_names_the_current_plan(ln_app):
    app = ln_app
    assert planner_of(app.session) == "none"
    app.auto("stitch")
    assert app.planner.value == "stitch"
    app.auto("xla")
    assert app.planner.value == "xla"
    app.undo()
    assert app.planner.value == "stitch" == planner_of(app.session)
    app.undo()
    assert app.planner.value == "none"
    app.redo()
    assert app.planner.value == "stitch"


def test_the_scheme_list_offers_only_what_the_plan_accepts(ln_app):
    app = ln_app
    app.auto("stitch")
    gr = max(app.session.plan.groups, key=lambda g: len(g.nodes))
    app.selected = [gr.nodes[0]]
    offered = list(app.scheme.options)
    assert "independent" not in offered and app.scheme.value in offered
    for sc in StitchScheme:      # every one left out is refused, every one offered is not
        value = app.edge.value
        if sc.value in offered:
            app.session.plan.set_scheme(value, sc)
        else:
            with pytest.raises(wb.WorkbenchError):
                app.session.plan.set_scheme(value, sc)
    assert offered == allowed_schemes(app.session.plan, app.edge.value)


def test_export_names_come_from_the_model_and_a_taken_path_offers_overwrite(ln_app,
                                                                           tmp_path):
    assert export_name("main_graph", "models/bert-tiny.onnx") == "bert-tiny_artifact"
    assert export_name("main_graph", None) == "main_graph_artifact"
    assert export_name("layernorm", "x/other.json") == "layernorm_artifact"
    app = ln_app
    assert app.export_path.value == "layernorm_artifact"
    path = tmp_path / "ln_artifact"
    assert app.export(path) is not None and taken(path)
    overwrite = app.buttons["Overwrite"]
    assert overwrite.layout.display == "none"
    assert app.export(path) is None                    # taken: refused, Overwrite shown
    assert "press Overwrite" in app.message and overwrite.layout.display is None
    app.export_path.value = "elsewhere_artifact"       # another name: hidden again
    assert overwrite.layout.display == "none"
    app.export_path.value = str(path)
    app.export(path)
    overwrite.click()                                  # what the button does
    assert "exported step 0" in app.message and not app._status.refused
    assert overwrite.layout.display == "none"
