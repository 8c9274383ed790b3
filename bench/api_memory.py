"""What large sends cost an API process in memory: ``--parallel`` sends of ``--mib`` MiB bodies
each (JSON with one Base64 attachment) at once to ``layang serve`` with one worker process.

Prints the worker's resident memory before, its peak (the kernel's high-water mark, VmHWM)
and after, the answers (200, 503 …) and how long the sends took. ``--code DIR`` runs the
server from another checkout of Layang, for a before/after; ``--database-url`` stores the
sends there (a PostgreSQL database, say) rather than in a new SQLite file.

    python bench/api_memory.py [--code DIR] [--database-url URL] [--parallel 16] [--mib 24]
        [--threads 8]
"""

from __future__ import annotations

import argparse
import base64
import collections
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid``, in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(value.split()[0]) / 1024
    return values


def worker_pid(master: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise SystemExit("no gunicorn worker")


def wait_healthy(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("layang serve did not come up")


def body(mib: int) -> bytes:
    # Base64 grows by a third: an attachment of 3/4 of the body makes a body of ``mib`` MiB.
    content = base64.b64encode(os.urandom(mib * 1024 * 1024 * 3 // 4 - 4096)).decode()
    return json.dumps(
        {
            "from": {"email": "shop@example.com"},
            "to": [{"email": "ana@example.org"}],
            "subject": "A large attachment",
            "bodyText": "See the attachment.",
            "attachments": [
                {"filename": "data.bin", "mimeType": "application/octet-stream", "value": content}
            ],
        }
    ).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run the server from")
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--mib", type=int, default=24)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    args = parser.parse_args()

    payload = body(args.mib)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="layang-bench-") as directory:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
        env.update(
            LAYANG_DATA_DIR=directory,
            LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
            LAYANG_HTTP_BIND=f"127.0.0.1:{port}",
            LAYANG_HTTP_WORKERS="1",
            LAYANG_HTTP_THREADS=str(args.threads),
            LAYANG_LOG_LEVEL="WARNING",
            PYTHONPATH=str(args.code.resolve()),
        )
        if args.database_url:
            env["LAYANG_DATABASE_URL"] = args.database_url
        layang = [sys.executable, "-m", "layang"]
        run = {"cwd": args.code, "env": env, "capture_output": True, "check": True}
        account = f"bench-{os.urandom(4).hex()}"  # a database given may have served before
        subprocess.run([*layang, "accounts", "create", account, "--live"], **run)
        key = json.loads(subprocess.run([*layang, "keys", "create", account], **run).stdout)["key"]
        server = subprocess.Popen(
            [*layang, "serve"],
            cwd=args.code,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_healthy(port)
            worker = worker_pid(server.pid)
            before = memory_mib(worker)
            answers: collections.Counter[str] = collections.Counter()
            lock = threading.Lock()
            times: list[float] = []

            def send() -> None:
                began = time.monotonic()
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                    conn.request(
                        "POST",
                        "/v1/layang/transmissions",
                        body=payload,
                        headers={
                            "Authorization": f"Bearer {key}",
                            "Content-Type": "application/json",
                        },
                    )
                    response = conn.getresponse()
                    response.read()
                    answer = str(response.status)
                    if response.status == 503:
                        answer += f" (Retry-After {response.getheader('Retry-After')})"
                except OSError as error:
                    answer = type(error).__name__
                with lock:
                    answers[answer] += 1
                    times.append(round(time.monotonic() - began, 1))

            senders = [threading.Thread(target=send) for _ in range(args.parallel)]
            started = time.monotonic()
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join()
            elapsed = time.monotonic() - started
            time.sleep(1)
            after = memory_mib(worker)
        finally:
            server.terminate()
            server.wait(timeout=60)
    print(
        f"{args.parallel} parallel sends of {len(payload) / 2**20:.1f} MiB to one worker "
        f"({args.threads} threads): answers {dict(answers)} in {elapsed:.1f} s; worker RSS "
        f"before {before['VmRSS']:.0f} MiB, peak {after['VmHWM']:.0f} MiB, after "
        f"{after['VmRSS']:.0f} MiB; peak over before per send in flight "
        f"{(after['VmHWM'] - before['VmRSS']) / min(args.parallel, args.threads):.0f} MiB"
    )
    print(f"each send's time (s), in the order they finished: {sorted(times)}")


if __name__ == "__main__":
    main()
