#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A TCP proxy that a test can turn into a black hole.

    tcpblackhole.py LISTEN_PORT TARGET_HOST:TARGET_PORT HOLE_FILE

Bytes pass both ways until HOLE_FILE exists; from then on (looked at on
every chunk and every 10 ms) they are dropped in both directions and the
connections are kept open, as on a link that went dark without a reset:
a client learns of it only by its own timeouts.  Prints "ready" once it
listens.
"""
import asyncio
import os
import sys

PORT, TARGET, HOLE = int(sys.argv[1]), sys.argv[2], sys.argv[3]
THOST, TPORT = TARGET.rsplit(":", 1)


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if not os.path.exists(HOLE):
                writer.write(data)
                await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        if not os.path.exists(HOLE):
            writer.close()


async def serve(creader, cwriter):
    try:
        treader, twriter = await asyncio.open_connection(THOST, int(TPORT))
    except OSError:
        cwriter.close()
        return
    await asyncio.gather(pipe(creader, twriter), pipe(treader, cwriter))


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", PORT)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
