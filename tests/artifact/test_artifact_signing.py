"""An artifact is code: loading it runs its compiled kernels' code. Signatures
(HMAC-SHA256 with a shared secret; Ed25519 when ``cryptography`` is installed) let a
loader refuse, before anything is compiled, an artifact that no trusted key signed."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from workbench import GraphBuilder, Session, load_artifact
from workbench.artifact import HmacKey, load_key
from workbench.errors import ArtifactError

SECRET = b"0123456789abcdef0123456789abcdef-test-secret"


@pytest.fixture(scope="module")
def session():
    b = GraphBuilder("scale")
    x = b.input("x", (64, 256))
    b.output(b.exp(x) * 2.0, "y")
    s = Session(b.build(), backend="cpu", seed=1)
    s.auto("rules")
    return s


@pytest.fixture
def key():
    return HmacKey(SECRET)


def refused(path, match, cache, **kw):
    with pytest.raises(ArtifactError, match=match) as e:
        load_artifact(path, backend="cpu", **kw)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    assert not cache.exists() or not list(cache.rglob("*.so")), "something was compiled"
    return msg


def _constructor_artifact(session, root: Path, marker: Path, art) -> Path:
    """An artifact whose C source runs code when its library is loaded."""
    path = session.export(root)
    (src,) = (path / "kernels").glob("*.c")
    src.write_text(src.read_text() + "\n#include <stdio.h>\n"
                   "__attribute__((constructor)) static void wb_evil(void) {\n"
                   f"  FILE* f = fopen(\"{marker}\", \"w\"); if (f) fclose(f);\n}}\n")
    art.resign(path)      # a consistent manifest: no secret is needed for that
    return path


def test_loading_an_artifact_runs_its_code(session, tmp_path, fresh_cache, art):
    """What the README says: loading compiles and loads the shipped code, which runs
    before the model is called. Trust an artifact as you would a pickle."""
    marker = tmp_path / "ran"
    path = _constructor_artifact(session, tmp_path / "a", marker, art)
    load_artifact(path, backend="cpu")
    assert marker.exists()


def test_a_signature_requirement_refuses_it_before_compiling(session, tmp_path, fresh_cache,
                                                             art, key):
    marker = tmp_path / "ran"
    path = _constructor_artifact(session, tmp_path / "a", marker, art)
    msg = refused(path, "is not signed", fresh_cache, trusted_keys=[key])
    assert "re-export it signed" in msg and "trust" in msg
    refused(path, "is not signed", fresh_cache, require_signature=True, trusted_keys=[key])
    assert not marker.exists()
    # signed by someone else: refused just the same
    other = HmacKey(b"another secret, also at least 32 bytes long")
    signed = session.export(tmp_path / "b", sign_with=other)
    refused(signed, "signature does not verify with any trusted key", fresh_cache,
            trusted_keys=[key])


def test_require_signature_needs_keys(session, tmp_path, fresh_cache):
    path = session.export(tmp_path / "a")
    with pytest.raises(ArtifactError, match="require_signature=True needs trusted_keys"):
        load_artifact(path, backend="cpu", require_signature=True)
    # an empty list of trusted keys trusts nothing (it does not switch checking off)
    with pytest.raises(ArtifactError, match="at least one key"):
        load_artifact(path, backend="cpu", trusted_keys=[])
    with pytest.raises(ArtifactError, match="not a key"):
        load_artifact(path, backend="cpu", trusted_keys=["my secret"])


@pytest.mark.parametrize("form", ["dir", "zip"])
def test_hmac_signed_round_trip(session, tmp_path, fresh_cache, key, form):
    path = session.export(tmp_path / ("a.zip" if form == "zip" else "a"), sign_with=key)
    if form == "zip":
        with zipfile.ZipFile(path) as z:
            sig = json.loads(z.read("signature.json"))
            manifest = json.loads(z.read("manifest.json"))
    else:
        sig = json.loads((path / "signature.json").read_text())
        manifest = json.loads((path / "manifest.json").read_text())
    assert sig["algorithm"] == "hmac-sha256" and sig["key_id"] == key.key_id
    assert sig["digest"] == manifest["digest"]
    assert "signature.json" not in manifest["files"]   # outside the digest, by design
    assert SECRET.decode() not in json.dumps(sig)
    want = session.run(session.inputs)["y"]
    for keys in ([key], [HmacKey(b"x" * 40), key], key):
        model = load_artifact(path, backend="cpu", trusted_keys=keys)
        assert np.array_equal(model(**session.inputs)["y"], want)
    # a secret is given as one (HmacKey): bare bytes could be a public key's PEM
    with pytest.raises(ArtifactError, match="bare bytes are not a key"):
        load_artifact(path, backend="cpu", trusted_keys=[SECRET])
    # a signed artifact still loads, unverified, where no signature is asked for
    assert np.array_equal(load_artifact(path, backend="cpu")(**session.inputs)["y"], want)
    # require_signature=False with keys: verify what is signed, accept what is not
    unsigned = session.export(tmp_path / "u")
    load_artifact(unsigned, backend="cpu", trusted_keys=[key], require_signature=False)


def test_verification_compares_in_constant_time(session, tmp_path, fresh_cache, key,
                                                monkeypatch):
    import hmac

    import workbench.artifact.sign as sign
    calls, real = [], hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)
    monkeypatch.setattr(sign.hmac, "compare_digest", spy)
    path = session.export(tmp_path / "a", sign_with=key)
    load_artifact(path, backend="reference", trusted_keys=[key])
    assert calls


def test_tampering_after_signing_is_refused(session, tmp_path, fresh_cache, key, art):
    path = session.export(tmp_path / "a", sign_with=key)
    # a kernel edited and the manifest made consistent again: the digest moved
    root = tmp_path / "b"
    shutil.copytree(path, root)
    (src,) = (root / "kernels").glob("*.c")
    src.write_text(src.read_text().replace("2.0f", "3.0f"))
    art.resign(root)
    refused(root, "signature .*does not match|signature does not verify", fresh_cache,
            trusted_keys=[key])
    # ... and with the signature's digest set to the new one
    sig = json.loads((root / "signature.json").read_text())
    sig["digest"] = json.loads((root / "manifest.json").read_text())["digest"]
    (root / "signature.json").write_text(json.dumps(sig))
    refused(root, "signature does not verify with any trusted key", fresh_cache,
            trusted_keys=[key])
    # the signature itself changed
    root = tmp_path / "c"
    shutil.copytree(path, root)
    sig = json.loads((root / "signature.json").read_text())
    sig["signature"] = ("0" if sig["signature"][0] != "0" else "1") + sig["signature"][1:]
    (root / "signature.json").write_text(json.dumps(sig))
    refused(root, "signature does not verify with any trusted key", fresh_cache,
            trusted_keys=[key])


@pytest.mark.parametrize("text", [
    "", "{not json", "[]", '{"format": "x"}', '{"algorithm": "none"}',
    json.dumps({"format": "fusion-workbench.artifact.signature", "version": 1,
                "algorithm": "none", "key_id": "k", "digest": "0" * 64, "signature": ""}),
    json.dumps({"format": "fusion-workbench.artifact.signature", "version": 1,
                "algorithm": "hmac-sha256", "key_id": 7, "digest": "0" * 64,
                "signature": "é" * 64}),
])
def test_malformed_signature_file(session, tmp_path, fresh_cache, key, text):
    path = session.export(tmp_path / "a", sign_with=key)
    (path / "signature.json").write_text(text)
    refused(path, "signature", fresh_cache, trusted_keys=[key])


def test_keys(tmp_path):
    with pytest.raises(ArtifactError, match="at least 32 bytes"):
        HmacKey(b"short")
    with pytest.raises(ArtifactError, match="bytes"):
        HmacKey("a string secret that is long enough to pass")
    k = HmacKey.generate()
    assert len(k.secret) >= 32 and k.key_id.startswith("hmac-sha256:")
    assert HmacKey(k.secret).key_id == k.key_id != HmacKey(SECRET).key_id
    assert SECRET.hex() not in repr(HmacKey(SECRET)) and "0123" not in repr(HmacKey(SECRET))
    f = tmp_path / "wb.key"
    f.write_bytes(k.secret + b"\n")            # a trailing newline is not part of it
    assert load_key(f).key_id == k.key_id
    with pytest.raises(ArtifactError, match="no key file"):
        load_key(tmp_path / "missing.key")
    (tmp_path / "short.key").write_text("abc\n")
    with pytest.raises(ArtifactError, match="at least 32 bytes"):
        load_key(tmp_path / "short.key")


def test_sign_with_a_string_is_refused(session, tmp_path):
    with pytest.raises(ArtifactError, match="sign_with"):
        session.export(tmp_path / "a", sign_with="my secret")
    assert not (tmp_path / "a").exists()


@pytest.mark.slow   # (the CLI in subprocesses)
def test_cli_sign_key(tmp_path, fresh_cache):
    key = HmacKey.generate()
    f = tmp_path / "wb.key"
    f.write_bytes(key.secret + b"\n")
    out = tmp_path / "ln.zip"
    cli = [sys.executable, "-m", "workbench.cli", "export", "sample_graphs/layernorm.json",
           "--backend", "cpu", "-o", str(out), "-q"]
    r = subprocess.run(cli + ["--sign-key", str(f)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(out) as z:
        assert json.loads(z.read("signature.json"))["key_id"] == key.key_id
    assert load_artifact(out, backend="reference", trusted_keys=[load_key(f)]).kernels
    r = subprocess.run(cli + ["--sign-key", str(tmp_path / "nope.key"), "--force"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "nope.key" in r.stderr


# -- Ed25519 (public/private keys), with the optional cryptography package -----------------
def test_ed25519_signed_round_trip(session, tmp_path, fresh_cache):
    pytest.importorskip("cryptography")
    from workbench.artifact import Ed25519Key
    signer = Ed25519Key.generate()
    public = signer.public()
    assert public.key_id == signer.key_id and not public.can_sign
    path = session.export(tmp_path / "a.zip", sign_with=signer)
    with zipfile.ZipFile(path) as z:
        sig = json.loads(z.read("signature.json"))
    assert sig["algorithm"] == "ed25519" and sig["key_id"] == signer.key_id
    # someone else's public key, or a shared secret: refused
    refused(path, "signature does not verify with any trusted key", fresh_cache,
            trusted_keys=[Ed25519Key.generate().public(), HmacKey(SECRET)])
    want = session.run(session.inputs)["y"]
    model = load_artifact(path, backend="cpu", trusted_keys=[public])
    assert np.array_equal(model(**session.inputs)["y"], want)
    with pytest.raises(ArtifactError, match="cannot sign"):
        session.export(tmp_path / "b", sign_with=public)
    # PEM files, and cryptography's own key objects
    (tmp_path / "priv.pem").write_bytes(signer.private_pem())
    (tmp_path / "pub.pem").write_bytes(public.public_pem())
    assert load_key(tmp_path / "priv.pem").can_sign
    assert load_key(tmp_path / "pub.pem").key_id == signer.key_id
    load_artifact(path, backend="reference", trusted_keys=[load_key(tmp_path / "pub.pem")])
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    raw = Ed25519PrivateKey.generate()
    p2 = session.export(tmp_path / "c", sign_with=raw)
    load_artifact(p2, backend="reference", trusted_keys=[raw.public_key()])


def test_ed25519_cli(tmp_path, fresh_cache):
    pytest.importorskip("cryptography")
    from workbench.artifact import Ed25519Key
    signer = Ed25519Key.generate()
    (tmp_path / "priv.pem").write_bytes(signer.private_pem())
    out = tmp_path / "a"
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "export",
                        "sample_graphs/layernorm.json", "--backend", "cpu", "-o", str(out),
                        "-q", "--sign-key", str(tmp_path / "priv.pem")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    load_artifact(out, backend="reference", trusted_keys=[signer.public()])


def test_ed25519_without_cryptography_says_what_to_install(monkeypatch, tmp_path):
    for m in [m for m in sys.modules if m.startswith("cryptography.")] + ["cryptography"]:
        monkeypatch.setitem(sys.modules, m, None)      # import cryptography fails
    from workbench.artifact import Ed25519Key
    with pytest.raises(ArtifactError, match=r"pip install .*\[sign\]"):
        Ed25519Key.generate()
    (tmp_path / "k.pem").write_text("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ArtifactError, match=r"pip install .*\[sign\]"):
        load_key(tmp_path / "k.pem")


# -- key confusion, algorithm downgrade, replay (the red team's forged artifact) ----------
def _forged_with_public_key_as_secret(session, root, marker, art, public_pem: bytes):
    """An attacker's artifact: a C constructor added, the manifest made consistent, and
    an HMAC signature keyed by the signer's *public* key, which anyone has."""
    import workbench.artifact.sign as signing
    path = _constructor_artifact(session, root, marker, art)
    digest = json.loads((path / "manifest.json").read_text())["digest"]

    class PublicAsSecret:           # what the loader's old bytes->HmacKey made of it
        algorithm = signing.HMAC
        key_id = f"{signing.HMAC}:" + __import__("hashlib").sha256(
            b"fusion-workbench.artifact key id\0" + public_pem).hexdigest()[:16]

        def sign(self, message):
            import hashlib
            import hmac
            return hmac.new(public_pem, message, hashlib.sha256).hexdigest()
    (path / "signature.json").write_bytes(signing.signature_file(digest, PublicAsSecret()))
    return path


