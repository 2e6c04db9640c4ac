"""The peers the benchmark compares this library with, one adapter module each.

Each module has ``make(db) -> adapter``: the peer behind the workloads' adapter interface
(``workloads.QueueAdapter``), offering what fits it. ``peer_worker.py --peer NAME`` runs one
workload of one peer in a process of its own, as ``ours_worker.py`` does for this library.
"""
