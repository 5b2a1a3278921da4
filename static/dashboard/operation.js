// Rescaler console: one operation, live. Everything shown comes from GET /api/v1/operations/<id>
// (the same view the API serves), kept current by the deltas of ws/operations/<id>/: each
// operation.progress event carries the next progress_version and only what changed, in the
// document's shapes. A delta is applied when it is exactly the version after the one the page
// holds; a missed version, any other event and a reconnect re-read the document, so a missed or
// reordered event can never leave the page wrong.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const PHASE_SYMBOL = {
    owned: "·", planned: "○", pending: "◔", collecting: "H", exported: "E", acquiring: "A",
    acquired: "a", dropping: "D", done: "✓", cancelled: "×",
  };
  const FINAL = new Set(["completed", "cancelled", "failed"]);

  let root;
  let operationId;
  let current = null;
  let selected = null; // "fragment/vnode"
  const { number, bytes, duration, el } = window.rescalerFormat;


  // --- rendering ---------------------------------------------------------------------------
  // moved against planned, as the server words it (op.moved: never a share over 100 %)
  function bar(id, figures) {
    const b = $(`${id}-bar`);
    b.max = 1;
    b.value = figures.share || 0;
    $(`${id}-text`).textContent = figures.text;
  }

  function renderHeader(op) {
    const status = $("op-status");
    status.textContent = op.status;
    status.className = `badge status-${op.status}`;
    const waiting = $("op-waiting");
    waiting.hidden = !op.waiting;
    if (op.waiting) waiting.textContent = op.waiting.detail;
    const outcome = $("op-outcome");
    outcome.hidden = !op.outcome;
    outcome.textContent = op.outcome ? `Outcome: ${op.outcome}${op.error_code ? ` (${op.error_code})` : ""}` : "";

    bar("keys", op.moved.keys);
    bar("bytes", op.moved.bytes);
    bar("vnodes", op.moved.vnodes);
    const keys = op.moved.keys;
    const started = op.started_at ? Date.parse(op.started_at) : null;
    const ended = op.finished_at ? Date.parse(op.finished_at) : Date.now();
    const elapsed = started ? (ended - started) / 1000 : null;
    if (elapsed && elapsed > 0 && op.keys_moved > 0) {
      const rate = op.keys_moved / elapsed;
      $("rate-text").textContent = `${number(Math.round(rate))} keys/s`;
      $("eta-text").textContent = FINAL.has(op.status)
        ? `took ${duration(elapsed)}`
        : `ETA ${duration(Math.max(keys.planned - keys.moved + keys.arrived, 0) / rate)}`;
    } else {
      $("rate-text").textContent = "–";
      $("eta-text").textContent = elapsed ? `${FINAL.has(op.status) ? "took" : "running for"} ${duration(elapsed)}` : "not started";
    }
    const cancel = $("cancel");
    if (cancel) cancel.hidden = FINAL.has(op.status) || op.status === "cancelling";
  }

  function stepsByNumber(op) {
    const byStep = new Map();
    for (const s of op.steps || []) byStep.set(s.step, s);
    return byStep;
  }

  // cells are updated in place (never rebuilt), so focus and layout survive every refresh
  function gridFor(holder, name, size) {
    let grid = holder.querySelector(`.vgrid[data-fragment="${CSS.escape(name)}"]`);
    if (grid && grid.children.length === size) return grid;
    if (grid) grid.previousElementSibling.remove();
    if (grid) grid.remove();
    grid = el("div", { class: "vgrid", role: "list", "aria-label": `vnodes of ${name}`, "data-fragment": name });
    for (let vnode = 0; vnode < size; vnode += 1) {
      grid.append(el("button", { type: "button", class: "vn", role: "listitem", "data-key": `${name}/${vnode}` }));
    }
    holder.append(el("h3", { text: `${name} · ${size} vnodes` }), grid);
    return grid;
  }

  function renderGrid(op) {
    const holder = $("vnode-grids");
    const byVnode = new Map();
    for (const v of op.vnodes || []) byVnode.set(`${v.fragment}/${v.vnode}`, v);
    const steps = stepsByNumber(op);
    const now = Date.now() / 1000;
    for (const [name, frag] of Object.entries((op.plan && op.plan.fragments) || {})) {
      const before = frag.mapping_before || [];
      const grid = gridFor(holder, name, before.length);
      before.forEach((owner, vnode) => {
        const key = `${name}/${vnode}`;
        const v = byVnode.get(key);
        // a vnode's PUs and phase are its step's (the document says each once)
        const step = v ? steps.get(v.step) : null;
        const phase = step ? step.phase : "owned";
        const since = step && step.timings ? step.timings[phase] : null;
        const label = step
          ? `vnode ${vnode}: PU ${step.source_pu} → PU ${step.target_pu}, ${phase}, ${number(v.keys)} keys, ` +
            `${bytes(v.bytes)}, hold queue ${number(v.hold_queue)}` +
            (since ? `, ${duration(now - since)} in phase` : "")
          : `vnode ${vnode}: stays on PU ${owner}`;
        const cell = grid.children[vnode];
        cell.className = `vn phase-${phase}`;
        cell.textContent = PHASE_SYMBOL[phase] || "?";
        cell.title = label;
        cell.setAttribute("aria-label", label);
        cell.setAttribute("aria-pressed", key === selected ? "true" : "false");
        cell.dataset.phase = phase;
      });
    }
    const detail = $("vnode-detail");
    const pressed = selected && holder.querySelector(`[data-key="${CSS.escape(selected)}"]`);
    detail.hidden = !pressed;
    if (pressed) detail.textContent = pressed.getAttribute("aria-label");
  }

  function renderPlacement(op) {
    const holder = $("placement");
    holder.replaceChildren();
    const steps = stepsByNumber(op);
    const moved = new Map(); // "fragment/vnode" -> target PU, once its records go there
    for (const v of op.vnodes || []) {
      const step = steps.get(v.step);
      if (step && v.routing === "target") moved.set(`${v.fragment}/${v.vnode}`, step.target_pu);
    }
    for (const [name, frag] of Object.entries((op.plan && op.plan.fragments) || {})) {
      const before = frag.mapping_before || [];
      const count = (mapping) => {
        const c = {};
        mapping.forEach((pu) => { c[pu] = (c[pu] || 0) + 1; });
        return c;
      };
      const rows = [
        ["before", count(before)],
        ["planned", count(frag.mapping_after || [])],
        ["now", count(before.map((pu, vnode) => moved.get(`${name}/${vnode}`) ?? pu))],
      ];
      const pus = [...new Set([...(frag.parallel_units_before || []), ...(frag.parallel_units_after || [])])].sort((a, b) => a - b);
      const table = el("table", { class: "matrix plan", "aria-label": `vnodes per PU of ${name}` },
        el("thead", {}, el("tr", {}, el("th", { scope: "col", text: name }), ...pus.map((pu) => el("th", { scope: "col", class: "pu", text: `PU ${pu}` })))),
        el("tbody", {}, ...rows.map(([label, counts]) => el("tr", { "data-row": label },
          el("th", { scope: "row", class: "frag", text: label }),
          ...pus.map((pu) => el("td", {}, el("span", { class: "plan-cell", text: String(counts[pu] || 0) })))))));
      holder.append(table);
    }
  }

  function renderSteps(op) {
    const now = Date.now() / 1000;
    const tbody = $("steps");
    tbody.replaceChildren();
    const perSource = new Map();
    for (const s of op.steps || []) {
      const since = s.timings ? s.timings[s.phase] : null;
      tbody.append(
        el("tr", { "data-phase": s.phase },
          el("td", { text: String(s.step) }),
          el("td", { text: s.fragment }),
          el("td", { text: `PU ${s.source_pu} → PU ${s.target_pu}` }),
          el("td", { text: (s.vnodes || []).join(" ") }),
          el("td", {}, el("span", { class: `vn phase-${s.phase}`, text: PHASE_SYMBOL[s.phase] || "?" }), ` ${s.phase}`),
          el("td", { text: number(s.keys_moved || s.keys) }),
          el("td", { text: bytes(s.bytes_moved || s.bytes) }),
          el("td", { text: number(s.hold_queue) }),
          el("td", { text: since && !["done", "cancelled", "planned"].includes(s.phase) ? duration(now - since) : "–" }),
        ),
      );
      const key = `${s.fragment} · PU ${s.source_pu}`;
      const entry = perSource.get(key) || { done: 0, total: 0 };
      entry.total += 1;
      if (s.phase === "done") entry.done += 1;
      perSource.set(key, entry);
    }
    const box = $("per-source");
    box.replaceChildren();
    for (const [key, e] of perSource) {
      const p = el("progress", { max: String(e.total), value: String(e.done) });
      box.append(el("div", { class: "per-source" }, el("span", { text: `${key} ` }), p, ` ${e.done} / ${e.total} steps done${e.done === e.total ? " — done" : ""}`));
    }
  }

  function renderTimeline(op) {
    const list = $("timeline");
    list.replaceChildren();
    for (const e of op.events || []) {
      const at = new Date(e.at);
      list.append(
        el("li", {},
          el("time", { datetime: e.at, text: at.toLocaleTimeString() }),
          el("b", { text: ` ${e.action} ` }),
          el("span", { class: "muted", text: `${e.object_type} ${e.object_id} by ${e.actor_name}` }),
        ),
      );
    }
  }

  function render(op) {
    current = op;
    renderHeader(op);
    renderGrid(op);
    renderPlacement(op);
    renderSteps(op);
    renderTimeline(op);
  }

  // --- data: the document, then its deltas --------------------------------------------------
  let inflight = false;
  let again = false;
  let held = []; // deltas that arrived while the document was being read

  async function load() {
    if (inflight) {
      again = true;
      return;
    }
    inflight = true;
    try {
      const response = await fetch(`/api/v1/operations/${encodeURIComponent(operationId)}`, {
        headers: { Accept: "application/json" },
      });
      if (response.ok) {
        current = await response.json();
        const waiting = held;
        held = [];
        // the document may already hold some of them (a delta's figures are absolute)
        for (const delta of waiting) if (apply(delta) === "missed") again = true;
        render(current);
      }
    } catch (err) {
      // the socket's state says whether the page is live; the next event or poll retries
    } finally {
      inflight = false;
      if (again) {
        again = false;
        load();
      }
    }
  }

  function replace(list, rows, keyOf) {
    const at = new Map(list.map((row, i) => [keyOf(row), i]));
    for (const row of rows) {
      const i = at.get(keyOf(row));
      if (i === undefined) list.push(row);
      else list[i] = row;
    }
  }

  // one operation.progress delta onto the document held: "applied" when it is the next
  // version, "held" when the page already has it, "missed" when a version came between
  function apply(delta) {
    if (delta.progress_version <= current.progress_version) return "held";
    if (delta.progress_version !== current.progress_version + 1) return "missed";
    Object.assign(current, delta.operation || {});
    current.progress_version = delta.progress_version;
    current.steps = current.steps || [];
    replace(current.steps, delta.steps || [], (s) => s.step);
    current.vnodes = current.vnodes || [];
    replace(current.vnodes, delta.vnodes || [], (v) => `${v.fragment}/${v.vnode}`);
    current.events = current.events || [];
    replace(current.events, delta.events || [], (e) => e.id);
    return "applied";
  }

  function receive(delta) {
    if (inflight || !current) {
      held.push(delta); // applied once the document is read
      return;
    }
    const result = apply(delta);
    if (result === "applied") render(current);
    else if (result === "missed") load();
  }

  function onEvent(message) {
    if (message.type === "operation.progress" && typeof message.progress_version === "number") {
      receive(message);
    } else {
      load(); // requested, cancelling, finished: rare, and said by the document
    }
  }

  let retryMs = 500;
  let poller = null;
  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${window.location.host}/ws/operations/${encodeURIComponent(operationId)}/`);
    socket.addEventListener("open", () => {
      retryMs = 500;
      $("live-state").textContent = "live";
      $("live-state").className = "live";
      if (poller) window.clearInterval(poller);
      poller = null;
      load(); // resync: anything may have happened while the socket was down
    });
    socket.addEventListener("message", (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (err) {
        load(); // not JSON: say what the document says
        return;
      }
      // how late events reach the page (publish time vs now; one clock on one machine)
      const sent = message.published_at;
      if (typeof sent === "number") {
        window.rescalerConsole.eventDelays.push(Date.now() / 1000 - sent);
        if (window.rescalerConsole.eventDelays.length > 1000) window.rescalerConsole.eventDelays.shift();
      }
      onEvent(message);
    });
    socket.addEventListener("close", () => {
      $("live-state").textContent = `not live — reconnecting in ${Math.round(retryMs / 1000)} s`;
      $("live-state").className = "muted";
      if (!poller) poller = window.setInterval(load, 5000);
      window.setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    });
  }

  async function cancel() {
    if (!window.confirm("Cancel this operation? Steps in flight finish; no new step starts.")) return;
    const error = $("action-error");
    error.hidden = true;
    const token = document.querySelector('meta[name="csrf-token"]').content;
    const response = await fetch(`/api/v1/operations/${encodeURIComponent(operationId)}/cancel`, {
      method: "POST",
      headers: { Accept: "application/json", "X-CSRFToken": token },
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      error.textContent = `${body.code || response.status}: ${body.detail || "the cancel was refused"}`;
      error.hidden = false;
    }
    load();
  }

  window.rescalerConsole = window.rescalerConsole || { eventDelays: [] };

  document.addEventListener("DOMContentLoaded", () => {
    root = $("operation");
    if (!root) return;
    operationId = root.dataset.operationId;
    const button = $("cancel");
    if (button) button.addEventListener("click", cancel);
    $("vnode-grids").addEventListener("click", (event) => {
      const cell = event.target.closest("button.vn");
      if (!cell) return;
      selected = selected === cell.dataset.key ? null : cell.dataset.key;
      if (current) renderGrid(current);
    });
    load();
    connect();
    // times in phase and the ETA move on their own
    window.setInterval(() => current && !FINAL.has(current.status) && render(current), 1000);
  });
})();
