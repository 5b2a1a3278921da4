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
      ...row("state", body.exists ? JSON.stringify(body.value) : body.state_error || "no state yet"),
    );
    box.append(dl);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = $("key-finder");
    if (form) form.addEventListener("submit", find);
  });
})();
