// A public agent's page. Conversations arrive in a later update: until then the message box
// explains that nothing was sent, and keeps what the visitor typed.
(function () {
  "use strict";

  var form = document.getElementById("agent-form");
  if (!form) return;
  var box = document.getElementById("agent-message");
  var note = document.getElementById("agent-note");
  var name = document.getElementById("agent-name").textContent.trim();

  function grow() {
    box.style.height = "auto";
    box.style.height = Math.min(box.scrollHeight, 200) + "px";
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
    if (!box.value.trim()) { box.focus(); return; }
    note.textContent = name + " cannot reply yet — conversations open here soon. Your message was not sent.";
    note.classList.add("attention");
  });
})();