def test_a_public_key_is_never_an_hmac_secret(session, tmp_path, fresh_cache, art):
    """The loader the README describes passes ``signer.public_pem()``: before, those
    bytes became an HMAC secret, and an artifact HMAC-signed with the public key (which
    anyone has) passed, its constructor running inside load_artifact."""
    pytest.importorskip("cryptography")
    from workbench.artifact import Ed25519Key
    signer = Ed25519Key.generate()
    pem = signer.public_pem()
    marker = tmp_path / "ran"
    path = _forged_with_public_key_as_secret(session, tmp_path / "a", marker, art, pem)
    for keys in ([pem], pem, [bytearray(pem)]):
        with pytest.raises(ArtifactError, match="bare bytes are not a key"):
            load_artifact(path, backend="cpu", trusted_keys=keys)
    for material in (pem, signer.private_pem(), b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA" * 2):
        with pytest.raises(ArtifactError, match="key material"):
            HmacKey(material)
    (tmp_path / "pub.pem").write_bytes(pem)
    for keys in ([signer.public()], [tmp_path / "pub.pem"]):
        msg = refused(path, "no trusted key is an 'hmac-sha256' key", fresh_cache,
                      trusted_keys=keys)
        assert "its own algorithm" in msg
    assert not marker.exists()
    # an OpenSSH public key in a key file is no shared secret either
    (tmp_path / "id.pub").write_bytes(b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK" + b"x" * 40)
    with pytest.raises(ArtifactError, match="key material"):
        load_key(tmp_path / "id.pub")


def test_an_hmac_signature_is_refused_where_ed25519_is_trusted(session, tmp_path,
                                                               fresh_cache, key):
    """Algorithm downgrade: a loader that trusts an Ed25519 key accepts only Ed25519
    signatures of it, whatever else verifies."""
    pytest.importorskip("cryptography")
    from workbench.artifact import Ed25519Key
    path = session.export(tmp_path / "a", sign_with=key)
    refused(path, "no trusted key is an 'hmac-sha256' key", fresh_cache,
            trusted_keys=[Ed25519Key.generate().public()])
    # the same signature.json claiming ed25519 with the HMAC key's id: refused too
    sig = json.loads((path / "signature.json").read_text())
    sig["algorithm"] = "ed25519"
    (path / "signature.json").write_text(json.dumps(sig))
    refused(path, "no trusted key is an 'ed25519' key", fresh_cache, trusted_keys=[key])


def test_a_signature_replayed_onto_another_artifact_is_refused(session, tmp_path,
                                                               fresh_cache, art, key):
    """A valid signature.json copied onto a modified artifact (its manifest made
    consistent again) signs another manifest: refused before anything compiles."""
    good = session.export(tmp_path / "good", sign_with=key)
    marker = tmp_path / "ran"
    bad = _constructor_artifact(session, tmp_path / "bad", marker, art)
    shutil.copy(good / "signature.json", bad / "signature.json")
    refused(bad, "signs another manifest", fresh_cache, trusted_keys=[key])
    assert not marker.exists()
