// Rescaler console: the fragment × PU matrix. The server renders it (dashboard/console.py);
// this script switches the metric it is coloured by, lists a cell's vnodes, and re-fetches the
// rendered matrix and workers table (one response, one moment) when the cluster changes (events
// from app.js, or an action of workers.js), at most once a second.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  let metric = "vnodes";
  let selected = null; // "fragment/pu" of the cell whose vnodes are listed
  const { number, bytes } = window.rescalerFormat;

  function show(value) {
    return metric === "bytes" ? bytes(value) : number(value);
  }

  function paint() {
    for (const cell of document.querySelectorAll("button.cell")) {
      const heat = Number(cell.dataset[`heat${metric[0].toUpperCase()}${metric.slice(1)}`] || 0);
      cell.style.setProperty("--heat", String(heat));
      cell.classList.toggle("hot", heat > 0.6);
      cell.querySelector(".value").textContent = show(cell.dataset[metric]);
      const key = `${cell.dataset.fragment}/${cell.dataset.pu}`;
      cell.setAttribute("aria-pressed", key === selected ? "true" : "false");
    }
    for (const td of document.querySelectorAll("td.skew")) {
      td.textContent = td.dataset[`skew${metric[0].toUpperCase()}${metric.slice(1)}`] || "–";
    }
    detail();
  }

  function detail() {
    const box = $("cell-detail");
    if (!box) return;
    const cell = selected
      ? document.querySelector(
          `button.cell[data-fragment="${CSS.escape(selected.split("/")[0])}"][data-pu="${selected.split("/")[1]}"]`,
        )
      : null;
    if (!cell) {
      box.hidden = true;
      return;
    }
    const list = cell.dataset.vnodeList ? cell.dataset.vnodeList.split(",") : [];
    box.replaceChildren();
    const title = document.createElement("div");
    const strong = document.createElement("strong");
    strong.textContent = `${cell.dataset.fragment} on PU ${cell.dataset.pu}`;
    title.append(
      strong,
      ` — ${number(cell.dataset.vnodes)} vnodes, ${number(cell.dataset.keys)} keys, ` +
        `${bytes(cell.dataset.bytes)}, ${number(cell.dataset.rows)} records in the last epoch`,
    );
    const vnodes = document.createElement("div");
    vnodes.className = "vnodes";
    vnodes.textContent = list.length ? `vnodes: ${list.join(" ")}` : "no vnodes";
    box.append(title, vnodes);
    box.hidden = false;
  }

  // --- live: re-fetch the rendered matrix and workers table ---------------------------------
  let pending = false;
  let last = 0;

  function swap(holder, id) {
    const fresh = holder.querySelector(`#${id}`);
    const current = $(id);
    if (!fresh || !current) return;
    // keep the keyboard where it was: a focused action button is found again by its label
    const focused = current.contains(document.activeElement) ? document.activeElement.getAttribute("aria-label") : null;
    current.replaceWith(fresh);
    if (focused) {
      const again = fresh.querySelector(`[aria-label="${CSS.escape(focused)}"]`);
      if (again) again.focus();
    }
  }

  async function refresh() {
    pending = false;
    last = Date.now();
    try {
      const response = await fetch("/partials/cluster", { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const holder = document.createElement("div");
      holder.innerHTML = await response.text();
      swap(holder, "matrix");
      swap(holder, "workers");
      paint();
      document.dispatchEvent(new CustomEvent("rescaler:cluster-refreshed"));
    } catch (err) {
      // the next event tries again; app.js shows whether the page is live
    }
  }

  function scheduleRefresh() {
    if (pending) return;
    pending = true;
    window.setTimeout(refresh, Math.max(0, 1000 - (Date.now() - last)));
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!$("matrix")) return;
    for (const input of document.querySelectorAll('fieldset.metric input[name="metric"]')) {
      input.addEventListener("change", () => {
        metric = input.value;
        paint();
      });
    }
    document.addEventListener("click", (event) => {
      const cell = event.target.closest("button.cell");
      if (!cell) return;
      const key = `${cell.dataset.fragment}/${cell.dataset.pu}`;
      selected = selected === key ? null : key;
      paint();
    });
    document.addEventListener("rescaler:cluster-changed", scheduleRefresh);
    paint();
  });
})();
