// Connect Claude ([data-claude-connect], on the onboarding page and in Settings): the session
// manager runs `claude setup-token` in a PTY, shown here in xterm.js (terminal.js) on the same
// WebSocket bridge as a session's terminal. The sign-in URL it prints is offered as a link; the
// code the sign-in page shows goes back as keystrokes (the field below, or typed into the
// terminal). The manager reads the token from the CLI's output and stores it; it never reaches
// this page. State comes from GET /api/admin/claude every second while a sign-in runs. Plain
// ES5-style JS, no build step.
(function () {
  "use strict";

  var brand = document.querySelector('meta[name="maxy-brand"]').content; // the product name
  var API = "/api/admin/claude";
  var POLL_MS = 1000;
  var SAY = {
    starting: "Starting the Claude sign-in…",
    "waiting-for-code": "Waiting for the code from the Claude sign-in page.",
    connected: "Claude is connected: sessions now use your Claude subscription.",
  };

  function call(url, method) {
    var session = window.maxySession;
    var opts = { method: method || "GET", headers: { Accept: "application/json" }, cache: "no-store" };
    var request = session ? session.fetch(url, opts)
      : window.fetch(url, Object.assign({ credentials: "same-origin" }, opts));
    return request.then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (body) {
        if (!response.ok) {
          throw new Error(body.message || brand + " answered HTTP " + response.status + ".");
        }
        return body;
      });
    });
  }

  function wire(root) {
    function part(name) { return root.querySelector('[data-cc="' + name + '"]'); }
    var el = {
      status: part("status"), error: part("error"), steps: part("steps"), url: part("url"),
      form: part("form"), code: part("code"), terminal: part("terminal"),
      start: part("start"), cancel: part("cancel"),
    };
    var vendor = root.getAttribute("data-vendor") || "";
    var terminal = null;
    var loginId = null;
    var timer = null;

    function say(text) { el.status.textContent = text; }
    function fail(text) {
      el.error.textContent = text || "";
      el.error.hidden = !text;
    }
    function closeTerminal() {
      if (terminal) terminal.then(function (t) { t.close(); }).catch(function () {});
      terminal = null;
      el.terminal.hidden = true;
    }
    function idle(message) {
      window.clearTimeout(timer);
      closeTerminal();
      el.steps.hidden = true;
      el.cancel.hidden = true;
      el.start.hidden = false;
      el.start.disabled = false;
      if (message) fail(message);
    }
    function connected() {
      window.clearTimeout(timer);
      closeTerminal();
      el.steps.hidden = true;
      el.cancel.hidden = true;
      el.start.hidden = true;
      fail("");
      say(SAY.connected);
      root.setAttribute("data-connected", "true");
      var step = root.closest("[data-maxy-step]");
      var next = step && step.querySelector("[data-maxy-next]");
      if (next) next.textContent = "Continue";
      document.dispatchEvent(new CustomEvent("maxy:claude-connected"));
    }

    function show(login) {
      if (login.state === "connected") return connected();
      if (login.state === "starting" || login.state === "waiting-for-code") {
        say(SAY[login.state]);
        if (login.url) {
          el.url.href = login.url;
          el.steps.hidden = false;
        }
        fail(login.error || "");
        timer = window.setTimeout(poll, POLL_MS);
        return null;
      }
      say("Claude is not connected.");
      return idle(login.message || "The sign-in stopped. Start Connect Claude again.");
    }

    function poll() {
      call(API).then(function (body) {
        var login = body.login || {};
        if (body.connected && login.state === "connected") return connected();
        if (login.id !== loginId) return idle("The sign-in was replaced or the manager restarted. Start again.");
        return show(login);
      }).catch(function (err) {
        fail(String(err.message || err));
        timer = window.setTimeout(poll, POLL_MS * 3);
      });
    }

    el.start.addEventListener("click", function () {
      el.start.disabled = true;
      fail("");
      say(SAY.starting);
      call(API + "/login", "POST").then(function (body) {
        var login = body.login;
        loginId = login.id;
        el.start.hidden = true;
        el.cancel.hidden = false;
        el.terminal.hidden = false;
        if (window.maxyTerminal) {
          terminal = window.maxyTerminal.open(el.terminal, loginId, vendor, function (text) {
            if (text && text !== "The session has ended.") fail(text);
          });
          terminal.catch(function (err) { fail(String(err.message || err)); });
        }
        show(login);
      }).catch(function (err) {
        say("Claude is not connected.");
        idle(String(err.message || err));
      });
    });

    el.cancel.addEventListener("click", function () {
      el.cancel.disabled = true;
      call(API + "/login", "DELETE").catch(function () {}).then(function () {
        el.cancel.disabled = false;
        say("Claude is not connected.");
        idle("");
      });
    });

    el.form.addEventListener("submit", function (event) {
      event.preventDefault();
      var code = el.code.value.trim();
      if (!code || !terminal) return;
      terminal.then(function (t) {
        t.input(code + "\r");
        el.code.value = "";
        say("Checking the code…");
      });
    });

    if (root.getAttribute("data-connected") === "true") say(SAY.connected);
    else say("Claude is not connected.");
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-claude-connect]"), wire);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
