// The sandbox page's terminal: term.js (Debian's libjs-term.js) on a websocket. Keys go to the
// server as {"type": "input"}; the screen comes back as binary frames of the terminal's bytes.
(function () {
  "use strict";

  function charSize(host) {
    var probe = document.createElement("span");
    probe.textContent = "W";
    probe.style.cssText = "font: 14px/1.2 monospace; position: absolute; visibility: hidden";
    host.appendChild(probe);
    var size = { w: probe.getBoundingClientRect().width || 8.4, h: probe.getBoundingClientRect().height || 17 };
    host.removeChild(probe);
    return size;
  }

  function open(button) {
    var host = document.getElementById("terminal");
    var cell = charSize(host);
    var cols = Math.max(40, Math.floor((host.clientWidth || 800) / cell.w) - 1);
    var rows = 24;
    // useStyle would add a <style> element, which the Content-Security-Policy refuses: the
    // same rules are in boxyard.css.
    var term = new Terminal({ cols: cols, rows: rows, screenKeys: true, useStyle: false, cursorBlink: true });
    term.open(host);
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + location.host + button.dataset.url + "?cols=" + cols + "&rows=" + rows);
    ws.binaryType = "arraybuffer";
    var decoder = new TextDecoder();
    ws.onmessage = function (event) {
      term.write(typeof event.data === "string" ? event.data : decoder.decode(event.data, { stream: true }));
    };
    ws.onclose = function () { term.write("\r\n[closed]\r\n"); host.dataset.state = "closed"; };
    ws.onopen = function () { host.dataset.state = "open"; term.focus(); };
    term.on("data", function (data) {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "input", data: data }));
    });
    window.addEventListener("resize", function () {
      if (!host.clientWidth) return; // its tab is not shown: no width to fit
      var next = Math.max(40, Math.floor(host.clientWidth / cell.w) - 1);
      if (next !== cols) {
        cols = next;
        term.resize(cols, rows);
        if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols: cols, rows: rows }));
      }
    });
    button.disabled = true;
  }

  document.addEventListener("click", function (event) {
    if (event.target && event.target.id === "terminal-open") open(event.target);
  });
})();
