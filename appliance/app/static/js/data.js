// The Data page: search the memory graph, one score breakdown per result, type chips to filter,
// and a result's neighbourhood on click. Uses window.maxyApi (shell.js) and window.maxyGraph.
(function () {
  "use strict";

  var form = document.getElementById("data-search");
  if (!form) return;
  var input = document.getElementById("data-q");
  var list = document.getElementById("data-results");
  var status = document.getElementById("data-status");
  var chips = document.getElementById("data-types");
  var detail = document.getElementById("data-detail");
  var G = window.maxyGraph;
  var el = G.el;
  var selected = {};
  var lastQuery = "";
  var generation = 0;
  var mini = null;

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
      list.querySelectorAll(".result").forEach(function (other) { other.removeAttribute("aria-current"); });
      button.setAttribute("aria-current", "true");
      neighbourhood(result.id, result.labels[0]);
    });
    var li = el("li", {}, [button]);
    if (window.maxyRowActions) window.maxyRowActions(li, result); // Forget, Versions (knowledge.js)
    return li;
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
    status.textContent = "Searching…";
    window.history.replaceState(null, "", "/admin/data?q=" + encodeURIComponent(query));
    window.maxyApi("/api/admin/search?" + params.toString()).then(function (data) {
      if (mine !== generation) return;
      window.maxyVectorBanner("search", data.keywordOnly);
      if (fresh) renderChips(data.types);
      list.replaceChildren.apply(list, data.results.map(row));
      var count = data.results.length;
      status.textContent = count ? count + (count === 1 ? " result" : " results") + " in " + Math.round(data.ms) + " ms"
        : "Nothing found for “" + query + "”. Try other words.";
    }).catch(function (err) {
      if (mine !== generation) return;
      list.replaceChildren();
      status.textContent = err.message;
    });
  }

  function neighbourhood(id, label) {
    detail.replaceChildren(el("p", { className: "muted", text: "Loading…" }));
    var params = label ? "?label=" + encodeURIComponent(label) : "";
    window.maxyApi("/api/admin/graph/node/" + encodeURIComponent(id) + params).then(function (data) {
      if (mini) { mini.destroy(); mini = null; }
      var canvas = el("div", { className: "mini-graph", id: "data-graph", "aria-label": "Neighbourhood graph" });
      var around = el("ul", { className: "neighbours" }, data.neighbours.map(function (node) {
        var arrow = node.direction === "out" ? "→ " + node.type : "← " + node.type;
        var go = el("button", { type: "button" }, [el("span", { className: "rel", text: arrow }),
          el("span", { text: node.title })].concat(G.badges(node.labels)));
        go.addEventListener("click", function () { neighbourhood(node.id, node.labels[0]); });
        return el("li", {}, [go]);
      }));
      var shown = data.neighbours.length;
      var more = data.degree > shown ? " (" + shown + " shown)" : "";
      detail.replaceChildren(
        el("div", { className: "result-head" }, [el("h2", { text: data.node.title })].concat(G.badges(data.node.labels))),
        canvas,
        el("h3", { className: "muted", text: data.degree + (data.degree === 1 ? " connection" : " connections") + more }),
        around,
        el("h3", { className: "muted", text: "Properties" }),
        G.propsList(data.node.props)
      );
      var nodes = [data.node].concat(data.neighbours);
      mini = G.draw(canvas, nodes, data.edges, { center: data.node.id, edgeLabels: true, onSelect: function (node) {
        if (node.id !== data.node.id) neighbourhood(node.id, node.labels[0]);
      } });
    }).catch(function (err) {
      detail.replaceChildren(el("p", { className: "alert", text: err.message }));
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    search(input.value, true);
  });
  var initial = new URLSearchParams(window.location.search).get("q");
  if (initial) {
    input.value = initial;
    search(initial, true);
  } else {
    input.focus();
  }
})();
