// A session's terminal in the browser: xterm.js (vendored, loaded on first use) on the
// WebSocket /api/admin/sessions/<id>/terminal. The server sends {"type":"sync","seq":N,"reset":b}
// and then output as binary frames (byte k after the sync is number N+k); a dropped connection
// reconnects with ?resume=<next seq> so nothing is shown twice. Keys, size and focus go back as
// {"type":"input"|"resize"|"focus"}. Plain ES5-style JS, no build step.
(function () {
  "use strict";

  var loading = null;
  // Close codes after which reconnecting can help (a slow viewer, a restart, a lost network).
  var RECONNECT = { 1001: true, 1006: true, 1012: true, 1013: true, 4000: true };

  function load(tag, attrs) {
    return new Promise(function (resolve, reject) {
      var node = document.createElement(tag);
      Object.keys(attrs).forEach(function (name) { node.setAttribute(name, attrs[name]); });
      node.addEventListener("load", function () { resolve(); });
      node.addEventListener("error", function () {
        reject(new Error("Could not load " + (attrs.src || attrs.href) + "."));
      });
      document.head.appendChild(node);
    });
  }

  function loadXterm(vendor) {
    if (window.Terminal && window.FitAddon) return Promise.resolve();
    if (loading) return loading;
    var base = "/static/vendor/@xterm/";
    var version = vendor ? "?v=" + encodeURIComponent(vendor) : "";
    loading = Promise.all([
      load("link", { rel: "stylesheet", href: base + "xterm/css/xterm.css" + version }),
      load("script", { src: base + "xterm/lib/xterm.js" + version }),
    ]).then(function () {
      return load("script", { src: base + "addon-fit/lib/addon-fit.js" + version });
    });
    loading.catch(function () { loading = null; });
    return loading;
  }

  function socketUrl(id, resume) {
    var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    var path = "/api/admin/sessions/" + encodeURIComponent(id) + "/terminal";
    var url = scheme + "//" + window.location.host + path;
    return resume === null ? url : url + "?resume=" + resume;
  }

  // Open the terminal of session `id` in `container`; resolves to {input(text), close()}.
  function open(container, id, vendor, onStatus) {
    var say = onStatus || function () {};
    return loadXterm(vendor).then(function () {
      var term = new window.Terminal({
        cursorBlink: true, fontSize: 13, scrollback: 5000, theme: { background: "#11141a" },
      });
      var fit = new window.FitAddon.FitAddon();
      term.loadAddon(fit);
      container.textContent = "";
      term.open(container);
      var socket = null;
      var next = null; // sequence number of the next byte we expect
      var closed = false;
      var retry = null;

      function send(message) {
        if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
      }
      function resize() {
        try { fit.fit(); } catch (err) { return; }
        send({ type: "resize", rows: term.rows, cols: term.cols });
      }
      function connect() {
        socket = new WebSocket(socketUrl(id, next));
        socket.binaryType = "arraybuffer";
        socket.addEventListener("open", function () { say(""); resize(); });
        socket.addEventListener("message", function (event) {
          if (typeof event.data !== "string") {
            var bytes = new Uint8Array(event.data);
            if (next !== null) next += bytes.length;
            term.write(bytes);
            return;
          }
          var message;
          try { message = JSON.parse(event.data); } catch (err) { return; }
          if (message.type === "sync") {
            if (message.reset) term.reset();
            next = message.seq;
          } else if (message.type === "ended") {
            say("The session has ended.");
          } else if (message.code) {
            say(message.message || message.code);
          }
        });
        socket.addEventListener("close", function (event) {
          if (closed) return;
          if (RECONNECT[event.code]) {
            say(event.reason === "app-restarting"
              ? "Server is restarting — reconnect will happen automatically."
              : "Lost connection — retrying.");
            retry = window.setTimeout(connect, 1000);
          } else if (event.code !== 1000) {
            say(event.reason || "The terminal closed (code " + event.code + ").");
          }
        });
      }

      term.onData(function (data) { send({ type: "input", data: data }); });
      container.addEventListener("focusin", function () { send({ type: "focus" }); });
      window.addEventListener("resize", resize);
      connect();
      term.focus();

      return {
        // Type ``text`` into the terminal, as keystrokes would (Connect Claude's code field).
        input: function (text) { send({ type: "input", data: text }); },
        close: function () {
          closed = true;
          window.clearTimeout(retry);
          window.removeEventListener("resize", resize);
          if (socket) socket.close(1000);
          term.dispose();
          container.textContent = "";
        },
      };
    });
  }

  window.maxyTerminal = { open: open };
})();
