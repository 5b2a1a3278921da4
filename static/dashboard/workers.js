// Rescaler console: the workers card of the cluster page. Its actions speak to the REST API
// like every other console action (POST /api/v1/workers, /api/v1/workers/<name>/cordon,
// /uncordon, /drain, with the session's CSRF token), so the console and automation share one
// path: the same permission, validation, refusals and audit. A refusal is shown as the API
// words it ({code, detail}), never paraphrased: "no worker provider: local mode runs in one
// JVM…" is the explanation the operator needs. The table itself is rendered by the server and
// re-fetched by console.js; this script never draws a worker.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);

  // what each action does, said before it is done; drain is the destructive one
  const ACTIONS = {
    cordon: {
      title: (w) => `Cordon worker ${w}`,
      what: (w) => `No new vnodes go to the parallel units of ${w}; it keeps the vnodes it has. Uncordon undoes it.`,
      confirm: (w) => `Cordon ${w}`,
      done: (w) => `Cordoned ${w}.`,
    },
    uncordon: {
      title: (w) => `Uncordon worker ${w}`,
      what: (w) => `The parallel units of ${w} may be given vnodes again.`,
      confirm: (w) => `Uncordon ${w}`,
      done: (w) => `Uncordoned ${w}.`,
    },
    drain: {
      title: (w) => `Drain and remove worker ${w}`,
      what: (w, pus) =>
        `A live rescale moves every vnode off PUs ${pus || "(none)"} of ${w}; when it completes the runner ` +
        `stops the executor and the worker provider releases its machine. Cancelling the operation ` +
        `stops the drain (the worker stays cordoned); once it completed, the worker is gone.`,
      confirm: (w) => `Drain and remove ${w}`,
      done: (w) => `Draining ${w}.`,
      destructive: true,
    },
  };

  const WORDS = {
    "worker.joined": (w) => `${w.name} joined (PUs ${(w.parallel_units || []).join(", ") || "none"}).`,
    "worker.lost": (w) => `${w.name} was lost: its executor disappeared without a drain.`,
    "worker.removed": (w) => `${w.name} was removed.`,
    "worker.status": (w) => `${w.name} is ${w.status}.`,
  };

  let dialog;
  let current = null; // {action, worker, pus} of the open dialog

  function csrf() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  async function post(url, payload) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf() },
      body: JSON.stringify(payload),
    });
    const data = await response.json().catch(() => ({ code: String(response.status), detail: response.statusText }));
    return { ok: response.ok, data };
  }

  function refused(data) {
    return `${data.code || "error"}: ${data.detail || "the request was refused"}`;
  }

  function say(text, link) {
    const state = $("workers-state");
    state.replaceChildren(text);
    if (link) {
      const a = document.createElement("a");
      a.href = link.href;
      a.textContent = link.text;
      state.append(" ", a);
    }
  }

  function fail(box, text) {
    box.textContent = text;
    box.hidden = false;
  }

  function changed() {
    document.dispatchEvent(new CustomEvent("rescaler:cluster-changed", { detail: { type: "worker.action" } }));
  }

  // --- add a worker --------------------------------------------------------------------------
  async function add(event) {
    event.preventDefault();
    const error = $("workers-error");
    error.hidden = true;
    const input = $("add-cores");
    const cores = input.value.trim() === "" ? 1 : Number(input.value);
    const button = event.target.querySelector('button[type="submit"]');
    button.disabled = true;
    say("asking the worker provider…");
    try {
      const { ok, data } = await post("/api/v1/workers", { cores });
      if (!ok) {
        say("");
        fail(error, refused(data));
        return;
      }
      say(
        `Asked the ${data.provider} provider for a worker with ${data.cores} core${data.cores === 1 ? "" : "s"}: ` +
          `${data.answer}. It joins by itself once its executor registers.`,
      );
    } catch (err) {
      say("");
      fail(error, `the dashboard server is unreachable: ${err}`);
    } finally {
      button.disabled = false;
    }
  }

  // --- cordon, uncordon, drain: a dialog with the reason, then the request -------------------
  function open(button) {
    const action = ACTIONS[button.dataset.action];
    if (!action) return;
    current = { action: button.dataset.action, worker: button.dataset.worker, pus: button.dataset.pus || "" };
    $("worker-dialog-title").textContent = action.title(current.worker);
    $("worker-dialog-what").textContent = action.what(current.worker, current.pus);
    const confirm = $("worker-confirm");
    confirm.textContent = action.confirm(current.worker);
    confirm.className = action.destructive ? "danger" : "";
    confirm.disabled = false;
    $("worker-reason").value = "";
    $("worker-reason").required = Boolean(action.destructive);
    $("worker-reason").placeholder = action.destructive ? "required: say why" : "optional";
    $("worker-dialog-error").hidden = true;
    dialog.showModal();
    $("worker-reason").focus();
  }

  async function submit(event) {
    event.preventDefault();
    if (!current) return;
    const action = ACTIONS[current.action];
    const error = $("worker-dialog-error");
    error.hidden = true;
    const reason = $("worker-reason").value.trim();
    if (action.destructive && !reason) {
      fail(error, "reason_required: say why: the reason goes to the audit trail");
      $("worker-reason").focus();
      return;
    }
    // the second step of a destructive action, as the operation page's Cancel asks it
    if (action.destructive && !window.confirm(`${action.title(current.worker)}? ${action.what(current.worker, current.pus)}`)) {
      return;
    }
    const { worker, action: which } = current; // the dialog's close clears ``current``
    const confirm = $("worker-confirm");
    confirm.disabled = true;
    try {
      const url = `/api/v1/workers/${encodeURIComponent(worker)}/${which}`;
      const { ok, data } = await post(url, { reason });
      if (!ok) {
        fail(error, refused(data));
        return;
      }
      dialog.close();
      const op = data.operation;
      if (op && op.operation_id) {
        say(action.done(worker), { href: `/operations/${encodeURIComponent(op.operation_id)}/`, text: `Follow operation ${op.operation_id}.` });
      } else {
        say(which === "drain" ? `${worker} ran no stateful fragment: it is being decommissioned.` : action.done(worker));
      }
      changed();
    } catch (err) {
      fail(error, `the dashboard server is unreachable: ${err}`);
    } finally {
      confirm.disabled = false;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const card = $("workers-card");
    if (!card) return;
    // live: a worker event in words (the table itself follows through console.js)
    document.addEventListener("rescaler:worker-event", (event) => {
      const message = event.detail || {};
      const words = WORDS[message.type];
      if (words && message.name) say(`Live: ${words(message)}`);
    });
    const form = $("add-worker");
    if (form) form.addEventListener("submit", add);
    dialog = $("worker-dialog");
    if (!dialog) return; // a user without the permission: nothing to act on
    // the table is replaced on every refresh: one listener on the card finds its buttons
    card.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) open(button);
    });
    $("worker-form").addEventListener("submit", submit);
    $("worker-dismiss").addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => {
      current = null;
    });
  });
})();
