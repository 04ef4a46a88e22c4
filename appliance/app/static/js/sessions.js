// The sessions list, live over Server-Sent Events (/api/admin/sessions/events), with its
// live-updates dot. The chat pane (chat.js) shows the selected session; "New session" (a new
// admin login session) is shell.js's. Plain ES5-style JS, no build step.
//
// window.maxySessions = {rows, selected, render, api, statusOf, titleOf}. Every change of the
// rows is announced as a "maxy:sessions" event on document (detail.id: the row, or null for a
// snapshot), and a click on a row as "maxy:select" (detail.id) when a chat pane listens, else
// the click opens /?session=<id>.
(function () {
  "use strict";

  var API = "/api/admin/sessions";
  var FEED = API + "/events";
  var RESTARTING = "Server is restarting — reconnect will happen automatically.";
  var LOST = "Lost connection — retrying.";
  var UNTITLED = "Untitled session";

  var list = document.getElementById("session-list");
  var empty = document.getElementById("session-empty");
  var dot = document.getElementById("live-dot");
  var note = document.getElementById("live-note");
  if (!list || !dot || !note || typeof window.EventSource !== "function") return;

  var state = {
    rows: {}, selected: null, chatPane: false,
    render: render, api: api, statusOf: statusOf, titleOf: titleOf,
  };
  window.maxySessions = state;
  var lastEventId = "";
  var source = null;
  var restarting = false;
  var retryTimer = null;

  function api(url, opts) {
    var session = window.maxySession;
    if (session && typeof session.fetch === "function") return session.fetch(url, opts || {});
    return window.fetch(url, Object.assign({ credentials: "same-origin" }, opts || {}));
  }

  function jsonOf(response) {
    return response.json().catch(function () { return {}; });
  }

  // ---- the live-updates dot -------------------------------------------------------------------

  function setLive(mode, message) {
    var label = { live: "connected", reconnecting: "reconnecting" }[mode] || "not connected";
    dot.setAttribute("data-state", mode);
    dot.title = "Live updates: " + label;
    dot.setAttribute("aria-label", "Live updates: " + label);
    note.textContent = message || "";
    note.hidden = !message;
  }

  // Why the feed was refused (EventSource cannot read the answer): ask the list once.
  function explain() {
    var opts = { credentials: "same-origin", headers: { Accept: "application/json" }, cache: "no-store" };
    return window
      .fetch(API, opts)
      .then(function (response) { return response.ok ? {} : jsonOf(response); })
      .catch(function () { return {}; })
      .then(function (body) {
        if (body.code === "app-restarting") restarting = true;
        if (restarting) return RESTARTING;
        if (body.code === "manager-unavailable" && body.message) return body.message;
        if (body.code === "login-required" || body.code === "session-rotated") {
          return "Your admin session ended. Reload the page to log in again.";
        }
        return LOST;
      });
  }

  // ---- the feed ---------------------------------------------------------------------------------

  function on(name, handler) {
    source.addEventListener(name, function (event) {
      if (event.lastEventId) lastEventId = event.lastEventId;
      var data;
      try { data = JSON.parse(event.data); } catch (err) { return; }
      handler(data);
    });
  }

  function connect() {
    window.clearTimeout(retryTimer);
    // A new EventSource cannot send Last-Event-ID; the feed also reads it from the query.
    var url = lastEventId ? FEED + "?lastEventId=" + encodeURIComponent(lastEventId) : FEED;
    source = new window.EventSource(url);
    source.addEventListener("open", function () {
      restarting = false;
      setLive("live", "");
    });
    on("snapshot", function (data) {
      state.rows = {};
      (data.rows || []).forEach(function (row) { state.rows[row.id] = row; });
      changed(null);
    });
    ["row-created", "row-updated", "row-archived"].forEach(function (name) {
      on(name, function (data) {
        if (data.row) state.rows[data.id] = data.row;
        changed(data.id);
      });
    });
    on("row-removed", function (data) {
      delete state.rows[data.id];
      changed(data.id);
    });
    on("restarting", function () {
      restarting = true;
      setLive("reconnecting", RESTARTING);
    });
    source.addEventListener("error", function () {
      if (source.readyState !== window.EventSource.CLOSED) {
        setLive("reconnecting", restarting ? RESTARTING : LOST); // the browser retries itself
        return;
      }
      // Refused (503 while the app or the manager restarts, 401…): the browser gives up; we don't.
      source.close();
      setLive("reconnecting", restarting ? RESTARTING : LOST);
      explain().then(function (message) { setLive("reconnecting", message); });
      retryTimer = window.setTimeout(connect, restarting ? 2000 : 3000);
    });
  }

  // ---- the list ---------------------------------------------------------------------------------

  function titleOf(row) {
    return row.title || UNTITLED;
  }

  function statusOf(row) {
    if (row.state !== "live") return "ended";
    return row.status === "busy" ? "busy" : "idle";
  }

  function startedText(ms) {
    var when = new Date(ms);
    var today = new Date();
    var time = when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    if (when.toDateString() === today.toDateString()) return time;
    return when.toLocaleDateString([], { day: "numeric", month: "short" }) + ", " + time;
  }

  function span(className, text) {
    var node = document.createElement("span");
    node.className = className;
    node.textContent = text;
    return node;
  }

  function item(row) {
    var li = document.createElement("li");
    li.setAttribute("data-state", row.state);
    var button = document.createElement("button");
    button.type = "button";
    button.className = "session-row";
    button.setAttribute("data-id", row.id);
    button.setAttribute("data-testid", "session-row");
    if (row.id === state.selected) button.setAttribute("aria-current", "true");
    button.appendChild(span("session-title", titleOf(row)));
    var meta = span("session-meta", "");
    var status = span("session-status", statusOf(row));
    status.setAttribute("data-status", statusOf(row));
    meta.appendChild(status);
    if (row.startedAt) {
      var time = document.createElement("time");
      time.dateTime = new Date(row.startedAt).toISOString();
      time.textContent = startedText(row.startedAt);
      meta.appendChild(time);
    }
    button.appendChild(meta);
    li.appendChild(button);
    return li;
  }

  function render() {
    var filter = list.getAttribute("data-filter") || "active";
    var all = Object.keys(state.rows)
      .map(function (id) { return state.rows[id]; })
      .filter(function (row) { return !row.hidden; });
    var shown = all.filter(function (row) {
      return filter === "all" || (filter === "active") === (row.state === "live");
    });
    shown.sort(function (a, b) {
      return (b.startedAt || 0) - (a.startedAt || 0) || (a.id < b.id ? -1 : 1);
    });
    list.textContent = "";
    shown.forEach(function (row) { list.appendChild(item(row)); });
    if (empty) {
      empty.hidden = shown.length > 0;
      empty.textContent = all.length ? "No " + filter + " sessions" : "No sessions yet";
    }
  }

  function changed(id) {
    render();
    document.dispatchEvent(new CustomEvent("maxy:sessions", { detail: { id: id } }));
  }

  new MutationObserver(render).observe(list, { attributes: true, attributeFilter: ["data-filter"] });

  list.addEventListener("click", function (event) {
    var button = event.target.closest("[data-id]");
    if (!button) return;
    var id = button.getAttribute("data-id");
    if (state.chatPane) {
      document.dispatchEvent(new CustomEvent("maxy:select", { detail: { id: id } }));
    } else {
      window.location.assign("/?session=" + encodeURIComponent(id));
    }
  });

  connect();
})();
