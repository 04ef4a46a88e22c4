"""The retrieval engine: the Neo4j memory graph and the in-process embedding model.

``maxy engine`` loads both once and serves them over RPC on a Unix socket (see
:mod:`appliance.memory.service`).
"""
