// The Data page: search the memory graph (results by their human title, one score breakdown
// each, type chips to filter, internal records only when asked), a result's details as
// labelled fields with its neighbourhood, and the owner's changes: add a note, edit a node's
// text, change who can see it, delete it (with an undo). Uses window.maxyApi (shell.js) and
// window.maxyGraph (graph.js).
(function () {
  "use strict";

  var form = document.getElementById("data-search");
  if (!form) return;
  var input = document.getElementById("data-q");
  var list = document.getElementById("data-results");
  var status = document.getElementById("data-status");
  var chips = document.getElementById("data-types");
  var detail = document.getElementById("data-detail");
  var internal = document.getElementById("data-internal");
  var addNote = document.getElementById("add-note");
  var G = window.maxyGraph;
  var el = G.el;
  var selected = {};
  var lastQuery = "";
  var generation = 0;
  var mini = null;
  var agents = null;
  // Conversation records keep what was said; a document's parts change with their document.
  var RECORDS = ["Conversation", "Message", "ToolCall"];
  var PARTS = ["Section", "Chunk"];
  var TITLE_KEYS = ["name", "title", "canonicalName", "headline", "subject", "slug"];
  var TEXT_KEYS = ["text", "body", "content", "description", "summary"];

  function has(labels, names) {
    return (labels || []).some(function (label) { return names.indexOf(label) >= 0; });
  }
  function isAudit(node) { return has(node.labels, ["Task"]) && (node.props || {}).source === "audit"; }
  function canEdit(node) {
    return !has(node.labels, RECORDS.concat(PARTS, ["KnowledgeDocument"])) && !isAudit(node);
  }
  function canScope(node) { return !has(node.labels, RECORDS.concat(PARTS)) && !isAudit(node); }
  function canDelete(node) { return !has(node.labels, ["ToolCall"].concat(PARTS)); }
  function firstKey(props, keys, fallback) {
    for (var i = 0; i < keys.length; i++) if (typeof props[keys[i]] === "string") return keys[i];
    return fallback;
  }

  function chosenTypes() {
    return Object.keys(selected).filter(function (label) { return selected[label]; });
  }

  function renderChips(types) {
    chips.replaceChildren();
    types.forEach(function (type) {
      var chip = el("button", { type: "button", className: "chip", "data-label": type.label,
        "aria-pressed": String(Boolean(selected[type.label])) }, [
        el("span", { text: type.label }), el("span", { className: "count", text: String(type.count) })
      ]);
      chip.addEventListener("click", function () {
        selected[type.label] = !selected[type.label];
        chip.setAttribute("aria-pressed", String(selected[type.label]));
        search(lastQuery, false);
      });
      chips.appendChild(chip);
    });
  }

  function row(result) {
    var button = el("button", { type: "button", className: "result", "data-id": result.id }, [
      el("span", { className: "result-head" }, [el("span", { className: "result-title", text: result.title })]
        .concat(G.badges(result.labels))),
      result.snippet ? el("span", { className: "result-snippet", text: result.snippet }) : null,
      el("span", { className: "breakdown", "data-testid": "breakdown", text: result.breakdown })
    ]);
    button.addEventListener("click", function () {
      markCurrent(result.id);
      neighbourhood(result.id, result.labels[0]);
    });
    var li = el("li", {}, [button]);
    if (window.maxyRowActions) window.maxyRowActions(li, result); // Forget, Versions (knowledge.js)
    return li;
  }

  function markCurrent(id) {
    list.querySelectorAll(".result").forEach(function (other) {
      if (other.getAttribute("data-id") === id) other.setAttribute("aria-current", "true");
      else other.removeAttribute("aria-current");
    });
  }

  function resultButton(id) {
    return list.querySelector('.result[data-id="' + (window.CSS ? CSS.escape(id) : id) + '"]');
  }

  // A new query (fresh=true) rebuilds the type chips from its unfiltered results.
  function search(query, fresh) {
    query = query.trim();
    if (!query) return;
    lastQuery = query;
    if (fresh) selected = {};
    var mine = ++generation;
    var params = new URLSearchParams({ q: query });
    if (chosenTypes().length) params.set("types", chosenTypes().join(","));
    if (internal.checked) params.set("internal", "1");
    status.textContent = "Searching…";
    window.history.replaceState(null, "", "/admin/data?q=" + encodeURIComponent(query));
    window.maxyApi("/api/admin/search?" + params.toString()).then(function (data) {
      if (mine !== generation) return;
      window.maxyVectorBanner("search", data.keywordOnly);
      if (fresh) renderChips(data.types);
      list.replaceChildren.apply(list, data.results.map(row));
      var count = data.results.length;
      var text = count ? count + (count === 1 ? " result" : " results") + " in " + Math.round(data.ms) + " ms"
        : "Nothing found for “" + query + "”. Try other words.";
      if (data.hiddenInternal) {
        text += " · " + data.hiddenInternal + (data.hiddenInternal === 1 ? " internal record" : " internal records") +
          " hidden (tick Show internal records)";
      }
      status.textContent = text;
    }).catch(function (err) {
      if (mine !== generation) return;
      list.replaceChildren();
      status.textContent = err.message;
    });
  }

  function loadAgents() {
    if (agents) return Promise.resolve(agents);
    return window.maxyApi("/api/admin/agents").then(function (data) {
      agents = data.agents || [];
      return agents;
    });
  }

  function message(text, kind) {
    return el("p", { className: kind === "error" ? "alert" : "muted", role: kind === "error" ? "alert" : "status",
      "data-testid": "node-message", text: text });
  }

  // The edit form: the node's title and text.
  function editForm(node, area, done) {
    var props = node.props || {};
    var titleKey = firstKey(props, TITLE_KEYS, "name");
    var textKey = firstKey(props, TEXT_KEYS, has(node.labels, ["Note"]) ? "text" : "description");
    var title = el("input", { type: "text", id: "edit-title", maxlength: "300" });
    title.value = props[titleKey] || "";
    var text = el("textarea", { id: "edit-text", rows: "6", maxlength: "20000" });
    text.value = props[textKey] || "";
    var save = el("button", { type: "submit", className: "btn btn-primary", text: "Save" });
    var cancel = el("button", { type: "button", className: "btn", text: "Cancel" });
    var box = el("form", { className: "node-form", "data-testid": "edit-form" }, [
      el("label", { for: "edit-title", text: "Title" }), title,
      el("label", { for: "edit-text", text: "Text" }), text,
      el("div", { className: "form-actions" }, [save, cancel])
    ]);
    cancel.addEventListener("click", function () { area.replaceChildren(); });
    box.addEventListener("submit", function (event) {
      event.preventDefault();
      save.disabled = true;
      change(node, { title: title.value, text: text.value }, area, done).finally(function () { save.disabled = false; });
    });
    area.replaceChildren(box);
    title.focus();
  }

  // Who can see it: only the owner, shared, or public for the agents ticked.
  function scopeForm(node, area, done) {
    var props = node.props || {};
    loadAgents().then(function (known) {
      var current = props.scope || "admin";
      var choices = [["admin", "Only you"], ["shared", "Shared"], ["public", "Public, for an agent"]];
      var radios = choices.map(function (choice) {
        var radio = el("input", { type: "radio", name: "scope", value: choice[0], id: "scope-" + choice[0] });
        radio.checked = choice[0] === current;
        return el("label", { className: "choice", for: "scope-" + choice[0] }, [radio, el("span", { text: " " + choice[1] })]);
      });
      var tagged = props.agents || [];
      var boxes = known.map(function (agent) {
        var box = el("input", { type: "checkbox", value: agent.slug, id: "agent-" + agent.slug });
        box.checked = tagged.indexOf(agent.slug) >= 0;
        return el("label", { className: "choice", for: "agent-" + agent.slug }, [box, el("span", { text: " " + agent.displayName })]);
      });
      var agentList = el("fieldset", { className: "agent-choices" }, [el("legend", { text: "Agents that may show it to visitors" })]
        .concat(boxes.length ? boxes : [el("p", { className: "muted", text: "No agents yet: create one on the Agents page." })]));
      var save = el("button", { type: "submit", className: "btn btn-primary", text: "Save" });
      var cancel = el("button", { type: "button", className: "btn", text: "Cancel" });
      var box = el("form", { className: "node-form", "data-testid": "scope-form" },
        [el("fieldset", {}, [el("legend", { text: "Who can see it" })].concat(radios)), agentList,
          el("div", { className: "form-actions" }, [save, cancel])]);
      function sync() { agentList.hidden = box.querySelector("input[name=scope]:checked").value !== "public"; }
      box.addEventListener("change", sync);
      sync();
      cancel.addEventListener("click", function () { area.replaceChildren(); });
      box.addEventListener("submit", function (event) {
        event.preventDefault();
        var scope = box.querySelector("input[name=scope]:checked").value;
        var body = { scope: scope };
        if (scope === "public") {
          body.agents = Array.prototype.map.call(agentList.querySelectorAll("input:checked"), function (b) { return b.value; });
        }
        save.disabled = true;
        change(node, body, area, done).finally(function () { save.disabled = false; });
      });
      area.replaceChildren(box);
    }).catch(function (err) { area.replaceChildren(message(err.message, "error")); });
  }

  function change(node, body, area, done) {
    body.label = node.labels[0];
    area.appendChild(message("Saving…"));
    return window.maxyApi("/api/admin/memory/nodes/" + encodeURIComponent(node.id), { method: "PATCH", body: body })
      .then(function (data) {
        var button = resultButton(node.id);
        if (button) button.querySelector(".result-title").textContent = data.node.title;
        done(data, "Saved.");
      })
      .catch(function (err) {
        var last = area.lastChild;
        if (last && last.getAttribute && last.getAttribute("data-testid") === "node-message") last.remove();
        area.appendChild(message(err.message, "error"));
      });
  }

  function remove(node, area) {
    window.maxyApi("/api/admin/memory/nodes/" + encodeURIComponent(node.id) + "?label=" +
      encodeURIComponent(node.labels[0]), { method: "DELETE" }).then(function () {
      var button = resultButton(node.id);
      if (button) button.closest("li").hidden = true;
      if (mini) { mini.destroy(); mini = null; }
      var undo = el("button", { type: "button", className: "btn", "data-testid": "undo-delete", text: "Undo" });
      undo.addEventListener("click", function () {
        undo.disabled = true;
        window.maxyApi("/api/admin/memory/nodes/" + encodeURIComponent(node.id) + "/restore",
          { method: "POST", body: { label: node.labels[0] } }).then(function () {
          if (button) button.closest("li").hidden = false;
          neighbourhood(node.id, node.labels[0], "Restored.");
        }).catch(function (err) {
          undo.disabled = false;
          detail.appendChild(message(err.message, "error"));
        });
      });
      detail.replaceChildren(el("div", { className: "deleted-note", "data-testid": "deleted" }, [
        el("p", { text: "Deleted “" + node.title + "”. It is kept for a while in case you change your mind." }), undo]));
    }).catch(function (err) { area.replaceChildren(message(err.message, "error")); });
  }

  function actions(node, area, done) {
    var bar = el("div", { className: "node-actions", "data-testid": "node-actions" });
    function add(label, id, handler) {
      var button = el("button", { type: "button", className: "btn small", id: id, text: label });
      button.addEventListener("click", handler);
      bar.appendChild(button);
    }
    if (canEdit(node)) add("Edit", "node-edit", function () { editForm(node, area, done); });
    if (canScope(node)) add("Who can see it", "node-scope", function () { scopeForm(node, area, done); });
    var documentId = has(node.labels, ["KnowledgeDocument"]) ? node.id : (node.props || {}).documentId;
    if (documentId) {
      bar.appendChild(el("a", { className: "btn small", href: "/admin/artefacts?open=" +
        encodeURIComponent("document:" + documentId), text: "Open the document" }));
    }
    if (canDelete(node)) add("Delete", "node-delete", function () { remove(node, area); });
    return bar;
  }

  function neighbourhood(id, label, note) {
    detail.replaceChildren(el("p", { className: "muted", text: "Loading…" }));
    var params = label ? "?label=" + encodeURIComponent(label) : "";
    window.maxyApi("/api/admin/graph/node/" + encodeURIComponent(id) + params).then(function (data) {
      show(data, note);
    }).catch(function (err) {
      detail.replaceChildren(el("p", { className: "alert", text: err.message }));
    });
  }

  function show(data, note) {
    if (mini) { mini.destroy(); mini = null; }
    var node = data.node;
    var area = el("div", { className: "node-area" });
    var canvas = el("div", { className: "mini-graph", id: "data-graph", "aria-label": "Neighbourhood graph" });
    var around = el("ul", { className: "neighbours" }, (data.neighbours || []).map(function (other) {
      var arrow = other.direction === "out" ? "→ " + other.type : "← " + other.type;
      var go = el("button", { type: "button" }, [el("span", { className: "rel", text: arrow }),
        el("span", { text: other.title })].concat(G.badges(other.labels)));
      go.addEventListener("click", function () { neighbourhood(other.id, other.labels[0]); });
      return el("li", {}, [go]);
    }));
    var shown = (data.neighbours || []).length;
    var degree = data.degree || 0;
    var more = degree > shown ? " (" + shown + " shown)" : "";
    detail.replaceChildren(
      el("div", { className: "result-head" }, [el("h2", { text: node.title })].concat(G.badges(node.labels))),
      actions(node, area, function (fresh, said) { show(fresh, said); }),
      area,
      G.fields(node.props, node.labels),
      el("h3", { className: "muted", text: degree + (degree === 1 ? " connection" : " connections") + more }),
      canvas,
      around
    );
    if (note) area.appendChild(message(note));
    var nodes = [node].concat(data.neighbours || []);
    mini = G.draw(canvas, nodes, data.edges || [], { center: node.id, edgeLabels: true, onSelect: function (other) {
      if (other.id !== node.id) neighbourhood(other.id, other.labels[0]);
    } });
  }

  function noteForm() {
    if (mini) { mini.destroy(); mini = null; }
    markCurrent("");
    var title = el("input", { type: "text", id: "note-title", maxlength: "300", placeholder: "A few words (optional)" });
    var text = el("textarea", { id: "note-text", rows: "6", maxlength: "20000", required: "required",
      placeholder: "What should " + document.querySelector('meta[name="maxy-brand"]').content + " remember?" });
    var save = el("button", { type: "submit", className: "btn btn-primary", text: "Save the note" });
    var area = el("div", { className: "node-area" });
    var box = el("form", { className: "node-form", "data-testid": "note-form" }, [
      el("h2", { text: "Add a note" }),
      el("label", { for: "note-title", text: "Title" }), title,
      el("label", { for: "note-text", text: "Note" }), text,
      el("div", { className: "form-actions" }, [save]), area
    ]);
    box.addEventListener("submit", function (event) {
      event.preventDefault();
      save.disabled = true;
      window.maxyApi("/api/admin/memory/notes", { method: "POST", body: { title: title.value, text: text.value } })
        .then(function (data) { show(data, "Saved. Search finds it from now on."); })
        .catch(function (err) { area.replaceChildren(message(err.message, "error")); })
        .finally(function () { save.disabled = false; });
    });
    detail.replaceChildren(box);
    text.focus();
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    search(input.value, true);
  });
  internal.addEventListener("change", function () { search(lastQuery || input.value, true); });
  addNote.addEventListener("click", noteForm);
  var initial = new URLSearchParams(window.location.search).get("q");
  if (initial) {
    input.value = initial;
    search(initial, true);
  } else {
    input.focus();
  }
})();
