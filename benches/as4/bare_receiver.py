#!/usr/bin/env python3
"""The AS4 benchmark's floor: a receiver that only verifies and answers, with the receiving side
of PyPI ``as4`` 0.2.0 as its README shows it: ``parse_peppol_message`` on each POST (the MIME
read, the signature checked, the payload decrypted and inflated, the SBDH checked), then
``build_signal()``'s signed receipt (or ebMS error) answered with HTTP 200. Nothing is stored,
nothing is checked for duplicates, nothing is parsed as EDIFACT.

    bare_receiver.py --certs DIR --listen HOST:PORT [--workers W] [--trust pinned|chain]

As PTE000002, with ``receiver.{key,cert}.pem`` from DIR. ``--trust pinned`` (the default) trusts
the sender's certificate ``sender.cert.pem`` by fingerprint (``as4.pinned_certificates``), as
edi-inbox pins a partner's; ``chain`` uses the Peppol policy over ``root-ca.cert.pem`` and
``ap-ca.cert.pem`` (``peppol_security_policy``). Python runs one thread at a time, so the listening
socket is shared by W processes (default: one per core), each an ``http.server``
ThreadingHTTPServer (HTTP/1.1 keep-alive, a thread per connection), so that the floor may use
every core as edi-inbox does. SIGTERM or SIGINT stops them all; each worker prints its counts
to standard error.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "as4"))
import send  # noqa: E402  the test sender's identifiers and key loading

from as4 import AS4LocalPrivateKey, SecurityPolicy, pinned_certificates  # noqa: E402
from as4.peppol import (  # noqa: E402
    create_peppol_internal_party,
    parse_peppol_message,
    peppol_security_policy,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--certs", type=Path, required=True)
    parser.add_argument("--listen", required=True, help="HOST:PORT")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trust", choices=("pinned", "chain"), default="pinned")
    args = parser.parse_args()

    certs = args.certs
    local = create_peppol_internal_party(
        send.RECEIVER_AP,
        x509.load_pem_x509_certificate((certs / "receiver.cert.pem").read_bytes()),
        AS4LocalPrivateKey(send.load_key(certs / "receiver.key.pem")),
    )
    if args.trust == "pinned":
        policy = SecurityPolicy(
            signer_resolver=pinned_certificates(
                x509.load_pem_x509_certificate((certs / "sender.cert.pem").read_bytes())
            )
        )
    else:
        policy = peppol_security_policy(
            x509.load_pem_x509_certificate((certs / "root-ca.cert.pem").read_bytes()),
            intermediates=[x509.load_pem_x509_certificate((certs / "ap-ca.cert.pem").read_bytes())],
        )
    counts = {"receipt": 0, "error": 0}
    counting = threading.Lock()

    def accept(participant) -> None:  # every participant is served here
        return None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiving = parse_peppol_message(
                request_headers=dict(self.headers.items()),
                request_body=body,
                local_party=local,
                accept_participant=accept,
                security_policy=policy,
            )
            headers, answer = receiving.build_signal()
            with counting:
                counts["receipt" if receiving.successful else "error"] += 1
            head = ["HTTP/1.1 200 OK", f"Content-Length: {len(answer)}"]
            head += [f"{k}: {v}" for k, v in headers.items()]
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + answer)

        def log_message(self, format, *args) -> None:  # noqa: A002
            pass

    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True

    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:

            def report(signum, frame) -> None:
                print(f"bare_receiver worker {os.getpid()}: {counts['receipt']} receipts, {counts['error']} errors",
                      file=sys.stderr, flush=True)
                os._exit(0)

            signal.signal(signal.SIGTERM, report)
            signal.signal(signal.SIGINT, report)
            server.serve_forever()
            os._exit(0)
        children.append(pid)
    server.socket.close()

    def stop(signum, frame) -> None:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for pid in children:
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
    return 0


if __name__ == "__main__":
    sys.exit(main())
