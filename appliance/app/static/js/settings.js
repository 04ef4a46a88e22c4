// The Settings page: the API key (checked by the server with one API call before it is stored),
// the PIN and remote password forms, "Sign out other devices" and Disconnect Claude. Connect
// Claude is claude-connect.js's. Plain ES5-style JS, no build step.
(function () {
  "use strict";

  var brand = document.querySelector('meta[name="maxy-brand"]').content; // the product name
  var root = document.getElementById("settings");
  var session = window.maxySession;
  if (!root || !session) return;

  function send(url, method, body) {
    var opts = { method: method, headers: { Accept: "application/json" } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    return session.fetch(url, opts).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (answer) {
        if (!response.ok) {
          throw new Error(answer.message || brand + " answered HTTP " + response.status + ".");
        }
        return answer;
      });
    });
  }

  function tell(box, text, kind) {
    box.textContent = text;
    box.setAttribute("data-kind", kind);
  }

  function busy(form, on) {
    Array.prototype.forEach.call(form.querySelectorAll("button, input"), function (el) {
      el.disabled = on;
    });
  }

  // What the server says about the key and the visitors, here and in the sidebar.
  function showState(state) {
    var keyState = document.getElementById("api-key-state");
    keyState.setAttribute("data-set", String(state.apiKey.set));
    keyState.textContent = state.apiKey.set
      ? "A key is stored (it ends " + state.apiKey.hint + ")."
      : "No key is stored.";
    document.getElementById("api-key-remove").hidden = !state.apiKey.set;
    var visitors = document.getElementById("visitors-state");
    visitors.setAttribute("data-path", state.visitors.path);
    visitors.textContent = state.visitors.message;
    var line = document.getElementById("visitor-status");
    if (line) {
      line.setAttribute("data-path", state.visitors.path);
      line.title = state.visitors.message;
      line.querySelector(".label").textContent = {
        "api-key": "Visitors: answered through the API key",
        claude: "Visitors: answered through Claude",
        none: "Visitors are being turned away",
      }[state.visitors.path];
    }
  }

  var keyForm = document.getElementById("api-key-form");
  var keyInput = document.getElementById("api-key-input");
  var keyMessage = document.getElementById("api-key-message");
  keyForm.addEventListener("submit", function (event) {
    event.preventDefault();
    busy(keyForm, true);
    tell(keyMessage, "Checking the key with Anthropic…", "busy");
    send("/api/admin/settings/anthropic-key", "POST", { key: keyInput.value })
      .then(function (state) {
        keyInput.value = "";
        showState(state);
        tell(keyMessage, "Saved: Anthropic accepted the key.", "ok");
      })
      .catch(function (err) { tell(keyMessage, err.message, "error"); })
      .then(function () { busy(keyForm, false); });
  });
  document.getElementById("api-key-remove").addEventListener("click", function () {
    send("/api/admin/settings/anthropic-key", "DELETE")
      .then(function (state) {
        showState(state);
        tell(keyMessage, "The key is removed.", "ok");
      })
      .catch(function (err) { tell(keyMessage, err.message, "error"); });
  });

  // The PIN and remote password forms: every named input becomes a field of the JSON body.
  Array.prototype.forEach.call(root.querySelectorAll("form[data-settings-form]"), function (form) {
    var message = form.querySelector("[data-form-message]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var body = {};
      new FormData(form).forEach(function (value, name) { body[name] = String(value); });
      busy(form, true);
      tell(message, "", "");
      send(form.getAttribute("data-settings-form"), "POST", body)
        .then(function () {
          form.reset();
          tell(message, form.getAttribute("data-done"), "ok");
        })
        .catch(function (err) { tell(message, err.message, "error"); })
        .then(function () { busy(form, false); });
    });
  });

  // Telegram: the bot's token (checked with Telegram before it is stored), who the owner is,
  // strangers and groups. Every answer is the card's state; the page reloads to show it.
  var tgTokenForm = document.getElementById("telegram-token-form");
  if (tgTokenForm) {
    var tgTokenMessage = document.getElementById("telegram-token-message");
    tgTokenForm.addEventListener("submit", function (event) {
      event.preventDefault();
      busy(tgTokenForm, true);
      tell(tgTokenMessage, "Checking the token with Telegram…", "busy");
      var input = document.getElementById("telegram-token-input");
      send("/api/admin/settings/telegram-token", "POST", { token: input.value })
        .then(function (tg) {
          input.value = "";
          tell(tgTokenMessage, "Saved: Telegram knows this bot as @" + tg.bot.username + ".", "ok");
          window.setTimeout(function () { window.location.reload(); }, 1200);
        })
        .catch(function (err) { tell(tgTokenMessage, err.message, "error"); })
        .then(function () { busy(tgTokenForm, false); });
    });
    document.getElementById("telegram-token-remove").addEventListener("click", function () {
      send("/api/admin/settings/telegram-token", "DELETE")
        .then(function () { window.location.reload(); })
        .catch(function (err) { tell(tgTokenMessage, err.message, "error"); });
    });
    var tgForm = document.getElementById("telegram-form");
    var tgMessage = document.getElementById("telegram-message");
    var saveTelegram = function (body, done) {
      send("/api/admin/settings/telegram", "POST", body)
        .then(function () {
          tell(tgMessage, done, "ok");
          window.setTimeout(function () { window.location.reload(); }, 800);
        })
        .catch(function (err) { tell(tgMessage, err.message, "error"); });
    };
    tgForm.addEventListener("submit", function (event) {
      event.preventDefault();
      var owners = document.getElementById("telegram-owners").value
        .split(/[\s,]+/).filter(function (id) { return id; });
      var groups = {};
      Array.prototype.forEach.call(tgForm.querySelectorAll("select[data-group]"), function (el) {
        groups[el.getAttribute("data-group")] = el.value;
      });
      saveTelegram({
        ownerIds: owners,
        strangers: document.getElementById("telegram-strangers").value,
        groups: groups,
      }, "Saved.");
    });
    Array.prototype.forEach.call(document.querySelectorAll("button[data-owner]"), function (button) {
      button.addEventListener("click", function () {
        var owners = document.getElementById("telegram-owners").value
          .split(/[\s,]+/).filter(function (id) { return id; });
        owners.push(button.getAttribute("data-owner"));
        saveTelegram({ ownerIds: owners }, "Saved: that account is yours now.");
      });
    });
  }

  // WhatsApp: link (the QR code is drawn by the server; polled while pairing), unlink, settings.
  var waForm = document.getElementById("whatsapp-form");
  if (waForm) {
    var waMessage = document.getElementById("whatsapp-message");
    var waState = document.getElementById("whatsapp-state");
    var reload = function () { window.location.reload(); };
    document.getElementById("whatsapp-link").addEventListener("click", function () {
      send("/api/admin/settings/whatsapp-link", "POST").then(reload)
        .catch(function (err) { tell(waMessage, err.message, "error"); });
    });
    document.getElementById("whatsapp-unlink").addEventListener("click", function () {
      if (!window.confirm("Unlink WhatsApp from this device?")) return;
      send("/api/admin/settings/whatsapp-link", "DELETE").then(reload)
        .catch(function (err) { tell(waMessage, err.message, "error"); });
    });
    waForm.addEventListener("submit", function (event) {
      event.preventDefault();
      var groups = {};
      Array.prototype.forEach.call(waForm.querySelectorAll("select[data-group]"), function (el) {
        groups[el.getAttribute("data-group")] = el.value;
      });
      send("/api/admin/settings/whatsapp", "POST", {
        ownerIds: document.getElementById("whatsapp-owners").value
          .split(",").map(function (n) { return n.trim(); }).filter(function (n) { return n; }),
        strangers: document.getElementById("whatsapp-strangers").value,
        groups: groups,
      })
        .then(function () { tell(waMessage, "Saved.", "ok"); window.setTimeout(reload, 800); })
        .catch(function (err) { tell(waMessage, err.message, "error"); });
    });
    // While a link is on its way, follow it: a new code replaces the old; another state reloads.
    var shown = waState.getAttribute("data-state");
    var linking = !document.getElementById("whatsapp-unlink").hidden && shown !== "connected";
    if (linking) {
      window.setInterval(function () {
        send("/api/admin/settings/whatsapp", "GET").then(function (wa) {
          if (wa.state !== shown) reload();
          else if (wa.qrSvg) document.getElementById("whatsapp-qr").innerHTML = wa.qrSvg;
        }).catch(function () {});
      }, 3000);
    }
  }

  var signOut = document.getElementById("sign-out-others");
  var signOutMessage = document.getElementById("sign-out-message");
  signOut.addEventListener("click", function () {
    signOut.disabled = true;
    Promise.resolve(session.rotate())
      .then(function () {
        tell(signOutMessage, "Every other device is logged out; this one stays logged in.", "ok");
      })
      .catch(function (err) { tell(signOutMessage, String(err.message || err), "error"); })
      .then(function () { signOut.disabled = false; });
  });

  var disconnect = document.getElementById("settings-disconnect");
  if (disconnect) {
    disconnect.addEventListener("click", function () {
      if (!window.confirm("Disconnect Claude? Running sessions are stopped.")) return;
      disconnect.disabled = true;
      send("/api/admin/claude", "DELETE")
        .then(function () { window.location.reload(); })
        .catch(function (err) {
          disconnect.disabled = false;
          window.alert("Claude could not be disconnected: " + err.message);
        });
    });
  }
  // Once Connect Claude succeeds, the page (and the sidebar) show the new state.
  document.addEventListener("maxy:claude-connected", function () {
    window.setTimeout(function () { window.location.reload(); }, 1500);
  });
})();
