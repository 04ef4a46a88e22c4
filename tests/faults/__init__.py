"""Faults: Neo4j, the engine and the manager killed under load; nothing acknowledged lost."""
