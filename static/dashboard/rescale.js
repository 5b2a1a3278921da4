// Rescaler console: the rescale form. It speaks to the REST API itself (POST
// /api/v1/operations, first with dry_run), so the page and automation share one path: the same
// parser, validation, refusals and audit. The plan is drawn against the current placement
// before anything moves; Start sends the dry run's plan_id, so the operation is exactly the
// plan shown (or refused with plan_stale); a refusal is shown next to the field the API says it
// concerns (the error's "field").
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const { bytes, el } = window.rescalerFormat;
  const number = (v) => window.rescalerFormat.number(v || 0);

  let form;
  let previewed = null; // the body whose dry run is shown, with its plan_id: Start sends it

  function fragmentPus() {
    const option = $("fragment").selectedOptions[0];
    return option.dataset.parallelUnits ? option.dataset.parallelUnits.split(",").map(Number) : [];
  }

  // the PU check boxes follow the chosen fragment: add what it lacks, remove what it has
  function syncBoxes() {
    const pus = new Set(fragmentPus());
    for (const box of form.querySelectorAll('input[name="add"]')) {
      const label = box.closest("label");
      label.hidden = pus.has(Number(box.value));
      if (label.hidden) box.checked = false;
    }
    for (const box of form.querySelectorAll('input[name="remove"]')) {
      const label = box.closest("label");
      label.hidden = !pus.has(Number(box.value));
      if (label.hidden) box.checked = false;
    }
    $("target").value = String(pus.size);
    invalidate();
  }

  function applyTarget() {
    const want = Number($("target").value);
    const pus = fragmentPus().sort((a, b) => a - b);
    if (!Number.isInteger(want) || want < 1) return;
    for (const box of form.querySelectorAll('input[name="add"], input[name="remove"]')) box.checked = false;
    if (want > pus.length) {
      const free = [...form.querySelectorAll('input[name="add"]')].filter((b) => !b.disabled && !b.closest("label").hidden);
      free.slice(0, want - pus.length).forEach((b) => { b.checked = true; });
    } else if (want < pus.length) {
      const highest = new Set(pus.slice(want));
      for (const b of form.querySelectorAll('input[name="remove"]')) b.checked = highest.has(Number(b.value));
    }
    invalidate();
  }

  function body(dryRun) {
    const checked = (name) => [...form.querySelectorAll(`input[name="${name}"]:checked`)].map((b) => Number(b.value));
    const preset = $("preset").value;
    let granularity = preset;
    if (preset === "custom") {
      granularity = {};
      for (const name of ["vnodes_per_step", "steps_in_flight", "max_keys_per_step", "max_bytes_per_step", "bytes_per_second"]) {
        const value = form.elements[name].value;
        if (value !== "") granularity[name] = Number(value);
      }
    }
    return {
      changes: {
        [$("fragment").value]: {
          added_parallel_units: checked("add"),
          removed_parallel_units: checked("remove"),
        },
      },
      strategy: form.querySelector('input[name="strategy"]:checked').value,
      granularity,
      weighted: form.elements.weighted.checked,
      reason: $("reason").value.trim(),
      dry_run: dryRun,
    };
  }

  function clearErrors() {
    for (const p of form.querySelectorAll(".field-error")) p.hidden = true;
    for (const f of form.querySelectorAll(".field")) f.classList.remove("invalid");
    $("form-error").hidden = true;
  }

  // the API names the request field a refusal concerns (its "field"); the form has a box of
  // that name, or shows the refusal above its buttons (plan_id, or no one field)
  function showError(code, detail, field) {
    const box = field && form.querySelector(`.field[data-field="${field}"]`);
    const text = `${code}: ${detail}`;
    if (box) {
      box.classList.add("invalid");
      const p = box.querySelector(".field-error");
      p.textContent = text;
      p.hidden = false;
      const focusable = box.querySelector("input:not([disabled]), select, textarea");
      if (focusable) focusable.focus();
    } else {
      $("form-error").textContent = text;
      $("form-error").hidden = false;
    }
  }

  function invalidate() {
    previewed = null;
    $("plan-card").classList.remove("stale");
    $("start").disabled = true;
    $("form-state").textContent = "";
  }

  async function post(payload) {
    const token = document.querySelector('meta[name="csrf-token"]').content;
    const response = await fetch("/api/v1/operations", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": token },
      body: JSON.stringify(payload),
    });
    const data = await response.json().catch(() => ({ code: String(response.status), detail: response.statusText }));
    return { ok: response.ok, status: response.status, data };
  }

  // --- the plan, drawn against the current placement ---------------------------------------
  function renderPlan(plan) {
    const holder = $("plan");
    holder.replaceChildren();
    for (const [name, frag] of Object.entries(plan.fragments || {})) {
      const before = frag.balance_before.vnodes_per_pu;
      const after = frag.balance_after.vnodes_per_pu;
      const bytesBefore = frag.balance_before.bytes_per_pu || {};
      const bytesAfter = frag.balance_after.bytes_per_pu || {};
      const pus = [...new Set([...Object.keys(before), ...Object.keys(after)])].map(Number).sort((a, b) => a - b);
      const head = el("tr", {}, el("th", { scope: "col", text: name }), ...pus.map((pu) => el("th", { scope: "col", class: "pu", text: `PU ${pu}` })));
      const row = (label, counts, sizes, ghost) =>
        el("tr", {}, el("th", { scope: "row", class: "frag", text: label }),
          ...pus.map((pu) => {
            const n = counts[String(pu)];
            const was = before[String(pu)] || 0;
            const delta = ghost && n !== undefined ? n - was : 0;
            const cls = n === undefined ? "ghost gone" : ghost && delta !== 0 ? `ghost ${delta > 0 ? "gain" : "loss"}` : "";
            const text = n === undefined ? "—" : `${n}${delta ? ` (${delta > 0 ? "+" : ""}${delta})` : ""}`;
            return el("td", {},
              el("span", { class: `plan-cell ${cls}`, title: `${label}: PU ${pu}: ${n === undefined ? "released" : `${n} vnodes, ${bytes(sizes[String(pu)])}`}`, text }));
          }));
      const table = el("table", { class: "matrix plan", "aria-label": `vnodes per PU of ${name}, before and after` },
        el("thead", {}, head),
        el("tbody", {}, row("now", before, bytesBefore, false), row("after", after, bytesAfter, true)));
      const groups = new Map();
      for (const m of frag.moves || []) {
        const key = `PU ${m.source_pu} → PU ${m.target_pu}`;
        const g = groups.get(key) || { vnodes: [], keys: 0, bytes: 0 };
        g.vnodes.push(m.vnode);
        g.keys += m.keys;
        g.bytes += m.bytes;
        groups.set(key, g);
      }
      const moves = el("table", { class: "components moves" },
        el("thead", {}, el("tr", {}, ...["Move", "Vnodes", "Keys", "Bytes", "Which"].map((t) => el("th", { text: t })))),
        el("tbody", {}, ...[...groups].map(([key, g]) =>
          el("tr", {}, el("td", { text: key }), el("td", { text: number(g.vnodes.length) }), el("td", { text: number(g.keys) }),
            el("td", { text: bytes(g.bytes) }), el("td", { class: "which", text: g.vnodes.join(" ") })))));
      const skew = (b) => (b.max_bytes_over_mean === null || b.max_bytes_over_mean === undefined ? "–" : b.max_bytes_over_mean.toFixed(2));
      const summary = el("p", {},
        el("b", { text: `${frag.kind.replace("_", " ")}: ` }),
        `${number(frag.vnodes_moved)} vnodes move, ${number(frag.keys_moved)} keys, ${bytes(frag.bytes_moved)}. ` +
          `Balance: vnodes max − min ${frag.balance_before.max_vnodes_minus_min} → ${frag.balance_after.max_vnodes_minus_min}, ` +
          `bytes max / mean ${skew(frag.balance_before)} → ${skew(frag.balance_after)}.`);
      holder.append(el("h3", { text: name }), summary, el("div", { class: "matrix-wrap" }, table), moves);
    }
    const steps = (plan.steps || []).length;
    holder.append(el("p", { class: "estimate" },
      `${plan.strategy === "live" ? `${steps} steps` : "one barrier (stop-start)"}; estimated duration ` +
      `${Number(plan.estimated_duration_s || 0).toFixed(1)} s.`));
    $("plan-card").hidden = false;
  }

  async function preview(event) {
    event.preventDefault();
    clearErrors();
    if (!$("reason").value.trim()) {
      showError("reason_required", "say why: the reason goes to the audit trail");
      return;
    }
    $("form-state").textContent = "planning…";
    const payload = body(true);
    const { ok, data } = await post(payload);
    $("form-state").textContent = "";
    if (!ok) {
      showError(data.code, data.detail, data.field);
      $("plan-card").hidden = true;
      return;
    }
    renderPlan(data);
    $("plan-card").classList.remove("stale");
    previewed = { ...payload, dry_run: false, plan_id: data.plan_id };
    $("start").disabled = false;
    const until = new Date(data.expires_at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    $("form-state").textContent = `Check the plan, then start it (this plan can be started until ${until}).`;
  }

  async function start() {
    if (!previewed) return;
    clearErrors();
    $("start").disabled = true;
    $("form-state").textContent = "starting…";
    const { ok, data } = await post(previewed);
    if (!ok) {
      $("form-state").textContent = "";
      if (data.code === "plan_stale") {
        // the plan shown is not what would run: never start another one behind its back
        invalidate();
        $("plan-card").classList.add("stale");
        $("form-state").textContent = "Preview the plan again.";
      }
      showError(data.code, data.detail, data.field);
      return;
    }
    window.location.assign(`/operations/${encodeURIComponent(data.operation_id)}/`);
  }

  document.addEventListener("DOMContentLoaded", () => {
    form = $("rescale-form");
    if (!form) return;
    form.addEventListener("submit", preview);
    $("start").addEventListener("click", start);
    $("fragment").addEventListener("change", syncBoxes);
    $("target").addEventListener("change", applyTarget);
    $("preset").addEventListener("change", () => {
      $("custom").hidden = $("preset").value !== "custom";
    });
    form.addEventListener("input", (e) => {
      if (e.target.id !== "target") invalidate();
    });
    syncBoxes();
  });
})();
