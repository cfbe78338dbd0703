"""A WebSocket echo server (python3-websockets): echoes every message back.

Usage: ws_echo.py HOST PORT  (PORT 0: any free port). Prints "READY <port>" once listening.
"""
import asyncio
import sys

import websockets


async def echo(ws, _path=None):
    async for message in ws:
        await ws.send(message)


async def main():
    host, port = sys.argv[1], int(sys.argv[2])
    async with websockets.serve(echo, host, port, max_size=1 << 22) as server:
        print("READY", server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


asyncio.run(main())
