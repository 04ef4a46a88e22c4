"""The edge: owns TCP :19200 and answers even while the app restarts.

In this release it serves ``/healthz`` (Neo4j, embedder and schema, asked of the engine over RPC)
and ``/api/admin/version`` itself.
"""
