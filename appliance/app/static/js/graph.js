// Drawing the memory graph with the vendored cytoscape: shared helpers (window.maxyGraph, also
// used by the Data page) and the Graph page itself (#graph-canvas).
(function () {
  "use strict";

  var PALETTE = ["#2f55d4", "#1c8a4a", "#c2410c", "#7c3aed", "#0e7490", "#b91c1c", "#a16207",
    "#be185d", "#4d7c0f", "#475569"];
  var MAX_FIT_ZOOM = 1.4;
  var FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
  var MISSING = "The graph library is missing. Run build/vendor.py (just bootstrap does it), then reload.";
  // A node's details as labelled fields: what the owner wrote first, in an order that fits its
  // kind; bookkeeping (ids, times, hashes) folded away under "Record details".
  var LAYOUTS = {
    Person: ["name", "givenName", "familyName", "email", "telephone", "jobTitle", "worksFor", "address", "birthDate", "description"],
    Note: ["name", "text"],
    KnowledgeDocument: ["title", "summary", "sectionCount", "chunkCount", "charCount"],
    Section: ["path", "summary", "chunkCount"],
    Chunk: ["path", "content"],
    Message: ["role", "body", "createdAt"],
    Conversation: ["agentSlug", "startedAt", "lastMessageAt", "messageCount"],
    Task: ["name", "status", "description", "dueDate", "priority", "completedAt"],
    ToolCall: ["tool", "isError", "ms", "input", "output"],
    Event: ["name", "startDate", "endDate", "location", "description"],
    Reminder: ["name", "dueDate", "description", "status"],
    Report: ["title", "body", "sourceWorkflow", "keywords"]
  };
  var NAMES = {
    name: "Name", title: "Title", text: "Text", body: "Text", content: "Text", summary: "Summary",
    description: "About", email: "Email", telephone: "Phone", jobTitle: "Job", worksFor: "Works for",
    birthDate: "Birthday", givenName: "First name", familyName: "Last name", path: "Where",
    role: "Said by", createdAt: "When", agentSlug: "Agent", startedAt: "Started",
    lastMessageAt: "Last message", messageCount: "Messages", sectionCount: "Sections",
    chunkCount: "Chunks", charCount: "Characters", tool: "Tool", isError: "Failed", ms: "Took (ms)",
    dueDate: "Due", startDate: "Starts", endDate: "Ends", sourceWorkflow: "Made by"
  };
  var SPEAKERS = { user: "You", assistant: "Assistant" };
  var BOOKKEEPING = ["id", "createdAt", "updatedAt", "embeddingModel", "contentHash", "documentId",
    "sectionId", "attachmentId", "sessionId", "sourceKey", "order", "index", "level", "source",
    "minuteKey", "deletedAt"];
  var ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d/;

  function colour(label) {
    var hash = 0;
    var text = String(label || "");
    for (var i = 0; i < text.length; i++) hash = (hash * 31 + text.charCodeAt(i)) | 0;
    return PALETTE[Math.abs(hash) % PALETTE.length];
  }

  // Build an element; text only ever goes in through textContent.
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

  function badges(labels) {
    return (labels || []).map(function (label) { return el("span", { className: "badge", text: label }); });
  }

  function short(text) {
    text = String(text || "");
    return text.length > 40 ? text.slice(0, 39) + "…" : text;
  }

  function human(key) {
    if (NAMES[key]) return NAMES[key];
    var words = String(key).replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/_/g, " ").toLowerCase();
    return words.charAt(0).toUpperCase() + words.slice(1);
  }

  function valueText(key, value, props) {
    if (key === "path" && Array.isArray(value)) return value.join(" › ");
    if (key === "role") {
      if (value === "user" && props.scope === "public") return "Visitor";
      return SPEAKERS[value] || String(value);
    }
    if (Array.isArray(value)) return value.map(function (v) { return valueText("", v, props); }).join(", ");
    if (typeof value === "boolean") return value ? "Yes" : "No";
    if (value !== null && typeof value === "object") return JSON.stringify(value);
    if (typeof value === "string" && ISO.test(value)) {
      var when = new Date(value);
      if (!isNaN(when.getTime())) return when.toLocaleString();
    }
    return String(value);
  }

  // Who can see a node, in the owner's words.
  function scopeText(props) {
    if (props.scope === "public") {
      var agents = (props.agents || []).join(", ");
      return agents ? "Public, for " + agents : "Public (no agent shows it)";
    }
    return props.scope === "shared" ? "Shared" : "Only you";
  }

  function pairs(list, keys, props) {
    keys.forEach(function (key) {
      list.appendChild(el("dt", { text: human(key) }));
      list.appendChild(el("dd", { "data-field": key, text: valueText(key, props[key], props) }));
    });
    return list;
  }

  // A node's properties as labelled fields: its kind's own first (the first of its labels with a
  // layout decides), then the rest, who can see it, and (folded) the bookkeeping.
  function fields(props, labels) {
    props = props || {};
    function present(key) { return props[key] !== undefined && props[key] !== null && props[key] !== ""; }
    var layout = [];
    (labels || []).some(function (label) { layout = LAYOUTS[label] || []; return layout.length > 0; });
    var first = layout.filter(present);
    var rest = Object.keys(props).filter(function (key) {
      return present(key) && first.indexOf(key) < 0 && BOOKKEEPING.indexOf(key) < 0 &&
        key !== "scope" && key !== "agents";
    });
    var list = pairs(el("dl", { className: "props fields", "data-testid": "fields" }), first.concat(rest), props);
    list.appendChild(el("dt", { text: "Who can see it" }));
    list.appendChild(el("dd", { "data-field": "scope", text: scopeText(props) }));
    var kept = BOOKKEEPING.filter(present);
    if (!kept.length) return list;
    var more = el("details", { className: "record-details" }, [el("summary", { text: "Record details" }),
      pairs(el("dl", { className: "props" }), kept, props)]);
    return el("div", { className: "field-block" }, [list, more]);
  }

  var STYLE = [
    { selector: "node", style: {
      "background-color": "data(colour)", "label": "data(label)", "font-family": FONT,
      "font-size": 10, "color": "#1a1f29", "text-valign": "bottom", "text-margin-y": 4,
      "width": 16, "height": 16, "border-width": 2, "border-color": "#ffffff",
      "text-wrap": "ellipsis", "text-max-width": 140, "min-zoomed-font-size": 7 } },
    { selector: "node.center", style: { "width": 26, "height": 26, "font-weight": 600 } },
    { selector: "node:selected", style: { "border-color": "#1a1f29", "border-width": 3 } },
    { selector: "edge", style: {
      "width": 1.2, "line-color": "#c5ccd6", "target-arrow-color": "#c5ccd6",
      "target-arrow-shape": "triangle", "arrow-scale": 0.7, "curve-style": "bezier" } },
    { selector: "edge.named", style: {
      "label": "data(type)", "font-size": 8, "font-family": FONT, "color": "#5b6473",
      "text-rotation": "autorotate", "text-background-color": "#ffffff",
      "text-background-opacity": 1, "text-background-padding": 1 } }
  ];

  function elements(nodes, edges, options) {
    var ids = {};
    var out = nodes.map(function (node) {
      ids[node.id] = true;
      return {
        group: "nodes",
        data: { id: node.id, label: short(node.title), colour: colour((node.labels || [])[0]), node: node },
        classes: options.center === node.id ? "center" : ""
      };
    });
    edges.forEach(function (edge) {
      if (!ids[edge.source] || !ids[edge.target]) return;
      out.push({
        group: "edges",
        data: { id: "e:" + edge.id, source: edge.source, target: edge.target, type: edge.type },
        classes: options.edgeLabels ? "named" : ""
      });
    });
    return out;
  }

  function layout(count, options) {
    if (options.center) return { name: "concentric", animate: false, minNodeSpacing: 70,
      concentric: function (node) { return node.hasClass("center") ? 2 : 1; }, levelWidth: function () { return 1; } };
    if (count <= 400) return { name: "cose", animate: false, randomize: true, nodeRepulsion: function () { return 9000; },
      idealEdgeLength: function () { return 70; }, numIter: 1200, padding: 24 };
    return { name: "grid", animate: false, avoidOverlap: true, padding: 16 };
  }

  // Draw nodes and edges into a container; returns the cytoscape instance (null without it).
  function draw(container, nodes, edges, options) {
    options = options || {};
    if (typeof window.cytoscape !== "function") {
      container.replaceChildren(el("p", { className: "alert", text: MISSING }));
      return null;
    }
    container.replaceChildren();
    var cy = window.cytoscape({
      container: container,
      elements: elements(nodes, edges, options),
      style: STYLE,
      layout: layout(nodes.length, options),
      minZoom: 0.05,
      maxZoom: 4,
      wheelSensitivity: 0.25
    });
    // A handful of nodes would be fitted at a huge zoom: keep them at a readable size.
    if (cy.zoom() > MAX_FIT_ZOOM) {
      cy.zoom(MAX_FIT_ZOOM);
      cy.center();
    }
    if (options.onSelect) cy.on("tap", "node", function (event) { options.onSelect(event.target.data("node")); });
    return cy;
  }

  window.maxyGraph = { colour: colour, el: el, badges: badges, fields: fields, scopeText: scopeText,
    draw: draw };

  // ── The Graph page ─────────────────────────────────────────────────────────────────────
  var canvas = document.getElementById("graph-canvas");
  if (!canvas) return;
  var query = document.getElementById("graph-q");
  var slider = document.getElementById("graph-limit");
  var output = document.getElementById("graph-limit-value");
  var chips = document.getElementById("graph-categories");
  var stats = document.getElementById("graph-stats");
  var errorBox = document.getElementById("graph-error");
  var detail = document.getElementById("graph-detail");
  var internal = document.getElementById("graph-internal");
  var selected = {};
  (canvas.getAttribute("data-labels") || "").split(",").forEach(function (label) {
    if (label) selected[label] = true;
  });
  var cy = null;
  var timer = null;
  var generation = 0;

  function chosenLabels() {
    return Object.keys(selected).filter(function (label) { return selected[label]; });
  }

  function showError(err) {
    errorBox.textContent = err.message || String(err);
    errorBox.hidden = false;
  }

  function swatch(label) {
    var dot = el("span", { className: "swatch" });
    dot.style.backgroundColor = colour(label);  // CSSOM, not a style attribute
    return dot;
  }

  function renderChips(categories) {
    chips.replaceChildren();
    categories.forEach(function (category) {
      var chip = el("button", { type: "button", className: "chip", "aria-pressed": String(Boolean(selected[category.label])),
        "data-label": category.label }, [
        swatch(category.label),
        el("span", { text: category.label }),
        el("span", { className: "count", text: String(category.count) })
      ]);
      chip.addEventListener("click", function () {
        selected[category.label] = !selected[category.label];
        chip.setAttribute("aria-pressed", String(selected[category.label]));
        load();
      });
      chips.appendChild(chip);
    });
  }

  function load() {
    var mine = ++generation;
    var params = new URLSearchParams({ limit: slider.value });
    if (query.value.trim()) params.set("q", query.value.trim());
    if (chosenLabels().length) params.set("labels", chosenLabels().join(","));
    if (internal && internal.checked) params.set("internal", "1");
    stats.textContent = "Loading…";
    window.maxyApi("/api/admin/graph?" + params.toString()).then(function (data) {
      if (mine !== generation) return;
      errorBox.hidden = true;
      renderChips(data.categories || []);
      var text = data.nodes.length + (data.nodes.length === 1 ? " node · " : " nodes · ") + data.edges.length +
        (data.edges.length === 1 ? " edge" : " edges");
      if (data.truncated) text += " — the newest " + data.nodes.length + " shown; narrow or raise the limit";
      stats.textContent = text;
      if (cy) cy.destroy();
      cy = draw(canvas, data.nodes, data.edges, { onSelect: show });
      window.maxyGraph.active = cy;  // the drawn graph, for the console (and the browser tests)
      if (!data.nodes.length) {
        canvas.replaceChildren(el("div", { className: "empty-state small" }, [
          el("p", { text: query.value.trim() ? "Search finds nothing for that. Try other words." :
            chosenLabels().length ? (canvas.getAttribute("data-empty") || "Nothing matches. Clear the filters to see everything.") :
            "Your memory graph is empty. What you tell your agent will appear here." })
        ]));
      }
    }).catch(function (err) {
      if (mine !== generation) return;
      stats.textContent = "";
      showError(err);
    });
  }

  function show(node) {
    detail.hidden = false;
    detail.replaceChildren(el("p", { className: "muted", text: "Loading…" }));
    var params = (node.labels || []).length ? "?label=" + encodeURIComponent(node.labels[0]) : "";
    window.maxyApi("/api/admin/graph/node/" + encodeURIComponent(node.id) + params).then(function (data) {
      var close = el("button", { type: "button", className: "icon-btn", "aria-label": "Close details", text: "×" });
      close.addEventListener("click", function () { detail.hidden = true; });
      var grow = el("button", { type: "button", className: "btn", text: "Show its neighbours here" });
      grow.addEventListener("click", function () { expand(data); });
      detail.replaceChildren(
        el("div", { className: "result-head" }, [el("h2", { text: data.node.title })].concat(badges(data.node.labels), [close])),
        el("p", { className: "muted", text: data.degree + (data.degree === 1 ? " connection" : " connections") }),
        grow,
        fields(data.node.props, data.node.labels)
      );
    }).catch(function (err) {
      detail.replaceChildren(el("p", { className: "alert", text: err.message }));
    });
  }

  function expand(data) {
    if (!cy) return;
    var added = [];
    data.neighbours.forEach(function (node) {
      if (cy.getElementById(node.id).empty()) {
        added.push({ group: "nodes", data: { id: node.id, label: short(node.title), colour: colour(node.labels[0]), node: node } });
      }
    });
    data.edges.forEach(function (edge) {
      if (cy.getElementById("e:" + edge.id).empty()) {
        added.push({ group: "edges", data: { id: "e:" + edge.id, source: edge.source, target: edge.target, type: edge.type } });
      }
    });
    var center = cy.getElementById(data.node.id);
    var fresh = cy.add(added);
    fresh.nodes().forEach(function (node, index) {
      var angle = (2 * Math.PI * index) / Math.max(fresh.nodes().length, 1);
      var at = center.position();
      node.position({ x: at.x + 90 * Math.cos(angle), y: at.y + 90 * Math.sin(angle) });
    });
  }

  if (internal) internal.addEventListener("change", load);
  slider.addEventListener("input", function () { output.textContent = slider.value; });
  slider.addEventListener("change", load);
  query.addEventListener("input", function () {
    window.clearTimeout(timer);
    timer = window.setTimeout(load, 250);
  });
  load();
})();
