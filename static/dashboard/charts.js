// Rescaler console: epoch throughput and epoch latency charts (uPlot, vendored under
// static/vendor/uplot). The page embeds the recent epochs (#epoch-series); the cluster page
// appends each epoch.committed event its socket swaps in; the operation page shades the
// operation's span. It also says when a live page's socket closed (htmx reconnects it).
// The autoscaling panels' signal charts (.signal-plot) draw the columns their page embeds
// (rescaler/autoscaling/figures.py): every figure is the server's, null where not reported.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const MAX_POINTS = 300;

  function spanPlugin(span) {
    // shade [start, end] of the x axis (unix seconds): the operation's time
    return {
      hooks: {
        drawClear: (u) => {
          if (!span || !Number.isFinite(span.start)) return;
          const end = Number.isFinite(span.end) ? span.end : Date.now() / 1000;
          const x0 = u.valToPos(span.start, "x", true);
          const x1 = u.valToPos(end, "x", true);
          const { top, height } = u.bbox;
          u.ctx.save();
          u.ctx.fillStyle = "rgba(230, 159, 0, 0.18)";
          u.ctx.fillRect(Math.min(x0, x1), top, Math.abs(x1 - x0), height);
          u.ctx.restore();
        },
      },
    };
  }

  function make(el, title, unit, stroke, data, span) {
    const width = Math.max(el.clientWidth || 600, 320);
    return new window.uPlot(
      {
        title,
        width,
        height: 180,
        plugins: [spanPlugin(span)],
        scales: { x: { time: true } },
        axes: [{}, { label: unit, size: 70 }],
        series: [{}, { label: unit, stroke, width: 1.5, points: { show: false } }],
      },
      data,
      el,
    );
  }

  document.addEventListener("DOMContentLoaded", () => {
    const source = $("epoch-series");
    if (!source || !window.uPlot) return;
    const s = JSON.parse(source.textContent);
    const holder = $("epoch-charts");
    const span = holder && holder.dataset.spanStart
      ? { start: Number(holder.dataset.spanStart), end: holder.dataset.spanEnd ? Number(holder.dataset.spanEnd) : NaN }
      : null;
    const at = s.at.slice();
    const rate = s.rows_per_s.slice();
    const latency = s.latency_ms.slice();
    const throughput = make($("chart-throughput"), "Epoch throughput", "records/s", "#0072b2", [at, rate], span);
    const delay = make($("chart-latency"), "Epoch latency", "ms", "#d55e00", [at, latency], span);
    if (holder) holder.dataset.points = String(at.length);

    // the cluster page's socket swaps each event in as #cluster-event (dashboard/consumers.py)
    let last = $("cluster-event");
    document.body.addEventListener("htmx:wsAfterMessage", () => {
      const element = $("cluster-event");
      if (!element || element === last) return;
      last = element;
      if (element.dataset.type !== "epoch.committed") return;
      let m;
      try {
        m = JSON.parse(element.dataset.payload || "{}");
      } catch (err) {
        return;
      }
      if (!m.committed_at || !(m.duration_s > 0)) return;
      at.push(Date.parse(m.committed_at) / 1000);
      rate.push(m.rows / m.duration_s);
      latency.push(m.duration_s * 1000);
      while (at.length > MAX_POINTS) {
        at.shift();
        rate.shift();
        latency.shift();
      }
      throughput.setData([at, rate]);
      delay.setData([at, latency]);
      if (holder) holder.dataset.points = String(at.length);
    });
  });

  function signalChart(el, s) {
    const width = Math.max(el.clientWidth || 600, 320);
    const rate = { scale: "rate", width: 1.5, points: { show: false } };
    return new window.uPlot(
      {
        width,
        height: 200,
        plugins: [spanPlugin({ start: s.window_start, end: NaN })],
        scales: {
          x: { time: true },
          rate: { range: (u, min, max) => [0, Math.max(max, 1) * 1.1] },
          busy: { range: [0, 1] },
        },
        axes: [
          {},
          { scale: "rate", label: "records/s", size: 70 },
          {
            scale: "busy",
            label: "busy",
            side: 1,
            size: 50,
            grid: { show: false },
            values: (u, ticks) => ticks.map((v) => Math.round(v * 100) + " %"),
          },
        ],
        series: [
          {},
          { ...rate, label: "input rate", stroke: "#0072b2" },
          { ...rate, label: "capacity", stroke: "#009e73" },
          { ...rate, label: "capacity at target", stroke: "#009e73", dash: [6, 4] },
          {
            label: "busy",
            scale: "busy",
            stroke: "#e69f00",
            width: 1,
            points: { show: false },
            // a hovered epoch without busy seconds says so; nothing hovered: uPlot's "--"
            value: (u, v) =>
              v != null ? Math.round(v * 100) + " %" : u.cursor.idx == null ? "--" : "not reported",
          },
        ],
      },
      [s.at, s.input_rate, s.capacity, s.capacity_at_target, s.busy_fraction],
      el,
    );
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!window.uPlot) return;
    document.querySelectorAll(".signal-plot[data-series]").forEach((el) => {
      const source = $(el.dataset.series);
      if (!source) return;
      const s = JSON.parse(source.textContent);
      if (!s.at.length) return;
      signalChart(el, s);
      el.dataset.points = String(s.at.length);
    });
  });

  document.addEventListener("DOMContentLoaded", () => {
    document.body.addEventListener("htmx:wsClose", () => {
      const state = $("live-state");
      if (state) {
        state.textContent = "not live: reconnecting";
        state.className = "muted";
      }
    });
  });
})();
