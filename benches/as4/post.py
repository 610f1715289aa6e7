#!/usr/bin/env python3
"""POSTs the requests ``benches/as4/prepare.py`` built to one AS4 receiver, over CONCURRENCY
keep-alive connections at once (threads, each taking the next message from one shared list, so
a faster connection takes more), and times it: from the first request sent to the last answer
read. Then, untimed, every answer is judged with the sender's own code (PyPI ``as4`` 0.2.0,
``PeppolSendingExchange.receive_signal`` on the exchange prepare.py kept: the receipt's
signature by the receiver's certificate, RefToMessageId, and every signed reference echoed).

    post.py --requests DIR --certs DIR --url URL [--concurrency C] [--no-judge]

One line on standard output, ``key=value`` pairs:

    messages=2000 seconds=7.412 per_second=269.8 http_200=2000 acknowledged=2000 retried=0 client_cpu_s=1.93

``acknowledged`` counts the answers the sender acknowledges (``-`` with ``--no-judge``); exit 1
when it is not every message. A request whose connection failed (no answer) is sent again, the
same bytes, on a fresh connection, at most three times (``retried`` counts those).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import prepare  # noqa: E402

from as4 import ExchangeState  # noqa: E402
from as4.peppol import PeppolSendingExchange  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--certs", type=Path, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--no-judge", action="store_true", help="skip the receipts' check")
    args = parser.parse_args()

    index = [json.loads(line) for line in (args.requests / "index.jsonl").read_text().splitlines()]
    bodies = [(args.requests / m["body"]).read_bytes() for m in index]
    url = urllib.parse.urlsplit(args.url)
    host, port, path = url.hostname, url.port or 80, url.path or "/"

    answers: list[tuple[int | None, bytes]] = [(None, b"")] * len(index)
    lock = threading.Lock()
    next_one = 0
    retried = 0
    start = threading.Barrier(args.concurrency + 1)

    def worker() -> None:
        nonlocal next_one, retried
        conn = http.client.HTTPConnection(host, port, timeout=args.timeout)
        start.wait()
        while True:
            with lock:
                k = next_one
                next_one += 1
            if k >= len(index):
                break
            for attempt in range(4):
                try:
                    conn.request("POST", path, body=bodies[k], headers=index[k]["headers"])
                    response = conn.getresponse()
                    answers[k] = (response.status, response.read())
                    break
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=args.timeout)
                    with lock:
                        retried += 1
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    cpu0 = os.times()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - began
    cpu1 = os.times()
    client_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)

    http_200 = sum(1 for status, _ in answers if status == 200)
    acknowledged: int | str = "-"
    failures: dict[str, int] = {}
    if not args.no_judge:
        local, _ = prepare.parties(args.certs)
        acknowledged = 0
        for m, (status, body) in zip(index, answers):
            if not body:
                state = f"unanswered (HTTP {status})"
            else:
                exchange = PeppolSendingExchange.restore(m["exchange"], local)
                try:
                    exchange.receive_signal(body)
                    state = exchange.state.value
                    if exchange.error is not None:
                        state += f" {exchange.error.error_code}"
                except Exception as exception:  # noqa: BLE001  ReceiptVerificationError and the like
                    state = f"refused: {type(exception).__name__}"
            if state == ExchangeState.ACKNOWLEDGED.value:
                acknowledged += 1
            else:
                failures[state] = failures.get(state, 0) + 1
    for state, count in sorted(failures.items()):
        print(f"post.py: {count} answers {state}", file=sys.stderr)
    print(
        f"messages={len(index)} seconds={seconds:.3f} per_second={len(index) / seconds:.1f} "
        f"http_200={http_200} acknowledged={acknowledged} retried={retried} client_cpu_s={client_cpu:.2f}",
        flush=True,
    )
    return 0 if args.no_judge or acknowledged == len(index) else 1


if __name__ == "__main__":
    sys.exit(main())
