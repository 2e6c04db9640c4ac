"""Benchmark worker for a peer of ``peers/`` (rq, bullmq, streams, plain).

Run by ``run.py`` as ``python bench/peer_worker.py --peer NAME --port P --workload W --out
FILE``: it imports ``peers.<NAME>`` and runs the workload on its adapter, as ``ours_worker.py``
does for this library. This repository's ``src/`` is not on its path.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from workloads import worker_main

PEERS = ("rq", "bullmq", "streams", "plain")
#: Module of each peer, in ``peers/``.
MODULES = {"rq": "rq_peer", "bullmq": "bullmq_peer", "streams": "streams", "plain": "plain"}


def main() -> None:
    parser = argparse.ArgumentParser(description="run one benchmark workload of a peer")
    parser.add_argument("--peer", choices=PEERS, required=True)
    args, rest = parser.parse_known_args()
    try:
        module = importlib.import_module(f"peers.{MODULES[args.peer]}")
    except ImportError as err:
        raise SystemExit(
            f"{args.peer} is not installed ({err}): pip install 'redis-work-queue-lua[bench]'"
        ) from err
    worker_main(module.make, argv=rest)


if __name__ == "__main__":
    sys.exit(main())
