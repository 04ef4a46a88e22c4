"""The development Neo4j instance: Java discovery, the jar distribution, start/stop/status.

On the device Neo4j is its own systemd unit; in development ``maxy run`` supervises it and
``maxy neo4j start|stop|status`` manages it by hand. The server itself comes from Maven Central as
the ``org.neo4j:neo4j`` artifacts (``build/neo4j.py`` fetches them into the cache directory).
"""
