"""Helpers the tests share: processes (``processes``) and Server-Sent Events (``sse``).

Import from here, not from ``tests.conftest``: conftest only holds fixtures.
"""
