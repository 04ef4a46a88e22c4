// Knowledge in memory from the admin pages (appliance/app/knowledge.py):
// - the upload component ([data-upload], _upload.html): drop files or choose them; each is sent
//   as it is (the bar shows the bytes sent), then followed over SSE while the engine reads and
//   embeds it; a refused file says why.
// - window.maxyRowActions(li, result): the Data page's result rows get Forget (a soft delete with
//   Undo) and, for a document or a part of one (result.documentId), Versions.
// - the versions dialog: a document's versions, each one's changes, and Restore.
// Plain ES5-style JS, no build step; uses window.maxyApi and window.maxySession (shell.js).
(function () {
  "use strict";

  if (window.maxyKnowledge) return; // included by more than one component on a page
  window.maxyKnowledge = true;

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else if (key === "className") node.className = attrs[key];
      else if (attrs[key] !== null && attrs[key] !== undefined) node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) { if (child) node.appendChild(child); });
    return node;
  }

  function csrf() {
    var meta = document.querySelector('meta[name="maxy-csrf"]');
    return meta ? meta.content : "";
  }

  function post(url) {
    var session = window.maxySession;
    var options = { method: "POST", headers: { Accept: "application/json", "X-Maxy-CSRF": csrf() } };
    var request = session && typeof session.fetch === "function"
      ? session.fetch(url, options) : window.fetch(url, options);
    return request.then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (body) {
        if (!response.ok) throw new Error(body.message || "The server answered HTTP " + response.status + ".");
        return body;
      });
    });
  }

  function plural(count, word) { return count + " " + word + (count === 1 ? "" : "s"); }

  function megabytes(bytes) { return (bytes / (1024 * 1024)).toFixed(bytes < 10485760 ? 1 : 0) + " MB"; }

  // --- uploads -------------------------------------------------------------------------

  function uploader(root) {
    var input = root.querySelector("input[type=file]");
    var list = root.querySelector(".upload-list");
    var maxBytes = parseInt(root.getAttribute("data-max-bytes"), 10) || 0;
    var types = (root.getAttribute("data-types") || "").split(",").filter(Boolean);

    function item(file) {
      var bar = el("progress", { max: "100", value: "0", "aria-label": "Progress of " + file.name });
      var status = el("span", { className: "upload-status muted", text: "Waiting…" });
      var li = el("li", { className: "upload-item", "data-state": "sending" }, [
        el("span", { className: "upload-name", text: file.name }), bar, status
      ]);
      list.insertBefore(li, list.firstChild);
      return {
        li: li,
        progress: function (fraction, text) {
          bar.value = Math.round(Math.max(0, Math.min(1, fraction)) * 100);
          status.textContent = text;
        },
        finish: function (state, text, extra) {
          li.setAttribute("data-state", state);
          bar.value = state === "done" ? 100 : bar.value;
          bar.hidden = true;
          status.className = state === "done" ? "upload-status" : "upload-status alert";
          status.setAttribute("role", state === "done" ? "status" : "alert");
          status.textContent = text;
          if (extra) li.appendChild(extra);
        }
      };
    }

    function follow(view, url) {
      var source = new EventSource(url);
      source.addEventListener("progress", function (event) {
        var data = JSON.parse(event.data);
        var total = data.total || 1;
        if (data.stage === "reading") view.progress(data.done / total * 0.3, "Reading page " + data.done + " of " + data.total + "…");
        else if (data.stage === "embedding") view.progress(0.3 + data.done / total * 0.7, "Remembering: " + data.done + " of " + data.total + " passages…");
        else view.progress(0.3, "Received " + megabytes(data.done) + ", reading…");
      });
      source.addEventListener("done", function (event) {
        source.close();
        var data = JSON.parse(event.data);
        var versions = el("button", { type: "button", className: "btn btn-ghost small", text: "Versions" });
        versions.addEventListener("click", function () { openVersions(data.documentId, data.title); });
        view.finish("done", "Added “" + data.title + "”: " + plural(data.sections, "section") + ", " +
          plural(data.chunks, "passage") + " (version " + data.version + ").", versions);
        document.dispatchEvent(new CustomEvent("maxy:ingested", { detail: data }));
      });
      source.addEventListener("failed", function (event) {
        source.close();
        view.finish("failed", JSON.parse(event.data).message);
      });
      source.onerror = function () {
        if (source.readyState === EventSource.CLOSED) view.finish("failed", "Lost touch with the server. Reload to see whether it was added.");
      };
    }

    function send(file) {
      var view = item(file);
      var dot = file.name.lastIndexOf(".");
      var ext = dot >= 0 ? file.name.slice(dot).toLowerCase() : "";
      if (types.length && types.indexOf(ext) < 0) {
        view.finish("failed", "“" + file.name + "” is not a kind of file this device takes. Upload one of: " + types.join(", ") + ".");
        return;
      }
      if (maxBytes && file.size > maxBytes) {
        view.finish("failed", "“" + file.name + "” is " + megabytes(file.size) + ", more than the " + megabytes(maxBytes) + " this device takes.");
        return;
      }
      var xhr = new XMLHttpRequest();
      xhr.open("POST", "/api/admin/uploads?name=" + encodeURIComponent(file.name));
      xhr.setRequestHeader("X-Maxy-CSRF", csrf());
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      xhr.setRequestHeader("Accept", "application/json");
      xhr.upload.onprogress = function (event) {
        if (event.lengthComputable) view.progress(event.loaded / event.total * 0.3, "Sending " + Math.round(event.loaded / event.total * 100) + "%…");
      };
      xhr.onload = function () {
        var body = {};
        try { body = JSON.parse(xhr.responseText); } catch (err) { /* not JSON */ }
        if (xhr.status === 202) follow(view, body.events);
        else view.finish("failed", body.message || "The server answered HTTP " + xhr.status + ".");
      };
      xhr.onerror = function () { view.finish("failed", "The upload was cut off. Check the connection and try again."); };
      xhr.send(file);
    }

    function sendAll(files) { Array.prototype.forEach.call(files, send); }

    input.addEventListener("change", function () { sendAll(input.files); input.value = ""; });
    ["dragenter", "dragover"].forEach(function (name) {
      root.addEventListener(name, function (event) {
        event.preventDefault();
        root.classList.add("dragging");
      });
    });
    ["dragleave", "dragend"].forEach(function (name) {
      root.addEventListener(name, function () { root.classList.remove("dragging"); });
    });
    root.addEventListener("drop", function (event) {
      event.preventDefault();
      root.classList.remove("dragging");
      if (event.dataTransfer && event.dataTransfer.files.length) sendAll(event.dataTransfer.files);
    });
  }

  // --- forget with undo, versions from a result row --------------------------------------

  window.maxyRowActions = function (li, result) {
    var label = result.labels[0];
    var actions = el("span", { className: "row-actions" });
    if (result.documentId) {
      var versions = el("button", { type: "button", className: "btn btn-ghost small", "data-testid": "row-versions", text: "Versions" });
      versions.addEventListener("click", function () { openVersions(result.documentId, result.title); });
      actions.appendChild(versions);
    }
    var forget = el("button", { type: "button", className: "btn btn-ghost small", "data-testid": "row-forget", text: "Forget" });
    forget.addEventListener("click", function () {
      forget.disabled = true;
      post("/api/admin/nodes/" + encodeURIComponent(label) + "/" + encodeURIComponent(result.id) + "/delete").then(function () {
        var undo = el("button", { type: "button", className: "btn btn-ghost small", "data-testid": "row-undo", text: "Undo" });
        var note = el("p", { className: "forgotten-note", role: "status", "data-testid": "forgotten" }, [
          document.createTextNode("Forgotten: “" + result.title + "”. "), undo
        ]);
        var kept = Array.prototype.slice.call(li.childNodes);
        kept.forEach(function (child) { child.hidden = true; });
        li.appendChild(note);
        undo.addEventListener("click", function () {
          undo.disabled = true;
          post("/api/admin/nodes/" + encodeURIComponent(label) + "/" + encodeURIComponent(result.id) + "/restore").then(function () {
            note.remove();
            kept.forEach(function (child) { child.hidden = false; });
            forget.disabled = false;
          }).catch(function (err) { undo.disabled = false; note.firstChild.textContent = err.message + " "; });
        });
      }).catch(function (err) {
        forget.disabled = false;
        forget.title = err.message;
        actions.appendChild(el("span", { className: "alert small", role: "alert", text: err.message }));
      });
    });
    actions.appendChild(forget);
    li.appendChild(actions);
  };

  // --- the versions dialog ---------------------------------------------------------------

  var dialog = null;

  function when(iso) {
    var date = new Date(iso);
    return isNaN(date.getTime()) ? String(iso || "") : date.toLocaleString();
  }

  function diffView(text) {
    var pre = el("pre", { className: "diff", "data-testid": "version-diff" });
    text.split("\n").forEach(function (line) {
      var kind = line.indexOf("+++") === 0 || line.indexOf("---") === 0 ? "file"
        : line[0] === "+" ? "added" : line[0] === "-" ? "removed" : line.indexOf("@@") === 0 ? "hunk" : "same";
      pre.appendChild(el("span", { className: "diff-" + kind, text: line + "\n" }));
    });
    return pre;
  }

  function openVersions(id, title) {
    if (!dialog) {
      dialog = el("dialog", { className: "versions-dialog card", "data-testid": "versions", "aria-label": "Versions" });
      document.body.appendChild(dialog);
    }
    var status = el("p", { className: "muted", role: "status", text: "Loading…" });
    var close = el("button", { type: "button", className: "btn btn-ghost small", text: "Close" });
    close.addEventListener("click", function () { dialog.close(); });
    var list = el("ol", { className: "versions-list", "data-testid": "versions-list" });
    var detail = el("div", { className: "version-detail" });
    dialog.replaceChildren(
      el("header", { className: "versions-head" }, [el("h2", { text: "Versions of “" + title + "”" }), close]),
      status, list, detail);
    if (!dialog.open) dialog.showModal();

    function load() {
      return window.maxyApi("/api/admin/documents/" + encodeURIComponent(id) + "/versions").then(function (data) {
        dialog.querySelector("h2").textContent = "Versions of “" + (data.title || title) + "”";
        status.textContent = data.versions.length + (data.versions.length === 1 ? " version" : " versions") +
          "; the newest is what " + document.querySelector('meta[name="maxy-brand"]').content + " remembers.";
        list.replaceChildren.apply(list, data.versions.map(function (v) {
          var show = el("button", { type: "button", className: "btn btn-ghost small", text: "Changes" });
          show.addEventListener("click", function () { view(v.number); });
          var parts = [el("strong", { text: "Version " + v.number }),
            el("span", { className: "muted", text: " · " + when(v.createdAt) + " · " + v.source +
              (v.fileName ? " · " + v.fileName : "") + (v.restoredFrom ? " · restored from " + v.restoredFrom : "") +
              " · " + (v.chars || 0).toLocaleString() + " characters" }),
            show];
          if (v.number === data.current) parts.push(el("span", { className: "badge", text: "current" }));
          else {
            var restore = el("button", { type: "button", className: "btn small", "data-testid": "version-restore", text: "Restore" });
            restore.addEventListener("click", function () {
              restore.disabled = true;
              status.textContent = "Restoring version " + v.number + "…";
              post("/api/admin/documents/" + encodeURIComponent(id) + "/versions/" + v.number + "/restore").then(function (done) {
                return load().then(function () {
                  status.textContent = "Restored version " + v.number + " as version " + done.version + ".";
                });
              }).catch(function (err) { restore.disabled = false; status.textContent = err.message; });
            });
            parts.push(restore);
          }
          return el("li", { "data-version": String(v.number) }, parts);
        }));
      }).catch(function (err) { status.textContent = err.message; });
    }

    function view(number) {
      detail.replaceChildren(el("p", { className: "muted", text: "Loading version " + number + "…" }));
      window.maxyApi("/api/admin/documents/" + encodeURIComponent(id) + "/versions/" + number).then(function (data) {
        var heading = data.against ? "Changes from version " + data.against + " to " + number : "Version " + number + " (the first)";
        var parts = [el("h3", { text: heading }), diffView(data.diff)];
        if (data.truncated) parts.push(el("p", { className: "muted", text: "Cut short: the document is long." }));
        detail.replaceChildren.apply(detail, parts);
      }).catch(function (err) { detail.replaceChildren(el("p", { className: "alert", text: err.message })); });
    }

    load();
  }

  window.maxyVersions = openVersions;
  document.querySelectorAll("[data-upload]").forEach(uploader);
})();
