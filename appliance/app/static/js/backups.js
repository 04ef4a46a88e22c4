// The Backups page: the archives kept (GET /api/admin/backups), Back up now (POST), a download
// link per archive, and Restore behind a dialog that asks for the archive's name to be typed.
// Plain ES5-style JS, no build step; uses window.maxySession (shell.js) for CSRF'd requests.
(function () {
  "use strict";

  var root = document.getElementById("backups");
  if (!root) return;
  var API = "/api/admin/backups";

  var list = document.getElementById("backups-list");
  var empty = document.getElementById("backups-empty");
  var schedule = document.getElementById("backups-schedule");
  var createButton = document.getElementById("backups-create");
  var keys = document.getElementById("backups-keys");
  var statusLine = document.getElementById("backups-status");
  var errorBox = document.getElementById("backups-error");
  var dialog = document.getElementById("backups-confirm");
  var typed = document.getElementById("backups-confirm-name");
  var expected = document.getElementById("backups-confirm-expected");
  var confirmWhen = document.getElementById("backups-confirm-when");
  var go = document.getElementById("backups-restore-go");
  var restoring = null; // the archive the dialog is about

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
    return isNaN(date.getTime()) ? iso : date.toLocaleString();
  }

  function showError(message) {
    errorBox.textContent = message || "";
    errorBox.hidden = !message;
  }

  function call(method, url, body) {
    return window.maxySession.fetch(url, {
      method: method,
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) throw new Error(data.message || "The server answered HTTP " + response.status + ".");
        return data;
      });
    });
  }

  function row(item) {
    var meta = item.error
      ? "Cannot be read: " + item.error
      : mib(item.bytes) + " · " + item.nodes + " memories, " + item.relationships + " links" +
        (item.keys ? " · with keys" : "");
    var restore = el("button", { type: "button", className: "btn", "data-testid": "backup-restore", text: "Restore" });
    restore.addEventListener("click", function () { ask(item); });
    var download = el("a", {
      className: "btn btn-ghost", href: API + "/" + encodeURIComponent(item.name),
      download: item.name, "data-testid": "backup-download", text: "Download",
    });
    return el("li", { className: "backup", "data-testid": "backup", "data-name": item.name }, [
      el("div", { className: "backup-text" }, [
        el("span", { className: "backup-title", text: when(item.createdAt) }),
        el("span", { className: "backup-meta", text: item.name + " · " + meta }),
      ]),
      el("div", { className: "backup-actions" }, [download, item.error ? null : restore]),
    ]);
  }

  function load() {
    return call("GET", API).then(function (data) {
      list.replaceChildren.apply(list, data.backups.map(row));
      empty.hidden = data.backups.length > 0;
      schedule.textContent = (data.schedule === "off"
        ? "Nightly backups are off."
        : "A backup is made every night at " + data.schedule + ".") +
        " The newest " + data.keep + " are kept in " + data.folder + ".";
    }).catch(function (err) { showError(err.message); });
  }

  createButton.addEventListener("click", function () {
    showError("");
    createButton.disabled = true;
    statusLine.textContent = "Backing up… you can keep using everything meanwhile.";
    call("POST", API, { includeKeys: keys.checked }).then(function (made) {
      statusLine.textContent = "Backed up: " + made.name + " (" + mib(made.bytes) + ").";
      return load();
    }).catch(function (err) {
      statusLine.textContent = "";
      showError(err.message);
    }).then(function () { createButton.disabled = false; });
  });

  function ask(item) {
    restoring = item;
    expected.textContent = item.name;
    confirmWhen.textContent = when(item.createdAt);
    typed.value = "";
    go.disabled = true;
    dialog.showModal();
    typed.focus();
  }

  typed.addEventListener("input", function () {
    go.disabled = !restoring || typed.value.trim() !== restoring.name;
  });

  go.addEventListener("click", function () {
    var item = restoring;
    dialog.close();
    showError("");
    statusLine.textContent = "Checking and restoring " + item.name + "…";
    call("POST", API + "/" + encodeURIComponent(item.name) + "/restore", { confirm: typed.value.trim() })
      .then(function (done) {
        statusLine.textContent = "Restored " + done.name + ": " + done.nodes + " memories, " +
          done.relationships + " links, " + done.files + " files.";
      })
      .catch(function (err) {
        statusLine.textContent = "";
        showError(err.message);
      });
  });

  load();
})();
