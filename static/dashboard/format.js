// Rescaler console: the formatting and DOM helpers every page script shares (one copy).
(function () {
  "use strict";

  function number(value) {
    return value === null || value === undefined ? "–" : Number(value).toLocaleString();
  }

  function bytes(value) {
    if (value === null || value === undefined) return "–";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let v = Number(value);
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
  }

  function duration(seconds) {
    if (!Number.isFinite(seconds) || seconds < 0) return "–";
    if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
    const m = Math.floor(seconds / 60);
    return m < 60 ? `${m} min ${Math.round(seconds % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  // el("td", {class: "x", text: "y"}, child...): attributes, text and children in one call
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    node.append(...children);
    return node;
  }

  window.rescalerFormat = { number, bytes, duration, el };
})();
