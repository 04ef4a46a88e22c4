// The admin shell: resizable panes (widths remembered), the drawer on small screens, the mode
// menu, the owner's menu (Settings, Disconnect Claude, Log out) and the session tabs. "New
// session" starts a Claude session (chat.js). Plain ES5-style JS, no build step.
(function () {
  "use strict";

  var root = document.documentElement;
  var shell = document.getElementById("shell");
  if (!shell) return;

  var STORE = { sidebar: "maxy.layout.sidebar", artefacts: "maxy.layout.artefacts", mode: "maxy.mode" };
  var LIMITS = { sidebar: [200, 420], artefacts: [240, 640] };

  function load(key) {
    try { return window.localStorage.getItem(key); } catch (err) { return null; }
  }
  function save(key, value) {
    try { window.localStorage.setItem(key, value); } catch (err) { /* private mode: not kept */ }
  }
  function clamp(value, range) { return Math.max(range[0], Math.min(range[1], value)); }

  function applyWidth(which, px) {
    var width = clamp(Math.round(px), LIMITS[which]);
    root.style.setProperty("--" + which + "-w", width + "px");
    return width;
  }

  ["sidebar", "artefacts"].forEach(function (which) {
    var stored = parseInt(load(STORE[which]) || "", 10);
    if (!isNaN(stored)) applyWidth(which, stored);
  });

  // Drag (pointer) or arrow keys on a separator resize the pane next to it.
  function resizer(handle, which) {
    if (!handle) return;
    var pane = document.getElementById(which === "sidebar" ? "sidebar" : "artefacts");
    function widthAt(clientX) {
      return which === "sidebar" ? clientX : window.innerWidth - clientX;
    }
    handle.addEventListener("pointerdown", function (event) {
      event.preventDefault();
      handle.setPointerCapture(event.pointerId);
      handle.classList.add("dragging");
      document.body.style.userSelect = "none";
      function move(e) { applyWidth(which, widthAt(e.clientX)); }
      function up() {
        handle.classList.remove("dragging");
        document.body.style.userSelect = "";
        handle.removeEventListener("pointermove", move);
        handle.removeEventListener("pointerup", up);
        handle.removeEventListener("pointercancel", up);
        save(STORE[which], String(Math.round(pane.getBoundingClientRect().width)));
      }
      handle.addEventListener("pointermove", move);
      handle.addEventListener("pointerup", up);
      handle.addEventListener("pointercancel", up);
    });
    handle.addEventListener("keydown", function (event) {
      var step = event.shiftKey ? 40 : 10;
      var delta = { ArrowLeft: -step, ArrowRight: step }[event.key];
      if (!delta) return;
      event.preventDefault();
      if (which === "artefacts") delta = -delta;
      var width = applyWidth(which, pane.getBoundingClientRect().width + delta);
      save(STORE[which], String(width));
    });
  }
  resizer(document.getElementById("sidebar-resizer"), "sidebar");
  resizer(document.getElementById("divider"), "artefacts");

  // The drawer (≤720 px): a toggle in the top bar, a scrim, Escape to close.
  var toggle = document.getElementById("drawer-toggle");
  var scrim = document.getElementById("scrim");
  var sidebar = document.getElementById("sidebar");
  function setDrawer(open) {
    document.body.classList.toggle("drawer-open", open);
    if (toggle) {
      toggle.setAttribute("aria-expanded", String(open));
      toggle.setAttribute("aria-label", open ? "Close navigation" : "Open navigation");
    }
    if (scrim) scrim.hidden = !open;
    if (open) {
      var first = sidebar.querySelector("a, button");
      if (first) first.focus();
    }
  }
  if (toggle) toggle.addEventListener("click", function () {
    setDrawer(!document.body.classList.contains("drawer-open"));
  });
  if (scrim) scrim.addEventListener("click", function () { setDrawer(false); });
  var closer = document.getElementById("drawer-close");
  if (closer) closer.addEventListener("click", function () { setDrawer(false); if (toggle) toggle.focus(); });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && document.body.classList.contains("drawer-open")) {
      setDrawer(false);
      if (toggle) toggle.focus();
    }
  });
  window.matchMedia("(min-width: 721px)").addEventListener("change", function (query) {
    if (query.matches) setDrawer(false);
  });

  // A menu behind a button: opens on click, arrows move, Escape and a click outside close it.
  function menuButton(trigger, menu, itemSelector, onPick) {
    function open(show) {
      menu.hidden = !show;
      trigger.setAttribute("aria-expanded", String(show));
      if (show) {
        var current = menu.querySelector('[aria-checked="true"]') || menu.querySelector(itemSelector);
        if (current) current.focus();
      }
    }
    trigger.addEventListener("click", function () { open(menu.hidden); });
    menu.addEventListener("click", function (event) {
      var item = event.target.closest(itemSelector);
      if (!item) return;
      open(false);
      trigger.focus();
      onPick(item, event);
    });
    menu.addEventListener("keydown", function (event) {
      var items = Array.prototype.slice.call(menu.querySelectorAll(itemSelector));
      var index = items.indexOf(document.activeElement);
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        var next = (index + (event.key === "ArrowDown" ? 1 : items.length - 1)) % items.length;
        items[next].focus();
      } else if (event.key === "Escape") {
        open(false);
        trigger.focus();
      }
    });
    document.addEventListener("click", function (event) {
      if (!menu.hidden && !menu.parentNode.contains(event.target)) open(false);
    });
  }

  // The mode menu: the permission mode new sessions start in (kept in this browser). Its items
  // are the server's (the CLI's mode names, the device default first), so the label shown is the
  // mode the spawn asks for: chat.js sends shell[data-mode] as the spawn's permissionMode.
  var trigger = document.getElementById("mode-trigger");
  var menu = document.getElementById("mode-menu");
  var label = document.getElementById("mode-label");
  function setMode(mode) {
    var chosen = menu.querySelector('[data-mode="' + mode + '"]') ||
      menu.querySelector('[data-mode="' + menu.getAttribute("data-default") + '"]');
    if (!chosen) return;
    menu.querySelectorAll("[data-mode]").forEach(function (item) {
      item.setAttribute("aria-checked", String(item === chosen));
    });
    var small = chosen.querySelector("small");
    label.textContent = chosen.getAttribute("data-label");
    trigger.title = "How new sessions may act: " + chosen.getAttribute("data-label") +
      (small ? " — " + small.textContent : "");
    shell.setAttribute("data-mode", chosen.getAttribute("data-mode"));
    save(STORE.mode, chosen.getAttribute("data-mode"));
  }
  if (trigger && menu) {
    setMode(load(STORE.mode) || menu.getAttribute("data-default"));
    menuButton(trigger, menu, "[data-mode]", function (item) {
      setMode(item.getAttribute("data-mode"));
    });
  }

  // The owner's menu: Settings, Disconnect Claude (stops running sessions), Log out.
  var account = document.getElementById("account-trigger");
  var accountMenu = document.getElementById("account-menu");
  if (account && accountMenu) {
    menuButton(account, accountMenu, '[role="menuitem"]', function (item, event) {
      var session = window.maxySession;
      if (item.id === "menu-logout" && session) {
        event.preventDefault();
        session.logout();
      } else if (item.id === "menu-disconnect-claude" && session) {
        event.preventDefault();
        if (!window.confirm("Disconnect Claude? Running sessions are stopped, and new ones " +
          "cannot use your Claude subscription until you connect it again.")) return;
        session.fetch("/api/admin/claude", { method: "DELETE", headers: { Accept: "application/json" } })
          .then(function (response) {
            if (!response.ok) throw new Error("HTTP " + response.status);
            window.location.reload();
          })
          .catch(function (err) { window.alert("Claude could not be disconnected: " + err.message); });
      }
    });
  }

  // Session tabs: Active / Archived / All. The list fills once the session manager exists.
  var tabs = document.querySelectorAll(".tabs [data-filter]");
  var list = document.getElementById("session-list");
  tabs.forEach(function (tab) {
    tab.addEventListener("click", function () {
      tabs.forEach(function (other) { other.setAttribute("aria-selected", String(other === tab)); });
      if (list) list.setAttribute("data-filter", tab.getAttribute("data-filter"));
    });
  });

  // The one way pages call the admin JSON API: through maxySession when it is loaded (it adds
  // the CSRF header to changes). options: {method, body} — body is sent as JSON.
  window.maxyApi = function (url, options) {
    options = options || {};
    var session = window.maxySession;
    var init = { method: options.method || "GET", headers: { Accept: "application/json" } };
    if (options.body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(options.body);
    }
    var request = session && typeof session.fetch === "function"
      ? session.fetch(url, init)
      : window.fetch(url, Object.assign({ credentials: "same-origin" }, init));
    return request.then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (body) {
        if (!response.ok) {
          var error = new Error(body.message || "The server answered HTTP " + response.status + ".");
          error.code = body.code || "http-" + response.status;
          error.status = response.status;
          throw error;
        }
        return body;
      });
    });
  };

  // Shared by the Data and Graph pages: the "Vector ranking unavailable" banner, shown while
  // any source (the engine's health, the last search) says the embedding model is down.
  var vectorDown = {};
  window.maxyVectorBanner = function (source, down) {
    vectorDown[source] = Boolean(down);
    var banner = document.getElementById("vector-banner");
    if (!banner) return;
    banner.hidden = !Object.keys(vectorDown).some(function (key) { return vectorDown[key]; });
  };
  if (document.getElementById("vector-banner")) {
    window.maxyApi("/api/admin/health").then(function (health) {
      window.maxyVectorBanner("health", Boolean(health.embedder && health.embedder.ok === false));
    }).catch(function () { /* the page's own calls report an unreachable engine */ });
  }

  // Remote access (the Cloudflare tunnel): off, connected, not connected or unknown.
  var tunnel = document.getElementById("tunnel-status");
  if (tunnel) {
    window.maxyApi("/api/admin/tunnel").then(function (state) {
      var word = "off";
      if (state.configured) {
        word = state.connected === true ? "connected"
          : state.connected === false ? "not connected" : "starting";
      }
      tunnel.dataset.state = word.replace(" ", "-");
      tunnel.querySelector(".label").textContent = "Remote access: " + word;
    }).catch(function () {
      tunnel.querySelector(".label").textContent = "Remote access: unknown";
    });
  }
})();
