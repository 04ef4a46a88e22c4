// The Plugins page: each optional plugin's switch turns it on or off (PUT /api/admin/plugins/NAME
// {"enabled"}); "Turn off" does the same for a plugin that is on but whose files are gone. The
// page is rendered by the server; this only sends the change and shows its answer. Plain ES5-style
// JS, no build step.
(function () {
  "use strict";

  var root = document.getElementById("plugins");
  var session = window.maxySession;
  if (!root || !session) return;
  var brand = document.querySelector('meta[name="maxy-brand"]').content; // the product name
  var pageMessage = document.getElementById("plugins-message");

  // Say what happened beside the plugin it happened to (the page's line when it has no card).
  function tell(card, text, kind) {
    var box = (card && card.querySelector(".plugin-status")) || pageMessage;
    box.textContent = text;
    box.setAttribute("data-kind", kind);
  }

  function put(name, on) {
    return session
      .fetch("/api/admin/plugins/" + encodeURIComponent(name), {
        method: "PUT",
        headers: { Accept: "application/json", "Content-Type": "application/json" },
        body: JSON.stringify({ enabled: on }),
      })
      .then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (answer) {
          if (!response.ok) {
            throw new Error(answer.message || brand + " answered HTTP " + response.status + ".");
          }
          return answer;
        });
      });
  }

  // Show a plugin's state as the server now has it.
  function show(card, plugin) {
    var on = Boolean(plugin.enabled);
    card.setAttribute("data-enabled", String(on));
    var toggle = card.querySelector("[data-plugin-toggle]");
    if (toggle) toggle.checked = on;
    var label = card.querySelector(".switch-label");
    if (label) label.textContent = on ? "On" : "Off";
  }

  function forgetMissing(names) {
    Array.prototype.forEach.call(root.querySelectorAll("[data-missing]"), function (item) {
      if (names.indexOf(item.getAttribute("data-missing")) === -1) item.remove();
    });
    var box = root.querySelector(".plugin-missing");
    if (box && !box.querySelector("[data-missing]")) box.remove();
  }

  Array.prototype.forEach.call(root.querySelectorAll("[data-plugin-toggle]"), function (toggle) {
    var name = toggle.getAttribute("data-plugin-toggle");
    var card = toggle.closest(".plugin");
    toggle.addEventListener("change", function () {
      var on = toggle.checked;
      toggle.disabled = true;
      tell(card, "Turning " + name + (on ? " on…" : " off…"), "busy");
      put(name, on)
        .then(function (answer) {
          if (answer.plugin) show(card, answer.plugin);
          forgetMissing(answer.missingPlugins || []);
          tell(card, answer.message, "ok");
        })
        .catch(function (err) {
          toggle.checked = !on;
          tell(card, err.message, "error");
        })
        .then(function () { toggle.disabled = false; });
    });
  });

  Array.prototype.forEach.call(root.querySelectorAll("[data-plugin-off]"), function (button) {
    var name = button.getAttribute("data-plugin-off");
    button.addEventListener("click", function () {
      button.disabled = true;
      put(name, false)
        .then(function (answer) {
          var card = root.querySelector('.plugin[data-plugin="' + name + '"]');
          if (card && answer.plugin) show(card, answer.plugin);
          forgetMissing(answer.missingPlugins || []);
          tell(null, answer.message, "ok");
        })
        .catch(function (err) {
          button.disabled = false;
          tell(null, err.message, "error");
        });
    });
  });
})();
