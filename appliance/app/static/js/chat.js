// The chat pane of the Sessions page: the selected session's transcript (re-read whenever its
// row changes) as chat bubbles, each tool call collapsed into a <details> holding its input and
// result, or its terminal (terminal.js), Stop and Download, and the composer, which types into
// the selected session or, after "New session" (or "+"), starts a new one in the Mode menu's mode.
// The rows come from sessions.js. A start that fails shows what the CLI said and what to do; an
// answer the CLI could not get from Claude (not logged in) says how to connect it.
// Plain ES5-style JS, no build step; transcript text only ever reaches the page as textContent.
(function () {
  "use strict";

  var brand = document.querySelector('meta[name="maxy-brand"]').content; // the product name
  var API = "/api/admin/sessions";
  var NOT_CONNECTED = "Claude is not connected on this device, so this session could not get an " +
    "answer. Connect Claude in Settings, then start a new session.";

  var sessions = window.maxySessions;
  var section = document.getElementById("sessions");
  var startButtons = ["new-session", "start-session"]
    .map(function (id) { return document.getElementById(id); })
    .filter(Boolean);
  var chat = {
    log: document.getElementById("chat-log"),
    empty: document.getElementById("chat-empty"),
    turns: document.getElementById("chat-turns"),
    status: document.getElementById("chat-status"),
    bar: document.getElementById("session-bar"),
    title: document.getElementById("session-bar-title"),
    state: document.getElementById("session-bar-status"),
    mode: document.getElementById("session-bar-mode"),
    download: document.getElementById("session-download"),
    stop: document.getElementById("session-stop"),
    transcriptTab: document.getElementById("view-transcript"),
    terminalTab: document.getElementById("view-terminal"),
    terminal: document.getElementById("session-terminal"),
    form: document.getElementById("composer"),
    input: document.getElementById("composer-input"),
    note: document.getElementById("composer-note"),
  };
  if (!chat.log || !chat.form || !chat.input || !chat.bar) {
    // No chat pane on this page: "New session" and "+" open the Sessions page ready to start one.
    startButtons.forEach(function (button) {
      button.addEventListener("click", function () { window.location.assign("/?new=1"); });
    });
    return;
  }
  if (!sessions) return;
  sessions.chatPane = true;

  var selected = null; // the session shown, null: "start a new one"
  var view = "transcript";
  var terminal = null;
  var refreshTimer = null;
  var loads = 0;
  var api = sessions.api;
  var statusOf = sessions.statusOf;

  function jsonOf(response) {
    return response.json().catch(function () { return {}; });
  }

  var TOOL_INPUT_CHARS = 2000;   // what a collapsed tool call shows; the download has it all
  var TOOL_RESULT_CHARS = 4000;
  var openTools = {};  // tool_use ids whose details the owner opened, kept across re-renders

  function textOf(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content
      .filter(function (block) { return block && block.type === "text" && typeof block.text === "string"; })
      .map(function (block) { return block.text; })
      .join("\n");
  }

  function resultText(content) {
    if (typeof content === "string") return content;
    if (!Array.isArray(content)) return "";
    return content.map(function (block) {
      if (block && block.type === "text" && typeof block.text === "string") return block.text;
      return block && block.type ? "[" + block.type + "]" : "";
    }).join("\n");
  }

  function cut(text, limit) {
    if (text.length <= limit) return text;
    return text.slice(0, limit) + "\n… (" + (text.length - limit) + " more characters)";
  }

  function inputText(input) {
    if (input === undefined || input === null) return "";
    if (typeof input === "string") return input;
    try { return JSON.stringify(input, null, 2); } catch (err) { return String(input); }
  }

  // mcp__<server>__<tool> is how the CLI names an MCP server's tool.
  function shortName(name) {
    var parts = String(name || "tool").split("__");
    return parts.length >= 3 && parts[0] === "mcp" ? parts.slice(2).join("__") : String(name || "tool");
  }

  // Turns in transcript order: text bubbles of either side, and each tool_use of the assistant
  // as one tool turn that the matching tool_result (a later user entry) completes.
  function turnsOf(ndjson) {
    var turns = [];
    var tools = {};
    ndjson.split("\n").forEach(function (line) {
      if (!line.trim()) return;
      var entry;
      try { entry = JSON.parse(line); } catch (err) { return; }
      if ((entry.type !== "user" && entry.type !== "assistant") || !entry.message || entry.isMeta) return;
      var content = entry.message.content;
      var text = textOf(content);
      if (entry.type === "assistant" && entry.isApiErrorMessage) {
        var hint = entry.error === "authentication_failed" ? NOT_CONNECTED : "";
        turns.push({ role: "error", text: text, hint: hint });
        return;
      }
      if (text.trim()) turns.push({ role: entry.type, text: text });
      if (!Array.isArray(content)) return;
      content.forEach(function (block) {
        if (!block) return;
        if (entry.type === "assistant" && block.type === "tool_use") {
          var tool = { role: "tool", id: String(block.id || ""), name: String(block.name || "tool"),
                       input: inputText(block.input), result: null, isError: false };
          turns.push(tool);
          if (tool.id) tools[tool.id] = tool;
        } else if (entry.type === "user" && block.type === "tool_result") {
          var used = tools[String(block.tool_use_id || "")];
          if (!used) return;
          used.result = resultText(block.content);
          used.isError = block.is_error === true;
        }
      });
    });
    return turns;
  }

  function toolSection(label, text, className) {
    var section = document.createElement("div");
    section.className = "tool-section";
    var heading = document.createElement("div");
    heading.className = "tool-label";
    heading.textContent = label;
    var pre = document.createElement("pre");
    pre.className = className;
    pre.textContent = text;
    section.appendChild(heading);
    section.appendChild(pre);
    return section;
  }

  function toolTurn(turn) {
    var li = document.createElement("li");
    var state = turn.result === null ? "running" : turn.isError ? "error" : "done";
    li.className = "turn turn-tool";
    li.setAttribute("data-role", "tool");
    li.setAttribute("data-tool", shortName(turn.name));
    li.setAttribute("data-state", state);
    var details = document.createElement("details");
    details.className = "tool-call";
    if (turn.id && openTools[turn.id]) details.open = true;
    details.addEventListener("toggle", function () {
      if (!turn.id) return;
      if (details.open) openTools[turn.id] = true;
      else delete openTools[turn.id];
    });
    var summary = document.createElement("summary");
    summary.title = turn.name;
    var name = document.createElement("span");
    name.className = "tool-name";
    name.textContent = shortName(turn.name);
    var badge = document.createElement("span");
    badge.className = "tool-state";
    badge.textContent = state === "running" ? "running…" : state === "error" ? "failed" : "done";
    summary.appendChild(name);
    summary.appendChild(badge);
    details.appendChild(summary);
    details.appendChild(toolSection("Input", cut(turn.input, TOOL_INPUT_CHARS) || "(none)", "tool-input"));
    if (turn.result !== null) {
      details.appendChild(toolSection(turn.isError ? "Error" : "Result",
        cut(turn.result, TOOL_RESULT_CHARS) || "(empty)", "tool-result"));
    }
    li.appendChild(details);
    return li;
  }

  function showTurns(turns, status) {
    var atEnd = chat.log.scrollHeight - chat.log.scrollTop - chat.log.clientHeight < 40;
    chat.turns.textContent = "";
    turns.forEach(function (turn) {
      if (turn.role === "tool") {
        chat.turns.appendChild(toolTurn(turn));
        return;
      }
      var li = document.createElement("li");
      li.className = "turn turn-" + turn.role;
      li.setAttribute("data-role", turn.role);
      li.textContent = turn.text;
      if (turn.hint) {
        var hint = document.createElement("p");
        hint.className = "turn-hint";
        hint.textContent = turn.hint + " ";
        var link = document.createElement("a");
        link.href = "/admin/settings#claude";
        link.textContent = "Open Settings";
        hint.appendChild(link);
        li.appendChild(hint);
      }
      chat.turns.appendChild(li);
    });
    chat.turns.hidden = !turns.length;
    chat.empty.hidden = selected !== null;
    chat.status.textContent = status || "";
    chat.status.hidden = !status;
    if (atEnd) chat.log.scrollTop = chat.log.scrollHeight;
  }

  function loadTranscript(id) {
    if (id === null) return;
    var mine = ++loads;
    var url = API + "/" + encodeURIComponent(id) + "/log";
    api(url, { headers: { Accept: "application/x-ndjson" }, cache: "no-store" })
      .then(function (response) {
        if (mine !== loads || selected !== id) return null;
        if (response.status === 202) return showTurns([], "Waiting for the session's first words…");
        if (!response.ok) {
          return jsonOf(response).then(function (body) {
            showTurns([], body.message || "The transcript could not be read (HTTP " + response.status + ").");
          });
        }
        return response.text().then(function (text) {
          if (mine === loads) showTurns(turnsOf(text), "");
        });
      })
      .catch(function () {
        if (mine === loads) showTurns([], brand + " did not answer. Check the connection and try again.");
      });
  }

  function showBar() {
    var row = selected !== null ? sessions.rows[selected] : null;
    chat.bar.hidden = selected === null;
    var live = Boolean(row && row.state === "live");
    if (selected !== null) {
      chat.title.textContent = sessions.titleOf(row || {});
      var status = row ? statusOf(row) : "";
      chat.state.textContent = status;
      chat.state.setAttribute("data-status", status);
      var item = row && row.permissionMode &&
        document.querySelector('#mode-menu [data-mode="' + row.permissionMode + '"]');
      chat.mode.textContent = row && row.permissionMode
        ? "Mode: " + (item ? item.getAttribute("data-label") : row.permissionMode) : "";
      chat.download.href = API + "/" + encodeURIComponent(selected) + "/log?download=1";
      chat.stop.hidden = !live;
      chat.terminalTab.disabled = !live;
      if (!live && view === "terminal") setView("transcript");
    }
    if (selected === null) {
      composer(true, "Message to start a new session…", "Sending starts a new session.");
    } else if (live) {
      composer(true, "Message this session…", "");
    } else {
      composer(false, "This session has ended.", "This session has ended. Start a new one with +.");
    }
  }

  function composer(enabled, placeholder, message) {
    chat.input.disabled = !enabled;
    chat.input.placeholder = placeholder;
    chat.form.querySelector('button[type="submit"]').disabled = !enabled;
    chat.note.textContent = message;
  }

  function setView(which) {
    view = which;
    chat.transcriptTab.setAttribute("aria-pressed", String(which === "transcript"));
    chat.terminalTab.setAttribute("aria-pressed", String(which === "terminal"));
    chat.log.hidden = which === "terminal";
    chat.terminal.hidden = which !== "terminal";
    if (terminal) {
      terminal.then(function (open) { open.close(); }).catch(function () {});
      terminal = null;
    }
    if (which === "terminal" && selected !== null && window.maxyTerminal) {
      var vendor = (section && section.getAttribute("data-vendor")) || "";
      terminal = window.maxyTerminal.open(chat.terminal, selected, vendor, function (text) {
        chat.note.textContent = text;
      });
      terminal.catch(function (err) {
        chat.note.textContent = String(err.message || err);
      });
    }
  }

  function remember(id) {
    var url = new URL(window.location.href);
    url.searchParams.delete("new");
    if (id === null) url.searchParams.delete("session");
    else url.searchParams.set("session", id);
    window.history.replaceState(null, "", url.pathname + url.search);
  }

  function select(id) {
    showFailure(null);
    selected = id;
    sessions.selected = id;
    remember(id);
    if (view === "terminal") setView("transcript");
    sessions.render();
    showBar();
    showTurns([], id === null ? "" : "Loading the transcript…");
    loadTranscript(id);
  }

  function startNew() {
    select(null);
    chat.input.focus();
  }

  function submit() {
    var text = chat.input.value.trim();
    if (!text) return;
    var id = selected;
    var body = { text: text, submit: true };
    var url = API + "/" + encodeURIComponent(id || "") + "/input";
    if (id === null) {
      url = API + "/spawn";
      body = { message: text };
      // Always the mode the menu shows, so what the label says is what the session runs with.
      var mode = document.getElementById("shell").getAttribute("data-mode");
      if (mode) body.permissionMode = mode;
    }
    composer(false, chat.input.placeholder, id === null ? "Starting the session…" : "Sending…");
    api(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
    })
      .then(function (response) {
        return jsonOf(response).then(function (answer) {
          if (!response.ok) {
            var error = new Error(answer.message || "HTTP " + response.status);
            error.answer = answer;
            throw error;
          }
          showFailure(null);
          chat.input.value = "";
          if (id === null && answer.row) {
            sessions.rows[answer.row.id] = answer.row;
            select(answer.row.id);
          } else {
            showBar();
          }
        });
      })
      .catch(function (err) {
        showBar();
        if (id === null && err.answer && err.answer.code) {
          showFailure(err.answer);
          chat.note.textContent = "The session did not start.";
        } else {
          chat.note.textContent = String(err.message || err);
        }
      });
  }

  // Why a new session did not start: the cause the manager read from the CLI's output, what to
  // do, and (folded) what the CLI printed.
  function showFailure(answer) {
    var box = document.getElementById("spawn-error");
    if (!answer) {
      if (box) box.remove();
      return;
    }
    if (!box) {
      box = document.createElement("div");
      box.id = "spawn-error";
      box.className = "alert spawn-error";
      box.setAttribute("role", "alert");
      box.setAttribute("data-testid", "spawn-error");
      chat.log.appendChild(box);
    }
    box.textContent = "";
    var title = document.createElement("strong");
    title.textContent = answer.cause ? "The session did not start: " + answer.cause : answer.message;
    box.appendChild(title);
    if (answer.hint) {
      var todo = document.createElement("p");
      todo.className = "spawn-hint";
      todo.textContent = answer.hint;
      box.appendChild(todo);
    }
    if (answer.output) {
      var details = document.createElement("details");
      var summary = document.createElement("summary");
      summary.textContent = "What claude printed (exit code " + answer.exitCode + ")";
      var pre = document.createElement("pre");
      pre.textContent = answer.output;
      details.appendChild(summary);
      details.appendChild(pre);
      box.appendChild(details);
    }
  }

  startButtons.forEach(function (button) { button.addEventListener("click", startNew); });
  chat.form.addEventListener("submit", function (event) {
    event.preventDefault();
    submit();
  });
  chat.input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  chat.transcriptTab.addEventListener("click", function () { setView("transcript"); });
  chat.terminalTab.addEventListener("click", function () { setView("terminal"); });
  chat.stop.addEventListener("click", function () {
    if (selected === null) return;
    chat.stop.disabled = true;
    api(API + "/" + encodeURIComponent(selected) + "/stop", { method: "POST" })
      .catch(function () {})
      .then(function () { chat.stop.disabled = false; });
  });
  document.addEventListener("maxy:select", function (event) { select(event.detail.id); });
  document.addEventListener("maxy:sessions", function (event) {
    var id = event.detail.id;
    showBar();
    if (selected !== null && (id === null || id === selected)) {
      window.clearTimeout(refreshTimer);
      refreshTimer = window.setTimeout(function () { loadTranscript(selected); }, 150);
    }
  });

  var params = new URLSearchParams(window.location.search);
  if (params.get("session")) select(params.get("session"));
  else if (params.get("new")) startNew();
  else showBar();
})();
