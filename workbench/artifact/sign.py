"""Signing artifacts, and refusing the ones no trusted key signed.

Loading an artifact compiles and loads its shipped kernel sources, so it runs the
artifact's code (a C constructor runs inside ``load_artifact``): trust an artifact as
you would a pickle. The integrity checks (:mod:`.manifest`, :mod:`.verify`) catch
accidents; anyone can recompute them. A signature says *who* made the artifact:

* :class:`HmacKey` -- HMAC-SHA256 with a shared secret (standard library; whoever can
  verify can also sign);
* :class:`Ed25519Key` -- Ed25519 public/private keys (needs the optional
  ``cryptography`` package: ``pip install fusion-workbench[sign]``): sign with the
  private key, give loaders only the public one.

The signature signs the manifest's ``digest`` (the SHA-256 of the manifest, which
holds the SHA-256 of every other file), together with the algorithm and the key id,
and lives beside the manifest in ``signature.json``: outside the digest by design, so
that signing changes no other byte of the artifact::

    {"format": "fusion-workbench.artifact.signature", "version": 1,
     "algorithm": "hmac-sha256", "key_id": "hmac-sha256:3f0c...", "digest": "<manifest
     digest>", "signature": "<hex>"}

Keys are typed by their algorithm, and a key verifies only signatures of its own
algorithm: an Ed25519 public key can never be taken for an HMAC secret (that confusion
would let anyone who has the public key sign, as in JWT libraries that let a public key
verify an HMAC token). So keys are given as key objects (or key files), never as bare
bytes, and an HMAC secret that is key material -- a PEM block, an OpenSSH key line --
is refused.

Key files (``load_key``, ``workbench export --sign-key FILE``): a PEM file is an
Ed25519 private or public key; any other file holds a shared secret as text (its
bytes, surrounding whitespace stripped; at least 32 bytes), e.g. made with
``python -c "import secrets; print(secrets.token_hex(32))" > wb.key``.

Example::

    >>> key = HmacKey(secret)                                      # doctest: +SKIP
    >>> s.export("ln.zip", sign_with=key)                          # doctest: +SKIP
    >>> wb.load_artifact("ln.zip", trusted_keys=[key])             # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any, Iterable

from ..errors import ArtifactError
from .manifest import canonical_json
from .strict_json import parse_json

SIGNATURE_FILE = "signature.json"
SIGNATURE_FORMAT = "fusion-workbench.artifact.signature"
SIGNATURE_VERSION = 1
MAX_SIGNATURE_BYTES = 64 << 10
MAX_KEY_FILE_BYTES = 64 << 10
MIN_SECRET_BYTES = 32
# what public or private key material starts with or holds: never an HMAC secret
_KEY_MATERIAL = (b"-----BEGIN", b"ssh-", b"ecdsa-", b"PUBLIC KEY", b"PRIVATE KEY")
HMAC = "hmac-sha256"
ED25519 = "ed25519"
_HEX = re.compile(r"[0-9a-f]*")
_INSTALL = "Ed25519 keys need the cryptography package: pip install fusion-workbench[sign]"


def _ed25519():
    """cryptography's Ed25519 module and its serialization (imported on first use)."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise ArtifactError(_INSTALL + " (or sign with an HmacKey)") from None
    return ed25519, serialization, InvalidSignature


def signed_message(algorithm: str, key_id: str, digest: str) -> bytes:
    """The bytes a signature signs: the manifest digest, the algorithm and the key id."""
    return canonical_json({"format": SIGNATURE_FORMAT, "version": SIGNATURE_VERSION,
                           "algorithm": algorithm, "key_id": key_id, "digest": digest})


class HmacKey:
    """A shared secret (bytes, at least 32): signs and verifies with HMAC-SHA256.

    ``key_id`` is derived from the secret (``hmac-sha256:`` and 16 hex digits); the
    secret itself is never written into an artifact."""
    algorithm = HMAC
    can_sign = True

    def __init__(self, secret: bytes):
        if not isinstance(secret, (bytes, bytearray)):
            raise ArtifactError("an HMAC secret must be bytes (e.g. secrets.token_bytes(32) "
                                f"or a key file's contents), not {type(secret).__name__}")
        if len(secret) < MIN_SECRET_BYTES:
            raise ArtifactError(f"an HMAC secret must be at least {MIN_SECRET_BYTES} bytes "
                                f"(this one has {len(secret)}); make one with "
                                "HmacKey.generate() or secrets.token_hex(32)")
        if any(m in bytes(secret) for m in _KEY_MATERIAL):
            raise ArtifactError("an HMAC secret must be a secret, and this is key material "
                                "(a PEM block or an OpenSSH key): a public key used as an "
                                "HMAC secret lets anyone who has it sign; load it with "
                                "load_key(path) or Ed25519Key to verify Ed25519 signatures")
        self.secret = bytes(secret)
        tag = hashlib.sha256(b"fusion-workbench.artifact key id\0" + self.secret)
        self.key_id = f"{HMAC}:{tag.hexdigest()[:16]}"

    @classmethod
    def generate(cls) -> "HmacKey":
        """A new random secret (64 hex characters: it can be written to a key file)."""
        return cls(secrets.token_hex(32).encode())

    def sign(self, message: bytes) -> str:
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def verify(self, message: bytes, signature: str) -> bool:
        return hmac.compare_digest(self.sign(message).encode(), signature.encode())

    def __repr__(self) -> str:
        return f"HmacKey(key_id={self.key_id!r})"


