// A public agent's page: the visitor's conversation with the agent.
// On load, the transcript this visitor already has (GET /api/public/<slug>/messages) is shown.
// A message is POSTed as JSON; the reply streams back as server-sent events (delta, refusal,
// error, done) read from the fetch body, and grows in the agent's bubble as it arrives.
(function () {
  "use strict";

  var main = document.getElementById("agent");
  var form = document.getElementById("agent-form");
  if (!main || !form) return;
  var box = document.getElementById("agent-message");
  var send = document.getElementById("agent-send");
  var log = document.getElementById("agent-log");
  var note = document.getElementById("agent-note");
  var defaultNote = note.textContent;
  var api = "/api/public/" + encodeURIComponent(main.dataset.slug) + "/messages";
  var busy = false;

  function grow() {
    box.style.height = "auto";
    box.style.height = Math.min(box.scrollHeight, 200) + "px";
  }

  function bubble(role, text) {
    var div = document.createElement("div");
    div.className = role === "user" ? "bubble from-visitor" : "bubble from-agent";
    div.dataset.role = role;
    div.textContent = text;
    log.appendChild(div);
    div.scrollIntoView({ block: "end" });
    return div;
  }

  function say(text, attention) {
    note.textContent = text;
    note.classList.toggle("attention", !!attention);
  }

  function parseEvent(block) {
    var name = "message";
    var data = "";
    block.split("\n").forEach(function (line) {
      if (line.indexOf("event:") === 0) name = line.slice(6).trim();
      else if (line.indexOf("data:") === 0) data += line.slice(5).trim();
    });
    try { return { name: name, data: data ? JSON.parse(data) : {} }; }
    catch (err) { return { name: "error", data: {} }; }
  }

  function handle(event, reply) {
    if (event.name === "delta") {
      reply.textContent += event.data.text || "";
    } else if (event.name === "refusal") {
      reply.textContent = event.data.text || "";
      reply.classList.add("refusal");
      reply.dataset.refusal = "true";
    } else if (event.name === "error") {
      if (!reply.textContent) reply.remove();
      say(event.data.message || "Something went wrong. Please try again.", true);
      return true;
    } else if (event.name === "done") {
      reply.dataset.done = "true";
      return true;
    }
    return false;
  }

  async function readStream(response, reply) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    var finished = false;
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      var cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        finished = handle(parseEvent(buffer.slice(0, cut)), reply) || finished;
        buffer = buffer.slice(cut + 2);
      }
      reply.scrollIntoView({ block: "end" });
    }
    return finished;
  }

  async function sendMessage(text) {
    busy = true;
    send.disabled = true;
    say(defaultNote, false);
    var mine = bubble("user", text);
    var reply = bubble("assistant", "");
    reply.classList.add("pending");
    try {
      var response = await fetch(api, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
        body: JSON.stringify({ text: text }),
        credentials: "same-origin",
      });
      if (!response.ok) {
        var problem = {};
        try { problem = await response.json(); } catch (err) { /* not JSON */ }
        mine.remove();
        reply.remove();
        box.value = text;  // keep what the visitor typed
        grow();
        say(problem.message || "Your message could not be sent. Please try again.", true);
        return;
      }
      box.value = "";
      grow();
      var finished = await readStream(response, reply);
      if (!finished) say("The reply was cut off. Please try again.", true);
    } catch (err) {
      if (!reply.textContent) reply.remove();
      say("The connection was lost. Please try again.", true);
    } finally {
      reply.classList.remove("pending");
      busy = false;
      send.disabled = false;
      box.focus();
    }
  }

  async function loadTranscript() {
    try {
      var response = await fetch(api, { credentials: "same-origin" });
      if (!response.ok) return;
      var data = await response.json();
      (data.messages || []).forEach(function (m) { bubble(m.role, m.text); });
    } catch (err) { /* an empty log is fine */ }
  }

  box.addEventListener("input", grow);
  box.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = box.value.trim();
    if (!text || busy) { box.focus(); return; }
    sendMessage(text);
  });
  loadTranscript();
})();
