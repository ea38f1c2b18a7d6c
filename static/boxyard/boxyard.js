// Boxyard's own script: live countdowns for deadlines (lease, idle, time to live). The page's
// live parts arrive through htmx and its websocket extension; nothing else runs here.
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

  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tick);
  document.addEventListener("htmx:oobAfterSwap", tick);
})();
