#!/usr/bin/env python3
"""A harness session on a pgstore, written from the store's facts alone
(not from leasefs's code), with psycopg2: table "looprig"."looprig_leases"
(name text PRIMARY KEY, epoch bigint, holder bytea, expires_at timestamptz,
revision bigint), holder and expires_at NULL together; acquire in one
transaction: insert the row if absent, lock it FOR UPDATE, held iff holder
is not NULL and expires_at > clock_timestamp(), else epoch + 1, a fresh
32-byte random holder, expires_at = clock_timestamp() + TTL, revision + 1;
renew every TTL/3 conditional on name, epoch, holder and not expired;
release clears holder and expires_at where name, epoch and holder match.

  pgstore_peer.py URI NAME try|hold|wait [TTL_S]
    try   one attempt: "granted E" (then releases) or "busy E"
    hold  "granted E" or "busy E" (exit 1); renews until stdin closes or
          says "release"; "lost" if a renewal finds the row not ours
    wait  tries every 50 ms until granted, then as hold; with WRITE_PROBE
          set, first tries to create that file: "probe: OK" or "probe: ERRNO"
  With PEER_NO_RENEW=1 a holder never renews (a stopped harness).
"""
import errno
import os
import select
import sys
import time

import psycopg2

T = '"looprig"."looprig_leases"'


def connect(uri):
    c = psycopg2.connect(uri)
    c.autocommit = False
    with c.cursor() as cur:
        cur.execute('CREATE SCHEMA IF NOT EXISTS "looprig"')
        cur.execute("CREATE TABLE IF NOT EXISTS " + T + " (name text PRIMARY KEY,"
                    " epoch bigint NOT NULL CHECK (epoch >= 0), holder bytea,"
                    " expires_at timestamptz, revision bigint NOT NULL"
                    " CHECK (revision >= 0))")
    c.commit()
    return c


def acquire(c, name, ttl):
    holder = os.urandom(32)
    with c.cursor() as cur:
        cur.execute("INSERT INTO " + T + " (name, epoch, revision) VALUES (%s, 0, 0)"
                    " ON CONFLICT (name) DO NOTHING", (name,))
        cur.execute("SELECT epoch, holder IS NOT NULL AND expires_at > clock_timestamp()"
                    " FROM " + T + " WHERE name = %s FOR UPDATE", (name,))
        epoch, held = cur.fetchone()
        if held:
            c.rollback()
            return None, epoch
        cur.execute("UPDATE " + T + " SET epoch = epoch + 1, holder = %s, expires_at ="
                    " clock_timestamp() + %s * interval '1 second', revision ="
                    " revision + 1 WHERE name = %s RETURNING epoch",
                    (psycopg2.Binary(holder), ttl, name))
        epoch = cur.fetchone()[0]
    c.commit()
    return holder, epoch


def renew(c, name, epoch, holder, ttl):
    with c.cursor() as cur:
        cur.execute("UPDATE " + T + " SET expires_at = clock_timestamp() + %s *"
                    " interval '1 second', revision = revision + 1 WHERE name = %s"
                    " AND epoch = %s AND holder = %s AND expires_at > clock_timestamp()",
                    (ttl, name, epoch, psycopg2.Binary(holder)))
        ok = cur.rowcount == 1
    c.commit()
    return ok


def release(c, name, epoch, holder):
    with c.cursor() as cur:
        cur.execute("UPDATE " + T + " SET holder = NULL, expires_at = NULL, revision ="
                    " revision + 1 WHERE name = %s AND epoch = %s AND holder = %s",
                    (name, epoch, psycopg2.Binary(holder)))
    c.commit()


def hold(c, name, epoch, holder, ttl):
    no_renew = os.environ.get("PEER_NO_RENEW") == "1"
    while True:
        r, _, _ = select.select([sys.stdin], [], [], ttl / 3.0)
        if r:
            line = sys.stdin.readline()
            if line == "" or line.strip() == "release":
                release(c, name, epoch, holder)
                return 0
        elif not no_renew and not renew(c, name, epoch, holder, ttl):
            print("lost", flush=True)
            return 2


def main():
    uri, name, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    ttl = float(sys.argv[4]) if len(sys.argv) > 4 else 15.0
    c = connect(uri)
    holder, epoch = acquire(c, name, ttl)
    while holder is None and mode == "wait":
        time.sleep(0.05)
        holder, epoch = acquire(c, name, ttl)
    if holder is None:
        print("busy %d" % epoch, flush=True)
        return 1 if mode == "hold" else 0
    print("granted %d" % epoch, flush=True)
    if mode == "try":
        release(c, name, epoch, holder)
        return 0
    probe = os.environ.get("WRITE_PROBE")
    if probe:
        try:
            with open(probe, "w") as f:
                f.write("peer\n")
            print("probe: OK", flush=True)
        except OSError as e:
            print("probe: %s" % errno.errorcode.get(e.errno, e.errno), flush=True)
    return hold(c, name, epoch, holder, ttl)


sys.exit(main())
