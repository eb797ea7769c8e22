#!/usr/bin/env python3
"""A harness session on an fsstore, written from the store's facts alone
(not from leasefs's code): leases/<name>.lock, name segments as
directories 0700, the file 0600; flock(LOCK_EX|LOCK_NB) held on an open
descriptor for the life of the grant; the content is the epoch in ASCII
decimal plus a newline (empty = 0), raised under the lock (write at 0,
truncate, fsync) before the grant; a holder's epoch read without the lock.

  fsstore_peer.py DIR NAME try      one attempt: "granted E" (then releases)
                                    or "busy E"; exit 0 either way
  fsstore_peer.py DIR NAME hold     "granted E" or "busy E" (exit 1); holds
                                    until stdin closes or says "release"
  fsstore_peer.py DIR NAME wait     blocks in flock(LOCK_EX) until granted,
                                    then "granted E", then: if WRITE_PROBE
                                    is set, tries to create that file and
                                    prints "probe: OK" or "probe: ERRNO";
                                    holds as "hold" does
  fsstore_peer.py ROOT --root-name  the root lease name of ROOT
"""
import errno
import fcntl
import hashlib
import os
import sys


def root_name(root):
    canon = os.path.realpath(os.path.abspath(root))
    return "workspace-roots/" + hashlib.sha256(canon.encode()).hexdigest()


def lock_path(d, name):
    path = os.path.join(d, "leases", name + ".lock")
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    return path


def read_epoch(fd):
    data = os.pread(fd, 64, 0)
    if data == b"":
        return 0
    if not data.endswith(b"\n") or not data[:-1].isdigit():
        raise SystemExit("corrupt lock file: %r" % data)
    return int(data[:-1])


def raise_epoch(fd):
    e = read_epoch(fd) + 1
    data = b"%d\n" % e
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
    os.fsync(fd)
    return e


def hold(fd):
    for line in sys.stdin:
        if line.strip() == "release":
            break
    os.close(fd)  # the kernel drops the flock


def main():
    if sys.argv[2] == "--root-name":
        print(root_name(sys.argv[1]))
        return 0
    d, name, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    fd = os.open(lock_path(d, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if mode == "wait" else fcntl.LOCK_NB))
    except BlockingIOError:
        print("busy %d" % read_epoch(fd), flush=True)
        return 1 if mode == "hold" else 0
    print("granted %d" % raise_epoch(fd), flush=True)
    if mode == "try":
        return 0
    probe = os.environ.get("WRITE_PROBE")
    if mode == "wait" and probe:
        try:
            with open(probe, "w") as f:
                f.write("peer\n")
            print("probe: OK", flush=True)
        except OSError as e:
            print("probe: %s" % errno.errorcode.get(e.errno, e.errno), flush=True)
    hold(fd)
    return 0


sys.exit(main())
