"""The edge: owns TCP :19200 and answers even while the app restarts.

app.py         the ASGI entry point: classify, answer /healthz and /api/admin/version, proxy
network.py     who is asking: LAN or external, client address, admin or public host role
proxy.py       HTTP, SSE and WebSockets to the app's Unix socket (via appliance.web.upstream)
headers.py     which headers cross the edge, both ways
websocket.py   the WebSocket handshake checks (frames: appliance.web.wsrelay)
restarting.py  the 503 answer and SSE event while the app is down
server.py      `maxy edge`: Granian on settings.host:settings.port
"""
