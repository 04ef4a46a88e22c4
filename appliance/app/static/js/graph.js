// Drawing the memory graph with the vendored cytoscape: shared helpers (window.maxyGraph, also
// used by the Data page) and the Graph page itself (#graph-canvas).
(function () {
  "use strict";

  var PALETTE = ["#2f55d4", "#1c8a4a", "#c2410c", "#7c3aed", "#0e7490", "#b91c1c", "#a16207",
    "#be185d", "#4d7c0f", "#475569"];
  var MAX_FIT_ZOOM = 1.4;
  // Bookkeeping properties go last in a node's details; what the owner wrote comes first.
  var SYSTEM_KEYS = ["id", "createdAt", "updatedAt", "scope", "agents", "embeddingModel", "contentHash"];
  var FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
  var MISSING = "The graph library is missing. Run build/vendor.py (just bootstrap does it), then reload.";

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

  function valueText(value) {
    if (Array.isArray(value)) return value.map(valueText).join(", ");
    if (value !== null && typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function propsList(props) {
    var list = el("dl", { className: "props" });
    var keys = Object.keys(props || {});
    var own = keys.filter(function (key) { return SYSTEM_KEYS.indexOf(key) < 0; });
    var system = SYSTEM_KEYS.filter(function (key) { return keys.indexOf(key) >= 0; });
    own.concat(system).forEach(function (key) {
      list.appendChild(el("dt", { text: key }));
      list.appendChild(el("dd", { text: valueText(props[key]) }));
    });
    return list;
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

  window.maxyGraph = { colour: colour, el: el, badges: badges, propsList: propsList, draw: draw };

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
  var selected = {};
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
          el("p", { text: query.value.trim() || chosenLabels().length ? "Nothing matches. Clear the filters to see everything." :
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
        propsList(data.node.props)
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

  slider.addEventListener("input", function () { output.textContent = slider.value; });
  slider.addEventListener("change", load);
  query.addEventListener("input", function () {
    window.clearTimeout(timer);
    timer = window.setTimeout(load, 250);
  });
  load();
})();
