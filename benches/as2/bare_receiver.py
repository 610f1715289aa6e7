#!/usr/bin/env python3
"""The AS2 benchmark's floor: pyas2lib 1.4.4's own receiving side, which only reads and answers:
``Message.parse`` on each POST (decrypt, inflate, verify against the partner's certificate, the
MIC) and the signed MDN it builds, answered with HTTP 200. Nothing is stored, nothing is
checked for duplicates, nothing is parsed as EDIFACT.

    bare_receiver.py --certs DIR --listen HOST:PORT [--workers W]

As EDIINBOX, with ``receiver.{key,cert}.pem``; PARTNER's certificate ``sender.cert.pem``. The
listening socket is shared by W processes (default: one per core), each a ThreadingHTTPServer
(HTTP/1.1 keep-alive), so that the floor may use every core as edi-inbox does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pyas2lib import Message, Organization, Partner


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--certs", type=Path, required=True)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    key = (a.certs / "receiver.key.pem").read_bytes() + (a.certs / "receiver.cert.pem").read_bytes()
    org = Organization(as2_name="EDIINBOX", sign_key=key, decrypt_key=key, domain="receiver.example")
    partner = Partner(
        as2_name="PARTNER",
        verify_cert=(a.certs / "sender.cert.pem").read_bytes(),
        validate_certs=False,
        sign=True,
    )

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            raw = b"".join(f"{k}: {v}\r\n".encode() for k, v in self.headers.items()) + b"\r\n" + body
            _, _, mdn = Message().parse(raw, find_org_cb=lambda _: org, find_partner_cb=lambda _: partner)
            answer = mdn.content if mdn else b""
            answer = answer.encode() if isinstance(answer, str) else answer
            head = ["HTTP/1.1 200 OK", f"Content-Length: {len(answer)}"]
            head += [f"{k}: {v}" for k, v in (mdn.headers.items() if mdn else [])]
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + answer)

        def log_message(self, format, *args) -> None:  # noqa: A002
            pass

    host, _, port = a.listen.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True
    children = []
    for _ in range(a.workers):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
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
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
