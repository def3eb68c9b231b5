// The dashboard's script: live updates in place, sortable tables, following the hosted log.
// Every page works without it (each is complete as served); this only keeps it current.
(function () {
  "use strict";

  function text(el, value) { if (el && el.textContent !== value) { el.textContent = value; } }
  function num(value, digits) {
    if (value === null || value === undefined) { return "\u2013"; }
    if (Number.isInteger(value)) { return value.toLocaleString("en-US"); }
    return value.toFixed(digits === undefined ? 3 : digits);
  }
  function seconds(value) {
    if (value === null || value === undefined) { return "\u2013"; }
    if (value < 1) { return Math.round(value * 1000) + " ms"; }
    if (value < 120) { return value.toFixed(1) + " s"; }
    var m = Math.floor(value / 60), h = Math.floor(m / 60);
    return h ? h + "h " + String(m % 60).padStart(2, "0") + "m"
             : m + "m " + String(Math.floor(value % 60)).padStart(2, "0") + "s";
  }
  var STATUS = { PENDING: "pending", RUNNING: "running", PROCESSING: "running", COMPLETED: "ok",
    FAILED: "bad", CANCELLED: "muted", TIMEOUT: "bad" };
  function status(cell, value) {
    var badge = cell && cell.querySelector(".status");
    if (!badge || badge.textContent === value) { return; }
    badge.textContent = value;
    badge.className = "status " + (STATUS[value] || "muted");
  }
  function mean(cell, m) {
    if (!cell || !m) { return; }
    var shape = cell.querySelector(".shape"), value = cell.querySelector(".mean");
    if (!value || m.mean === null) { return; }
    text(value, num(m.mean));
    var pm = cell.querySelector(".pm");
    if (pm && m.ci95 !== null && m.symmetric) { text(pm, "\u00b1 " + num(m.half_width)); }
    else if (pm && m.ci95 !== null) { text(pm, "[" + num(m.ci95[0]) + ", " + num(m.ci95[1]) + "]"); }
    if (shape) {
      text(shape, num(m.n_examples) + " \u00d7 " + m.rollouts +
        (m.n_errored ? ", " + num(m.n_errored) + " errored" : ""));
    }
  }

  // The list: patch each row's status, samples and mean; selections and typed filters stay.
  // An evaluation that is new to the page (or gone from it) redraws the rows from the page.
  function patchList(data) {
    var rows = document.querySelectorAll("#evaluations tbody tr[data-id]");
    var shown = Array.prototype.map.call(rows, function (r) { return r.dataset.id; });
    var sent = data.evaluations.map(function (e) { return e.id; });
    if (shown.join() !== sent.join()) { redrawRows(); }
    data.evaluations.forEach(function (e) {
      var row = document.querySelector('tr[data-id="' + CSS.escape(e.id) + '"]');
      if (!row) { return; }
      status(row.querySelector('[data-field="status"]'), e.status);
      text(row.querySelector('[data-field="samples"]'), num(e.samples));
      mean(row.querySelector('[data-field="mean"]'), e.mean_reward);
    });
    // The newest page keeps watching for new evaluations; another page, for running ones.
    return Boolean(data.refresh_s);
  }

  function fetchPage() {
    var url = new URL(window.location.href);
    url.searchParams.delete("format");
    return fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { return html && new DOMParser().parseFromString(html, "text/html"); });
  }

  function redrawRows() {
    fetchPage().then(function (doc) {
      var now = document.querySelector("#evaluations tbody");
      var next = doc && doc.querySelector("#evaluations tbody");
      if (!now || !next) { return; }
      // Keep what the user ticked: the compare boxes and the baseline choice.
      var ticked = {};
      now.querySelectorAll("input:checked").forEach(function (i) { ticked[i.name + "=" + i.value] = true; });
      next.querySelectorAll("input").forEach(function (i) { i.checked = !!ticked[i.name + "=" + i.value]; });
      now.replaceWith(document.importNode(next, true));
      var total = document.querySelector("h1 small"), nextTotal = doc.querySelector("h1 small");
      if (total && nextTotal) { text(total, nextTotal.textContent); }
    });
  }

  // An evaluation's parts drawn by the server: the histograms and metrics, pass@k and the
  // per-example figures, the samples table. Redrawn from the page when samples arrive; a
  // part the user is typing in is left alone.
  var PARTS = ["#figures", "#per-example", "#samples"];
  function redrawParts() {
    fetchPage().then(function (doc) {
      if (!doc) { return; }
      PARTS.forEach(function (selector) {
        var now = document.querySelector(selector), next = doc.querySelector(selector);
        if (!now || !next || now.contains(document.activeElement)) { return; }
        if (now.innerHTML === next.innerHTML) { return; }
        var fresh = document.importNode(next, true);
        now.replaceWith(fresh);
        fresh.querySelectorAll("table.sortable").forEach(sortable);
      });
    });
  }

  // An evaluation: header figures, progress, the headline, and the new part of the log.
  function patchEvaluation(data) {
    var ev = data.evaluation, p = data.progress;
    document.querySelectorAll('[data-field="status"]').forEach(function (c) { status(c, ev.status); });
    text(document.querySelector('dd[data-field="samples"]'), num(ev.total_samples));
    text(document.querySelector('[data-field="headline"]'), data.stats.headline);
    text(document.querySelector('[data-field="errored"]'), num(data.mean.n_errored));
    mean(document.querySelector('td[data-field="mean"]'), data.mean);
    text(document.querySelector('[data-field="tokens"]'), num(data.stats.usage.prompt_tokens) +
      " prompt + " + num(data.stats.usage.completion_tokens) + " completion");
    var bar = document.querySelector('[data-field="progress-bar"]');
    if (bar && p.expected) { bar.max = p.expected; bar.value = p.done; }
    text(document.querySelector('[data-field="progress-text"]'),
      num(p.done) + (p.expected ? " of " + num(p.expected) : "") + " samples");
    text(document.querySelector('[data-field="elapsed"]'), seconds(p.elapsed_s));
    text(document.querySelector('[data-field="eta"]'), seconds(p.eta_s));
    var shards = document.querySelector("#shards tbody");
    if (shards && data.shards) {
      shards.textContent = "";
      data.shards.forEach(function (s) {
        var row = shards.insertRow();
        [s.index + "/" + s.count, s.state, String(s.attempt),
          num(s.samples) + (s.expected === null ? "" : " of " + num(s.expected)), s.error || ""]
          .forEach(function (value) { row.insertCell().textContent = value; });
      });
    }
    var log = document.getElementById("hosted-logs");
    if (log && data.logs !== null) {
      // Follow the log only when the reader is at its end: never jump away from what they read.
      var atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 8;
      if (data.logs_reset || log.dataset.length === "0") { log.textContent = data.logs; }
      else if (data.logs) { log.appendChild(document.createTextNode(data.logs)); }
      if (data.logs_length !== null) { log.dataset.length = String(data.logs_length); }
      if (data.logs && atEnd) { log.scrollTop = log.scrollHeight; }
    }
    return ev.live;
  }

  function poll() {
    var period = Number(document.body.dataset.pollS || 0) * 1000;
    if (!period) { return; }
    var patch = document.getElementById("evaluations") ? patchList
      : (document.querySelector(".eval-header") ? patchEvaluation : null);
    if (!patch) { return; }
    function tick() {
      var url = new URL(window.location.href);
      url.searchParams.set("format", "json");
      var log = document.getElementById("hosted-logs");
      if (log) { url.searchParams.set("logs_from", log.dataset.length || "0"); }
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) {
          var shown = document.querySelector('dd[data-field="samples"]');
          var before = shown && shown.textContent;
          var live = data ? patch(data) : true;
          if (live && shown && shown.textContent !== before) { redrawParts(); }
          // A finished evaluation: load it once more, so every part (histograms, pass@k,
          // per-example figures, run summary, samples) shows the final figures.
          if (!live && patch === patchEvaluation) { window.location.reload(); return; }
          if (live) { window.setTimeout(tick, period); }
          else { var note = document.getElementById("live-note"); if (note) { note.remove(); } }
        })
        .catch(function () { window.setTimeout(tick, period * 2); });
    }
    window.setTimeout(tick, period);
  }

  // Tables with class "sortable": click a heading to sort by it (numbers by data-value).
  function sortable(table) {
    table.querySelectorAll("thead th").forEach(function (th, index) {
      th.classList.add("sort-key");
      th.tabIndex = 0;
      th.setAttribute("role", "button");
      function sort() {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var up = th.dataset.dir !== "asc";
        table.querySelectorAll("thead th").forEach(function (o) { delete o.dataset.dir; o.removeAttribute("aria-sort"); });
        th.dataset.dir = up ? "asc" : "desc";
        th.setAttribute("aria-sort", up ? "ascending" : "descending");
        function key(row) {
          var cell = row.cells[index], v = cell ? cell.dataset.value : "";
          return v === "" || v === undefined ? null : Number(v);
        }
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          if (x === null) { return y === null ? 0 : 1; }  // missing values last, both ways
          if (y === null) { return -1; }
          return up ? x - y : y - x;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); } });
    });
  }

  // Long texts (class "clamp") are served capped and scrollable; a button shows all of it.
  function showAll(box) {
    var button = document.createElement("button");
    var lines = Number(box.dataset.lines || 0);
    var more = "Show all" + (lines ? " (" + lines.toLocaleString("en-US") + " lines)" : "");
    button.type = "button";
    button.className = "show-all";
    button.textContent = more;
    button.setAttribute("aria-expanded", "false");
    button.addEventListener("click", function () {
      var shown = box.classList.toggle("shown");
      button.textContent = shown ? "Show less" : more;
      button.setAttribute("aria-expanded", shown ? "true" : "false");
      if (!shown) { box.scrollTop = 0; box.scrollIntoView({ block: "nearest" }); }
    });
    box.insertAdjacentElement("afterend", button);
  }

  // A sample page: j and k open the next and previous sample (as in a mail reader).
  var nav = document.getElementById("sample-nav");
  if (nav) {
    document.addEventListener("keydown", function (e) {
      if (e.altKey || e.ctrlKey || e.metaKey || e.target.closest("input, select, textarea, [contenteditable]")) { return; }
      var link = nav.querySelector(e.key === "j" ? 'a[rel="next"]' : (e.key === "k" ? 'a[rel="prev"]' : null));
      if (link) { window.location.href = link.href; }
    });
  }

  // A sample page: each message rendered as markdown can be shown as written instead (its
  // text from the page's JSON twin, fetched once), for code the model wrote without fences.
  function asWritten(articles) {
    var twin = null;
    function load() {
      if (!twin) {
        var url = new URL(window.location.href);
        url.searchParams.set("format", "json");
        twin = fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
          .then(function (r) { return r.json(); });
      }
      return twin;
    }
    articles.forEach(function (article) {
      var body = article.querySelector(":scope > .content");
      if (!body || !body.querySelector(".md")) { return; }
      var button = document.createElement("button");
      button.type = "button";
      button.className = "show-all as-written";
      button.textContent = "As written";
      button.setAttribute("aria-pressed", "false");
      article.querySelector(":scope > header").appendChild(button);
      function show(written) {
        var pre = article.querySelector(":scope > pre.written");
        pre.hidden = !written;
        body.hidden = written;
        button.setAttribute("aria-pressed", written ? "true" : "false");
      }
      button.addEventListener("click", function () {
        if (article.querySelector(":scope > pre.written")) { show(button.getAttribute("aria-pressed") !== "true"); return; }
        load().then(function (data) {
          var pre = document.createElement("pre");
          pre.className = "output written";
          pre.textContent = data.sample.messages[Number(article.dataset.message)].content;
          body.insertAdjacentElement("afterend", pre);
          show(true);
        });
      });
    });
  }

  var log = document.getElementById("hosted-logs");
  if (log && log.dataset.follow === "yes") { log.scrollTop = log.scrollHeight; }
  if (nav) { asWritten(document.querySelectorAll("#transcript article.message[data-message]")); }
  document.querySelectorAll(".clamp").forEach(showAll);
  document.querySelectorAll("table.sortable").forEach(sortable);
  poll();
})();
