#!/usr/bin/env python3
"""POSTs the requests ``benches/as2/prepare.py`` built to one AS2 receiver over CONCURRENCY
keep-alive connections (threads taking the next message from one shared list), timed from the
first request to the last answer. Then, untimed, every MDN is judged by pyas2lib's own
``Mdn.parse`` (its signature by the receiver's certificate, the original Message-ID, the
disposition) and its MIC compared with the one the sender expects.

    post.py --requests DIR --certs DIR --url URL [--concurrency C]

One line: ``messages=2000 seconds=7.4 per_second=269.8 http_200=2000 processed=2000 retried=0``;
exit 1 when not every message is ``processed`` with its MIC.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prepare  # noqa: E402

from pyas2lib import Mdn, Message  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=Path, required=True)
    ap.add_argument("--certs", type=Path, required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    index = [json.loads(line) for line in (a.requests / "index.jsonl").read_text().splitlines()]
    bodies = [(a.requests / m["body"]).read_bytes() for m in index]
    url = urllib.parse.urlsplit(a.url)
    host, port, path = url.hostname, url.port or 80, url.path or "/"
    answers: list = [(None, {}, b"")] * len(index)
    lock = threading.Lock()
    state = {"next": 0, "retried": 0}
    start = threading.Barrier(a.concurrency + 1)

    def worker() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        start.wait()
        while True:
            with lock:
                k = state["next"]
                state["next"] += 1
            if k >= len(index):
                break
            for _ in range(4):
                try:
                    conn.request("POST", path, body=bodies[k], headers=index[k]["headers"])
                    r = conn.getresponse()
                    answers[k] = (r.status, dict(r.getheaders()), r.read())
                    break
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=120)
                    with lock:
                        state["retried"] += 1
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - began

    org, partner = prepare.parties(a.certs)
    ok = 0
    failures: dict[str, int] = {}
    for m, (status, headers, body) in zip(index, answers):
        original = Message(org, partner)
        original.message_id = m["message_id"]
        raw = b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n" + body
        st, detail = Mdn().parse(raw, find_message_cb=lambda mid, rcpt: original)
        mic = next((line.split(b":", 1)[1].split(b",")[0].strip().decode()
                    for line in body.split(b"\r\n") if line.lower().startswith(b"received-content-mic:")), None)
        if st == "processed" and mic == m["mic"]:
            ok += 1
        else:
            key = f"{status} {st} {detail} mic={'ok' if mic == m['mic'] else mic}"
            failures[key] = failures.get(key, 0) + 1
    for k, n in sorted(failures.items()):
        print(f"post.py: {n} answers {k}", file=sys.stderr)
    http_200 = sum(1 for s, _, _ in answers if s == 200)
    print(f"messages={len(index)} seconds={seconds:.3f} per_second={len(index) / seconds:.1f} "
          f"http_200={http_200} processed={ok} retried={state['retried']}")
    return 0 if ok == len(index) else 1


if __name__ == "__main__":
    sys.exit(main())
