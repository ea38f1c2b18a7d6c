// Boxyard's own script: live countdowns for deadlines (lease, idle, time to live), and what
// the templates ask for with data attributes, since the Content-Security-Policy allows no
// inline handler: `data-confirm` on a form asks before it is sent, `data-autosubmit` on a
// field sends its form when it changes. The page's live parts arrive through htmx and its
// websocket extension.
(function () {
  "use strict";

  function left(seconds) {
    if (seconds <= 0) return "0s";
    var h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = Math.floor(seconds % 60);
    if (h > 0) return h + "h " + m + "m";
    if (m > 0) return m + "m " + (s < 10 ? "0" : "") + s + "s";
    return s + "s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(at)) el.textContent = left((at - now) / 1000);
    });
  }

  // Listeners on the document, so that forms swapped in later by htmx are covered too.
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });
  document.addEventListener("change", function (event) {
    var field = event.target;
    if (!field.hasAttribute || !field.hasAttribute("data-autosubmit") || !field.form) return;
    if (field.form.requestSubmit) field.form.requestSubmit(); else field.form.submit();
  });

  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tick);
  document.addEventListener("htmx:oobAfterSwap", tick);
})();
