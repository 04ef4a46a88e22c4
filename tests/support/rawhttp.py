"""HTTP/1.1 by hand on one raw connection: a request whose body arrives after its headers (as a
loaded machine or a slow network delivers it), then each response read back off the connection,
so a test sees whether the server kept that connection for the next request."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Mapping

import pytest


def send_late_body(
    conn: socket.socket, request_line: str, headers: Mapping[str, str], body: bytes
) -> None:
    """Send ``request_line`` and ``headers`` (Content-Length added), then the body 0.2 s later."""
    head = [f"{request_line}\r\n", *(f"{k}: {v}\r\n" for k, v in headers.items())]
    head.append(f"Content-Length: {len(body)}\r\n\r\n")
    conn.sendall("".join(head).encode())
    time.sleep(0.2)  # the server has the headers, and may answer, before the body arrives
    conn.sendall(body)


def read_response(conn: socket.socket) -> bytes:
    """One response with a Content-Length: head and body, or a failure if the server closed."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += conn.recv(65536) or pytest.fail(f"the server hung up after {received!r}")
    head, _, rest = received.partition(b"\r\n\r\n")
    length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    assert length, head
    while len(rest) < int(length[1]):
        rest += conn.recv(65536) or pytest.fail("the server closed the connection mid-body")
    return head + b"\r\n\r\n" + rest
