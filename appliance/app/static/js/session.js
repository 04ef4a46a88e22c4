// The admin session in the browser: CSRF header, "Sign out other devices", log out, and the
// login/onboarding forms.
//
// window.maxySession.fetch(url, opts) is window.fetch plus the X-Maxy-CSRF header on state-changing
// requests. The token comes from <meta name="maxy-csrf"> or GET /api/admin/session. When a request
// is refused because the session was renewed elsewhere (401 session-rotated) or the token is stale
// (403 csrf), the token is fetched again ONCE and the request retried; if that fails too, one
// banner (#session-banner) offers to reload. maxySession.rotate() ("Sign out other devices" in
// Settings) asks for a new session and tells sibling tabs the new token over
// BroadcastChannel("maxy-session"), so they carry on silently.
(function () {
  "use strict";

  var brand = document.querySelector('meta[name="maxy-brand"]').content; // the product name
  var CHANNEL = "maxy-session";
  var BANNER_ID = "session-banner";
  var BANNER_TEXT = "Your admin session was renewed in another tab. Click to reload.";
  var SAFE = { GET: true, HEAD: true, OPTIONS: true };

  var token = null;
  var meta = document.querySelector('meta[name="maxy-csrf"]');
  if (meta && meta.content) token = meta.content;

  var channel = null;
  if (typeof BroadcastChannel === "function") {
    channel = new BroadcastChannel(CHANNEL);
    channel.onmessage = function (event) {
      var data = event.data || {};
      if (data.type === "token" && typeof data.csrf === "string") token = data.csrf;
    };
  }

  function announce(csrf) {
    token = csrf;
    if (channel) channel.postMessage({ type: "token", csrf: csrf });
  }

  function refreshToken() {
    return window
      .fetch("/api/admin/session", {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
        cache: "no-store",
      })
      .then(function (response) {
        if (!response.ok) return null;
        return response.json().then(function (body) {
          token = body.csrf || null;
          return token;
        });
      })
      .catch(function () {
        return null;
      });
  }

  function send(url, opts, csrf) {
    var headers = new Headers(opts.headers || {});
    if (csrf) headers.set("X-Maxy-CSRF", csrf);
    var init = Object.assign({}, opts, { headers: headers, credentials: "same-origin" });
    return window.fetch(url, init);
  }

  // The error code of a 401/403 answer whose token refresh could help, else null.
  function staleCode(response) {
    if (response.status !== 401 && response.status !== 403) return Promise.resolve(null);
    return response
      .clone()
      .json()
      .then(function (body) {
        var code = body && body.code;
        return code === "session-rotated" || code === "csrf" ? code : null;
      })
      .catch(function () {
        return null;
      });
  }

  function showBanner() {
    var banner = document.getElementById(BANNER_ID);
    if (banner) return banner;
    banner = document.createElement("button");
    banner.type = "button";
    banner.id = BANNER_ID;
    banner.className = "session-banner";
    banner.setAttribute("role", "alert");
    banner.textContent = BANNER_TEXT;
    // CSSOM, not a style attribute: allowed by a strict style-src.
    var s = banner.style;
    s.position = "fixed";
    s.left = "0";
    s.right = "0";
    s.top = "0";
    s.zIndex = "2147483647";
    s.padding = "0.75rem 1rem";
    s.border = "0";
    s.font = "inherit";
    s.background = "#fff4ce";
    s.color = "#3b2f00";
    s.cursor = "pointer";
    banner.addEventListener("click", function () {
      window.location.reload();
    });
    document.body.appendChild(banner);
    return banner;
  }

  function maxyFetch(url, opts) {
    opts = opts || {};
    var method = String(opts.method || "GET").toUpperCase();
    var needsToken = !SAFE[method];
    var first = needsToken && !token ? refreshToken() : Promise.resolve(token);
    return first.then(function (csrf) {
      return send(url, opts, needsToken ? csrf : null).then(function (response) {
        return staleCode(response).then(function (code) {
          if (!code) return response;
          return refreshToken().then(function (fresh) {
            if (!fresh) {
              showBanner();
              return response;
            }
            return send(url, opts, needsToken ? fresh : null).then(function (retried) {
              return staleCode(retried).then(function (again) {
                if (again) showBanner();
                return retried;
              });
            });
          });
        });
      });
    });
  }

  function rotate() {
    return maxyFetch("/api/admin/session/rotate", { method: "POST" }).then(function (response) {
      if (!response.ok) throw new Error("New session failed: HTTP " + response.status);
      return response.json().then(function (body) {
        announce(body.csrf);
        return body;
      });
    });
  }

  function logout() {
    return window
      .fetch("/api/auth/logout", { method: "POST", credentials: "same-origin" })
      .then(function () {
        token = null;
        window.location.assign("/login");
      });
  }

  // --- login and onboarding forms (data-maxy-auth="login|setup|remote-password") -------------

  function postJson(url, body, withToken) {
    var opts = {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
    };
    return withToken ? maxyFetch(url, opts) : send(url, opts, null);
  }

  function formValues(form) {
    var values = {};
    new FormData(form).forEach(function (value, name) {
      values[name] = String(value);
    });
    return values;
  }

  function say(form, text) {
    var box = form.querySelector("[data-maxy-message]");
    if (box) box.textContent = text;
  }

  function answer(response) {
    return response
      .json()
      .catch(function () {
        return {};
      })
      .then(function (body) {
        return { response: response, body: body || {} };
      });
  }

  function explain(form, result) {
    var body = result.body;
    var message = body.message || "Something went wrong (HTTP " + result.response.status + ").";
    say(form, message);
  }

  var handlers = {
    login: function (form) {
      var values = formValues(form);
      values.next = form.getAttribute("data-next") || "/";
      return postJson("/api/auth/login", values, false).then(answer).then(function (result) {
        if (result.response.ok) {
          announce(result.body.csrf);
          window.location.assign(result.body.next || "/");
          return;
        }
        explain(form, result);
      });
    },
    setup: function (form) {
      return postJson("/api/auth/pin/setup", formValues(form), false)
        .then(answer)
        .then(function (result) {
          if (!result.response.ok) return explain(form, result);
          announce(result.body.csrf);
          advance(form.closest("[data-maxy-step]"), result.body.next || "/");
        });
    },
    "remote-password": function (form) {
      return postJson("/api/admin/settings/remote-password", formValues(form), true)
        .then(answer)
        .then(function (result) {
          if (!result.response.ok) return explain(form, result);
          say(form, "Saved.");
          var done = form.getAttribute("data-done");
          if (done) window.location.assign(done);
        });
    },
  };

  // Onboarding is a row of steps (PIN, Connect Claude, remote password): show the next one, or
  // go to `done` after the last.
  function advance(step, done) {
    var next = step && step.nextElementSibling;
    while (next && !next.hasAttribute("data-maxy-step")) next = next.nextElementSibling;
    if (!next) {
      window.location.assign(done || "/");
      return;
    }
    step.hidden = true;
    next.hidden = false;
    var input = next.querySelector("input:not([type=hidden]), button");
    if (input) input.focus();
  }

  function wireForms() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-maxy-next]"), function (button) {
      button.addEventListener("click", function () {
        advance(button.closest("[data-maxy-step]"), "/");
      });
    });
    var forms = document.querySelectorAll("form[data-maxy-auth]");
    Array.prototype.forEach.call(forms, function (form) {
      var handler = handlers[form.getAttribute("data-maxy-auth")];
      if (!handler) return;
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        var button = form.querySelector('button[type="submit"]');
        if (button) button.disabled = true;
        say(form, "");
        handler(form)
          .catch(function () {
            say(form, brand + " did not answer. Check the connection and try again.");
          })
          .then(function () {
            if (button) button.disabled = false;
          });
      });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", wireForms);
  } else {
    wireForms();
  }

  window.maxySession = {
    fetch: maxyFetch,
    rotate: rotate,
    logout: logout,
    token: function () {
      return token;
    },
    refreshToken: refreshToken,
  };
})();
