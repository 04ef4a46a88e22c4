// The Updates page: the running version, the last update's outcome, updates offered from USB
// sticks, a two-step install (Install, then "Install and restart" in a dialog), and live progress
// from GET /api/admin/updates/progress (SSE). Uses window.maxyApi and window.maxySession.
(function () {
  "use strict";

  var brand = document.querySelector('meta[name="maxy-brand"]').content; // the product name
  var root = document.getElementById("updates");
  if (!root) return;
  var STATUS = "/api/admin/updates";
  var PROGRESS = "/api/admin/updates/progress";
  var REFRESH_MS = 5000;

  var list = document.getElementById("updates-offers");
  var empty = document.getElementById("updates-empty");
  var errorBox = document.getElementById("updates-error");
  var outcome = document.getElementById("updates-outcome");
  var slots = document.getElementById("updates-slots");
  var dialog = document.getElementById("updates-confirm");
  var dialogText = document.getElementById("updates-confirm-text");
  var go = document.getElementById("updates-go");
  var progress = document.getElementById("updates-progress");
  var bar = document.getElementById("updates-bar");
  var phase = document.getElementById("updates-phase");
  var log = document.getElementById("updates-log");

  var status = { offers: [], pending: false, running: false, lan: true };
  var confirming = null; // {offer, nonce} between the two steps
  var currentRun = null;

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "className") node.className = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) { if (child) node.appendChild(child); });
    return node;
  }

  function mib(bytes) {
    return (bytes / 1048576).toFixed(bytes < 10485760 ? 1 : 0) + " MiB";
  }

  function when(iso) {
    var date = new Date(iso);
    return isNaN(date.getTime()) ? "" : date.toLocaleString();
  }

  function showError(message) {
    errorBox.textContent = message || "";
    errorBox.hidden = !message;
  }

  function post(url, body) {
    return window.maxySession.fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) {
          var error = new Error(data.message || "The server answered HTTP " + response.status + ".");
          error.code = data.code;
          throw error;
        }
        return data;
      });
    });
  }

  function titleOf(offer) {
    return offer.version ? brand + " " + offer.version : offer.name;
  }

  function offerRow(offer) {
    var verdict = offer.verified
      ? el("span", { className: "offer-verdict ok", text: "Verified: signed by a trusted key, made for this device." })
      : el("span", { className: "offer-verdict refused", text: "Refused: " + (offer.error || "not a valid update.") });
    var meta = [offer.name, mib(offer.size), offer.source ? "from " + offer.source : "", when(offer.foundAt)]
      .filter(Boolean).join(" · ");
    var text = el("div", { className: "offer-text" }, [
      el("span", { className: "offer-title", text: titleOf(offer) }),
      el("span", { className: "offer-meta", text: meta }),
      verdict,
    ]);
    var button = null;
    if (offer.verified && offer.installed) {
      button = el("span", { className: "badge", "data-testid": "installed", text: "Installed" });
    } else if (offer.verified) {
      button = el("button", { type: "button", className: "btn btn-primary", "data-testid": "install",
        "data-offer": offer.id, text: "Install" });
      var busy = status.pending || status.running;
      button.disabled = busy || !status.lan;
      if (!status.lan) button.title = "Updates are installed from the home network.";
      else if (busy) button.title = "An update is being installed.";
      button.addEventListener("click", function () { askToConfirm(offer, button); });
    }
    return el("li", { className: "offer", "data-offer": offer.id, "data-verified": String(offer.verified) },
      [text, button]);
  }

  function render() {
    list.replaceChildren.apply(list, status.offers.map(offerRow));
    empty.hidden = status.offers.length > 0;
    var text = "";
    if (status.slots && status.slots.committed) {
      text = " · default slot " + status.slots.committed.slot.toUpperCase() + " (" + status.slots.committed.version + ")";
    }
    if (status.slots && status.slots.trial) {
      text += " · on trial: slot " + status.slots.trial.slot.toUpperCase() + " (" + status.slots.trial.version + ")";
    }
    slots.textContent = text;
    if (status.outcome) {
      outcome.textContent = status.outcome.message;
      outcome.setAttribute("data-result", status.outcome.result);
      outcome.hidden = false;
    } else {
      outcome.hidden = true;
    }
  }

  function load() {
    return window.maxyApi(STATUS).then(function (data) {
      status = data;
      if (!dialog.open) render();
    }).catch(function (err) { showError(err.message); });
  }

  // Step one: the server hands out a one-time confirmation for this offer.
  function askToConfirm(offer, button) {
    showError("");
    button.disabled = true;
    post(STATUS + "/confirm", { offer: offer.id }).then(function (data) {
      confirming = { offer: data.offer, nonce: data.nonce };
      dialogText.textContent = "Install " + titleOf(data.offer) + " (" + data.offer.name + ", " +
        mib(data.offer.size) + ")? The update starts at once and " + "ends with a restart.";
      go.disabled = false;
      dialog.showModal();
    }).catch(function (err) { showError(err.message); }).then(function () { button.disabled = false; });
  }

  // Step two: only this button, after the dialog, asks for the install.
  go.addEventListener("click", function () {
    if (!confirming) return;
    var chosen = confirming;
    confirming = null;
    go.disabled = true;
    post(STATUS + "/install", { offer: chosen.offer.id, nonce: chosen.nonce }).then(function () {
      dialog.close();
      progress.hidden = false;
      phase.textContent = "Install requested: waiting for the installer to start…";
      status.pending = true;
      render();
    }).catch(function (err) {
      dialog.close();
      showError(err.message);
    });
  });
  dialog.addEventListener("close", function () {
    confirming = null;
    render();
  });

  var PHASES = {
    start: "Starting", verify: "Checking the update", backup: "Backing up your data",
    "write-boot": "Writing the boot partition", "write-root": "Writing the system",
    readback: "Reading it back", arm: "Preparing the restart", reboot: "Restarting",
    done: "Done", error: "Stopped",
  };

  // One row per phase, updated in place with its latest line.
  function onProgress(line) {
    if (line.run !== currentRun) {
      currentRun = line.run;
      log.replaceChildren();
    }
    progress.hidden = false;
    var row = log.querySelector('li[data-phase="' + line.phase + '"]');
    if (!row) {
      row = el("li", { "data-phase": line.phase }, [
        el("span", { className: "phase-name", text: (PHASES[line.phase] || line.phase) + ": " }),
        el("span", { className: "phase-message" }),
      ]);
      log.appendChild(row);
    }
    var percent = line.total > 0 && line.phase !== "start" ? " (" + Math.floor(100 * Math.min(line.done, line.total) / line.total) + " %)" : "";
    row.querySelector(".phase-message").textContent = (line.message || "") + percent;
    phase.textContent = line.message || PHASES[line.phase] || line.phase;
    if (line.total > 0) {
      bar.max = line.total;
      bar.value = Math.min(line.done, line.total);
    } else if (line.phase === "done") {
      bar.max = 1;
      bar.value = 1;
    }
    if (line.phase === "done" || line.phase === "error" || line.phase === "reboot") load();
  }

  function follow() {
    if (typeof window.EventSource !== "function") return;
    var source = new window.EventSource(PROGRESS);
    source.addEventListener("progress", function (event) {
      var line;
      try { line = JSON.parse(event.data); } catch (err) { return; }
      onProgress(line);
    });
    source.addEventListener("reset", function () {
      currentRun = null;
      log.replaceChildren();
    });
  }

  load();
  follow();
  window.setInterval(function () { if (!document.hidden) load(); }, REFRESH_MS);
})();
