"""What every part of the web app is given: settings, the account, clients of the other roles."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core.accounts import Account
from appliance.core.config import Settings
from appliance.rpc.client import RpcClient


@dataclass
class AppContext:
    """Built once by :func:`appliance.app.main.create_app` and passed to each route module."""

    settings: Settings
    account: Account
    engine: RpcClient
