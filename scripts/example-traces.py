#!/usr/bin/env python3
"""Writes the example traces of issue 27 into examples/ (deterministic; rerun to regenerate).

ebs-fast-fill.csv   a 50Gi claim filling at 2 MB/s for 16 h, one row a minute: with a 6 h
                    modification interval (ebs.csi.aws.com) every grow must last until the next.
ebs-speed-up.csv    a 50Gi claim near its line filling at 1 MB/s, then at 20 MB/s for an hour:
                    two grows within three hours, which EBS's rule since January 2026 (four per
                    rolling 24 h) allows and the six-hour rule before it did not.
noisy-*.csv         a 100Gi claim at 74-75Gi (5-6Gi under the 80 % line), one row a second (the
                    agent's sampling) for 30 min, whose fill rate is noisy but that never reaches
                    the line: none of them may be grown early by the predictive trigger.
"""
import os

GI = 1 << 30
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def write(name, header, rows):
    with open(os.path.join(HERE, name), "w") as f:
        for line in header:
            f.write(f"# {line}\n")
        f.write("seconds,used_bytes\n")
        for t, used in rows:
            f.write(f"{t},{int(used)}\n")


def fast_fill():
    rows = [(t, 20 * GI + 2e6 * t) for t in range(0, 16 * 3600 + 1, 60)]
    write("ebs-fast-fill.csv", [
        "A 50Gi claim from 20Gi used, filling at 2 MB/s for 16 h (one row a minute): the 80 %",
        "line is 3 h away. scripts/example-traces.py writes it.",
    ], rows)


def speed_up():
    rows = []
    used = 35 * GI
    for t in range(0, 6 * 3600 + 1, 60):
        rows.append((t, used))
        used += 60 * (1e6 if t < 2 * 3600 else 20e6 if t < 3 * 3600 else 0)
    write("ebs-speed-up.csv", [
        "A 50Gi claim from 35Gi used, filling at 1 MB/s for 2 h, then at 20 MB/s for 1 h, then",
        "still for 3 h (one row a minute). scripts/example-traces.py writes it.",
    ], rows)


def bursts():
    # A batch job: every 20 s, 1Gi of temporary files written in 5 s (215 MB/s), deleted 10 s
    # later; the database underneath grows at 100 kB/s.
    rows = []
    for t in range(0, 1800 + 1):
        # Starts between two batches, as the agent would see them after the first.
        phase = (t + 12) % 20
        temp = GI * min(phase, 5) / 5 if phase <= 15 else 0
        rows.append((t, 74 * GI + 1e5 * t + temp))
    write("noisy-bursts.csv", [
        "A 100Gi claim at 74Gi: every 20 s a batch writes 1Gi of temporary files in 5 s and",
        "deletes them 10 s later; the data grows at 100 kB/s underneath. scripts/example-traces.py.",
    ], rows)


def wal_cycles():
    # WAL written at 60 MB/s for 50 s, then a checkpoint recycles it (usage drops back), on a
    # volume whose data grows at 50 kB/s; every fifth cycle autovacuum truncates 256Mi of a table.
    rows = []
    base = 74 * GI
    for t in range(0, 1800 + 1):
        # Starts just before a checkpoint: the agent has seen the cycle before (a cycle's first
        # tooth, with no delete seen yet, is a fill as far as anyone can tell).
        cycle, phase = divmod(t + 55, 60)
        wal = 60e6 * min(phase, 50)
        truncated = (cycle // 5) * 256 * (1 << 20)
        rows.append((t, base + 5e4 * t + wal - truncated))
    write("noisy-wal-vacuum.csv", [
        "A 100Gi Postgres volume at 74Gi: WAL written at 60 MB/s for 50 s of every minute and",
        "recycled at each checkpoint; every fifth minute a VACUUM truncates 256Mi of a table; the",
        "data grows at 50 kB/s. scripts/example-traces.py writes it.",
    ], rows)


def deletes():
    # An ingest that writes 100 MB/s for 10 s, then compacts (deletes) what it wrote, twice a
    # minute, over a slow 200 kB/s growth.
    rows = []
    for t in range(0, 1800 + 1):
        # Starts just before a compaction: the agent has seen the cycle before (a cycle's
        # first tooth, with no delete seen yet, is a fill as far as anyone can tell).
        phase = (t + 11) % 30
        burst = 2e8 * min(phase, 10) if phase <= 12 else 0
        rows.append((t, 75 * GI + 2e5 * t + burst))
    write("noisy-deletes.csv", [
        "A 100Gi claim at 75Gi: twice a minute 2 GB is ingested at 200 MB/s and compacted away",
        "2 s later, over a 200 kB/s growth. scripts/example-traces.py writes it.",
    ], rows)


fast_fill()
speed_up()
bursts()
wal_cycles()
deletes()
