#!/usr/bin/env python3
"""The independent AS2 sender of edi-inbox's tests: PyPI ``pyas2lib`` 1.4.4 builds each message
(compressed, signed, encrypted as asked), this script POSTs it to ``edi-inbox receive`` at
``/as2``, and pyas2lib's own ``Mdn.parse`` judges the synchronous MDN (its signature by the
receiver's certificate, the original Message-ID, the disposition).

    send.py --certs DIR --url URL [--mode secure|signed|plain] [--times N] [--tamper MODE]
            [--as2-from NAME] [--as2-to NAME] [--digest ALG] [--mdn-digest ALG|none]
            [--enc-alg ALG] [--key-enc ALG] [--sign-alg ALG] [--sign-with STEM]
            [--encrypt-to CERT] [--message-id ID] [--save DIR] [--retry-for S] FILE...

One JSON line per answer on standard output:

    {"file": ..., "message_id": ..., "http": 200, "status": "processed" | "processed/error" | ...,
     "detail": ..., "mic_expected": ..., "mic_returned": ..., "mdn_sha256": ..., "signed": bool}

pyas2lib treats a missing MIC as a match, and computes none for an unsigned message: the MIC is
checked here (``mic_expected`` beside ``mic_returned``). pyas2lib turns LF into CRLF for text
content types: every interchange is sent as ``application/octet-stream``.

``--url`` may name several receivers (comma-separated): each try goes to the next one.
``--retry-for S``: a message answered with a 5xx, or not at all, is sent again (the same bytes)
until an answer comes or S seconds went by.

``--async-mdn PORT``: the MDN is asked for asynchronously, to ``http://127.0.0.1:PORT/mdn``,
where this script listens (from ``--mdn-down S`` seconds on: until then nothing listens, as a
partner's MDN server that is down). After the sendings it waits (at most ``--mdn-wait S``) for
an MDN of each message, then ``--mdn-linger S`` more for any MDN sent twice, and prints one line
per MDN received, ``"async": true``, judged by pyas2lib as a synchronous one is.
``--async-mdn-url URL``: the MDN is asked for asynchronously at URL, which this script neither
serves nor waits on (another partner's MDN server). ``--mdn-options TEXT``: the
``Disposition-Notification-Options`` sent instead of pyas2lib's (which marks the micalg optional).

``--tamper flip``: one byte of the request's body is changed after it was built. ``--save DIR``
keeps each answer as ``N.mdn`` (headers, an empty line, the body) for ``openssl cms -verify``.

DIR holds ``sender.{key,cert}.pem`` and ``receiver.{key,cert}.pem``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pyas2lib import Mdn, Message, Organization, Partner
from pyas2lib import as2 as pyas2

# What pyas2lib signed (its `canonicalize` of the signed entity), for the MIC this script expects.
SIGNED: list[bytes] = []
_canonicalize = pyas2.canonicalize


def _capture(message, *args, **kwargs):
    out = _canonicalize(message, *args, **kwargs)
    SIGNED.append(out)
    return out


pyas2.canonicalize = _capture


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--certs", required=True, type=Path)
    ap.add_argument("--url", required=True)
    ap.add_argument("--mode", choices=["secure", "signed", "plain"], default="secure")
    ap.add_argument("--times", type=int, default=1)
    ap.add_argument("--tamper", choices=["flip"])
    ap.add_argument("--as2-from", default="PARTNER")
    ap.add_argument("--as2-to", default="EDIINBOX")
    ap.add_argument("--digest", default="sha256")
    ap.add_argument("--mdn-digest", default="sha256")
    ap.add_argument("--no-mdn", action="store_true", help="ask for no MDN at all")
    ap.add_argument("--enc-alg", default="aes_256_cbc")
    ap.add_argument("--key-enc", default="rsaes_pkcs1v15")
    # `openssl-pss`: the signature made by `openssl cms -sign` with RSASSA-PSS (pyas2lib's own
    # PSS signatures carry no RSASSA-PSS-params, which RFC 4056 requires and OpenSSL refuses).
    ap.add_argument("--sign-alg", default="rsassa_pkcs1v15")
    ap.add_argument("--sign-with", default="sender")
    ap.add_argument("--encrypt-to", default="receiver.cert.pem")
    ap.add_argument("--message-id")
    ap.add_argument("--save", type=Path)
    ap.add_argument("--retry-for", type=float, default=0.0)
    ap.add_argument("--async-mdn", type=int, metavar="PORT")
    ap.add_argument("--async-mdn-url", metavar="URL")
    ap.add_argument("--mdn-options", metavar="TEXT")
    ap.add_argument("--mdn-down", type=float, default=0.0)
    ap.add_argument("--mdn-wait", type=float, default=60.0)
    ap.add_argument("--mdn-linger", type=float, default=1.0)
    ap.add_argument("files", nargs="+", type=Path)
    a = ap.parse_args()

    certs = a.certs
    stem = a.sign_with
    sign_alg = a.sign_alg
    if sign_alg == "openssl-pss":
        sign_alg = "rsassa_pkcs1v15"
        pyas2.sign_message = lambda data, digest, key, alg: openssl_pss(
            data, digest, certs / f"{stem}.key.pem", certs / f"{stem}.cert.pem"
        )
    sign_key = (certs / f"{stem}.key.pem").read_bytes() + (certs / f"{stem}.cert.pem").read_bytes()
    mdn_url = f"http://127.0.0.1:{a.async_mdn}/mdn" if a.async_mdn else a.async_mdn_url
    org = Organization(
        as2_name=a.as2_from, sign_key=sign_key, domain="sender.example", mdn_url=mdn_url
    )
    if a.async_mdn:
        threading.Thread(target=listen, args=(a.async_mdn, a.mdn_down), daemon=True).start()
    mdn_digest = None if a.mdn_digest == "none" else a.mdn_digest
    partner = Partner(
        as2_name=a.as2_to,
        verify_cert=(certs / "receiver.cert.pem").read_bytes(),
        encrypt_cert=(certs / a.encrypt_to).read_bytes(),
        validate_certs=False,
        compress=a.mode == "secure",
        sign=a.mode in ("secure", "signed"),
        encrypt=a.mode == "secure",
        digest_alg=a.digest,
        enc_alg=a.enc_alg,
        key_enc_alg=a.key_enc,
        sign_alg=sign_alg,
        mdn_mode=None if a.no_mdn else ("ASYNC" if mdn_url else "SYNC"),
        mdn_digest_alg=mdn_digest,
    )
    n = 0
    sent: dict[str, tuple[Message, str, str]] = {}
    for path in a.files:
        data = path.read_bytes()
        SIGNED.clear()
        msg = Message(org, partner)
        msg.build(
            data,
            filename=path.name,
            content_type="application/octet-stream",
            disposition_notification_to=None if a.no_mdn else "mdn@sender.example",
            message_id=a.message_id,
        )
        headers = {k: v for k, v in msg.headers.items()}
        if a.mdn_options is not None:
            headers = {k: v for k, v in headers.items()
                       if k.lower() != "disposition-notification-options"}
            headers["Disposition-Notification-Options"] = a.mdn_options
        body = msg.content
        if isinstance(body, str):
            body = body.encode()
        if a.tamper == "flip":
            # A byte of the interchange itself where it is sent in the clear (signed only),
            # else one in the middle of the body.
            at = body.find(data[:64])
            at = at + min(20, len(data) - 1) if at >= 0 else len(body) // 2
            body = body[:at] + bytes([body[at] ^ 0x01]) + body[at + 1 :]
        expected = expected_mic(msg, data, mdn_digest or "sha1")
        sent[msg.message_id] = (msg, expected, path.name)
        for _ in range(a.times):
            n += 1
            line = send(a.url, headers, body, msg, a.retry_for)
            line.update(file=path.name, message_id=msg.message_id, mic_expected=expected)
            if a.save and "raw" in line:
                a.save.mkdir(parents=True, exist_ok=True)
                (a.save / f"{n}.mdn").write_bytes(line["raw"])
            line.pop("raw", None)
            print(json.dumps(line), flush=True)
    if a.async_mdn:
        until = time.monotonic() + a.mdn_wait
        while time.monotonic() < until:
            with LOCK:
                got = {m["original"] for m in RECEIVED}
            if set(sent) <= got:
                break
            time.sleep(0.1)
        time.sleep(a.mdn_linger)
        with LOCK:
            received = list(RECEIVED)
        for m in received:
            msg, expected, name = sent.get(m["original"], (None, None, None))
            line = {"async": True, "file": name, "message_id": m["original"], "http": 200,
                    "mic_expected": expected, "mdn_sha256": m["mdn_sha256"],
                    "signed": m["signed"], "original": m["original"],
                    "mic_returned": returned_mic(m["body"])}
            if msg is None:
                line.update(status="unknown-original")
            else:
                mdn = Mdn()
                st, detail = mdn.parse(m["raw"], find_message_cb=lambda mid, rcpt: msg)
                line.update(status=st, detail=detail)
            print(json.dumps(line), flush=True)
    return 0


LOCK = threading.Lock()
RECEIVED: list[dict] = []


def listen(port: int, down: float) -> None:
    """The asynchronous MDNs' server: nothing listens for `down` seconds, then each POST is
    kept (its headers and body, as pyas2lib's Mdn.parse takes them) and answered 200."""
    time.sleep(down)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            raw = b"".join(f"{k}: {v}\r\n".encode() for k, v in self.headers.items())
            original = None
            for line in body.split(b"\r\n"):
                if line.lower().startswith(b"original-message-id:"):
                    original = line.split(b":", 1)[1].strip().decode().strip("<>")
            with LOCK:
                RECEIVED.append({
                    "raw": raw + b"\r\n" + body, "body": body, "original": original,
                    "mdn_sha256": hashlib.sha256(raw_body(self.headers, body)).hexdigest(),
                    "signed": self.headers.get("Content-Type", "").lower().startswith("multipart/signed"),
                })
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def expected_mic(msg: Message, data: bytes, digest: str) -> str:
    """The MIC RFC 4130 7.3.1 asks for, by the digest of signed-receipt-micalg: over what was
    signed where the message is signed (pyas2lib computes its own with the signature's digest,
    and so reads a MIC by another requested digest as a mismatch); else over the content (this
    script sends nothing encrypted and unsigned)."""
    signed = SIGNED[0] if msg.signed and SIGNED else data
    return base64.b64encode(hashlib.new(digest, signed).digest()).decode()


def openssl_pss(data: bytes, digest: str, key: Path, cert: Path) -> bytes:
    """A detached CMS signature over `data` by `openssl cms`, RSASSA-PSS, DER."""
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        return subprocess.run(
            ["openssl", "cms", "-sign", "-binary", "-in", f.name, "-signer", str(cert),
             "-inkey", str(key), "-md", digest, "-keyopt", "rsa_padding_mode:pss",
             "-outform", "DER"],
            check=True, capture_output=True,
        ).stdout


TRIES = [0]


def send(urls: str, headers: dict, body: bytes, msg: Message, retry_for: float) -> dict:
    """POSTs the message (each try to the next of the comma-separated `urls`) until an answer
    that is not a 5xx comes, or `retry_for` seconds went by: an AS2 sender's retries."""
    until = time.monotonic() + retry_for
    urls = urls.split(",")
    while True:
        url = urls[TRIES[0] % len(urls)]
        TRIES[0] += 1
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                status, rh, rb = r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            status, rh, rb = e.code, e.headers, e.read()
        except OSError as e:
            if time.monotonic() < until:
                time.sleep(0.2)
                continue
            return {"http": None, "status": "unanswered", "detail": str(e)}
        if status >= 500 and time.monotonic() < until:
            time.sleep(0.2)
            continue
        raw = b"".join(f"{k}: {v}\r\n".encode() for k, v in rh.items()) + b"\r\n" + rb
        line = {"http": status, "mdn_sha256": hashlib.sha256(raw_body(rh, rb)).hexdigest(), "raw": raw}
        if status != 200 or not rb:
            line.update(status="no-mdn", detail=rb.decode("utf-8", "replace"))
            return line
        mdn = Mdn()
        st, detail = mdn.parse(raw, find_message_cb=lambda mid, rcpt: msg)
        line.update(
            status=st,
            detail=detail,
            signed=rh.get("Content-Type", "").lower().startswith("multipart/signed"),
            original=mdn.orig_message_id,
            mic_returned=returned_mic(rb),
        )
        return line


def raw_body(headers, body: bytes) -> bytes:
    """What identifies an MDN: its Content-Type (its boundary) and body."""
    return headers.get("Content-Type", "").encode() + b"\r\n" + body


def returned_mic(body: bytes) -> str | None:
    for line in body.split(b"\r\n"):
        if line.lower().startswith(b"received-content-mic:"):
            return line.split(b":", 1)[1].split(b",")[0].strip().decode()
    return None


if __name__ == "__main__":
    sys.exit(main())
