#!/usr/bin/env python3
"""Builds the AS2 benchmark's requests once, before any timing, with PyPI ``pyas2lib`` 1.4.4 (the
test sender's settings, ``tests/as2/send.py``): each interchange of a folder made into one
compressed, signed (SHA-256) and encrypted (AES-256-CBC) message from PARTNER to EDIINBOX asking
for a signed synchronous MDN, so that every receiver gets the very same request bytes.

    prepare.py --certs DIR --out DIR CORPUS

OUT gets ``NNNNN.bin`` (each body) and ``index.jsonl`` (per message: its body file, its HTTP
headers, its Message-ID and the MIC the sender expects back).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "as2"))
import send  # noqa: E402  the test sender: its canonicalize hook records what was signed

from pyas2lib import Message, Organization, Partner  # noqa: E402


def parties(certs: Path) -> tuple[Organization, Partner]:
    sign_key = (certs / "sender.key.pem").read_bytes() + (certs / "sender.cert.pem").read_bytes()
    org = Organization(as2_name="PARTNER", sign_key=sign_key, domain="sender.example")
    partner = Partner(
        as2_name="EDIINBOX",
        verify_cert=(certs / "receiver.cert.pem").read_bytes(),
        encrypt_cert=(certs / "receiver.cert.pem").read_bytes(),
        validate_certs=False,
        compress=True,
        sign=True,
        encrypt=True,
        digest_alg="sha256",
        enc_alg="aes_256_cbc",
        mdn_mode="SYNC",
        mdn_digest_alg="sha256",
    )
    return org, partner


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--certs", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("corpus", type=Path)
    a = ap.parse_args()
    org, partner = parties(a.certs)
    a.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    files = sorted(a.corpus.glob("*.edi"))
    with (a.out / "index.jsonl").open("w") as index:
        for k, path in enumerate(files):
            data = path.read_bytes()
            send.SIGNED.clear()
            msg = Message(org, partner)
            msg.build(data, filename=path.name, content_type="application/octet-stream",
                      disposition_notification_to="mdn@sender.example")
            body = msg.content
            name = f"{k:05}.bin"
            (a.out / name).write_bytes(body)
            index.write(json.dumps({
                "body": name,
                "headers": dict(msg.headers.items()),
                "message_id": msg.message_id,
                "mic": send.expected_mic(msg, data, "sha256"),
            }) + "\n")
    print(f"built {len(files)} messages (pyas2lib, compressed, signed, encrypted) in {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
