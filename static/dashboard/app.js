// Rescaler dashboard: live last-epoch ticker (websocket ws/cluster/) and component status
// (polled from /healthz). No framework, no external files: the dashboard must work offline.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);

  function setText(id, text) {
    const el = $(id);
    if (el) el.textContent = text;
  }

  // --- live epochs over the websocket, reconnecting with backoff ----------------------------
  let retryMs = 1000;
  let wasOpen = false; // the socket has been open before: an open is a reconnection
  // workers.rescale.protocol.Event: the worker events (their payload is the worker's summary)
  const WORKER_EVENTS = new Set(["worker.joined", "worker.lost", "worker.removed", "worker.status"]);

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${window.location.host}/ws/cluster/`);

    socket.addEventListener("open", () => {
      retryMs = 1000;
      setText("ws-state", "connected");
      $("ws-state").classList.remove("muted");
      // back after a drop: events were missed (a worker lost, an operation ended), so the page
      // re-reads what they would have changed
      if (wasOpen) {
        document.dispatchEvent(new CustomEvent("rescaler:cluster-changed", { detail: { type: "reconnected" } }));
      }
      wasOpen = true;
    });

    socket.addEventListener("message", (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (err) {
        return;
      }
      if (message.type === "epoch.committed") onEpoch(message);
      // a worker joined, was lost or removed, or changed status: workers.js says so in words
      if (WORKER_EVENTS.has(message.type)) {
        document.dispatchEvent(new CustomEvent("rescaler:worker-event", { detail: message }));
      }
      // any cluster event may have changed the matrix: the console re-fetches it
      document.dispatchEvent(new CustomEvent("rescaler:cluster-changed", { detail: message }));
    });

    socket.addEventListener("close", () => {
      setText("ws-state", `reconnecting in ${Math.round(retryMs / 1000)} s…`);
      $("ws-state").classList.add("muted");
      window.setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 30000);
    });
  }

  function onEpoch(message) {
    if (message.epoch !== undefined) setText("last-epoch", String(message.epoch));
    if (message.rows !== undefined) setText("epoch-rows", Number(message.rows).toLocaleString());
    if (message.duration_s !== undefined) {
      setText("epoch-duration", `${(Number(message.duration_s) * 1000).toFixed(0)} ms`);
    }
    const ticker = $("last-epoch");
    ticker.classList.remove("flash");
    void ticker.offsetWidth; // restart the animation
    ticker.classList.add("flash");
  }

  // --- component status from /healthz --------------------------------------------------------
  function display(value) {
    if (value === null || value === undefined) return "–";
    if (Array.isArray(value)) return value.length ? value.join(", ") : "none";
    return String(value);
  }

  function renderComponents(body) {
    const overall = $("overall");
    overall.className = `badge ${body.status === "ok" ? "up" : "down"}`;
    overall.textContent = body.status === "ok" ? "all systems up" : `down: ${body.down.join(", ")}`;

    const tbody = $("components");
    tbody.replaceChildren();
    for (const [name, component] of Object.entries(body.components)) {
      const row = document.createElement("tr");
      const nameCell = document.createElement("td");
      nameCell.className = "name";
      nameCell.textContent = name;
      const statusCell = document.createElement("td");
      const badge = document.createElement("span");
      badge.className = `badge ${component.status}`;
      badge.textContent = component.status;
      statusCell.append(badge);
      const details = document.createElement("td");
      details.className = "details";
      for (const [key, value] of Object.entries(component)) {
        if (key === "status" || key === "error") continue;
        const kv = document.createElement("span");
        kv.className = "kv";
        const b = document.createElement("b");
        b.textContent = key;
        kv.append(b, ` ${display(value)}`);
        details.append(kv);
      }
      if (component.error) {
        const error = document.createElement("div");
        error.className = "error";
        error.textContent = component.error;
        details.append(error);
      }
      row.append(nameCell, statusCell, details);
      tbody.append(row);
      // The runner reports -1 until its first epoch commits.
      if (name === "runner" && typeof component.last_epoch === "number" && component.last_epoch >= 0) {
        // The websocket is the fast path; this keeps the ticker right if an event was missed.
        const shown = Number($("last-epoch").textContent);
        if (Number.isNaN(shown) || component.last_epoch > shown) {
          setText("last-epoch", String(component.last_epoch));
        }
      }
    }
  }

  async function poll() {
    try {
      const response = await fetch("/healthz", { headers: { Accept: "application/json" } });
      renderComponents(await response.json()); // 503 still carries the components
    } catch (err) {
      setText("overall", "dashboard server unreachable");
      $("overall").className = "badge down";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    if ($("last-epoch")) {
      connect();
      window.setInterval(poll, 10000);
    }
  });
})();
