#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fsync-acknowledged records of writers that take turns holding a lease.

  records.py write FILE TAG EPOCH ACK
      append "EPOCH SEQ TAG MS" (MS: the writer's wall clock, ms) to FILE every 5 ms, each fsync'ed; after each
      whose write and fsync both succeeded, the same line to ACK (a local
      file, flushed).  Stops at the first error ("stopped: ERRNO" on
      stdout) or SIGTERM.
  records.py check FILE ACK...
      the lines of FILE that some ACK acknowledges, in FILE's order: once
      a writer's first record appears, no record of a writer that came
      before it may follow, and each writer's epoch is above the one
      before it.  Prints what it found, with the time from each writer's
      last record to the next one's first; exits 1 on a violation.
"""
import errno
import os
import signal
import sys
import time


def write(path, tag, epoch, ack_path):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    ack = open(ack_path, "a", buffering=1)
    seq = 0
    print("writing", flush=True)
    while True:
        seq += 1
        line = f"{epoch} {seq} {tag} {int(time.time() * 1000)}\n"
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        except OSError as e:
            print(f"stopped: {errno.errorcode.get(e.errno, e.errno)} after {seq - 1}", flush=True)
            return 0
        ack.write(line)
        ack.flush()
        time.sleep(0.005)


def check(path, ack_paths):
    acked = set()
    for a in ack_paths:
        with open(a) as f:
            acked.update(line.rstrip("\n") for line in f)
    order = []     # writers, in the order of their first record
    epoch = {}
    first, last = {}, {}
    late = []
    with open(path) as f:
        for line in f:
            rec = line.rstrip("\n")
            if rec not in acked:
                continue
            e, _, tag, ms = rec.split(" ")
            first.setdefault(tag, int(ms))
            last[tag] = int(ms)
            if tag not in epoch:
                order.append(tag)
                epoch[tag] = int(e)
            elif order[-1] != tag:
                late.append((rec, order[-1]))
    counts = {t: 0 for t in order}
    with open(path) as f:
        for line in f:
            rec = line.rstrip("\n")
            if rec in acked:
                counts[rec.split(" ")[2]] += 1
    print("writers in order: " + ", ".join(f"{t} (epoch {epoch[t]}, {counts[t]} records)" for t in order))
    for a, b in zip(order, order[1:]):
        print(f"{a}'s last record to {b}'s first: {first[b] - last[a]} ms")
    bad = False
    if late:
        bad = True
        print(f"{len(late)} acknowledged records of an older writer after a newer one's first; "
              f"the first: '{late[0][0]}' after writer {late[0][1]} began")
    for a, b in zip(order, order[1:]):
        if epoch[b] <= epoch[a]:
            bad = True
            print(f"writer {b} at epoch {epoch[b]} came after {a} at epoch {epoch[a]}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "write":
        sys.exit(write(*sys.argv[2:]))
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
