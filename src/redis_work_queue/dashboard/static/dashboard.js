// rwq dashboard: fetches JSON every few seconds and draws it with DOM text nodes only
// (item data is never parsed as markup). Actions are POSTs carrying the page's CSRF token.
"use strict";

(function () {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
  const csrf = meta("csrf-token");
  const refreshMs = Number(meta("refresh-ms")) || 2000;
  const actions = meta("allow-actions") === "yes";
  const $ = (id) => document.getElementById(id);
  // Absolute URLs without any user:password the page was opened with (fetch refuses those).
  const base = location.origin + location.pathname.replace(/[^/]*$/, "");
  const api = (path) => base + path;
  let selected = null;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function num(value) {
    return el("td", value, "num");
  }

  function age(secs) {
    if (secs === null || secs === undefined) return "\u2014";
    if (secs < 60) return `${secs.toFixed(1)} s`;
    if (secs < 3600) return `${(secs / 60).toFixed(1)} min`;
    if (secs < 86400) return `${(secs / 3600).toFixed(1)} h`;
    return `${(secs / 86400).toFixed(1)} d`;
  }

  function rate(value) {
    return value === null || value === undefined ? "\u2014" : value.toFixed(2);
  }

  function when(secs) {
    return secs ? new Date(secs * 1000).toLocaleString() : "\u2014";
  }

  // The file name a download is saved under: the id, with anything unusual as "_".
  function fileName(id) {
    const safe = id.replace(/[^A-Za-z0-9._-]/g, "_").slice(0, 100).replace(/^\.+|\.+$/g, "");
    return `${safe || "item"}.bin`;
  }

  // An item's data: the bounded preview the server sent, and a link to the whole data (read
  // from Redis only when followed) when the preview is a part of it or is binary.
  function dataCell(d, queue, id, dead) {
    const cell = el("td");
    const kind = d.kind === "hex" ? "hex" : "text";
    const body = d.kind === "missing" ? "(data gone)" : d.text + (d.truncated ? " \u2026" : "");
    const span = el("span", body, `data ${kind}`);
    span.title = `${d.size} bytes${d.kind === "hex" ? ", shown as hex" : ""}`;
    cell.append(span);
    if (d.kind !== "missing" && (d.truncated || d.kind === "hex")) {
      const params = new URLSearchParams({ name: queue, id: id });
      if (dead) params.set("dead", "1");
      const link = el("a", `download (${d.size.toLocaleString("en-US")} bytes)`, "download");
      link.href = api(`api/data?${params}`);
      link.download = fileName(id);
      cell.append(" ", link);
    }
    return cell;
  }

  function showBanner(message) {
    const banner = $("banner");
    if (message) {
      banner.textContent = message;
      banner.hidden = false;
    } else {
      banner.hidden = true;
      banner.textContent = "";
    }
  }

  function notice(message, isError) {
    const box = $("notice");
    box.textContent = message;
    box.className = isError ? "notice error" : "notice";
    box.hidden = false;
  }

  async function getJSON(url) {
    const response = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    let body = null;
    try {
      body = await response.json();
    } catch (err) {
      body = { ok: false, error: `HTTP ${response.status}` };
    }
    if (!response.ok || !body.ok) {
      const error = new Error(body.error || `HTTP ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  function drawChart(history) {
    const svg = $("chart");
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (!history || history.length < 1) return;
    const t0 = history[0].t;
    const t1 = history[history.length - 1].t;
    const span = t1 > t0 ? t1 - t0 : 1;
    let top = 1;
    for (const s of history) top = Math.max(top, s.queued, s.leased, s.dead);
    $("chart-span").textContent = age(t1 - t0);
    const ns = "http://www.w3.org/2000/svg";
    for (const key of ["queued", "leased", "dead"]) {
      const line = document.createElementNS(ns, "polyline");
      const points = history.map((s) => {
        const x = ((s.t - t0) / span) * 600;
        const y = 115 - (s[key] / top) * 110;
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      });
      if (points.length === 1) points.push(points[0].replace(/^[^,]*/, "600"));
      line.setAttribute("points", points.join(" "));
      line.setAttribute("class", key);
      line.dataset.series = key;
      svg.append(line);
    }
  }

  function drawQueues(body) {
    const tbody = document.querySelector("#queues tbody");
    tbody.replaceChildren();
    $("empty").hidden = body.queues.length > 0;
    $("truncated").hidden = !body.truncated;
    for (const q of body.queues) {
      const row = el("tr");
      row.dataset.queue = q.name;
      if (q.name === selected) row.classList.add("selected");
      row.append(el("td", q.name, "name"));
      row.addEventListener("click", () => select(q.name));
      if (q.broken) {
        // A queue that cannot be read (a key of another program): one row saying why.
        row.classList.add("broken");
        const why = el("td", q.broken, "why");
        why.colSpan = 8;
        row.append(why);
        tbody.append(row);
        continue;
      }
      for (const key of ["queued", "leased", "expired", "delayed", "dead"]) {
        const cell = num(q[key]);
        cell.dataset.count = key;
        row.append(cell);
      }
      row.append(num(age(q.oldest_age)));
      row.append(num(rate(q.rates.queued)));
      row.append(num(rate(q.rates.dead)));
      tbody.append(row);
      if (q.name === selected && q.history) drawChart(q.history);
    }
    const first = body.queues.find((q) => !q.broken);
    if (selected === null && first) {
      selected = first.name;
      for (const row of tbody.children) {
        row.classList.toggle("selected", row.dataset.queue === selected);
      }
      if (first.history) drawChart(first.history);
    }
  }

  function unknown(value) {
    return value === null || value === undefined ? "?" : value;
  }

  function drawDetail(d) {
    $("detail").hidden = false;
    $("detail-name").textContent = d.name;
    $("broken").hidden = !d.broken;
    $("broken").textContent = d.broken || "";
    $("detail-body").hidden = Boolean(d.broken);
    if (d.broken) return;
    const workers = document.querySelector("#workers tbody");
    workers.replaceChildren();
    for (const w of d.workers) {
      const row = el("tr");
      row.append(el("td", w.id), el("td", w.host), num(unknown(w.pid)));
      row.append(el("td", w.queues.join(", ")), el("td", w.beat === null ? "?" : when(w.beat)));
      row.append(num(w.completed), num(w.failed), num(w.lost));
      const bad = w.unreadable || [];
      row.append(el("td", bad.length ? `unreadable: ${bad.join(", ")}` : "", "muted"));
      workers.append(row);
    }
    if (d.workers.length === 0) workers.append(emptyRow(9, "no live workers"));
    const waiting = document.querySelector("#waiting tbody");
    waiting.replaceChildren();
    for (const q of d.waiting) {
      const row = el("tr");
      row.dataset.id = q.id;
      row.append(num(q.position), el("td", q.id), dataCell(q.data, d.name, q.id, false));
      waiting.append(row);
    }
    if (d.waiting.length === 0) waiting.append(emptyRow(3, "nothing waiting"));
    const pending = document.querySelector("#pending tbody");
    pending.replaceChildren();
    for (const p of d.pending) {
      const row = el("tr");
      const left = p.expired ? "expired (awaiting a light clean)" : age(p.lease_left);
      row.append(el("td", p.id), num(p.deliveries), el("td", left));
      pending.append(row);
    }
    if (d.pending.length === 0) pending.append(emptyRow(3, "no leases"));
    $("dead-total").textContent = `(${d.dead_total})`;
    const dead = document.querySelector("#dead tbody");
    dead.replaceChildren();
    for (const x of d.dead) {
      const row = el("tr");
      row.dataset.id = x.id;
      if (actions) {
        const box = el("input");
        box.type = "checkbox";
        box.value = x.id;
        box.className = "pick";
        const cell = el("td");
        cell.append(box);
        row.append(cell);
      }
      row.append(el("td", x.id), num(x.deliveries), el("td", when(x.died_at)));
      const reason = el("td");
      reason.append(el("div", x.reason, "reason"));
      if (x.traceback) {
        const details = el("details");
        details.append(el("summary", "traceback"), el("pre", x.traceback));
        reason.append(details);
      }
      row.append(reason, dataCell(x.data, d.name, x.id, true));
      if (actions) {
        const cell = el("td");
        const requeue = el("button", "requeue", "requeue-one");
        requeue.type = "button";
        requeue.addEventListener("click", () => act("requeue", { ids: [x.id] }));
        const purge = el("button", "purge", "purge-one danger");
        purge.type = "button";
        purge.addEventListener("click", () => act("purge", { ids: [x.id] }));
        cell.append(requeue, purge);
        row.append(cell);
      }
      dead.append(row);
    }
    if (d.dead.length === 0) dead.append(emptyRow(actions ? 7 : 5, "no dead letters"));
  }

  function emptyRow(span, text) {
    const row = el("tr");
    const cell = el("td", text, "muted");
    cell.colSpan = span;
    row.append(cell);
    return row;
  }

  function select(name) {
    selected = name;
    for (const row of document.querySelectorAll("#queues tbody tr")) {
      row.classList.toggle("selected", row.dataset.queue === name);
    }
    const confirm = $("flush-confirm");
    if (confirm) {
      confirm.value = "";
      $("flush").disabled = true;
    }
    refresh();
  }

  async function act(action, extra) {
    if (!selected) return;
    const body = Object.assign({ queue: selected, action: action }, extra || {});
    try {
      const response = await fetch(api("api/action"), {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify(body),
      });
      const reply = await response.json();
      if (!response.ok || !reply.ok) throw new Error(reply.error || `HTTP ${response.status}`);
      notice(reply.message, false);
    } catch (err) {
      notice(`${action} failed: ${err.message}`, true);
    }
    refresh();
  }

  function picked() {
    return Array.from(document.querySelectorAll("#dead input.pick:checked")).map((b) => b.value);
  }

  function wireActions() {
    if (!actions) return;
    $("light-clean").addEventListener("click", () => act("light-clean"));
    $("deep-clean").addEventListener("click", () => act("deep-clean"));
    const confirm = $("flush-confirm");
    confirm.addEventListener("input", () => {
      $("flush").disabled = confirm.value !== selected;
    });
    $("flush").addEventListener("click", () => {
      act("flush", { confirm: confirm.value });
      confirm.value = "";
      $("flush").disabled = true;
    });
    $("requeue-selected").addEventListener("click", () => {
      const ids = picked();
      if (ids.length) act("requeue", { ids: ids });
    });
    $("purge-selected").addEventListener("click", () => {
      const ids = picked();
      if (ids.length) act("purge", { ids: ids });
    });
    $("requeue-all").addEventListener("click", () => act("requeue", { all: true }));
    $("purge-all").addEventListener("click", () => act("purge", { all: true }));
  }

  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const charted = selected === null ? "" : `?history=${encodeURIComponent(selected)}`;
      const body = await getJSON(api(`api/overview${charted}`));
      drawQueues(body);
      if (selected !== null) {
        try {
          const detail = await getJSON(api(`api/queue?name=${encodeURIComponent(selected)}`));
          // The ticks as they are now: one made while the request was in flight is kept too.
          const kept = picked();
          drawDetail(detail);
          for (const box of document.querySelectorAll("#dead input.pick")) {
            box.checked = kept.includes(box.value);
          }
        } catch (err) {
          if (err.status === 404) {
            selected = null;
            $("detail").hidden = true;
          } else {
            throw err;
          }
        }
      }
      showBanner(null);
      $("updated").textContent = `updated ${new Date(body.time * 1000).toLocaleTimeString()}`;
      document.body.dataset.refreshed = String(body.time);
    } catch (err) {
      showBanner(`Error: ${err.message}`);
    } finally {
      busy = false;
    }
  }

  wireActions();
  refresh();
  setInterval(refresh, refreshMs);
})();
