// Tabs, as the WAI-ARIA tabs pattern has them, over markup that works without this script: a
// `[role=tablist][data-tabs]` of links (`role=tab`, `data-tab="NAME"`, `aria-controls` naming
// the panel it links to) and the `role=tabpanel` panels. Without the script every panel
// shows and a tab jumps to its panel; with it one panel shows, the arrow keys (and Home, End)
// move between the tabs, Tab goes on to the panel, and the URL's fragment (`#tab-NAME`, which
// no element has for an id, so that nothing scrolls) says which tab is chosen, so that a
// reload or a link opens the same one. A fragment naming an element inside a panel (`#events`)
// opens that panel too.
(function () {
  "use strict";

  var PREFIX = "#tab-";

  function tabsOf(list) {
    return Array.prototype.slice.call(list.querySelectorAll("[role=tab]"));
  }

  function panelOf(tab) {
    return document.getElementById(tab.getAttribute("aria-controls"));
  }

  function choose(list, chosen) {
    tabsOf(list).forEach(function (tab) {
      var on = tab === chosen;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.tabIndex = on ? 0 : -1;
      var panel = panelOf(tab);
      if (!panel) return;
      var shown = on && panel.hidden;
      panel.hidden = !on;
      // What waited for the panel to be seen (a file listing to fetch again) hears it now.
      if (shown) panel.dispatchEvent(new CustomEvent("boxyard:shown", { bubbles: true }));
    });
  }

  // The tab a fragment asks for in this list: by its name, or as the one whose panel holds
  // the element the fragment names; null if none.
  function wanted(list, hash) {
    if (!hash || hash === "#") return null;
    var tabs = tabsOf(list);
    if (hash.indexOf(PREFIX) === 0) {
      var name = decodeURIComponent(hash.slice(PREFIX.length));
      return tabs.filter(function (tab) { return tab.getAttribute("data-tab") === name; })[0] || null;
    }
    var target = document.getElementById(decodeURIComponent(hash.slice(1)));
    if (!target) return null;
    return tabs.filter(function (tab) {
      var panel = panelOf(tab);
      return panel && panel.contains(target);
    })[0] || null;
  }

  function remember(tab) {
    var hash = PREFIX + encodeURIComponent(tab.getAttribute("data-tab"));
    if (location.hash !== hash) history.replaceState(history.state, "", hash);
  }

  function setUp(list) {
    var tabs = tabsOf(list);
    if (!tabs.length) return;
    var selected = tabs.filter(function (tab) { return tab.getAttribute("aria-selected") === "true"; });
    choose(list, wanted(list, location.hash) || selected[0] || tabs[0]);
    list.setAttribute("data-ready", "");

    list.addEventListener("click", function (event) {
      var tab = event.target.closest("[role=tab]");
      if (!tab || !list.contains(tab)) return;
      event.preventDefault();
      choose(list, tab);
      remember(tab);
    });
    list.addEventListener("keydown", function (event) {
      var tab = event.target.closest("[role=tab]");
      if (!tab || event.altKey || event.ctrlKey || event.metaKey) return;
      var all = tabsOf(list), at = all.indexOf(tab), next;
      if (event.key === "ArrowRight") next = all[(at + 1) % all.length];
      else if (event.key === "ArrowLeft") next = all[(at - 1 + all.length) % all.length];
      else if (event.key === "Home") next = all[0];
      else if (event.key === "End") next = all[all.length - 1];
      else return;
      event.preventDefault();
      choose(list, next);
      remember(next);
      next.focus();
    });
  }

  function lists() {
    return Array.prototype.slice.call(document.querySelectorAll("[role=tablist][data-tabs]"));
  }

  // A link within the page to another tab (or to something in its panel).
  window.addEventListener("hashchange", function () {
    lists().forEach(function (list) {
      var tab = wanted(list, location.hash);
      if (tab) choose(list, tab);
    });
  });

  // A form that comes back to this page (the language switcher's `next`) comes back to the
  // tab that is shown.
  document.addEventListener("submit", function (event) {
    var next = event.target.querySelector && event.target.querySelector("input[name=next]");
    if (!next || location.hash.indexOf(PREFIX) !== 0) return;
    if (next.value === location.pathname + location.search) next.value += location.hash;
  });

  function start() {
    lists().forEach(setUp);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
