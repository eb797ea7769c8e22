#!/usr/bin/env python3
"""bench-sqlite DB ROWS: insert ROWS rows into a new sqlite database at DB, one transaction per
row (each commit creates, syncs and removes the rollback journal), then check they are there."""
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1], isolation_level=None)
rows = int(sys.argv[2])
db.execute("create table t (k integer primary key, v text)")
for i in range(rows):
    db.execute("begin")
    db.execute("insert into t values (?, ?)", (i, "v%d" % i))
    db.execute("commit")
assert db.execute("select count(*) from t").fetchone()[0] == rows
