/* A small SVG chart module for the dashboard (no dependency): line charts and stacked bars,
   with axes, a legend and a native tooltip per point. Colours come from CSS classes. */
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const PAD = { left: 56, right: 12, top: 10, bottom: 26 };

  function el(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function niceStep(raw) {
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const unit = raw / power;
    return (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 2.5 ? 2.5 : unit <= 5 ? 5 : 10) * power;
  }

  function yTicks(max) {
    if (!(max > 0)) return [0, 1];
    const step = Math.max(1, niceStep(max / 4));  // what is drawn is counted: 0, 1, 2, never 0.5 shown as "1"
    const ticks = [];
    for (let v = 0; v < max + step * 0.999; v += step) ticks.push(v);
    return ticks;
  }

  /* An empty chart frame: the svg, its scales and the plot box. */
  function frame(container, count, max, opts) {
    container.replaceChildren();
    const width = Math.max(280, container.clientWidth || 600);
    const height = container.classList.contains("tall") ? 280 : 220;
    const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", height, role: "img",
                            "aria-label": opts.label || "chart" });
    const ticks = yTicks(max);
    const top = ticks[ticks.length - 1];
    const plotW = width - PAD.left - PAD.right, plotH = height - PAD.top - PAD.bottom;
    const x = (i) => PAD.left + (count <= 1 ? plotW / 2 : (i * plotW) / (count - 1));
    const y = (v) => PAD.top + plotH - (v / top) * plotH;
    for (const t of ticks) {
      svg.append(el("line", { x1: PAD.left, x2: width - PAD.right, y1: y(t), y2: y(t), class: "grid" }));
      svg.append(el("text", { x: PAD.left - 6, y: y(t) + 4, class: "tick", "text-anchor": "end" },
                    (opts.yFormat || String)(t)));
    }
    const every = Math.max(1, Math.ceil(count / Math.max(2, Math.floor(plotW / 90))));
    for (let i = 0; i < count; i += every) {
      svg.append(el("text", { x: x(i), y: height - 8, class: "tick", "text-anchor": "middle" },
                    (opts.xLabel || String)(i)));
    }
    container.append(svg);
    return { svg, x, y, width, height, plotW, plotH };
  }

  function legend(container, items) {
    const box = document.createElement("div");
    box.className = "legend";
    for (const item of items) {
      const entry = document.createElement("span");
      const swatch = document.createElement("span");
      swatch.className = "swatch " + item.cls;
      entry.append(swatch, document.createTextNode(item.name));
      box.append(entry);
    }
    container.append(box);
  }

  function empty(container, text) {
    container.replaceChildren();
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = text || "No traffic in this window yet.";
    container.append(p);
  }

  /* Invisible columns, one per point, whose <title> is the tooltip. */
  function hovers(f, count, title) {
    const w = count <= 1 ? f.plotW : f.plotW / (count - 1);
    for (let i = 0; i < count; i++) {
      const r = el("rect", { x: f.x(i) - w / 2, y: PAD.top, width: w, height: f.plotH, class: "hover" });
      r.append(el("title", {}, title(i)));
      f.svg.append(r);
    }
  }

  /* opts: {count, series: [{name, cls, values}], markers: [{i, cls, title}], xLabel, yFormat, title, label} */
  function lines(container, opts) {
    const count = opts.count;
    const max = Math.max(0, ...opts.series.flatMap((s) => s.values));
    if (!count || (!(max > 0) && !opts.showEmpty)) return empty(container, opts.emptyText);
    const f = frame(container, count, max, opts);
    for (const s of opts.series) {
      const points = s.values.map((v, i) => `${f.x(i).toFixed(1)},${f.y(v).toFixed(1)}`).join(" ");
      f.svg.append(el("polyline", { points, class: "line " + s.cls }));
    }
    for (const m of opts.markers || []) {
      const dot = el("circle", { cx: f.x(m.i), cy: f.y(m.value), r: 4, class: "marker " + m.cls });
      f.svg.append(dot);
    }
    if (opts.title) hovers(f, count, opts.title);
    legend(container, [...opts.series, ...(opts.legendExtra || [])]);
  }

  /* opts: {count, stacks: [{name, cls, values}], line: {name, cls, values}, xLabel, yFormat, title, label} */
  function bars(container, opts) {
    const count = opts.count;
    const totals = Array.from({ length: count }, (_, i) => opts.stacks.reduce((a, s) => a + (s.values[i] || 0), 0));
    const lineMax = opts.line ? Math.max(0, ...opts.line.values) : 0;
    const max = Math.max(0, ...totals, lineMax);
    if (!count || !(max > 0)) return empty(container, opts.emptyText);
    const f = frame(container, count, max, opts);
    const slot = count <= 1 ? f.plotW / 2 : f.plotW / (count - 1);
    const bw = Math.max(1, Math.min(24, slot * 0.7));
    for (let i = 0; i < count; i++) {
      let base = 0;
      for (const s of opts.stacks) {
        const v = s.values[i] || 0;
        if (v > 0) {
          f.svg.append(el("rect", { x: f.x(i) - bw / 2, y: f.y(base + v), width: bw,
                                    height: Math.max(0.5, f.y(base) - f.y(base + v)), class: "bar " + s.cls }));
        }
        base += v;
      }
    }
    if (opts.line) {
      const points = opts.line.values.map((v, i) => `${f.x(i).toFixed(1)},${f.y(v).toFixed(1)}`).join(" ");
      f.svg.append(el("polyline", { points, class: "line " + opts.line.cls }));
    }
    if (opts.title) hovers(f, count, opts.title);
    legend(container, [...opts.stacks, ...(opts.line ? [opts.line] : [])]);
  }

  window.OffloadCharts = { lines, bars, empty };
})();
