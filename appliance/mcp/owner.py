"""Who may call the admin plugin's tools, and on what: the caller's own account, as its owner.

Every admin tool starts here. The account is the caller's (``ACCOUNT_ID`` of the session,
never an argument) and must exist on disk; a public caller (a visitor's session: narrowed scopes
or an agent slug) is refused even though its server would not list these tools. Tools about the
device as a whole (its roles, logs and sessions) also need the caller's account to be the one
the device serves (``MAXY_ACCOUNT_ID``): the manager and the logs belong to that account.
"""

from __future__ import annotations

from appliance.core.accounts import Account, AccountError, BrandMissing, validate_account_id
from appliance.mcp.tool import ToolContext, ToolError


def account_of(context: ToolContext) -> Account:
    """The caller's account, checked on disk; refused for a public caller."""
    caller = context.caller
    if caller.scopes is not None or caller.agent is not None:
        raise ToolError(
            "The admin tools are for the owner's own sessions, not a public agent's.",
            code="owner-only",
        )
    try:
        return validate_account_id(context.settings.accounts_dir, caller.account_id)
    except AccountError as err:
        raise ToolError(f"This session's account cannot be used: {err}", code="account") from err


def device_account(context: ToolContext) -> Account:
    """:func:`account_of`, and it is the account this device serves."""
    account = account_of(context)
    if account.id != context.settings.account_id:
        raise ToolError(
            f"The account {account.id} is not the one this device serves; its roles, logs and "
            "sessions are not this session's to see.",
            code="other-account",
        )
    return account


def product_name(account: Account) -> str:
    """The brand's product name; a missing one is a hard error that says how to set it."""
    try:
        return account.product_name()
    except BrandMissing as err:
        raise ToolError(str(err), code="brand-missing") from err
