"""The Plugins page: what the admin agent can do, and turning the optional plugins on and off.

Routes (admin only; the auth middleware checks the login and, on a change, the CSRF header)::

    GET /admin/plugins                   the page
    GET /api/admin/plugins               {"plugins": [plugin], "missingPlugins", "note"}
    PUT /api/admin/plugins/{name}        {"enabled": true|false} → {"plugin", "changed",
                                          "message", "missingPlugins"}

A plugin is :meth:`appliance.plugins.format.Plugin.summary` with ``enabled`` and ``missing``
(on, but its files are gone), every text with ``{{productName}}`` filled in. The plugins are
read by :func:`appliance.plugins.resolver.resolve` and changed by its ``set_enabled``
(account.json's ``enabledPlugins``): a change reaches the sessions started after it; the
running ones keep the plugins they started with. A name ``enabledPlugins`` lists but no root
has can be turned off.

Errors are ``{code, message}``: 400 ``bad-request`` (no boolean ``enabled``), 404
``no-such-plugin``, 409 ``plugin-locked`` (core plugins are always on), 503 ``plugins-refused``
(the plugins on disk cannot be read or are refused, as a session spawn would answer).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from appliance.app.context import AppContext
from appliance.app.pages import SECTIONS, brand_of, json_api, render
from appliance.core.accounts import fill_brand
from appliance.plugins.errors import PluginError, PluginLocked, PluginNotFound
from appliance.plugins.format import NAME, Plugin, missing_files
from appliance.plugins.resolver import Installed, resolve, set_enabled, write_enabled
from appliance.web.bodies import json_object
from appliance.web.errors import ApiError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256
#: Where a change lands; the page and every change's answer say it.
NOTE = (
    "Changes take effect from the next session: sessions already running keep the plugins "
    "they started with."
)
#: The roots in the order the page shows them, with their headings.
ROOTS = {
    "core": "Built in — always on",
    "premium": "Premium",
    "account": "Yours",
}


def filled(value: Any, product: str) -> Any:
    """``value`` with ``{{productName}}`` filled in every string it holds."""
    if isinstance(value, str):
        return fill_brand(value, product)
    if isinstance(value, list):
        return [filled(item, product) for item in value]
    if isinstance(value, dict):
        return {key: filled(item, product) for key, item in value.items()}
    return value


def entry(plugin: Plugin, installed: Installed, product: str) -> dict[str, Any]:
    """One plugin as the page and the API show it."""
    enabled = plugin.locked or plugin.name in installed.enabled_names
    shown = {
        **plugin.summary(),
        "enabled": enabled,
        "missing": enabled and bool(missing_files(plugin)),
    }
    return {key: filled(value, product) for key, value in shown.items()}


def listing(installed: Installed, product: str) -> dict[str, Any]:
    """Every installed plugin, the enabled ones that are gone, and where a change lands."""
    return {
        "plugins": [entry(p, installed, product) for p in installed.plugins],
        "missingPlugins": installed.missing(),
        "note": NOTE,
    }


def refused(err: PluginError) -> ApiError:
    """The answer when the plugins on disk cannot be read: what is wrong, what to do."""
    return ApiError(
        503,
        "plugins-refused",
        f"The plugins cannot be read ({err}). No session starts until this is fixed: correct "
        "or remove the plugin folder named there, then reload this page.",
    )


def toggled(name: str, on: bool, changed: bool) -> str:
    """What a change did, in a sentence, and when it applies."""
    state = "on" if on else "off"
    done = f"{name} is now {state}." if changed else f"{name} was already {state}."
    return f"{done} {NOTE}"


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The Plugins page and its API (registered before the pages' /admin catch-all)."""
    settings, account_id = ctx.settings, ctx.account.id
    changing = asyncio.Lock()  # account.json is read, changed and written whole

    async def installed_now() -> Installed:
        try:
            return await run_in_threadpool(resolve, settings, account_id)
        except PluginError as err:
            log.warning("[plugins] op=list error=%r", str(err))
            raise refused(err) from err

    async def page(request: Request) -> Response:
        try:
            found: dict[str, Any] = listing(await installed_now(), brand_of(ctx))
            error = None
        except ApiError as err:
            found, error = {"plugins": [], "missingPlugins": [], "note": NOTE}, err.message
        return render(
            ctx,
            request,
            "plugins.html",
            "Plugins",
            admin=True,
            section="plugins",
            sections=SECTIONS,
            roots=ROOTS,
            error=error,
            **found,
        )

    async def show(request: Request) -> dict[str, Any]:
        return listing(await installed_now(), brand_of(ctx))

    def change(name: str, on: bool) -> tuple[Installed, bool]:
        before = resolve(settings, account_id)
        if not on and name in before.unknown:  # listed, but no root has it any more
            write_enabled(settings, account_id, before.enabled_names - {name})
            return resolve(settings, account_id), True
        plugin = before.get(name)
        was = plugin.locked or name in before.enabled_names
        after = set_enabled(settings, account_id, name, on)
        return after, was != on

    async def switch(request: Request) -> dict[str, Any]:
        name = request.path_params["name"]
        data = await json_object(request, limit=MAX_BODY_BYTES, what="the change")
        on = data.get("enabled")
        if not isinstance(on, bool):
            raise ApiError(400, "bad-request", 'Send {"enabled": true} or {"enabled": false}.')
        product = brand_of(ctx)
        if not NAME.match(name):
            raise ApiError(404, "no-such-plugin", f"There is no plugin {name!r}.")
        async with changing:
            try:
                installed, changed = await run_in_threadpool(change, name, on)
            except PluginLocked as err:
                raise ApiError(
                    409,
                    "plugin-locked",
                    f"{name} is built into {product} and always on; only the other plugins can "
                    "be turned off.",
                ) from err
            except PluginNotFound as err:
                raise ApiError(404, "no-such-plugin", str(err)) from err
            except PluginError as err:
                log.warning("[plugins] op=switch plugin=%s error=%r", name, str(err))
                raise refused(err) from err
        log.info("[plugins] op=switch plugin=%s enabled=%s changed=%s", name, on, changed)
        plugin = next((p for p in installed.plugins if p.name == name), None)
        return {
            "plugin": entry(plugin, installed, product) if plugin else None,
            "changed": changed,
            "message": toggled(name, on, changed),
            "missingPlugins": installed.missing(),
        }

    return [
        Route("/admin/plugins", page, methods=["GET"]),
        Route("/api/admin/plugins", json_api(show), methods=["GET"]),
        Route("/api/admin/plugins/{name}", json_api(switch), methods=["PUT"]),
    ]
