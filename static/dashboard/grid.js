// Rescaler console: the operation page's vnode grid, one square per vnode on a canvas (32,768
// vnodes stay one small picture). It decides nothing: the server gives each vnode's phase as
// an index into the legend it renders (data-phases, one digit per vnode), and each live delta
// the vnodes that changed (#vnode-patch, swapped in by htmx); the colour of a phase is the
// legend's own swatch. The counts by phase, the steps and their vnodes are in the page itself.
(function () {
  "use strict";

  const CELL_MAX = 14; // px: a few vnodes are big squares, thousands are small ones

  function palette() {
    const colours = [];
    for (const swatch of document.querySelectorAll(".legend [data-phase-index]")) {
      colours[Number(swatch.dataset.phaseIndex)] = getComputedStyle(swatch).backgroundColor;
    }
    return colours;
  }

  function layout(canvas, count) {
    const width = Math.max(canvas.parentElement.clientWidth || 320, 160);
    let cell = CELL_MAX;
    while (cell > 2 && Math.ceil(count / Math.floor(width / cell)) * cell > 480) cell -= 1;
    const columns = Math.max(Math.floor(width / cell), 1);
    return { cell, columns, rows: Math.ceil(count / columns) };
  }

  function paintCell(ctx, grid, vnode) {
    const { cell, columns } = grid.layout;
    const x = (vnode % columns) * cell;
    const y = Math.floor(vnode / columns) * cell;
    ctx.fillStyle = grid.colours[grid.phases[vnode]] || "#888";
    ctx.fillRect(x, y, cell - (cell > 3 ? 1 : 0), cell - (cell > 3 ? 1 : 0));
  }

  const grids = new Map(); // fragment -> {canvas, phases, layout, colours}

  function draw(canvas) {
    const phases = Uint8Array.from(canvas.dataset.phases || "", (c) => c.charCodeAt(0) - 48);
    const grid = { canvas, phases, layout: layout(canvas, phases.length), colours: palette() };
    canvas.width = grid.layout.columns * grid.layout.cell;
    canvas.height = grid.layout.rows * grid.layout.cell;
    const ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    for (let vnode = 0; vnode < phases.length; vnode += 1) paintCell(ctx, grid, vnode);
    grids.set(canvas.dataset.fragment, grid);
  }

  function drawAll() {
    for (const canvas of document.querySelectorAll("canvas.vgrid-canvas")) draw(canvas);
  }

  function patch(holder) {
    let changes;
    try {
      changes = JSON.parse(holder.dataset.patch || "{}");
    } catch (err) {
      return;
    }
    for (const [fragment, rows] of Object.entries(changes)) {
      const grid = grids.get(fragment);
      if (!grid) continue;
      const ctx = grid.canvas.getContext("2d");
      for (const [vnode, phase] of rows) {
        if (vnode >= grid.phases.length) continue;
        grid.phases[vnode] = phase;
        paintCell(ctx, grid, vnode);
      }
    }
  }

  const seen = new WeakSet(); // the #vnode-patch elements already applied
  const delays = [];
  window.rescalerConsole = { eventDelays: delays };

  function drawNew() {
    for (const canvas of document.querySelectorAll("canvas.vgrid-canvas")) {
      const grid = grids.get(canvas.dataset.fragment);
      if (!grid || grid.canvas !== canvas) draw(canvas);
    }
    const holder = document.getElementById("vnode-patch");
    if (holder) seen.add(holder); // rendered with the grid: nothing to apply
  }

  document.addEventListener("DOMContentLoaded", drawNew);
  // a delta's vnodes: htmx swapped a new #vnode-patch in
  document.body.addEventListener("htmx:wsAfterMessage", () => {
    const holder = document.getElementById("vnode-patch");
    if (holder && !seen.has(holder)) {
      seen.add(holder);
      patch(holder);
      // how late deltas reach the page (rendered vs now; one clock on one machine)
      const sent = Number(holder.dataset.renderedAt);
      if (sent) {
        delays.push(Date.now() / 1000 - sent);
        if (delays.length > 1000) delays.shift();
      }
    }
  });
  // the live part re-read whole: new canvases
  document.body.addEventListener("htmx:afterSettle", drawNew);
  let resized = null;
  window.addEventListener("resize", () => {
    window.clearTimeout(resized);
    resized = window.setTimeout(drawAll, 200);
  });
  window.rescalerGrid = { grids };
})();
