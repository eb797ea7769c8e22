#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fsync-acknowledged records of the fault campaign's writers, and the check.

  faultrec.py write MNT FILE HOST ACK LEASEFS
      waits (bounded: 120 s) until MNT is a mount, reads the mount's epoch
      from `LEASEFS status MNT --json`, then appends to MNT/FILE every 5 ms
      one record "HOST EPOCH SEQ START WALL" (START: CLOCK_MONOTONIC in ns
      just before the write; WALL: the wall clock in ms), fsync'ed.  After
      each record whose write and fsync both succeeded, "RECORD ACKED" to
      ACK (ACKED: CLOCK_MONOTONIC in ns after the fsync; ACK is a local
      file, flushed).  Prints "writing EPOCH" once it has the epoch and
      "stopped: ERRNO after N" at its first error; ends on SIGTERM.
      CLOCK_MONOTONIC is one clock for every network and mount namespace
      of a machine (there is no time namespace here), so the hosts' times
      compare; libfaketime is only ever preloaded into a daemon.

  faultrec.py check FILE ACK...
      the records of FILE (the backing file both hosts append to) that an
      ACK acknowledges, in FILE's order.  A violation is
        - order: an acknowledged record of a holder after the first
          acknowledged record of its successor (the holder whose first
          record comes next in the file);
        - time: an acknowledged record of a holder whose write began after
          a successor's first record was acknowledged (on the one
          monotonic clock), whatever the file's order;
        - epoch: a holder's epoch not above its predecessor's (a store
          that lost its data restarts at 1: reported, counted apart).
      Prints one JSON line: holders in order (host, epoch, records),
      violations, the overlap of each handover in ms (the old holder's
      last write's start minus the successor's first acknowledgement:
      above 0 is a violation, below 0 is the gap), and the first offending
      records.  Exits 1 on a violation.
"""
import errno
import json
import os
import signal
import subprocess
import sys
import time


def wait_mount(mnt, deadline):
    parent = os.stat(os.path.dirname(os.path.abspath(mnt))).st_dev
    while time.monotonic() < deadline:
        try:
            if os.stat(mnt).st_dev != parent:
                return True
        except OSError:
            pass
        time.sleep(0.002)
    return False


def write(mnt, name, host, ack_path, leasefs):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not wait_mount(mnt, time.monotonic() + 120):
        print(f"no mount at {mnt}", flush=True)
        return 1
    st = json.loads(subprocess.run([leasefs, "status", mnt, "--json"], capture_output=True,
                                   text=True, check=True, timeout=30).stdout)
    epoch = int(st["epoch"])
    try:
        fd = os.open(os.path.join(mnt, name),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        print(f"stopped: {errno.errorcode.get(e.errno, e.errno)} at open (epoch {epoch})", flush=True)
        return 0
    ack = open(ack_path, "a", buffering=1)
    print(f"writing {epoch}", flush=True)
    seq = 0
    while True:
        seq += 1
        line = f"{host} {epoch} {seq} {time.monotonic_ns()} {int(time.time() * 1000)}"
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        except OSError as e:
            print(f"stopped: {errno.errorcode.get(e.errno, e.errno)} after {seq - 1}", flush=True)
            return 0
        ack.write(f"{line} {time.monotonic_ns()}\n")
        ack.flush()
        time.sleep(0.005)


def check(path, ack_paths):
    acked = {}
    for a in ack_paths:
        if not os.path.exists(a):
            continue
        with open(a) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 6:
                    acked[" ".join(parts[:5])] = int(parts[5])
    holders = []          # (host, epoch) in the order of their first record: the succession
    info = {}             # (host, epoch) -> first ack, last start, count
    order_bad, time_bad, epoch_bad = [], [], []
    with open(path if os.path.exists(path) else os.devnull, errors="replace") as f:
        for line in f:
            rec = line.rstrip("\n")
            if rec not in acked:
                continue
            host, e, _, start, _ = rec.split(" ")
            key, start = (host, int(e)), int(start)
            if key not in info:
                holders.append(key)
                info[key] = {"first_ack": acked[rec], "last_start": start, "n": 0}
            h = info[key]
            h["n"] += 1
            h["last_start"] = max(h["last_start"], start)
            if holders[-1] != key:
                order_bad.append(f"'{rec}' after {holders[-1][0]} at epoch {holders[-1][1]} began")
    for a, b in zip(holders, holders[1:]):
        if b[1] <= a[1]:
            epoch_bad.append(f"{b[0]} at epoch {b[1]} after {a[0]} at epoch {a[1]}")
    overlaps = []
    for a, b in zip(holders, holders[1:]):
        overlaps.append((info[a]["last_start"] - info[b]["first_ack"]) / 1e6)
    # time: a record of a holder begun after a successor's first acknowledgement
    for i, key in enumerate(holders):
        for other in holders[i + 1:]:
            if info[key]["last_start"] > info[other]["first_ack"]:
                time_bad.append(f"{key[0]} at epoch {key[1]} wrote "
                                f"{(info[key]['last_start'] - info[other]['first_ack']) / 1e6:.1f} ms "
                                f"after {other[0]} at epoch {other[1]} had its first record acknowledged")
    out = {
        "holders": [f"{h} e{e} ({info[(h, e)]['n']} records)" for h, e in holders],
        "violations": len(order_bad) + len(time_bad) + len(epoch_bad),
        "order": len(order_bad), "time": len(time_bad), "epoch": len(epoch_bad),
        "overlap_ms": [round(o, 1) for o in overlaps],
        "first": (order_bad + time_bad + epoch_bad)[:3],
    }
    print(json.dumps(out))
    return 1 if out["violations"] else 0


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "write":
        sys.exit(write(*sys.argv[2:]))
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
