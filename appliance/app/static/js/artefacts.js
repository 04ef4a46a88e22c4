// The Artefacts page: every knowledge document, the agents' files and the plugins' specialists;
// a row opens in the artefact pane (an overlay on narrow screens). Editable text saves itself a
// moment after the owner stops typing (a document is ingested again, re-embedding only what
// changed); a PDF shows inline where the browser has a viewer, else a Download link; a row with
// nothing to read says why in one line. Uses window.maxyApi (shell.js).
(function () {
  "use strict";

  var shell = document.getElementById("shell");
  var view = document.getElementById("artefact-view");
  if (!view || !document.getElementById("artefact-documents")) return;
  var status = document.getElementById("artefacts-status");
  var titleEl = document.getElementById("artefact-title");
  var subtitleEl = document.getElementById("artefact-subtitle");
  var stateEl = document.getElementById("artefact-state");
  var closeButton = document.getElementById("artefact-close");
  var SAVE_AFTER_MS = 800;
  var current = null; // {id, version, text, dirty, saving, timer, failed}

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

  function apiUrl(id) {
    var parts = id.split(":");
    var kind = parts.shift();
    var rest = parts.map(encodeURIComponent);
    if (kind === "document") return "/api/admin/artefacts/documents/" + rest[0];
    if (kind === "agent") return "/api/admin/artefacts/agents/" + rest[0] + "/" + rest.slice(1).join(":");
    if (kind === "role") return "/api/admin/artefacts/roles/" + rest[0] + "/" + rest.slice(1).join(":");
    return null;
  }

  function setState(text, state) {
    stateEl.textContent = text;
    stateEl.setAttribute("data-state", state || "");
  }

  function rowButton(id, label, detail) {
    var button = el("button", { type: "button", className: "artefact-row", "data-artefact": id }, [
      el("span", { className: "artefact-name", text: label }),
      detail ? el("span", { className: "muted artefact-detail", text: detail }) : null
    ]);
    button.addEventListener("click", function () { open(id); });
    return el("li", {}, [button]);
  }

  function render(data) {
    var documents = document.getElementById("artefact-documents");
    documents.replaceChildren.apply(documents, data.documents.map(function (doc) {
      return rowButton(doc.id, doc.title, "Document");
    }));
    document.getElementById("documents-empty").hidden = data.documents.length > 0;
    var agentRows = [];
    data.agents.forEach(function (agent) {
      agent.files.forEach(function (file) {
        agentRows.push(rowButton(file.id, agent.displayName + " · " + file.name,
          file.editable ? (file.exists ? "Editable" : "Not written yet") : "Read-only"));
      });
    });
    var agentList = document.getElementById("artefact-agents");
    agentList.replaceChildren.apply(agentList, agentRows);
    document.getElementById("agents-empty").hidden = data.agents.length > 0;
    var roles = document.getElementById("artefact-roles");
    roles.replaceChildren.apply(roles, data.roles.map(function (role) {
      return rowButton(role.id, role.role, "Specialist · " + role.plugin);
    }));
    var count = data.documents.length;
    status.textContent = count + (count === 1 ? " document" : " documents") +
      (data.truncated ? " (the newest " + count + ")" : "");
  }

  function mark(id) {
    document.querySelectorAll(".artefact-row").forEach(function (row) {
      if (row.getAttribute("data-artefact") === id) row.setAttribute("aria-current", "true");
      else row.removeAttribute("aria-current");
    });
  }

  // Save now if there are unsaved changes; resolves once the pane's text is saved (or failed).
  function flush() {
    if (!current || !current.dirty) return Promise.resolve();
    window.clearTimeout(current.timer);
    return save(current);
  }

  function save(item) {
    if (item.saving) { item.again = true; return item.saving; }
    if (item.failed) return Promise.resolve();
    var text = item.editor.value;
    item.dirty = false;
    setState("Saving…", "saving");
    item.saving = window.maxyApi(apiUrl(item.id), { method: "PUT", body: { text: text, version: item.version } })
      .then(function (answer) {
        item.version = answer.version;
        if (item === current) setState(item.dirty ? "Unsaved changes" : "Saved", item.dirty ? "dirty" : "saved");
      })
      .catch(function (err) {
        item.dirty = true;
        if (err.code === "changed-elsewhere" || err.status === 403) item.failed = true;
        if (item === current) setState("Not saved: " + err.message, "error");
      })
      .then(function () {
        item.saving = null;
        if (item.again && !item.failed) {
          item.again = false;
          if (item.dirty) return save(item);
        }
        return undefined;
      });
    return item.saving;
  }

  function editor(item, data) {
    var area = el("textarea", { id: "artefact-text", "data-testid": "artefact-text", spellcheck: "true",
      "aria-label": data.title });
    area.value = data.text || "";
    item.editor = area;
    area.addEventListener("input", function () {
      item.dirty = true;
      if (item.failed) return;
      setState("Unsaved changes", "dirty");
      window.clearTimeout(item.timer);
      item.timer = window.setTimeout(function () { save(item); }, SAVE_AFTER_MS);
    });
    area.addEventListener("blur", function () { if (item.dirty) { window.clearTimeout(item.timer); save(item); } });
    return area;
  }

  function pdf(data) {
    var download = el("a", { className: "btn", href: data.downloadUrl, download: "", "data-testid": "artefact-download",
      text: "Download" });
    if (navigator.pdfViewerEnabled) {
      return [el("iframe", { className: "artefact-pdf", src: data.fileUrl, title: data.title, "data-testid": "artefact-pdf" }),
        el("p", { className: "artefact-actions" }, [download])];
    }
    return [el("p", { className: "banner banner-info", "data-testid": "artefact-banner",
      text: "This browser cannot show PDFs here: download it to read it." }),
    el("p", { className: "artefact-actions" }, [download])];
  }

  function show(id, data) {
    var item = { id: id, version: data.version, dirty: false, saving: null, timer: null, failed: false };
    current = item;
    titleEl.textContent = data.title;
    subtitleEl.textContent = data.subtitle || "";
    var parts = [];
    if (data.banner) parts.push(el("p", { className: "banner banner-info", "data-testid": "artefact-banner", text: data.banner }));
    if (data.view === "pdf") {
      parts = parts.concat(pdf(data));
    } else if (data.view === "text" && data.editable) {
      parts.push(editor(item, data));
      setState("Saves as you type", "idle");
    } else if (data.view === "text") {
      parts.push(el("pre", { id: "artefact-text", className: "artefact-read", "data-testid": "artefact-text", text: data.text || "" }));
      setState("Read-only", "read-only");
    } else if (data.view === "file") {
      parts.push(el("p", { className: "artefact-actions" }, [el("a", { className: "btn", href: data.downloadUrl, download: "",
        "data-testid": "artefact-download", text: "Download" })]));
    }
    if (data.view !== "text") setState(data.view === "missing" ? "Nothing to read" : "", data.view);
    if (data.downloadUrl && data.view === "text") {
      parts.push(el("p", { className: "artefact-actions" }, [el("a", { className: "btn small", href: data.downloadUrl,
        download: "", "data-testid": "artefact-download", text: "Download" })]));
    }
    view.replaceChildren.apply(view, parts);
  }

  function open(id) {
    var url = apiUrl(id);
    if (!url) return;
    flush().then(function () {
      mark(id);
      window.history.replaceState(null, "", "/admin/artefacts?open=" + encodeURIComponent(id));
      shell.classList.add("artefact-open");
      closeButton.hidden = false;
      setState("Opening…", "loading");
      view.setAttribute("data-artefact", id);
      return window.maxyApi(url).then(function (data) {
        if (view.getAttribute("data-artefact") === id) show(id, data);
      });
    }).catch(function (err) {
      current = null;
      titleEl.textContent = "Artefacts";
      subtitleEl.textContent = "";
      setState("", "error");
      view.replaceChildren(el("p", { className: "alert", role: "alert", text: err.message }));
    });
  }

  function close() {
    flush().then(function () {
      shell.classList.remove("artefact-open");
      closeButton.hidden = true;
      mark("");
      window.history.replaceState(null, "", "/admin/artefacts");
    });
  }

  closeButton.addEventListener("click", close);
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && shell.classList.contains("artefact-open") &&
      !document.body.classList.contains("drawer-open")) close();
  });
  window.addEventListener("beforeunload", function (event) {
    if (current && (current.dirty || current.saving)) {
      flush();
      event.preventDefault();
    }
  });

  window.maxyApi("/api/admin/artefacts").then(function (data) {
    render(data);
    var wanted = new URLSearchParams(window.location.search).get("open");
    if (wanted) open(wanted);
  }).catch(function (err) {
    status.textContent = err.message;
  });
})();
