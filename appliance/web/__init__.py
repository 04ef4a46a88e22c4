"""Shared by the edge and the app: client classification, cookies, credentials, throttling."""
