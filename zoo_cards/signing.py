"""Signed cards: Ed25519 signatures (``cryptography``) over the card and the model hash.

Consistency checks catch a card whose parts disagree; they cannot catch a forgery that is consistent as a whole
(a card rewritten from scratch for a model that never went through dpconvert). A publisher therefore signs the
card with a private key kept as a CI secret, and an auditor accepts only signatures by keys it trusts.

What is signed: the bytes ``dpconvert-card-signature/1\\n<model sha256>\\n<canonical card JSON>``, where the
canonical JSON is the whole card except its ``signature`` block, with sorted keys and no whitespace. The model
hash is inside the card too; it is named separately so that the signature binds the weights even for a reader
who only looks at the signed bytes. Changing any field of the card, or the weights (the audit recomputes their
hash), breaks the signature. Keys are raw Ed25519 keys in PEM files: ``KEY`` (private, PKCS#8, mode 0600) and
``KEY.pub`` (public, SubjectPublicKeyInfo). The key id is the first 16 hex digits of sha256 over the raw 32-byte
public key. No cryptography is written here: key generation, signing and verification are ``cryptography``'s.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from dpconvert.errors import DpconvertError

from .card import PrivacyCard

ALGORITHM = "ed25519"
CONTEXT = b"dpconvert-card-signature/1\n"


def canonical_json(data: dict) -> bytes:
    unsigned = {k: v for k, v in data.items() if k != "signature"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def signed_message(data: dict) -> bytes:
    """The bytes a signature covers; the hash named first is the model's (model cards) or the data file's (data cards)."""
    artifact = data.get("model") if "model" in data else data.get("data")
    return CONTEXT + str((artifact or {}).get("sha256")).encode() + b"\n" + canonical_json(data)


def key_id(public_key) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return hashlib.sha256(public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)).hexdigest()[:16]


def generate_key(path: str | Path) -> tuple[Path, Path, str]:
    """Write a new private key to PATH (mode 0600) and its public key to PATH.pub; return (private, public, key id)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

    priv_path, pub_path = Path(path), Path(str(path) + ".pub")
    for p in (priv_path, pub_path):
        if p.exists():
            raise DpconvertError(f"{p} exists", fix="choose another path (dpconvert never overwrites a key)")
    if not priv_path.parent.exists():
        raise DpconvertError(f"the folder {priv_path.parent} does not exist", fix="create it or choose another path")
    key = Ed25519PrivateKey.generate()
    fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    pub_path.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    return priv_path, pub_path, key_id(key.public_key())


def load_private_key(path: str | Path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    p = Path(path)
    if not p.is_file():
        raise DpconvertError(f"{path}: no such key file", fix=f"create one with `dpconvert card keygen {p.name}`")
    password = os.environ.get("DPCONVERT_SIGN_KEY_PASSWORD")
    try:
        key = load_pem_private_key(p.read_bytes(), password=password.encode() if password else None)
    except (ValueError, TypeError) as e:
        raise DpconvertError(fix=f"{path}: not a readable PEM private key ({str(e).splitlines()[0][:120]}); an encrypted key needs "
                             "DPCONVERT_SIGN_KEY_PASSWORD") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise DpconvertError(f"{path}: not an Ed25519 key", fix="create one with `dpconvert card keygen`")
    return key


def _load_public_key(path: Path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(path.read_bytes())
    except ValueError as e:
        raise DpconvertError(f"{path}: not a readable PEM public key ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise DpconvertError(f"{path}: not an Ed25519 public key")
    return key


def load_trusted_keys(path: str | Path) -> dict:
    """{key id: public key} from a directory of *.pub files, or from one public key file."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.pub"))
    elif p.is_file():
        files = [p]
    else:
        raise DpconvertError(f"`trusted_keys` {path}: no such file or directory", fix="give a folder of *.pub keys", param="trusted_keys")
    if not files:
        raise DpconvertError(f"`trusted_keys` {path}: no *.pub keys in it", fix="put the public keys you accept there", param="trusted_keys")
    keys = {}
    for f in files:
        k = _load_public_key(f)
        keys[key_id(k)] = k
    return keys


def sign_card(card: PrivacyCard, private_key) -> PrivacyCard:
    """A copy of the card with a ``signature`` block over its content and the model hash."""
    data = {k: v for k, v in card.data.items() if k != "signature"}
    sig = private_key.sign(signed_message(data))
    data["signature"] = {
        "algorithm": ALGORITHM,
        "key_id": key_id(private_key.public_key()),
        "signed": "sha256 model hash + canonical card JSON without this block (zoo_cards/signing.py)",
        "value": base64.b64encode(sig).decode("ascii"),
    }
    return PrivacyCard(data).validate("signed card")


def verify_card(card: PrivacyCard, trusted: Optional[dict]) -> tuple[str, str]:
    """(status, detail): status is unsigned, unchecked (no trusted keys given), valid, untrusted or invalid."""
    from cryptography.exceptions import InvalidSignature

    sig = card.data.get("signature")
    if not sig:
        return "unsigned", "not signed"
    kid = sig.get("key_id", "?")
    if trusted is None:
        return "unchecked", f"signed by key {kid} (not verified: no `trusted_keys`)"
    if kid not in trusted:
        return "untrusted", f"signed by key {kid}, which is not among the trusted keys"
    if sig.get("algorithm") != ALGORITHM:
        return "invalid", f"unsupported signature algorithm {sig.get('algorithm')!r}"
    try:
        trusted[kid].verify(base64.b64decode(sig["value"], validate=True), signed_message(card.data))
    except (InvalidSignature, KeyError, ValueError, TypeError, AttributeError):
        return "invalid", f"the signature by key {kid} does not match: the card or the model hash changed after signing"
    return "valid", f"signed by trusted key {kid}"


def sign_model(model_path: str | Path, private_key) -> PrivacyCard:
    """Sign the card of an ONNX model (the embedded copy, ``.card.json`` and ``.card.md`` are rewritten together) or
    of a synthetic data set (``data.npz``: its ``.card.json``)."""
    from .read import read_card_copies

    model_path = Path(model_path)
    copies = read_card_copies(model_path)
    card = copies.the_card()
    if card.model_sha256 != copies.artifact_sha256():
        raise DpconvertError(f"{model_path}: the {'data' if card.kind == 'data' else 'weights'} do not match the card's hash; refusing to sign")
    signed = sign_card(card, private_key)
    copies.rewrite(signed)
    return signed
