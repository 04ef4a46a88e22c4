// The Agents page: list the account's public agents, create and edit one (address, names,
// IDENTITY.md, SOUL.md, keyword subscriptions), regenerate its KNOWLEDGE.md, make it the default,
// delete it. Talks to /api/admin/agents through window.maxySession.fetch (CSRF header included).
// Everything from the server is shown with textContent.
(function () {
  "use strict";

  var form = document.getElementById("agent-form");
  if (!form) return;
  var API = "/api/admin/agents";
  var list = document.getElementById("agent-list");
  var listStatus = document.getElementById("agents-status");
  var title = document.getElementById("agent-form-title");
  var slugInput = document.getElementById("agent-slug");
  var nameInput = document.getElementById("agent-name");
  var descriptionInput = document.getElementById("agent-description");
  var identityInput = document.getElementById("agent-identity");
  var soulInput = document.getElementById("agent-soul");
  var keywordsInput = document.getElementById("agent-keywords");
  var save = document.getElementById("agent-save");
  var cancel = document.getElementById("agent-cancel");
  var tools = document.getElementById("agent-tools");
  var knowledgeState = document.getElementById("agent-knowledge-state");
  var knowledgeButton = document.getElementById("agent-knowledge");
  var defaultState = document.getElementById("agent-default-state");
  var defaultButton = document.getElementById("agent-default");
  var openLink = document.getElementById("agent-open");
  var deleteButton = document.getElementById("agent-delete");
  var status = document.getElementById("agent-status");
  var current = null; // the agent being edited, or null while creating one
  var busy = false;

  function request(method, url, body) {
    var opts = { method: method, headers: { Accept: "application/json" } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    return window.maxySession.fetch(url, opts).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) {
          var error = new Error(data.message || "The server answered HTTP " + response.status + ".");
          error.code = data.code || "http-" + response.status;
          throw error;
        }
        return data;
      });
    });
  }

  function agentUrl(slug) {
    return API + "/" + encodeURIComponent(slug);
  }

  function say(text, isError) {
    status.textContent = text;
    status.classList.toggle("error", Boolean(isError));
  }

  function setBusy(value) {
    busy = value;
    [save, knowledgeButton, defaultButton, deleteButton].forEach(function (button) {
      button.disabled = value;
    });
  }

  function node(tag, className, text) {
    var element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function renderList(agents) {
    list.replaceChildren();
    agents.forEach(function (agent) {
      var button = node("button", "agent-item");
      button.type = "button";
      button.dataset.slug = agent.slug;
      if (current && current.slug === agent.slug) button.setAttribute("aria-current", "true");
      var head = node("span", "agent-item-head");
      head.appendChild(node("span", "agent-item-name", agent.displayName));
      if (agent.isDefault) head.appendChild(node("span", "badge", "default"));
      button.appendChild(head);
      button.appendChild(node("span", "muted", "/" + agent.slug));
      if (agent.description) button.appendChild(node("span", "muted", agent.description));
      button.addEventListener("click", function () { open(agent.slug); });
      var item = node("li");
      item.appendChild(button);
      list.appendChild(item);
    });
    listStatus.textContent = agents.length
      ? agents.length + (agents.length === 1 ? " agent" : " agents")
      : "No agents yet. Create one: visitors talk to it at its address.";
  }

  function refreshList() {
    return request("GET", API).then(function (data) {
      renderList(data.agents || []);
    }).catch(function (err) {
      listStatus.textContent = err.message;
    });
  }

  function keywordsOf(text) {
    return text.split(",").map(function (word) { return word.trim(); })
      .filter(function (word) { return word.length > 0; });
  }

  function describeKnowledge(knowledge) {
    if (!knowledge || !knowledge.updatedAt) return "Not generated yet.";
    var when = new Date(knowledge.updatedAt);
    var text = "Generated " + when.toLocaleString() + " · " + knowledge.chars + " characters";
    if (knowledge.source && knowledge.source !== "KNOWLEDGE.md") {
      text += " · the agent reads " + knowledge.source;
    }
    return text;
  }

  function showAgent(agent) {
    current = agent;
    title.textContent = agent.displayName;
    slugInput.value = agent.slug;
    slugInput.disabled = true;
    nameInput.value = agent.displayName;
    descriptionInput.value = agent.description;
    identityInput.value = agent.identity;
    soulInput.value = agent.soul;
    keywordsInput.value = agent.keywordSubscriptions.join(", ");
    save.textContent = "Save";
    cancel.hidden = true;
    tools.hidden = false;
    knowledgeState.textContent = describeKnowledge(agent.knowledge);
    defaultState.textContent = agent.isDefault
      ? "This agent answers on the public home page."
      : "Another agent answers on the public home page.";
    defaultButton.hidden = agent.isDefault;
    deleteButton.hidden = agent.isDefault;
    openLink.textContent = agent.url;
    openLink.href = agent.url;
    Array.prototype.forEach.call(list.querySelectorAll(".agent-item"), function (button) {
      if (button.dataset.slug === agent.slug) button.setAttribute("aria-current", "true");
      else button.removeAttribute("aria-current");
    });
    window.history.replaceState(null, "", "/admin/agents?agent=" + encodeURIComponent(agent.slug));
  }

  function newAgent() {
    current = null;
    form.reset();
    title.textContent = "New agent";
    slugInput.disabled = false;
    save.textContent = "Create agent";
    cancel.hidden = false;
    tools.hidden = true;
    say("");
    Array.prototype.forEach.call(list.querySelectorAll(".agent-item"), function (button) {
      button.removeAttribute("aria-current");
    });
    window.history.replaceState(null, "", "/admin/agents");
    slugInput.focus();
  }

  function open(slug) {
    say("");
    return request("GET", agentUrl(slug)).then(showAgent).catch(function (err) {
      say(err.message, true);
    });
  }

  function run(work, done) {
    if (busy) return;
    setBusy(true);
    say("Working…");
    work().then(function (result) {
      say(done(result));
    }).catch(function (err) {
      say(err.message, true);
    }).then(function () {
      setBusy(false);
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var body = {
      displayName: nameInput.value,
      description: descriptionInput.value,
      identity: identityInput.value,
      soul: soulInput.value,
      keywordSubscriptions: keywordsOf(keywordsInput.value)
    };
    if (current) {
      var slug = current.slug;
      run(function () {
        return request("PUT", agentUrl(slug), body).then(function (agent) {
          showAgent(agent);
          return refreshList();
        });
      }, function () { return "Saved."; });
    } else {
      body.slug = slugInput.value.trim();
      run(function () {
        return request("POST", API, body).then(function (agent) {
          showAgent(agent);
          return refreshList();
        });
      }, function () { return "Created. Visitors can talk to it at " + current.url + "."; });
    }
  });

  cancel.addEventListener("click", function () {
    say("");
    form.reset();
  });

  document.getElementById("agent-new").addEventListener("click", newAgent);

  knowledgeButton.addEventListener("click", function () {
    if (!current) return;
    var slug = current.slug;
    run(function () {
      return request("POST", agentUrl(slug) + "/knowledge").then(function (data) {
        showAgent(data.agent);
        return data.knowledge;
      });
    }, function (knowledge) {
      return "Knowledge regenerated: " + knowledge.entries + " entries (" + knowledge.tagged +
        " tagged, " + knowledge.subscribed + " from keyword subscriptions).";
    });
  });

  defaultButton.addEventListener("click", function () {
    if (!current) return;
    var slug = current.slug;
    run(function () {
      return request("POST", agentUrl(slug) + "/default").then(function () {
        return refreshList().then(function () { return open(slug); });
      });
    }, function () { return "This is now the default agent."; });
  });

  deleteButton.addEventListener("click", function () {
    if (!current) return;
    var slug = current.slug;
    if (!window.confirm("Delete the agent /" + slug + " and its files? This cannot be undone.")) return;
    run(function () {
      return request("DELETE", agentUrl(slug)).then(function () {
        newAgent();
        return refreshList();
      });
    }, function () { return "Deleted /" + slug + "."; });
  });

  var wanted = new URLSearchParams(window.location.search).get("agent");
  refreshList().then(function () {
    if (wanted) open(wanted);
    else newAgent();
  });
})();
