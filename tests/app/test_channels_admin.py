"""The Settings page's Telegram and WhatsApp cards and the /bot page against a real `maxy app`,
Telegram replaced by the local Bot API: a token is checked before it is stored (0600, never
shown); a bad one stores nothing; the allow-list and the rest are validated and kept; /bot shows
the bot's link and its QR code (SVG drawn by the app, no script, no CDN) only while the bot runs.
WhatsApp's card draws the pairing code (written by `maxy channels`) as SVG, takes the owner's
numbers as people type them, and unlinks."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from appliance.channels import config as channel_config
from appliance.channels import status as channel_status
from appliance.channels.whatsapp import linking
from tests.app.running_app import edge_headers
from tests.fakes.telegram_api import BOT_USERNAME, TOKEN, FakeTelegram
from tests.support.stacks import Stack, sessions_stack

LAN = edge_headers()
PUBLIC = edge_headers(network="external", ip="203.0.113.9")


@pytest.fixture(scope="module")
def api() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake


@pytest.fixture(scope="module")
def stack(api: FakeTelegram, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("telegram-settings")
    with sessions_stack(root, "app", MAXY_TELEGRAM_API_URL=api.url) as running:
        yield running


@pytest.fixture
def admin(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client(stack.admin_cookies(), **LAN) as client:
        client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
        yield client
    stack.env.settings.telegram_token_path.unlink(missing_ok=True)


def telegram(client: httpx.Client) -> dict[str, Any]:
    answer = client.get("/api/admin/settings")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()["telegram"]
    return body


def test_a_token_telegram_accepts_is_stored_0600_and_never_shown(
    stack: Stack, admin: httpx.Client, api: FakeTelegram
) -> None:
    assert telegram(admin)["tokenSet"] is False
    answer = admin.post("/api/admin/settings/telegram-token", json={"token": f"  {TOKEN}  "})
    assert answer.status_code == 200, answer.text
    assert answer.json()["tokenSet"] is True and TOKEN not in answer.text
    path = stack.env.settings.telegram_token_path
    assert path.read_text().strip() == TOKEN and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert api.methods()[-1] == "getMe"
    page = admin.get("/admin/settings")
    assert page.status_code == 200 and TOKEN not in page.text and 'data-token="true"' in page.text
    assert TOKEN not in stack.output()
    removed = admin.delete("/api/admin/settings/telegram-token")
    assert removed.json()["tokenSet"] is False and not path.exists()


@pytest.mark.parametrize(
    ("token", "status", "code"),
    [
        ("not a token", 400, "invalid-token"),
        ("123:short", 400, "invalid-token"),
        ("555555555:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0", 400, "invalid-token"),  # refused
    ],
)
def test_a_token_that_is_not_one_or_that_telegram_refuses_stores_nothing(
    stack: Stack, admin: httpx.Client, token: str, status: int, code: str
) -> None:
    answer = admin.post("/api/admin/settings/telegram-token", json={"token": token})
    assert answer.status_code == status and answer.json()["code"] == code
    assert "Nothing was saved" in answer.json()["message"] or "not a bot token" in answer.text
    assert not stack.env.settings.telegram_token_path.exists()
    assert token not in stack.output()


def test_an_unreachable_telegram_leaves_the_token_unchecked_and_unsaved(
    stack: Stack, admin: httpx.Client, api: FakeTelegram
) -> None:
    api.fail("getMe", 502, "Bad Gateway")
    answer = admin.post("/api/admin/settings/telegram-token", json={"token": TOKEN})
    assert answer.status_code == 502 and answer.json()["code"] == "token-unchecked"
    assert not stack.env.settings.telegram_token_path.exists()


def test_the_allow_list_and_the_rest_are_validated_and_kept(
    stack: Stack, admin: httpx.Client
) -> None:
    folder = stack.env.settings.channels_dir
    good = {"ownerIds": ["42", 77], "strangers": "silent", "groups": {"-1001": "all"}}
    answer = admin.post("/api/admin/settings/telegram", json=good)
    assert answer.status_code == 200, answer.text
    assert answer.json()["ownerIds"] == ["42", "77"] and answer.json()["strangers"] == "silent"
    kept = channel_config.load(folder, "telegram")
    assert kept.owner_ids == ("42", "77") and kept.group_mode("-1001") == "all"
    for bad, needle in (
        ({"ownerIds": ["me; rm -rf /"]}, "not a user id"),
        ({"strangers": "everyone"}, "strangers must be one of"),
        ({"groups": {"-1001": "sometimes"}}, "the mode must be one of"),
        ({"admins": ["1"]}, "Unknown settings: admins"),
    ):
        refused = admin.post("/api/admin/settings/telegram", json=bad)
        assert refused.status_code == 400 and needle in refused.json()["message"], refused.text
    assert json.loads((folder / "telegram.json").read_text())["ownerIds"] == ["42", "77"]
    assert admin.post("/api/admin/settings/telegram", json={"ownerIds": []}).status_code == 200


def test_the_settings_need_an_admin_login_and_the_csrf_header(stack: Stack) -> None:
    with stack.client(**LAN) as anonymous:
        answer = anonymous.post("/api/admin/settings/telegram", json={"ownerIds": ["1"]})
        assert answer.status_code in (401, 403)
    with stack.client(stack.admin_cookies(), **LAN) as no_csrf:
        answer = no_csrf.post("/api/admin/settings/telegram", json={"ownerIds": ["1"]})
        assert answer.status_code == 403


def test_bot_shows_the_bots_link_and_qr_code_only_while_it_runs(stack: Stack) -> None:
    folder = stack.env.settings.channels_dir
    folder.mkdir(parents=True, exist_ok=True)
    status = folder / "telegram-status.json"
    with stack.client(**PUBLIC) as visitor:
        status.write_text(json.dumps({"state": "token-invalid", "bot": None}))
        assert 'data-testid="telegram-bot"' not in visitor.get("/bot").text
        bot = {"id": 1, "username": BOT_USERNAME, "name": "Maxy"}
        status.write_text(json.dumps({"state": "polling", "bot": bot}))
        page = visitor.get("/bot")
    assert page.status_code == 200
    assert f'href="https://t.me/{BOT_USERNAME}"' in page.text
    qr = page.text[page.text.index('<div class="qr"') :]
    assert "<svg" in qr[:400] and "<path" in qr and "<script" not in qr
    assert "cdn" not in page.text.lower()


# --- the WhatsApp card ----------------------------------------------------------------------


def test_the_whatsapp_card_links_shows_the_code_as_svg_and_keeps_the_owners_numbers(
    stack: Stack, admin: httpx.Client
) -> None:
    folder = stack.env.settings.channels_dir
    card = admin.get("/api/admin/settings/whatsapp").json()
    assert (card["linked"], card["linkRequested"], card["strangers"]) == (False, False, "silent")
    assert admin.post("/api/admin/settings/whatsapp-link").json()["linkRequested"] is True
    # What `maxy channels` writes while pairing: a code to scan (0600), the state.
    code = "2@Q0RFRkdISUpLTE1OT1BRUlNUVVZXWFla,bm9pc2VLZXk=,aWRlbnRpdHk="
    linking.set_qr(folder, code)
    channel_status.Status(folder, "whatsapp", state="pairing").write()
    page = admin.get("/admin/settings")
    assert page.status_code == 200 and 'data-state="pairing"' in page.text
    qr = page.text.split('data-testid="whatsapp-qr"')[1][:400]
    assert "<svg" in qr, qr
    assert code not in page.text
    assert stat.S_IMODE((folder / "whatsapp" / "qr").stat().st_mode) == 0o600
    assert code not in stack.output()
    # The owner's numbers as people type them; anything else refused, nothing kept.
    saved = admin.post(
        "/api/admin/settings/whatsapp",
        json={"ownerIds": ["+49 170 123-4567"], "strangers": "public"},
    )
    assert saved.status_code == 200, saved.text
    assert saved.json()["ownerIds"] == ["491701234567"]
    bad = admin.post("/api/admin/settings/whatsapp", json={"ownerIds": ["call me maybe"]})
    assert bad.status_code == 400 and "country code" in bad.json()["message"]
    kept = channel_config.load(folder, "whatsapp", "silent")
    assert kept.owner_ids == ("491701234567",) and kept.strangers == "public"
    # Unlinked before any session: the link request and the code are gone.
    gone = admin.delete("/api/admin/settings/whatsapp-link").json()
    assert (gone["linkRequested"], gone["qrSvg"]) == (False, None)
    assert linking.qr(folder) is None
    (folder / "whatsapp.json").unlink()
