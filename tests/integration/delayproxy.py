#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A TCP proxy that delays every byte by a set time, both ways (netem's
"delay" where the kernel has no sch_netem).

    delayproxy.py LISTEN_HOST:LISTEN_PORT TARGET_HOST:TARGET_PORT DELAY_FILE

Each chunk read from either side is written to the other DELAY ms after it
was read, in order (a link with that latency, not a slower one).  DELAY is
the number in DELAY_FILE (ms; absent or empty: 0), read for every chunk.
Prints "ready" once it listens.
"""
import asyncio
import sys
import time

LISTEN, TARGET, DELAY_FILE = sys.argv[1], sys.argv[2], sys.argv[3]


def delay_s():
    try:
        with open(DELAY_FILE) as f:
            return int(f.read().strip() or 0) / 1000
    except (OSError, ValueError):
        return 0.0


async def pipe(reader, writer):
    q = asyncio.Queue()

    async def send():
        while True:
            due, data = await q.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(send())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            q.put_nowait((time.monotonic() + delay_s(), data))
    except (ConnectionError, OSError):
        pass
    q.put_nowait((0, None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def handle(creader, cwriter):
    host, port = TARGET.rsplit(":", 1)
    try:
        sreader, swriter = await asyncio.open_connection(host, int(port))
    except OSError:
        cwriter.close()
        return
    await asyncio.gather(pipe(creader, swriter), pipe(sreader, cwriter))


async def main():
    host, port = LISTEN.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port))
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
