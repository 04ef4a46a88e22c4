"""A small stand-in for the app, served by Granian on a Unix socket behind the real edge.

Run ``python -m tests.edge.upstream SOCKET``. Endpoints:

    /echo             method, path, query, headers and body of the request, as JSON
    /upload           reads the body chunk by chunk; answers its length, chunk count, sha256
    /stream/{id}      sends "first", then waits for POST /_release/{id} before sending "last"
    /sse?channel=C    an event stream of what POST /_publish?channel=C sends (raw SSE text;
                      ``stamp=1`` publishes ``data: <monotonic ns>`` instead)
    /ws               WebSocket echo; the text "close:CODE:REASON" makes it close that way;
                      a handshake with X-Reject is refused
    /hop              a response carrying hop-by-hop headers (Connection: X-Private, Keep-Alive)
    /_state           what happened: stream progress, SSE subscribers and disconnects,
                      upload progress, WebSocket close codes received from the client

State lives in this one process (one Granian worker), so tests read it over the socket.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from starlette.types import Receive, Scope, Send

STATE: dict[str, Any] = {
    "produced": {},  # stream id -> chunks produced so far
    "subscribers": defaultdict(int),  # channel -> open SSE streams
    "disconnects": defaultdict(int),  # channel -> SSE clients that went away
    "upload_chunks": 0,  # chunks of the current upload received so far
    "ws_closed": [],  # [code, reason] of WebSocket closes started by the client
    "ws_opened": 0,  # WebSocket handshakes that reached this app
    "requests": 0,  # HTTP requests other than the /_ test controls
}
RELEASE: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
CHANNELS: dict[str, set[asyncio.Queue[bytes]]] = defaultdict(set)


async def _json(send: Send, body: Any, status: int = 200) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    body = await _body(receive)
    headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
    await _json(
        send,
        {
            "method": scope["method"],
            "path": scope["path"],
            "query": scope["query_string"].decode(),
            "headers": headers,
            "body": body.decode("latin-1"),
        },
    )


async def upload(scope: Scope, receive: Receive, send: Send) -> None:
    digest, length, chunks = hashlib.sha256(), 0, 0
    STATE["upload_chunks"] = 0
    while True:
        message = await receive()
        data = message.get("body", b"")
        if data:
            digest.update(data)
            length += len(data)
            chunks += 1
            STATE["upload_chunks"] = chunks
        if not message.get("more_body"):
            break
    await _json(send, {"length": length, "chunks": chunks, "sha256": digest.hexdigest()})


async def stream(scope: Scope, receive: Receive, send: Send, ident: str) -> None:
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/plain")],
    }
    await send(start)
    STATE["produced"][ident] = 0
    await send({"type": "http.response.body", "body": b"first\n", "more_body": True})
    STATE["produced"][ident] = 1
    await RELEASE[ident].wait()
    await send({"type": "http.response.body", "body": b"last\n", "more_body": False})
    STATE["produced"][ident] = 2


async def sse(scope: Scope, receive: Receive, send: Send, channel: str) -> None:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    CHANNELS[channel].add(queue)
    STATE["subscribers"][channel] += 1
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b": hello\n\n", "more_body": True})

    async def pump() -> None:
        while True:
            await send({"type": "http.response.body", "body": await queue.get(), "more_body": True})

    task = asyncio.ensure_future(pump())
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
        STATE["disconnects"][channel] += 1
    finally:
        task.cancel()
        CHANNELS[channel].discard(queue)
        STATE["subscribers"][channel] -= 1


async def publish(scope: Scope, receive: Receive, send: Send) -> None:
    query = dict(part.split("=", 1) for part in scope["query_string"].decode().split("&") if part)
    body = await _body(receive)
    if query.get("stamp"):
        body = b"data: %d\n\n" % time.monotonic_ns()
    queues = list(CHANNELS[query["channel"]])
    for queue in queues:
        queue.put_nowait(body)
    await _json(send, {"delivered": len(queues)})


async def websocket(scope: Scope, receive: Receive, send: Send) -> None:
    if (await receive())["type"] != "websocket.connect":
        return
    STATE["ws_opened"] += 1
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    if headers.get("x-reject"):
        await send({"type": "websocket.close", "code": 1008})
        return
    subprotocols = scope.get("subprotocols") or []
    await send(
        {"type": "websocket.accept", "subprotocol": subprotocols[0] if subprotocols else None}
    )
    # The first frame tells the test what the app saw of the handshake.
    await send({"type": "websocket.send", "text": json.dumps({"headers": headers})})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            STATE["ws_closed"].append([message.get("code"), message.get("reason") or ""])
            return
        text = message.get("text")
        if text is not None and text.startswith("close:"):
            _, code, reason = text.split(":", 2)
            await send({"type": "websocket.close", "code": int(code), "reason": reason})
            return
        if text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    path = scope["path"]
    if not path.startswith("/_") and scope["type"] == "http":
        STATE["requests"] += 1
    if scope["type"] == "websocket":
        await websocket(scope, receive, send)
    elif path == "/echo" or path.startswith("/api/") or path == "/":
        await echo(scope, receive, send)
    elif path == "/upload":
        await upload(scope, receive, send)
    elif path.startswith("/stream/"):
        await stream(scope, receive, send, path.removeprefix("/stream/"))
    elif path == "/sse":
        query = scope["query_string"].decode()
        await sse(scope, receive, send, query.removeprefix("channel="))
    elif path == "/hop":
        headers = [
            (b"content-type", b"text/plain"),
            (b"connection", b"X-Private"),
            (b"x-private", b"hop secret"),
            (b"keep-alive", b"timeout=5"),
            (b"x-end-to-end", b"kept"),
            (b"content-length", b"2"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
    elif path == "/_publish":
        await publish(scope, receive, send)
    elif path.startswith("/_release/"):
        RELEASE[path.removeprefix("/_release/")].set()
        await _json(send, {"released": True})
    elif path == "/_state":
        await _json(send, STATE)
    else:
        await _json(send, {"error": "no such test endpoint"}, status=404)


def main() -> None:
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    sock = Path(sys.argv[1])
    sock.unlink(missing_ok=True)
    Granian(
        "tests.edge.upstream:app",
        uds=sock,
        interface=Interfaces.ASGI,
        workers=1,
        workers_kill_timeout=2,
        log_level=LogLevels.warning,
    ).serve()


if __name__ == "__main__":
    main()
