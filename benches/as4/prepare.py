#!/usr/bin/env python3
"""Builds the AS4 benchmark's requests once, with the independent sender's own code (PyPI ``as4``
0.2.0's sending side, through ``tests/as4/send.py``): one signed, encrypted and compressed Peppol
user message per EDIFACT file, so that every receiver timed afterwards gets the very same bytes,
and the sender's cost of building them is paid before any clock starts.

    prepare.py --certs DIR --out DIR FILE_OR_FOLDER...

OUT gets ``NNNNNN.bin`` (the request body, exact bytes) per message and ``index.jsonl``, one line
per message: ``{"body": "NNNNNN.bin", "headers": {...}, "file": ..., "exchange": ...}``, where
``exchange`` is the sending exchange as the library persists it (``model_dump_json``, restored
with ``PeppolSendingExchange.restore``): the message id and the signed references that
``receive_signal`` checks each receipt against (``benches/as4/post.py`` does, after timing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cryptography import x509

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "as4"))
import send  # noqa: E402  the test sender: its envelope, parties and identifiers

from as4 import AS4LocalPrivateKey, ExchangeState  # noqa: E402
from as4.peppol import (  # noqa: E402
    PeppolAS4Profile,
    PeppolSendingExchange,
    build_peppol_message,
    create_peppol_external_party,
    create_peppol_internal_party,
)


def parties(certs: Path):
    """The sender (PTE000001, with its key) and the receiver as the sender knows it (PTE000002)."""
    local = create_peppol_internal_party(
        send.SENDER_AP,
        x509.load_pem_x509_certificate((certs / "sender.cert.pem").read_bytes()),
        AS4LocalPrivateKey(send.load_key(certs / "sender.key.pem")),
    )
    remote = create_peppol_external_party(
        send.RECEIVER_AP, x509.load_pem_x509_certificate((certs / "receiver.cert.pem").read_bytes())
    )
    return local, remote


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--certs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--form", choices=("text", "binary", "auto"), default="auto")
    parser.add_argument("inputs", nargs="+", type=Path, help="EDIFACT files, or folders of *.edi")
    args = parser.parse_args()

    files: list[Path] = []
    for p in args.inputs:
        files.extend(sorted(p.rglob("*.edi")) if p.is_dir() else [p])
    local, remote = parties(args.certs)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    size = 0
    with open(args.out / "index.jsonl", "w") as index:
        for n, path in enumerate(files):
            payload, root = send.envelope(path.read_bytes(), args.form)
            message = build_peppol_message(
                payload,
                local_party=local,
                remote_party=remote,
                sender="0088:5798000000001",
                recipient="0088:5798000000002",
                sender_country_id="DK",
                document_type_identifier_scheme="busdox-docid-qns",
                document_type_identifier_value=f"{send.ENVELOPE_NS}::{root}##{send.CUSTOMIZATION}",
                process_identifier=send.PROCESS,
            )
            body, boundary = message.get_request_data()
            headers = dict(message.get_http_headers(boundary))
            exchange = PeppolSendingExchange(
                profile=PeppolAS4Profile,
                local_party=local,
                remote_party=remote,
                message=message,
                message_id=message.message_id,
                messaging_id=message.messaging_id,
                signed_references=message.signed_references,
                state=ExchangeState.SENT,
            )
            name = f"{n:06d}.bin"
            (args.out / name).write_bytes(body)
            size += len(body)
            line = {
                "body": name,
                "headers": headers,
                "file": str(path),
                "exchange": exchange.model_dump_json(exclude={"message"}),
            }
            index.write(json.dumps(line) + "\n")
    seconds = time.perf_counter() - started
    print(
        f"built {len(files)} messages ({size / 1e6:.1f} MB of requests) in {seconds:.1f} s: "
        f"{seconds / max(len(files), 1) * 1000:.1f} ms each on the sending side",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
