#!/usr/bin/env python3
"""Writes the legacy-aes vectors with an implementation independent of gitstate's: the Python
`cryptography` package (OpenSSL's AES-GCM). The format is terraform-backend-git's `aes`
provider (crypt/aes.go and crypt/crypt.go in plumber-cd/terraform-backend-git):

    key    = the 32 ASCII characters of hex(MD5(passphrase)), used as an AES-256 key
    output = nonce (12 bytes) || AES-256-GCM ciphertext || tag (16 bytes), no associated data

Nonces are fixed here so that running the script again writes the same files.

    python3 generate.py     # in this directory
"""

import hashlib
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

HERE = Path(__file__).resolve().parent
PLAIN = (HERE / "state.tfstate.json").read_bytes()

VECTORS = [
    # (file, passphrase, nonce)
    ("state.tfstate.aes", "correct horse battery staple", bytes(range(12))),
    ("state-unicode-passphrase.tfstate.aes", "žluťoučký kůň 🐎 pass", bytes.fromhex("f0e1d2c3b4a5968778695a4b")),
    ("state-empty-passphrase.tfstate.aes", "", bytes.fromhex("00000000000000000000002a")),
]


def key_of(passphrase: str) -> bytes:
    return hashlib.md5(passphrase.encode("utf-8")).hexdigest().encode("ascii")


for name, passphrase, nonce in VECTORS:
    sealed = nonce + AESGCM(key_of(passphrase)).encrypt(nonce, PLAIN, None)
    (HERE / name).write_bytes(sealed)
    print(f"{name}: {len(sealed)} bytes, key {key_of(passphrase).decode()}")
