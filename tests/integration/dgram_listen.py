#!/usr/bin/env python3
"""Stand in for journald, a syslog daemon or systemd's notification socket.

Usage: dgram_listen.py LABEL=ADDRESS...   (ADDRESS a path, or @name: abstract)
       dgram_listen.py --count FILE LABEL [FILTER...]

Binds a datagram socket at each address, prints "ready" once all are
bound, then one JSON object per datagram received, flushed at once:
  {"socket": LABEL, "pid": sender's pid, "text": the datagram as text,
   "fields": {KEY: VALUE}}
"fields" is the datagram read as the journal's native protocol (KEY=VALUE
lines, or KEY, a newline, a 64-bit little-endian length, the value and a
newline) or as notification assignments (KEY=VALUE lines); {} when it is
neither.  Runs until killed.

--count prints how many of the datagrams recorded in FILE came to LABEL
and match every FILTER: KEY=VALUE (a field, exactly), KEY~REGEX (a field,
searched); KEY "text" is the whole datagram, "pid" its sender.
"""
import json
import os
import re
import select
import socket
import struct
import sys


def fields_of(data):
    out = {}
    i = 0
    while i < len(data):
        nl = data.find(b"\n", i)
        if nl < 0:
            nl = len(data)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            out[k.decode()] = v.decode(errors="replace")
            i = nl + 1
            continue
        if nl + 9 > len(data):  # neither form: not the protocol
            return {}
        n = struct.unpack("<Q", data[nl + 1:nl + 9])[0]
        v = data[nl + 9:nl + 9 + n]
        if data[nl + 9 + n:nl + 10 + n] != b"\n":
            return {}
        out[line.decode()] = v.decode(errors="replace")
        i = nl + 10 + n
    return out


def bind(address):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    if address.startswith("@"):
        s.bind("\0" + address[1:])
    else:
        if os.path.exists(address):
            os.unlink(address)
        s.bind(address)
        os.chmod(address, 0o666)
    return s


def matches(rec, filters):
    for f in filters:
        m = re.match(r"([A-Za-z0-9_]+)([=~])(.*)$", f, re.S)
        key, op, want = m.groups()
        have = rec["text"] if key == "text" else \
            str(rec["pid"]) if key == "pid" else rec["fields"].get(key)
        if have is None or (op == "=" and have != want) or \
                (op == "~" and not re.search(want, have)):
            return False
    return True


def count(path, label, filters):
    n = 0
    with open(path) as f:
        for line in f:
            if line.startswith("{") and line.endswith("\n"):  # whole
                rec = json.loads(line)
                n += rec["socket"] == label and matches(rec, filters)
    print(n)


def main():
    if sys.argv[1] == "--count":
        count(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    socks = {}
    for arg in sys.argv[1:]:
        label, address = arg.split("=", 1)
        socks[bind(address)] = label
    print("ready", flush=True)
    creds = struct.calcsize("3i")
    while True:
        for s in select.select(list(socks), [], [])[0]:
            data, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_SPACE(creds))
            pid = 0
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", payload[:creds])[0]
            print(json.dumps({"socket": socks[s], "pid": pid,
                              "text": data.decode(errors="replace"),
                              "fields": fields_of(data)}), flush=True)


if __name__ == "__main__":
    main()
