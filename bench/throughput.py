"""The throughput figures in one run: relay against raw smtplib at 5,000 and 50,000 queued
(with the rate per 1,000 and CPU per message), 1 against 2 workers on PostgreSQL, and HTTP intake
against a bare Flask app at the same durability.

    python bench/throughput.py [--admin-url postgresql://postgres@127.0.0.1:5432/postgres] [--quick]

``--quick`` runs each part small (1,000 messages, one round), to see that they all still run.

Each part is its own script (bench/relay.py, bench/scale.py, bench/intake.py); this runs them
one after the other so that their figures come from the same state of the machine. Postfix's
smtp-sink is used as the SMTP sink when installed (Debian: `apt-get install postfix`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes, messages, seconds, rounds = ("5000,50000", "10000", "6", "3")
    if args.quick:
        sizes, messages, seconds, rounds = ("1000", "1000", "2", "1")
    scale = ["scale.py", "--messages", messages, "--workers", "1,2", "--rounds", rounds]
    parts = [
        ("Relay, one worker, SQLite", ["relay.py", "--sizes", sizes]),
        ("Scale, PostgreSQL", [*scale, "--admin-url", args.admin_url]),
        ("Intake, SQLite", ["intake.py", "--seconds", seconds, "--rounds", rounds]),
    ]
    for title, command in parts:
        print(f"== {title}", flush=True)
        subprocess.run([sys.executable, str(BENCH / command[0]), *command[1:]], check=True)


if __name__ == "__main__":
    main()
