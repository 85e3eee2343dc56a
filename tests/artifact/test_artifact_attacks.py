"""The artifact attacks of workbench/testing/fuzz/artifacts.py on a fixed set of seeds:
every change to a signed artifact is refused, by a loader that trusts the signer,
before anything compiles or runs."""
import workbench as wb
from workbench.artifact import HmacKey
from workbench.testing.fuzz.artifacts import CHANGES, attack_failures

SEEDS = range(36)


def test_every_change_to_a_signed_artifact_is_refused_before_it_runs(tmp_path, monkeypatch):
    b = wb.GraphBuilder("attacked")
    x = b.input("x", (8, 40))
    b.output(b.softmax(b.exp(x) * 0.5), "y")
    s = wb.Session(b.build(), backend="cpu")
    s.auto("rules")
    key = HmacKey.generate()
    art = s.export(tmp_path / "a", sign_with=key)
    b2 = wb.GraphBuilder("another")
    b2.output(b2.tanh(b2.input("x", (8, 40))), "y")
    other = wb.Session(b2.build(), backend="cpu").export(tmp_path / "b", sign_with=key)
    cache = tmp_path / "cache"
    monkeypatch.setenv("WORKBENCH_CACHE", str(cache))
    work = tmp_path / "work"
    work.mkdir()
    fails = attack_failures(art, other, key, SEEDS, work, cache / "cpu")
    assert not fails, fails[:5]
    import numpy as np
    drawn = {CHANGES[int(np.random.default_rng(s).integers(len(CHANGES)))] for s in SEEDS}
    assert drawn == set(CHANGES)        # (the seeds cover every kind of change)
    # the untouched artifact still loads with the same key (the attacks were refused,
    # not everything)
    model = wb.load_artifact(art, backend="cpu", trusted_keys=[key])
    assert model.kernels
