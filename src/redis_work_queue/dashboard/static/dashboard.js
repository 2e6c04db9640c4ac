// rwq dashboard: fetches JSON every few seconds and draws it with DOM text nodes only
// (item data is never parsed as markup). On a queue made with events=True the page follows its
// event stream (api/live, one bounded blocking read after another) and redraws as events come,
// polling only every LIVE_POLL_FACTOR refreshes; on a queue without events it polls. Actions are POSTs carrying the page's CSRF token.
// What is shown is in the URL: ?queue=NAME&tab=waiting|leased|delayed|dead&page=N, ?queue=NAME&job=ID
// for one job, ?view=workers for the workers of every queue. Links navigate; a refresh redraws.
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
  const TABS = ["waiting", "leased", "delayed", "dead"];
  const params = new URLSearchParams(location.search);
  const view = params.get("view") === "workers" ? "workers" : "queues";
  let selected = params.get("queue");
  const job = params.get("job");
  const tab = TABS.includes(params.get("tab")) ? params.get("tab") : "waiting";
  const pageNo = Math.max(1, parseInt(params.get("page") || "1", 10) || 1);
  // Tracebacks the user opened, by row: kept open across the redraws of each refresh.
  const opened = new Set();
  // The queue whose view is drawn (the schedules' last ids link to its jobs).
  let lastQueue = null;

  function link(query) {
    const search = new URLSearchParams(query).toString();
    return search ? `?${search}` : "?";
  }

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function num(value) {
    return el("td", typeof value === "number" ? value.toLocaleString("en-US") : value, "num");
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

  function jobLink(queue, id) {
    const a = el("a", id, "job-link");
    a.href = link({ queue: queue, job: id });
    return a;
  }

  // The file name a download is saved under: the id, with anything unusual as "_".
  function fileName(id) {
    const safe = id.replace(/[^A-Za-z0-9._-]/g, "_").slice(0, 100).replace(/^\.+|\.+$/g, "");
    return `${safe || "item"}.bin`;
  }

  function downloadLink(queue, id, dead, size) {
    const params = new URLSearchParams({ name: queue, id: id });
    if (dead) params.set("dead", "1");
    const a = el("a", `download (${size.toLocaleString("en-US")} bytes)`, "download");
    a.href = api(`api/data?${params}`);
    a.download = fileName(id);
    return a;
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
      cell.append(" ", downloadLink(queue, id, dead, d.size));
    }
    return cell;
  }

  // A traceback in a <details> that stays open across refreshes once opened.
  function traceback(key, text, cls) {
    const details = el("details", null, cls);
    details.dataset.key = key;
    details.append(el("summary", "traceback"), el("pre", text));
    details.open = opened.has(key);
    details.addEventListener("toggle", () => {
      if (details.open) opened.add(key);
      else opened.delete(key);
    });
    return details;
  }

  function showBanner(message) {
    const banner = $("banner");
    banner.hidden = !message;
    banner.textContent = message || "";
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

  // Charts ---------------------------------------------------------------------------------

  const SVG = "http://www.w3.org/2000/svg";
  const CHART = { w: 640, h: 180, left: 56, right: 12, top: 10, bottom: 26 };

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A round top for the y axis: 1, 2 or 5 times a power of ten, at least the largest value.
  function niceTop(value) {
    if (!(value > 0)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
    return 10 * power;
  }

  function short(value) {
    if (value >= 1e6) return `${(value / 1e6).toFixed(value >= 1e7 ? 0 : 1)}M`;
    if (value >= 1e3) return `${(value / 1e3).toFixed(value >= 1e4 ? 0 : 1)}k`;
    return Number.isInteger(value) ? String(value) : value.toFixed(2);
  }

  function clock(secs) {
    return new Date(secs * 1000).toLocaleTimeString();
  }

  // Lines of series [{key, points: [[t, v], ...]}] with a y axis (0, half, top), an x axis
  // (first and last time), and each series' latest value in the legend.
  function drawLines(svg, legend, series, unit) {
    svg.replaceChildren();
    legend.replaceChildren();
    const all = series.flatMap((s) => s.points);
    const { w, h, left, right, top, bottom } = CHART;
    const plotW = w - left - right;
    const plotH = h - top - bottom;
    const t0 = all.length ? Math.min(...all.map((p) => p[0])) : 0;
    const t1 = all.length ? Math.max(...all.map((p) => p[0])) : 1;
    const span = t1 > t0 ? t1 - t0 : 1;
    const ymax = niceTop(Math.max(0, ...all.map((p) => p[1])));
    const x = (t) => left + ((t - t0) / span) * plotW;
    const y = (v) => top + plotH - (v / ymax) * plotH;
    for (const frac of [0, 0.5, 1]) {
      const value = ymax * frac;
      svg.append(svgEl("line", { x1: left, x2: w - right, y1: y(value), y2: y(value), class: "grid" }));
      svg.append(svgEl("text", { x: left - 6, y: y(value) + 4, class: "axis y" }, short(value)));
    }
    svg.append(svgEl("line", { x1: left, x2: left, y1: top, y2: top + plotH, class: "axis-line" }));
    if (all.length) {
      svg.append(svgEl("text", { x: left, y: h - 6, class: "axis x start" }, clock(t0)));
      svg.append(svgEl("text", { x: w - right, y: h - 6, class: "axis x end" }, clock(t1)));
    } else {
      svg.append(svgEl("text", { x: left + plotW / 2, y: top + plotH / 2, class: "axis x mid" }, "collecting samples\u2026"));
    }
    for (const s of series) {
      if (s.points.length) {
        const pts = s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`);
        if (pts.length === 1) pts.push(`${(w - right).toFixed(1)},${y(s.points[0][1]).toFixed(1)}`);
        const line = svgEl("polyline", { points: pts.join(" "), class: s.key });
        line.dataset.series = s.key;
        svg.append(line);
      }
      const last = s.points.length ? s.points[s.points.length - 1][1] : null;
      const key = el("span", null, `key ${s.key}`);
      key.dataset.series = s.key;
      key.append(`${s.key} `, el("b", last === null ? "\u2014" : `${short(last)}${unit}`, "value"));
      legend.append(key, " ");
    }
  }

  function drawCharts(history) {
    if (!history) return;
    const counts = ["queued", "leased", "dead"].map((key) => ({
      key: key,
      points: history.map((s) => [s.t, s[key]]),
    }));
    drawLines($("chart"), $("chart-legend"), counts, "");
    $("chart-span").textContent = history.length > 1 ? age(history[history.length - 1].t - history[0].t) : "0 s";
    // Per second, between consecutive samples of the counters (a flush resets them: never < 0).
    const rates = ["added", "completed", "failed"].map((key) => {
      const points = [];
      for (let i = 1; i < history.length; i++) {
        const a = history[i - 1];
        const b = history[i];
        if (a[key] === undefined || b[key] === undefined || b.t <= a.t) continue;
        points.push([b.t, Math.max(0, (b[key] - a[key]) / (b.t - a.t))]);
      }
      return { key: key, points: points };
    });
    drawLines($("rates-chart"), $("rates-legend"), rates, "/s");
  }

  // Queues ---------------------------------------------------------------------------------

  function drawQueues(body) {
    const tbody = document.querySelector("#queues tbody");
    tbody.replaceChildren();
    $("empty").hidden = body.queues.length > 0;
    $("truncated").hidden = !body.truncated;
    for (const q of body.queues) {
      const row = el("tr");
      row.dataset.queue = q.name;
      if (q.name === selected) row.classList.add("selected");
      const name = el("td", null, "name");
      const a = el("a", q.name);
      a.href = link({ queue: q.name });
      name.append(a);
      row.append(name);
      row.addEventListener("click", (event) => {
        if (event.target.tagName !== "A") location.href = link({ queue: q.name });
      });
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
        const cell = el("td", q[key], "num");
        cell.dataset.count = key;
        row.append(cell);
      }
      const oldest = num(age(q.oldest_age));
      if (q.oldest_age === null && q.queued > 0) {
        oldest.title = "the next item's id is not one the library made (a UUIDv7): it holds no time";
      }
      row.append(oldest, num(rate(q.rates.queued)), num(rate(q.rates.dead)));
      tbody.append(row);
      if (q.name === selected) drawCharts(q.history);
    }
  }

  function unknown(value) {
    return value === null || value === undefined ? "?" : value;
  }

  function emptyRow(span, text) {
    const row = el("tr");
    const cell = el("td", text, "muted");
    cell.colSpan = span;
    row.append(cell);
    return row;
  }

  // One queue, one tab, one page ---------------------------------------------------------------

  function drawTab(d) {
    $("detail").hidden = false;
    $("detail-name").textContent = d.name;
    $("broken").hidden = !d.broken;
    $("broken").textContent = d.broken || "";
    $("detail-body").hidden = Boolean(d.broken);
    if (d.broken) return;
    lastQueue = d.name;
    drawSchedules(d.schedules);
    drawGroups(d.groups);
    const totals = {
      waiting: d.counts.queued,
      leased: d.counts.leased + d.counts.expired,
      delayed: d.counts.delayed,
      dead: d.counts.dead,
    };
    for (const t of TABS) {
      const a = $(`tab-${t}`);
      a.href = link({ queue: d.name, tab: t });
      a.classList.toggle("active", t === d.tab);
      a.querySelector(".count").textContent = `(${totals[t].toLocaleString("en-US")})`;
    }
    $("waiting").hidden = d.tab !== "waiting";
    $("leased").hidden = d.tab !== "leased";
    $("delayed").hidden = d.tab !== "delayed";
    $("dead-tab").hidden = d.tab !== "dead";
    const total = d.total.toLocaleString("en-US");
    $("range").textContent = d.total
      ? `${d.first.toLocaleString("en-US")}\u2013${d.last.toLocaleString("en-US")} of ${total}`
      : `0 of 0`;
    $("range").title = `page ${d.page} of ${d.pages}`;
    const prev = $("prev");
    const next = $("next");
    prev.hidden = d.page <= 1;
    next.hidden = d.page >= d.pages;
    prev.href = link({ queue: d.name, tab: d.tab, page: d.page - 1 });
    next.href = link({ queue: d.name, tab: d.tab, page: d.page + 1 });
    const tbody = document.querySelector(`#${d.tab} tbody`);
    tbody.replaceChildren();
    for (const r of d.rows) {
      const row = el("tr");
      row.dataset.id = r.id;
      const id = el("td", null, "id");
      id.append(jobLink(d.name, r.id));
      if (d.tab === "waiting") {
        row.append(num(r.position + 1), id, dataCell(r.data, d.name, r.id, false));
      } else if (d.tab === "leased") {
        const left = r.expired ? "expired (awaiting a light clean)" : age(r.lease_left);
        const worker = el("td", "\u2014", "muted");
        worker.title = "a lease does not record the worker that holds it";
        row.append(num(r.position + 1), id, num(r.deliveries), el("td", when(r.leased_at)), el("td", left), worker);
      } else if (d.tab === "delayed") {
        const due = el("td", when(r.due_at));
        due.title = `in ${age(r.due_at - Date.now() / 1000)}`;
        row.append(num(r.position + 1), id, due, dataCell(r.data, d.name, r.id, false));
      } else {
        if (actions) {
          const box = el("input");
          box.type = "checkbox";
          box.value = r.id;
          box.className = "pick";
          const cell = el("td");
          cell.append(box);
          row.append(cell);
        }
        row.append(num(r.position + 1), id, num(r.deliveries), el("td", when(r.died_at)));
        const reason = el("td", null, "reason-cell");
        reason.append(el("div", r.reason, "reason"));
        if (r.traceback) reason.append(traceback(`dead:${r.id}`, r.traceback));
        row.append(reason, dataCell(r.data, d.name, r.id, true));
        if (actions) {
          const cell = el("td", null, "row-actions");
          const requeue = el("button", "requeue", "requeue-one");
          requeue.type = "button";
          requeue.addEventListener("click", () => act("requeue", { ids: [r.id] }));
          const purge = el("button", "purge", "purge-one danger");
          purge.type = "button";
          purge.addEventListener("click", () => act("purge", { ids: [r.id] }));
          cell.append(requeue, purge);
          row.append(cell);
        }
      }
      tbody.append(row);
    }
    if (d.rows.length === 0) {
      const spans = { waiting: 3, leased: 6, delayed: 4, dead: actions ? 8 : 6 };
      const words = { waiting: "nothing waiting", leased: "no leases", delayed: "nothing delayed", dead: "no dead letters" };
      tbody.append(emptyRow(spans[d.tab], words[d.tab]));
    }
  }

  function utc(secs) {
    if (secs === null || secs === undefined) return "\u2014";
    return `${new Date(secs * 1000).toISOString().replace("T", " ").slice(0, 19)} UTC`;
  }

  // A queue's schedules (at most the first page the API reads); nothing when it has none.
  function drawSchedules(s) {
    const box = $("schedules-box");
    const tbody = document.querySelector("#schedules tbody");
    tbody.replaceChildren();
    box.hidden = !s || s.total === 0;
    if (box.hidden) return;
    const total = s.total.toLocaleString("en-US");
    $("schedules-count").textContent = s.rows.length < s.total ? `(${s.rows.length} of ${total})` : `(${total})`;
    for (const r of s.rows) {
      const row = el("tr");
      row.dataset.schedule = r.name;
      const plan = r.cron !== null ? r.cron : `every ${age(r.every)}`;
      const state = el("td", r.state, `state-${r.state}`);
      const last = el("td", null, "id");
      if (r.last_id) last.append(jobLink(lastQueue, r.last_id));
      else last.textContent = "\u2014";
      row.append(el("td", r.name), el("td", plan, "mono"), el("td", r.tz), el("td", utc(r.next_due)), state, last);
      tbody.append(row);
    }
  }

  // A queue's fair groups: the groups with the most items waiting (a bounded number, read from
  // the ranking the queue keeps), each with its counts; nothing for a queue without groups.
  function drawGroups(g) {
    const box = $("groups-box");
    const tbody = document.querySelector("#groups tbody");
    tbody.replaceChildren();
    box.hidden = !g;
    if (!g) return;
    const count = (n) => n.toLocaleString("en-US");
    $("groups-count").textContent = `(${count(g.total)} with items waiting)`;
    const cap = g.cap === null ? "none" : count(g.cap);
    $("groups-summary").textContent = `${count(g.grouped)} items waiting on the groups' lists; group concurrency: ${cap}`;
    for (const r of g.rows) {
      const row = el("tr");
      row.dataset.group = r.name;
      const inFlight = num(r.in_flight);
      if (g.cap !== null && r.in_flight >= g.cap) {
        inFlight.classList.add("at-cap");
        inFlight.title = "at the cap: the group waits for one of its items to finish";
      }
      const state = el("td", r.paused ? "paused" : "active", r.paused ? "state-paused" : "state-active");
      state.dataset.state = r.paused ? "paused" : "active";
      row.append(el("td", r.name, "name"), num(r.ready), inFlight, num(g.cap === null ? "\u2014" : g.cap), state);
      if (actions) {
        const cell = el("td", null, "row-actions");
        const kind = r.paused ? "resume" : "pause";
        const button = el("button", kind, `group-${kind}`);
        button.type = "button";
        button.addEventListener("click", () => act(`${kind}-group`, { group: r.name }));
        cell.append(button);
        row.append(cell);
      }
      tbody.append(row);
    }
    if (g.rows.length === 0) tbody.append(emptyRow(actions ? 6 : 5, "no group has items waiting"));
    $("groups-rest").hidden = g.rest === 0;
    $("groups-rest").textContent = `and ${count(g.rest)} more groups with items waiting (the ${count(g.rows.length)} with the most are shown)`;
  }

  // One job ----------------------------------------------------------------------------------

  function facts(dl, pairs) {
    dl.replaceChildren();
    for (const [term, value] of pairs) {
      const dt = el("dt", term);
      const dd = el("dd", value);
      dd.dataset.fact = term;
      dl.append(dt, dd);
    }
  }

  function showData(pre, d, json) {
    pre.classList.toggle("hex", d.kind === "hex");
    if (json) pre.textContent = json;
    else if (d.kind === "missing") pre.textContent = "(data gone)";
    else if (d.kind === "hidden") pre.textContent = `(${d.size.toLocaleString("en-US")} bytes: too large to show here)`;
    else pre.textContent = d.text + (d.truncated ? " \u2026" : "");
  }

  function drawJob(j) {
    $("job").hidden = false;
    $("job-id").textContent = j.id;
    $("job-queue").textContent = j.name;
    $("job-back").href = link({ queue: j.name });
    $("job-missing").hidden = j.found;
    // The states of job control (WorkQueue.state), in the words of the tabs.
    const words = {
      queued: "waiting",
      delayed: "delayed",
      leased: "leased",
      expired: "leased, lease expired (awaiting a light clean)",
      dead: "dead",
      completed: "completed",
      gone: "not found",
    };
    const state = j.state;
    const pairs = [["state", words[state] || state], ["deliveries", String(j.deliveries)]];
    if (state === "leased") pairs.push(["lease left", age(j.lease_left)]);
    if (j.leased_at) pairs.push(["leased", when(j.leased_at)]);
    if (state === "delayed") pairs.push(["due", when(j.due_at)]);
    if (j.has_data) pairs.push(["size", `${j.data.size.toLocaleString("en-US")} bytes`]);
    if (j.progress !== null && j.progress !== undefined) pairs.push(["progress", JSON.stringify(j.progress)]);
    if (j.result && j.result.truncated) pairs.push(["result size", `${j.result.size.toLocaleString("en-US")} bytes`]);
    facts($("job-facts"), pairs);
    $("job-result-box").hidden = !j.result;
    if (j.result) showData($("job-result"), j.result, null);
    drawJobEvents(j.events);
    document.body.dataset.jobState = state;
    $("job-reason-box").hidden = !j.reason;
    $("job-reason").textContent = (j.reason || "") + (j.reason_cut ? " (cut)" : "");
    $("job-traceback-box").hidden = !j.traceback;
    $("job-traceback").textContent = j.traceback || "";
    // A dead job's data is its dead letter's (below); a live one's, or "(data gone)", here.
    // (A completed job's data is gone by design: its result, above, is what is left.)
    $("job-data-box").hidden = (!j.has_data && Boolean(j.dead)) || state === "completed";
    showData($("job-data"), j.data, j.json);
    $("job-download").replaceChildren();
    if (j.has_data && (j.data.truncated || j.data.kind === "hex")) {
      $("job-download").append(downloadLink(j.name, j.id, false, j.data.size));
    }
    $("job-dead").hidden = !j.dead;
    if (actions) {
      // Job control's actions, where they apply: cancel a live job, promote a delayed one,
      // retry or purge a dead letter.
      const live = ["queued", "delayed", "leased", "expired"].includes(state);
      $("job-cancel").hidden = !live;
      $("job-promote").hidden = state !== "delayed";
      $("job-retry").hidden = !j.dead;
      $("job-purge").hidden = !j.dead;
    }
    if (j.dead) {
      facts($("job-dead-facts"), [
        ["died", when(j.dead.died_at)],
        ["deliveries", String(j.dead.deliveries)],
        ["size", `${j.dead.data.size.toLocaleString("en-US")} bytes`],
      ]);
      $("job-dead-reason").textContent = j.dead.reason + (j.dead.reason_cut ? " (cut)" : "");
      $("job-dead-traceback-box").hidden = !j.dead.traceback;
      $("job-dead-traceback").textContent = j.dead.traceback || "";
      showData($("job-dead-data"), j.dead.data, j.dead.json);
      $("job-dead-download").replaceChildren();
      if (j.dead.data.truncated || j.dead.data.kind === "hex") {
        $("job-dead-download").append(downloadLink(j.name, j.id, true, j.dead.data.size));
      }
    }
  }

  // A job's newest events (null: its queue keeps no event stream).
  function drawJobEvents(events) {
    $("job-events-box").hidden = !events;
    const tbody = document.querySelector("#job-events tbody");
    tbody.replaceChildren();
    if (!events) return;
    for (const e of events) {
      const row = el("tr");
      row.dataset.event = e.kind;
      row.append(el("td", when(e.at)), el("td", e.kind), num(e.delivery === null ? "\u2014" : e.delivery));
      row.append(el("td", e.reason || ""));
      tbody.append(row);
    }
    if (events.length === 0) tbody.append(emptyRow(4, "no recent events"));
  }

  // Workers ----------------------------------------------------------------------------------

  function drawWorkers(body) {
    $("workers-view").hidden = false;
    const tbody = document.querySelector("#workers tbody");
    tbody.replaceChildren();
    for (const w of body.workers) {
      const row = el("tr");
      row.dataset.id = w.id;
      row.append(el("td", w.id), el("td", w.host), num(unknown(w.pid)));
      row.append(el("td", w.queues.join(", ")));
      const beat = el("td", w.beat_age === null ? "?" : `${age(w.beat_age)} ago`);
      if (w.beat) beat.title = when(w.beat);
      row.append(beat, el("td", w.started ? age(body.time - w.started) : "?"));
      row.append(num(w.completed), num(w.failed), num(w.lost));
      const bad = w.unreadable || [];
      row.append(el("td", bad.length ? `unreadable: ${bad.join(", ")}` : "", "muted"));
      tbody.append(row);
    }
    if (body.workers.length === 0) tbody.append(emptyRow(10, "no live workers"));
    const durations = document.querySelector("#durations tbody");
    durations.replaceChildren();
    for (const d of body.durations) {
      const row = el("tr");
      row.dataset.queue = d.queue;
      row.dataset.outcome = d.outcome;
      const bound = (b) => (b === "+Inf" ? "more" : `${b} s`);
      row.append(el("td", d.queue), el("td", d.outcome), num(d.jobs));
      const mean = d.mean < 1 ? `${(d.mean * 1000).toFixed(1)} ms` : age(d.mean);
      row.append(el("td", mean), el("td", bound(d.p50)), el("td", bound(d.p95)));
      durations.append(row);
    }
    if (body.durations.length === 0) durations.append(emptyRow(6, "no jobs timed yet"));
  }

  // Actions ----------------------------------------------------------------------------------

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

  // A text box that must hold the queue's name before its buttons work.
  function confirmBox(input, buttons) {
    input.addEventListener("input", () => {
      for (const b of buttons) b.disabled = input.value !== selected;
    });
  }

  function wireActions() {
    if (!actions) return;
    $("light-clean").addEventListener("click", () => act("light-clean"));
    $("deep-clean").addEventListener("click", () => act("deep-clean"));
    const flushConfirm = $("flush-confirm");
    confirmBox(flushConfirm, [$("flush")]);
    $("flush").addEventListener("click", () => {
      act("flush", { confirm: flushConfirm.value });
      flushConfirm.value = "";
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
    const allConfirm = $("all-confirm");
    const both = [$("requeue-all"), $("purge-all")];
    confirmBox(allConfirm, both);
    for (const [button, kind] of [[both[0], "requeue"], [both[1], "purge"]]) {
      button.addEventListener("click", () => {
        act(kind, { all: true, confirm: allConfirm.value });
        allConfirm.value = "";
        for (const b of both) b.disabled = true;
      });
    }
    // A group by name: pause or resume one that is not listed (a paused group with nothing
    // waiting, or one below the top groups).
    const groupName = $("group-name");
    const groupButtons = [$("group-pause"), $("group-resume")];
    groupName.addEventListener("input", () => {
      for (const b of groupButtons) b.disabled = groupName.value === "";
    });
    for (const [button, kind] of [[groupButtons[0], "pause-group"], [groupButtons[1], "resume-group"]]) {
      button.addEventListener("click", () => {
        if (groupName.value !== "") act(kind, { group: groupName.value });
      });
    }
    $("job-cancel").addEventListener("click", () => act("cancel", { id: job }));
    $("job-promote").addEventListener("click", () => act("promote", { id: job }));
    $("job-retry").addEventListener("click", () => act("retry", { id: job }));
    $("job-purge").addEventListener("click", () => act("purge", { ids: [job] }));
  }

  function wireSearch() {
    if (!selected || view === "workers") return;
    $("search").hidden = false;
    $("search-queue").textContent = selected;
    $("search").addEventListener("submit", (event) => {
      event.preventDefault();
      const id = $("search-id").value.trim();
      if (id) location.href = link({ queue: selected, job: id });
    });
  }

  // Refresh ----------------------------------------------------------------------------------

  let busy = false;
  // A refresh asked for while one was in flight: it runs again after it, with what changed.
  let again = false;
  let lastRefresh = 0;
  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    again = false;
    lastRefresh = Date.now();
    const started = performance.now();
    try {
      let time = null;
      if (view === "workers") {
        const body = await getJSON(api("api/workers"));
        drawWorkers(body);
        time = body.time;
      } else {
        // The queue's view is asked for with the overview, not after it: one wait, not two.
        let detail = null;
        if (selected !== null) {
          const q = job
            ? `api/job?${new URLSearchParams({ name: selected, id: job })}`
            : `api/queue?${new URLSearchParams({ name: selected, tab: tab, page: String(pageNo) })}`;
          detail = getJSON(api(q));
          detail.catch(() => {}); // awaited below; not an unhandled rejection meanwhile
        }
        const charted = selected === null ? "" : `?history=${encodeURIComponent(selected)}`;
        const body = await getJSON(api(`api/overview${charted}`));
        time = body.time;
        drawQueues(body);
        if (selected === null) {
          const first = body.queues.find((q) => !q.broken);
          if (first && !job) {
            selected = first.name;
            for (const row of document.querySelectorAll("#queues tbody tr")) {
              row.classList.toggle("selected", row.dataset.queue === selected);
            }
            drawCharts(first.history);
            wireSearch();
            const q = new URLSearchParams({ name: selected, tab: tab, page: String(pageNo) });
            detail = getJSON(api(`api/queue?${q}`));
          }
        }
        if (detail !== null) {
          try {
            if (job) {
              drawJob(await detail);
            } else {
              const shown = await detail;
              // The ticks as they are now: one made while the request was in flight is kept too.
              const kept = picked();
              drawTab(shown);
              for (const box of document.querySelectorAll("#dead input.pick")) {
                box.checked = kept.includes(box.value);
              }
            }
          } catch (err) {
            if (err.status === 404) {
              $("detail").hidden = true;
              $("job").hidden = true;
              throw new Error(`no queue ${selected} is shown here`);
            }
            throw err;
          }
        }
      }
      showBanner(null);
      $("updated").textContent = `updated ${new Date(time * 1000).toLocaleTimeString()}`;
      document.body.dataset.refreshed = String(time);
      document.body.dataset.drawnMs = String(Math.round(performance.now() - started));
      // The first draw of this view, in ms since the navigation started (the browser tests'
      // load time).
      if (!document.body.dataset.firstDrawnMs) {
        document.body.dataset.firstDrawnMs = String(Math.round(performance.now()));
      }
    } catch (err) {
      showBanner(`Error: ${err.message}`);
    } finally {
      busy = false;
      if (again) refresh();
    }
  }

  // Live updates -----------------------------------------------------------------------------

  // While the shown queue's event stream is followed, the page polls this many times less often
  // (the other queues' counts and the clocks still move), except on the page of a leased job,
  // whose progress and lease change without events.
  const LIVE_POLL_FACTOR = 10;
  let live = false;

  function setLive(on) {
    live = on;
    document.body.dataset.live = on ? "on" : "off";
    $("live").hidden = !on;
  }

  // Follow the shown queue's events: each reply with events redraws at once. A queue without
  // events ends the loop (the page polls); an error waits a refresh before trying again.
  async function follow() {
    if (view === "workers" || selected === null) {
      setLive(false);
      return;
    }
    let since = "$";
    for (;;) {
      try {
        const q = new URLSearchParams({ name: selected, since: since });
        const body = await getJSON(api(`api/live?${q}`));
        if (!body.live) {
          setLive(false);
          return;
        }
        setLive(true);
        since = body.since;
        if (body.events.length) {
          document.body.dataset.lastEvent = body.events[body.events.length - 1].event_id;
          refresh();
        }
      } catch (err) {
        setLive(false);
        await new Promise((resolve) => setTimeout(resolve, refreshMs));
      }
    }
  }

  $("queues-view").hidden = view === "workers" || Boolean(job);
  $("nav-workers").classList.toggle("active", view === "workers");
  $("nav-queues").classList.toggle("active", view !== "workers");
  wireActions();
  wireSearch();
  setLive(false);
  refresh().then(follow);
  setInterval(() => {
    const leasedJob = job && document.body.dataset.jobState === "leased";
    if (!live || leasedJob || Date.now() - lastRefresh >= refreshMs * LIVE_POLL_FACTOR) refresh();
  }, refreshMs);
})();
