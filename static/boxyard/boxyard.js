// Boxyard's own script: live countdowns for deadlines (lease, idle, time to live), past moments
// in words ("3 minutes ago"), and what the templates ask for with data attributes, since the
// Content-Security-Policy allows no inline handler: `data-confirm` on a form asks in a dialog
// before it is sent, `data-autosubmit` on a field sends its form when it changes, `data-upload`
// on a form sends its file with a progress bar, `data-copy` on a button copies the block or
// code beside it; the scope's preset and template stay one choice. The page's live parts arrive
// through htmx and its websocket extension; the tabs are tabs.js's.
(function () {
  "use strict";

  // A countdown in the page's language, in its short units ("29m 57s", "29分钟57秒").
  var units = {};
  function unit(value, name) {
    if (!units[name]) {
      try {
        units[name] = new Intl.NumberFormat(document.documentElement.lang || undefined,
          { style: "unit", unit: name, unitDisplay: "narrow" });
      } catch (error) {
        units[name] = { format: function (v) { return v + name.charAt(0); } };
      }
    }
    return units[name].format(value);
  }

  // `data-countdown="minutes"` (the fleet's rows) counts in minutes until the last one: a
  // table of sandboxes whose cells all changed every second would be noise to read, and a
  // redraw a second for every page open.
  function left(seconds, minutes) {
    if (seconds <= 0) return unit(0, "second");
    var h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = Math.floor(seconds % 60);
    if (h > 0) return unit(h, "hour") + " " + unit(m, "minute");
    if (m > 0) return minutes ? unit(m, "minute") : unit(m, "minute") + " " + unit(s, "second");
    return unit(s, "second");
  }

  // `<time data-relative>`: a past moment, in the page's language ("3 minutes ago", "hier"),
  // with the exact date and time, in the browser's time zone, in its title; the server's
  // absolute text stays for a browser without this script.
  var UNITS = [["year", 365 * 86400], ["month", 30 * 86400], ["week", 7 * 86400], ["day", 86400],
    ["hour", 3600], ["minute", 60], ["second", 1]];

  function formats() {
    var lang = document.documentElement.lang || undefined;
    try {
      new Intl.RelativeTimeFormat(lang);
    } catch (error) {
      lang = undefined; // a language the browser cannot name: its own
    }
    return {
      ago: new Intl.RelativeTimeFormat(lang, { numeric: "auto" }),
      exact: new Intl.DateTimeFormat(lang, { dateStyle: "long", timeStyle: "long" }),
    };
  }

  function ago(format, seconds) {
    seconds = Math.max(seconds, 0); // a clock a little ahead of the server's says "now"
    // Within the first minute, by tens of seconds ("now", "10 seconds ago"): a moment's words
    // change at most every 10 seconds, then every minute.
    if (seconds < 60) seconds = Math.floor(seconds / 10) * 10;
    var unit = UNITS.filter(function (u) { return seconds >= u[1]; })[0] || UNITS[UNITS.length - 1];
    return format.format(-Math.floor(seconds / unit[1]), unit[0]);
  }

  var wording = null; // the formats, made once

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      var text = left((at - now) / 1000, el.getAttribute("data-countdown") === "minutes");
      if (el.textContent !== text) el.textContent = text;
    });
    var moments = document.querySelectorAll("time[data-relative]");
    if (!moments.length) return;
    wording = wording || formats();
    moments.forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      var words = ago(wording.ago, (now - at) / 1000), exact = wording.exact.format(new Date(at));
      if (el.textContent !== words) el.textContent = words; // touched only when it changes
      if (el.title !== exact) el.title = exact;
    });
  }

  // Listeners on the document, so that forms swapped in later by htmx are covered too.
  // `data-confirm` asks in the page's dialog (base.html) and sends the form only once the
  // admin confirms; `data-count="NAME"` counts the ticked boxes NAME: none, and nothing is
  // sent; one, `data-confirm-one` is asked; more, `data-confirm` with {count} filled in.
  function question(form) {
    var name = form.getAttribute("data-count");
    if (!name) return form.getAttribute("data-confirm");
    var count = form.querySelectorAll("input[name='" + name + "']:checked").length;
    if (count === 0) return null;
    if (count === 1 && form.hasAttribute("data-confirm-one")) return form.getAttribute("data-confirm-one");
    return form.getAttribute("data-confirm").replace("{count}", count.toLocaleString(document.documentElement.lang || undefined));
  }

  function ask(form, submitter) {
    var dialog = document.getElementById("confirm-dialog");
    var text = question(form);
    if (text === null) return; // nothing to act on
    if (!dialog || !dialog.showModal) {
      if (window.confirm(text)) send(form, submitter);
      return;
    }
    dialog.querySelector("[data-question]").textContent = text;
    var yes = dialog.querySelector("[data-yes]");
    yes.textContent = form.getAttribute("data-confirm-button") || yes.getAttribute("data-default");
    yes.classList.toggle("danger", !!(submitter && submitter.classList.contains("danger")));
    dialog.returnValue = "";
    dialog.onclose = function () {
      if (dialog.returnValue === "yes") send(form, submitter);
    };
    dialog.showModal();
  }

  function send(form, submitter) {
    form.setAttribute("data-confirmed", "");
    if (form.requestSubmit) form.requestSubmit(submitter || undefined); else form.submit();
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.hasAttribute || !form.hasAttribute("data-confirm")) return;
    if (form.hasAttribute("data-confirmed")) {
      form.removeAttribute("data-confirmed");
      return;
    }
    event.preventDefault();
    ask(form, event.submitter);
  });
  document.addEventListener("change", function (event) {
    var field = event.target;
    if (!field.hasAttribute || !field.hasAttribute("data-autosubmit") || !field.form) return;
    if (field.form.requestSubmit) field.form.requestSubmit(); else field.form.submit();
  });

  // `data-upload`: the chosen file is the body of a PUT to the form's action, `?path=` the
  // directory shown and the file's name. The browser reads a File from disk as it sends it, so
  // a file of any size goes through and never sits in the page's memory (a multipart form
  // would be read whole by the server before its view ran). Every word shown comes from the
  // form's data attributes, translated by the server.
  function csrfToken() {
    // The one the page gives htmx for every request it makes.
    try {
      return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
    } catch (error) {
      return "";
    }
  }

  function say(form, done, failed) {
    form.querySelector("[data-upload-done]").textContent = done || "";
    form.querySelector("[data-upload-error]").textContent = failed || "";
    // A failed upload wrote nothing; its bar, which counts what the browser sent (all of it,
    // by the browser's count, once a refusal has come), would say otherwise.
    if (failed) form.querySelector("[data-upload-progress]").hidden = true;
  }

  function showProgress(form, sent, total) {
    var lang = document.documentElement.lang || undefined;
    var bar = form.querySelector("progress");
    bar.max = Math.max(total, 1);
    bar.value = total ? sent : 1;
    // Whole percents, rounded down: 100% is only said once every byte has gone.
    var share = total ? Math.floor((sent / total) * 100) / 100 : 1;
    form.querySelector("[data-upload-sent]").textContent = form.getAttribute("data-progress")
      .replace("{percent}", new Intl.NumberFormat(lang, { style: "percent" }).format(share))
      .replace("{sent}", sent.toLocaleString(lang))
      .replace("{total}", total.toLocaleString(lang));
    form.querySelector("[data-upload-progress]").hidden = false;
  }

  function answerOf(xhr) {
    try {
      return JSON.parse(xhr.responseText);
    } catch (error) {
      return null; // not ours: a login page, a proxy's error page
    }
  }

  function uploaded(form, message) {
    // The directory again, with the new file in it; the outcome stays said in the new form.
    var refreshed = window.htmx && htmx.ajax("GET", form.getAttribute("data-refresh"),
      { target: "#files-view", swap: "outerHTML" });
    if (!refreshed) {
      say(form, message, "");
      return;
    }
    var said = function () {
      say(document.querySelector("#files-view form[data-upload]") || form, message, "");
    };
    refreshed.then(said, said);
  }

  function upload(form) {
    var input = form.querySelector("input[type=file]");
    var button = form.querySelector("button[type=submit]");
    var file = input.files && input.files[0];
    say(form, "", "");
    if (!file) {
      say(form, "", form.getAttribute("data-choose"));
      return;
    }
    var directory = form.getAttribute("data-directory").replace(/\/+$/, "");
    var xhr = new XMLHttpRequest();
    xhr.open("PUT", form.action + "?path=" + encodeURIComponent(directory + "/" + file.name));
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    xhr.setRequestHeader("X-CSRFToken", csrfToken());
    xhr.upload.addEventListener("progress", function (event) {
      if (event.lengthComputable) showProgress(form, event.loaded, event.total);
    });
    xhr.addEventListener("load", function () {
      var answer = answerOf(xhr);
      button.disabled = false;
      if (xhr.status === 201 && answer && answer.ok) {
        showProgress(form, file.size, file.size);
        uploaded(form, answer.message);
        return;
      }
      var message = answer && answer.error && answer.error.message;
      say(form, "", message || form.getAttribute("data-failed").replace("{status}", xhr.status));
    });
    xhr.addEventListener("error", function () {
      button.disabled = false;
      say(form, "", form.getAttribute("data-lost"));
    });
    button.disabled = true;
    showProgress(form, 0, file.size);
    xhr.send(file);
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.hasAttribute || !form.hasAttribute("data-upload")) return;
    event.preventDefault();
    upload(form);
  });

  setInterval(tick, 1000);
  // The scope's two fields are one choice: a preset fills the template in; a template typed
  // that is a preset selects it, and any other selects "Custom" (what Save stores is what shows).
  // Heard on the way down (capture), before htmx's listener on the select asks for the preview:
  // the preview is then asked for with the preset's template, not the one it replaces.
  document.addEventListener(
    "change",
    function (event) {
      var select = event.target;
      if (select.id !== "id_scope_preset" || select.value === "custom") return;
      var template = document.getElementById("id_scope_template");
      if (template) template.value = select.value;
    },
    true
  );
  document.addEventListener("input", function (event) {
    var template = event.target;
    if (template.id !== "id_scope_template") return;
    var select = document.getElementById("id_scope_preset");
    if (!select) return;
    var typed = template.value.trim();
    var preset = Array.prototype.some.call(select.options, function (option) {
      return option.value === typed && option.value !== "custom";
    });
    select.value = preset ? typed : "custom";
  });

  // `data-copy`: the button copies the text of the block (`<pre>`) or code beside it.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button || !navigator.clipboard) return;
    var block = button.parentNode.querySelector("pre, code");
    if (!block) return;
    navigator.clipboard.writeText(block.textContent).then(function () {
      button.setAttribute("data-copied", "");
    });
  });

  // A change of the sandbox's files, said over the page's websocket (`#files-stale`): the
  // file browser fetches again what it shows, the directory or the file.
  // While the file browser is not shown (another tab is), it is only marked stale, and
  // fetches again when it is shown: a bot's burst of commands costs no listings meanwhile.
  var filesStale = false;
  function refreshFiles() {
    filesStale = false;
    var view = document.getElementById("files-view");
    var url = view && view.getAttribute("data-url");
    if (!url) return;
    if (view.closest("[hidden]")) {
      view.setAttribute("data-stale", "");  // until the new listing replaces it
      return;
    }
    var form = view.querySelector("form[data-upload]");
    // An upload under way refreshes the view itself when it ends; what an ended one said
    // stays said in the new view.
    if (form && form.querySelector("button[disabled]")) return;
    var done = form ? form.querySelector("[data-upload-done]").textContent : "";
    var failed = form ? form.querySelector("[data-upload-error]").textContent : "";
    htmx.ajax("GET", url, { target: "#files-view", swap: "outerHTML" }).then(function () {
      var again = document.querySelector("#files-view form[data-upload]");
      if (again && (done || failed)) say(again, done, failed);
    });
  }
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail && event.detail.target;
    if (!target || target.id !== "files-stale" || !window.htmx || filesStale) return;
    filesStale = true;
    setTimeout(refreshFiles, 0);
  });
  document.addEventListener("boxyard:shown", function (event) {
    var view = document.getElementById("files-view");
    if (view && view.hasAttribute("data-stale") && event.target.contains(view)) refreshFiles();
  });

  // The header's Menu button (narrow screens): shows and hides the menu it controls.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest(".menu-button");
    if (!button) return;
    var open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", open ? "true" : "false");
  });

  // After swaps, one tick for all of them: a pushed message swaps several parts, and htmx
  // says so for each element of each.
  var ticking = false;
  function tickSoon() {
    if (ticking) return;
    ticking = true;
    setTimeout(function () {
      ticking = false;
      tick();
    }, 0);
  }

  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tickSoon);
  document.addEventListener("htmx:oobAfterSwap", tickSoon);
})();
