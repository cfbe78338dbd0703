"""A WebSocket client (python3-websockets' protocol implementation) that talks through a proxy.

Usage: ws_client.py PROXY_HOST PROXY_PORT WS_URI absolute|origin|TARGET [SOURCE_ADDR]

Connects to the proxy (from SOURCE_ADDR if given), sends the opening handshake for WS_URI with
the request target in absolute-form (an explicit proxy), origin-form (interception) or as the
given TARGET (e.g. the same URI with an http:// scheme), checks
the 101 and Sec-WebSocket-Accept, exchanges text and binary messages with an echo server, closes
cleanly, and prints "WS-OK". Any deviation exits non-zero with the reason.
"""
import dataclasses
import os
import socket
import sys

try:
    from websockets.client import ClientProtocol as ClientConnection  # websockets >= 11
except ImportError:
    from websockets.client import ClientConnection  # websockets 10 (Debian 12)
from websockets.frames import Opcode
from websockets.http11 import Response
try:
    from websockets.protocol import State  # websockets >= 11
except ImportError:
    from websockets.connection import State  # websockets 10
from websockets.uri import parse_uri

proxy = (sys.argv[1], int(sys.argv[2]))
uri, form = sys.argv[3], sys.argv[4]
source = (sys.argv[5], 0) if len(sys.argv) > 5 else None

sock = socket.create_connection(proxy, timeout=20, source_address=source)
conn = ClientConnection(parse_uri(uri), max_size=1 << 22)
request = conn.connect()
if form == "absolute":
    request = dataclasses.replace(request, path=uri)
elif form != "origin":
    request = dataclasses.replace(request, path=form)
conn.send_request(request)


def flush():
    for data in conn.data_to_send():
        if data:
            sock.sendall(data)


def next_event():
    while True:
        events = conn.events_received()
        if events:
            pending.extend(events)
        if pending:
            return pending.pop(0)
        data = sock.recv(65536)
        if data:
            conn.receive_data(data)
        else:
            conn.receive_eof()
            if not conn.events_received() and not pending:
                sys.exit("connection closed early")
        flush()


pending = []
flush()
response = next_event()
if not isinstance(response, Response) or response.status_code != 101:
    sys.exit(f"handshake refused: {response!r}")
if conn.state is not State.OPEN:
    sys.exit(f"handshake invalid: {conn.handshake_exc!r}")

messages = [("text", f"hello {i}") for i in range(10)]
messages.append(("binary", os.urandom(300_000)))
for kind, payload in messages:
    if kind == "text":
        conn.send_text(payload.encode())
    else:
        conn.send_binary(payload)
    flush()
    frame = next_event()
    want = Opcode.TEXT if kind == "text" else Opcode.BINARY
    got = frame.data.decode() if kind == "text" else frame.data
    if frame.opcode is not want or got != payload:
        sys.exit(f"echo differs for a {kind} message")

conn.send_close(1000, "done")
flush()
frame = next_event()
if frame.opcode is not Opcode.CLOSE:
    sys.exit(f"expected a close frame, got {frame.opcode}")
print("WS-OK", flush=True)
