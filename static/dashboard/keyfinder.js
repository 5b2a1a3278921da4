// Rescaler console: the key finder. Reads GET /api/v1/fragments/<fragment>/keys/<key> (the
// per-key API): the key's vnode, the PU that owns it now, its migration if it is moving, and
// its current state value.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);

  function row(label, value) {
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.textContent = value;
    return [dt, dd];
  }

  // A StatefulProcessor's state ({state: {variable: {kind, ...}}, timers}) shows one row per
  // state variable and one for its pending timers; a keyed region's, the same per operator.
  function processorRows(value, prefix) {
    const rows = [];
    for (const [name, variable] of Object.entries(value.state)) {
      const shown =
        variable.kind === "value"
          ? JSON.stringify(variable.value)
          : variable.kind === "list"
            ? `list of ${variable.values.length}: ${JSON.stringify(variable.values)}`
            : `map of ${variable.entries.length}: ${JSON.stringify(variable.entries)}`;
      rows.push(...row(`${prefix}${name}`, shown));
    }
    const timers = value.timers.length
      ? value.timers.map((t) => new Date(t).toISOString()).join(", ")
      : "none";
    rows.push(...row(`${prefix}timers`, timers));
    return rows;
  }

  function isProcessorState(value) {
    return value && typeof value === "object" && "state" in value && "timers" in value;
  }

  function stateRows(body) {
    if (!body.exists) return row("state", body.state_error || "no state yet");
    const value = body.value;
    if (isProcessorState(value)) return processorRows(value, "");
    if (value && typeof value === "object" && Object.values(value).every(isProcessorState)) {
      return Object.entries(value).flatMap(([op, v]) => processorRows(v, `${op} · `));
    }
    return row("state", JSON.stringify(value));
  }

  async function find(event) {
    event.preventDefault();
    const fragment = $("kf-fragment").value;
    const key = $("kf-key").value;
    const box = $("key-result");
    box.hidden = false;
    box.replaceChildren();
    if (!key) return;
    const url = `/api/v1/fragments/${encodeURIComponent(fragment)}/keys/${encodeURIComponent(key)}`;
    let body;
    let ok = false;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" } });
      ok = response.ok;
      body = await response.json();
    } catch (err) {
      body = { code: "unreachable", detail: "the API did not answer" };
    }
    if (!ok) {
      const p = document.createElement("p");
      p.className = "error";
      p.setAttribute("role", "alert");
      p.textContent = `${body.code}: ${body.detail}`;
      box.append(p);
      return;
    }
    const dl = document.createElement("dl");
    dl.className = "key-facts";
    const moving = body.migration;
    dl.append(
      ...row("key", body.key),
      ...row("vnode", `${body.vnode} (mapping v${body.mapping_version})`),
      ...row("owner now", body.parallel_unit === null ? "–" : `PU ${body.parallel_unit}`),
      ...row(
        "moving",
        moving
          ? `PU ${moving.source_pu} → PU ${moving.target_pu}, ${moving.phase} (records go to ${moving.routing}), ` +
            `step ${moving.step} of operation ${moving.operation_id}`
          : "no",
      ),
      ...stateRows(body),
    );
    box.append(dl);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = $("key-finder");
    if (form) form.addEventListener("submit", find);
  });
})();
