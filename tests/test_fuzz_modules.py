"""The fuzzer's ``modules`` family on a fixed set of seeds: random torch.nn modules
imported by ``from_torch`` and checked against torch's own output, then every plan's
kernels against NumPy (the long run: python -m workbench.testing.fuzz --family
modules --seconds N)."""
import pytest

pytest.importorskip("torch")

from workbench.testing import fuzz  # noqa: E402

SEEDS = range(6)


def test_random_modules_import_and_every_plan_checks():
    rep = fuzz.fuzz(SEEDS, family="modules")
    assert rep.cases == len(SEEDS) and rep.plans >= len(SEEDS)
    assert not rep.failures, rep.failures


def test_a_wrong_import_is_a_failure_of_its_seed(monkeypatch):
    """The family checks the import against torch: an importer that changed the
    module's meaning fails the seed at 'draw', and the run goes on."""
    from workbench.testing.fuzz import modules
    real = modules.relative_to_largest
    monkeypatch.setattr(modules, "relative_to_largest", lambda a, b: 1.0 + 0 * real(a, b))
    rep = fuzz.fuzz(range(2), family="modules")
    assert rep.cases == 2 and [f.action for f in rep.failures] == ["draw", "draw"]
    assert "imported module 0 wrongly" in rep.failures[0].message