class Ed25519Key:
    """An Ed25519 key: a private key signs (and verifies), a public key only verifies.

    ``Ed25519Key.generate()``, ``.public()``, ``.private_pem()`` / ``.public_pem()``;
    ``load_key`` reads PEM files. Needs the ``cryptography`` package."""
    algorithm = ED25519

    def __init__(self, key: Any):
        ed, ser, _ = _ed25519()
        if isinstance(key, ed.Ed25519PrivateKey):
            self._private, self._public = key, key.public_key()
        elif isinstance(key, ed.Ed25519PublicKey):
            self._private, self._public = None, key
        else:
            raise ArtifactError(f"not an Ed25519 key: {type(key).__name__}")
        raw = self._public.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
        self.key_id = f"{ED25519}:{hashlib.sha256(raw).hexdigest()[:16]}"

    @classmethod
    def generate(cls) -> "Ed25519Key":
        ed, _, _ = _ed25519()
        return cls(ed.Ed25519PrivateKey.generate())

    @property
    def can_sign(self) -> bool:
        return self._private is not None

    def public(self) -> "Ed25519Key":
        """The public half: what loaders are given."""
        return Ed25519Key(self._public)

    def private_pem(self) -> bytes:
        if self._private is None:
            raise ArtifactError(f"{self!r} is a public key; it has no private half")
        _, ser, _ = _ed25519()
        return self._private.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8,
                                           ser.NoEncryption())

    def public_pem(self) -> bytes:
        _, ser, _ = _ed25519()
        return self._public.public_bytes(ser.Encoding.PEM,
                                         ser.PublicFormat.SubjectPublicKeyInfo)

    def sign(self, message: bytes) -> str:
        if self._private is None:
            raise ArtifactError(f"{self!r} is a public key and cannot sign; sign with the "
                                "private key")
        return self._private.sign(message).hex()

    def verify(self, message: bytes, signature: str) -> bool:
        _, _, invalid = _ed25519()
        try:
            self._public.verify(bytes.fromhex(signature), message)
        except (invalid, ValueError):
            return False
        return True

    def __repr__(self) -> str:
        kind = "private" if self._private is not None else "public"
        return f"Ed25519Key({kind}, key_id={self.key_id!r})"


def load_key(path: str | os.PathLike) -> HmacKey | Ed25519Key:
    """A key from a file: PEM (Ed25519 private or public key), else a shared secret."""
    p = Path(path)
    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            raise ArtifactError(f"key file {p} is not a regular file")
        if st.st_size > MAX_KEY_FILE_BYTES:
            raise ArtifactError(f"key file {p} is {st.st_size} bytes; a key file is a PEM "
                                "key or a secret of a few dozen bytes")
        data = p.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"no key file at {p}; give the file holding the signing key "
                            "(a PEM Ed25519 key, or a shared secret)") from None
    except OSError as e:
        raise ArtifactError(f"cannot read key file {p}: {e.strerror or e}") from None
    if data.lstrip().startswith(b"-----BEGIN"):
        _, ser, _ = _ed25519()
        try:
            if b"PRIVATE KEY" in data:
                return Ed25519Key(ser.load_pem_private_key(data, password=None))
            return Ed25519Key(ser.load_pem_public_key(data))
        except (ValueError, TypeError) as e:
            raise ArtifactError(f"key file {p} is not an unencrypted Ed25519 PEM key "
                                f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
                                ) from None
    secret = data.strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise ArtifactError(f"key file {p} holds {len(secret)} bytes; a shared secret must "
                            f"be at least {MIN_SECRET_BYTES} bytes (secrets.token_hex(32))")
    return HmacKey(secret)


def as_key(k: Any, what: str = "trusted_keys") -> HmacKey | Ed25519Key:
    """A key object from what a caller gave: a key, a ``cryptography`` Ed25519 key, or a
    path (``pathlib.Path``) to a key file. Bare bytes are refused: whether they are a
    shared secret or a public key's PEM only the caller knows (a public key taken for an
    HMAC secret lets anyone sign), so a secret is given as ``HmacKey(secret)``."""
    if isinstance(k, (HmacKey, Ed25519Key)):
        return k
    if isinstance(k, (bytes, bytearray)):
        raise ArtifactError(f"{what}: bare bytes are not a key (a shared secret, or a "
                            "public key's PEM?); pass HmacKey(secret) for a shared secret, "
                            "or load_key(path) / Ed25519Key for an Ed25519 key")
    if isinstance(k, os.PathLike):
        return load_key(k)
    if type(k).__module__.startswith("cryptography."):
        return Ed25519Key(k)
    raise ArtifactError(f"{what}: a {type(k).__name__} is not a key; pass an HmacKey, "
                        "an Ed25519Key or a pathlib.Path to a key file "
                        "(wb.artifact.load_key)")


