#!/usr/bin/env python3
"""A TCP proxy in front of etcd's JSON gateway that a test can degrade.

    etcdproxy.py LISTEN_PORT TARGET_HOST:TARGET_PORT CONTROL_DIR

Faults are switched by files in CONTROL_DIR (created and removed by the
test; the proxy looks at them on every chunk and every 10 ms):
  delay         its content, seconds: every chunk from the client reaches
                etcd that much later (a slow link), in order
  stall-watch   answers on a connection whose last request was /v3/watch
                are held back (and released when the file goes)
  cut-after-ka  the next answer to a /v3/lease/keepalive request is passed
                on, then every connection is cut and new ones are refused;
                the proxy then creates CONTROL_DIR/cut
  cut           cut now, as above
The proxy writes "ready" to stdout once it listens.
"""
import asyncio
import os
import sys
import time

PORT, TARGET, CTL = int(sys.argv[1]), sys.argv[2], sys.argv[3]
THOST, TPORT = TARGET.rsplit(":", 1)
conns = set()


def ctl(name):
    return os.path.exists(os.path.join(CTL, name))


def delay():
    try:
        with open(os.path.join(CTL, "delay")) as f:
            return float(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def cut_all():
    open(os.path.join(CTL, "cut"), "a").close()
    for w in list(conns):
        w.transport.abort()


class Conn:
    def __init__(self):
        self.last_path = ""


async def up(reader, writer, conn):
    """Client to etcd: note each request's path, forward after the delay."""
    queue = asyncio.Queue()

    async def sender():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    task = asyncio.ensure_future(sender())
    try:
        while True:
            data = await reader.read(65536)
            if not data or ctl("cut"):
                break
            for line in data.split(b"\r\n"):
                if line.startswith(b"POST /v3/"):
                    conn.last_path = line.split()[1].decode()
            await queue.put((time.monotonic() + delay(), data))
    finally:
        await queue.put((0, None))
        await task


async def down(reader, writer, conn):
    """etcd to client: hold watch answers while stalled; cut after a
    keepalive answer when armed."""
    while True:
        data = await reader.read(65536)
        if not data or ctl("cut"):
            break
        while conn.last_path == "/v3/watch" and ctl("stall-watch") and not ctl("cut"):
            await asyncio.sleep(0.01)
        if ctl("cut"):
            break
        writer.write(data)
        await writer.drain()
        if conn.last_path == "/v3/lease/keepalive" and ctl("cut-after-ka"):
            cut_all()
            break


async def handle(creader, cwriter):
    if ctl("cut"):
        cwriter.transport.abort()
        return
    try:
        ereader, ewriter = await asyncio.open_connection(THOST, int(TPORT))
    except OSError:
        cwriter.transport.abort()
        return
    conn = Conn()
    conns.update((cwriter, ewriter))
    tasks = [asyncio.ensure_future(up(creader, ewriter, conn)),
             asyncio.ensure_future(down(ereader, cwriter, conn))]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:
        t.cancel()
    for w in (cwriter, ewriter):
        conns.discard(w)
        w.transport.abort()


async def watchdog():
    while True:
        if ctl("cut"):
            cut_all()
        await asyncio.sleep(0.01)


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", PORT)
    print("ready", flush=True)
    asyncio.ensure_future(watchdog())
    async with server:
        await server.serve_forever()


asyncio.run(main())
