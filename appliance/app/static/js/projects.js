// The Projects view: the owner's active projects with their health (worst first), and the one
// in focus drawn with the Graph page's drawing (window.maxyGraph) — its tasks, stakeholder and
// history one hop away. A click focuses a project; a click on another swaps the focus. The
// focus is kept in the address (?focus=<id>) so a reload or a shared link shows it again.
(function () {
  "use strict";

  var list = document.getElementById("project-list");
  if (!list) return;
  var G = window.maxyGraph;
  var el = G.el;
  var status = document.getElementById("projects-status");
  var errorBox = document.getElementById("projects-error");
  var empty = document.getElementById("projects-empty");
  var focusBox = document.getElementById("project-focus");
  var focusEmpty = document.getElementById("project-focus-empty");
  var focusHead = focusBox.querySelector(".project-focus-head");
  var focusTitle = document.getElementById("project-focus-title");
  var focusStats = document.getElementById("project-focus-stats");
  var canvas = document.getElementById("project-canvas");
  var HEALTH = { green: "On track", amber: "At risk", red: "In trouble" };
  var cy = null;
  var focused = null;
  var generation = 0;

  function facts(project) {
    var parts = [project.phase, project.tier];
    if (project.targetDate) parts.push("target " + project.targetDate);
    var counts = project.counts || {};
    parts.push(counts.done + "/" + counts.total + " done");
    if (counts.overdue) parts.push(counts.overdue + " overdue");
    return parts.join(" · ");
  }

  function row(project) {
    var health = project.health || "none";
    var lines = [
      el("span", { className: "project-head" }, [
        el("span", { className: "project-name", text: project.name }),
        el("span", { className: "health", "data-health": health, text: HEALTH[health] || "No health" })
      ]),
      el("span", { className: "project-facts", text: facts(project) })
    ];
    if ((project.reasons || []).length) {
      lines.push(el("span", { className: "project-reasons", text: project.reasons.join("; ") }));
    }
    if ((project.next || []).length) {
      lines.push(el("span", { className: "project-next", text: "Next: " + project.next.map(function (t) { return t.name; }).join(", ") }));
    }
    var button = el("button", { type: "button", className: "project", "data-id": project.id,
      "data-health": health, "aria-pressed": String(project.id === focused) }, lines);
    button.addEventListener("click", function () { focus(project.id); });
    return el("li", {}, [button]);
  }

  function mark() {
    list.querySelectorAll(".project").forEach(function (button) {
      button.setAttribute("aria-pressed", String(button.getAttribute("data-id") === focused));
    });
  }

  // Focus the graph on one project's neighbourhood; a later focus replaces it.
  function focus(id) {
    var mine = ++generation;
    focused = id;
    mark();
    window.history.replaceState(null, "", "/admin/projects?focus=" + encodeURIComponent(id));
    focusEmpty.hidden = true;
    focusHead.hidden = false;
    canvas.hidden = false;
    focusStats.textContent = "Loading…";
    window.maxyApi("/api/admin/graph/node/" + encodeURIComponent(id) + "?label=Project").then(function (data) {
      if (mine !== generation) return;
      focusTitle.textContent = data.node.title;
      var shown = data.neighbours.length;
      focusStats.textContent = data.degree + (data.degree === 1 ? " connection" : " connections") +
        (data.degree > shown ? " (" + shown + " shown)" : "");
      if (cy) cy.destroy();
      cy = G.draw(canvas, [data.node].concat(data.neighbours), data.edges, { center: data.node.id, edgeLabels: true });
      canvas.setAttribute("data-focus", data.node.id);
      window.maxyGraph.active = cy;  // the drawn graph, for the console (and the browser tests)
    }).catch(function (err) {
      if (mine !== generation) return;
      focusStats.textContent = "";
      canvas.replaceChildren(el("p", { className: "alert", text: err.message }));
    });
  }

  window.maxyApi("/api/admin/projects").then(function (data) {
    errorBox.hidden = true;
    var projects = data.projects || [];
    status.textContent = projects.length ? projects.length + (projects.length === 1 ? " active project" : " active projects") : "";
    empty.hidden = projects.length > 0;
    list.replaceChildren.apply(list, projects.map(row));
    var wanted = new URLSearchParams(window.location.search).get("focus");
    if (wanted && projects.some(function (p) { return p.id === wanted; })) focus(wanted);
  }).catch(function (err) {
    status.textContent = "";
    errorBox.textContent = err.message;
    errorBox.hidden = false;
  });
})();
