"""Engine RPC: length-prefixed msgpack frames over a Unix domain socket.

A frame is a 4-byte big-endian length followed by that many bytes of msgpack. Requests are
``{"id": int, "method": str, "params": map}``; replies are ``{"id": int, "result": any}`` or
``{"id": int, "error": {"code": str, "message": str}}``. Vectors travel as packed float32 bytes.

Errors::

    RpcError
    ├── ProtocolError      a frame that is too large, truncated or not a msgpack map
    ├── RpcUnavailable     nothing listens on the socket, or it timed out
    └── RemoteError        the server answered with an error (carries its code)
"""