def signing_key(k: Any) -> HmacKey | Ed25519Key:
    key = as_key(k, "sign_with")
    if not key.can_sign:
        raise ArtifactError(f"sign_with: {key!r} cannot sign (a public key); sign with the "
                            "private key and give loaders the public one")
    return key


def trusted(keys: Any) -> tuple:
    """``trusted_keys`` as a tuple of key objects (one key may be given alone)."""
    if keys is None:
        return ()
    if isinstance(keys, (HmacKey, Ed25519Key, bytes, bytearray, os.PathLike)) or \
            type(keys).__module__.startswith("cryptography."):
        keys = [keys]
    if isinstance(keys, (str, dict)) or not isinstance(keys, Iterable):
        raise ArtifactError("trusted_keys: give a list of keys (HmacKey, Ed25519Key or "
                            f"pathlib.Path), not a {type(keys).__name__}")
    return tuple(as_key(k) for k in keys)


def signature_file(digest: str, key: HmacKey | Ed25519Key) -> bytes:
    """signature.json for a manifest digest, signed with key."""
    sig = key.sign(signed_message(key.algorithm, key.key_id, digest))
    return json.dumps({"format": SIGNATURE_FORMAT, "version": SIGNATURE_VERSION,
                       "algorithm": key.algorithm, "key_id": key.key_id, "digest": digest,
                       "signature": sig}, indent=1).encode()


def verify_signature(data: bytes | None, digest: str, keys: tuple, where: str,
                     required: bool) -> str | None:
    """Check signature.json (``data``; None when the artifact has none) against the
    manifest digest and the trusted keys. Returns the key id that verified, or None for
    an unsigned artifact that is allowed; raises ArtifactError otherwise."""
    if data is None:
        if required:
            raise ArtifactError(
                f"artifact {where} is not signed, and a signature is required; re-export it "
                "signed (export(..., sign_with=KEY), `workbench export --sign-key FILE`), or "
                "load it without trusted_keys/require_signature only if you trust it as you "
                "would a pickle (loading runs its code)")
        return None
    d = parse_json(data, SIGNATURE_FILE, where)
    fields = {"format", "version", "algorithm", "key_id", "digest", "signature"}
    if not isinstance(d, dict) or set(d) != fields or d["format"] != SIGNATURE_FORMAT:
        raise ArtifactError(f"artifact {where}: {SIGNATURE_FILE} is malformed (expected the "
                            f"fields {', '.join(sorted(fields))} of format "
                            f"{SIGNATURE_FORMAT}); re-export the artifact signed")
    if d["version"] != SIGNATURE_VERSION or isinstance(d["version"], bool):
        raise ArtifactError(f"artifact {where}: {SIGNATURE_FILE} has version "
                            f"{str(d['version'])[:20]!r}, this workbench reads "
                            f"{SIGNATURE_VERSION}; upgrade fusion-workbench or re-export it")
    alg, kid, sig = d["algorithm"], d["key_id"], d["signature"]
    if not all(isinstance(x, str) and len(x) <= 256 for x in (alg, kid, d["digest"])) or \
            not isinstance(sig, str) or len(sig) > 1024 or not _HEX.fullmatch(sig):
        raise ArtifactError(f"artifact {where}: {SIGNATURE_FILE} is malformed (algorithm, "
                            "key_id and digest must be short strings, signature hex); "
                            "re-export the artifact signed")
    shown = f"signed with {alg[:40]!r} key {kid[:60]!r}"
    ids = ", ".join(k.key_id for k in keys) or "none"
    if d["digest"] != digest:
        raise ArtifactError(f"artifact {where}: signature does not verify with any trusted key "
                            f"({SIGNATURE_FILE} signs another manifest: the artifact changed "
                            "after it was signed); re-export it signed")
    message = signed_message(alg, kid, digest)
    for k in keys:
        if k.algorithm == alg and k.key_id == kid and k.verify(message, sig):
            return k.key_id
    if keys and all(k.algorithm != alg for k in keys):
        # (a key verifies only its own algorithm's signatures: no downgrade to another)
        raise ArtifactError(f"artifact {where}: it is {shown}, and no trusted key is an "
                            f"{alg[:40]!r} key (trusted: {ids}); a key verifies only "
                            "signatures of its own algorithm -- re-export it signed with "
                            "a trusted key")
    raise ArtifactError(f"artifact {where}: signature does not verify with any trusted key "
                        f"({shown}; trusted: {ids}); it was changed after signing or signed "
                        "by a key you do not trust -- re-export it signed with a trusted key")
