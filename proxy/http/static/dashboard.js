/* The dashboard: signs in with a token, then draws the JSON API's answers and refreshes them
   every few seconds. Every string from the API is written as text (textContent), never as HTML. */
"use strict";
(function () {
  const REFRESH_MS = 5000;
  const PAGE = 25;
  const TOKEN_KEY = "offload-dashboard-token";
  const ACTIONS = [
    ["compact", "Compaction", "c-compact"],
    ["compress", "Compression", "c-compress"],
    ["compact+compress", "Both", "c-both"],
    ["pending", "Summary pending", "c-pending"],
  ];
  const $ = (id) => document.getElementById(id);
  const STATS = "/v1/offload/stats";
  // window: null until the address names one or the first answers pick the one that fits the data
  const state = { token: sessionStorage.getItem(TOKEN_KEY), window: null, tenant: null, offset: 0,
                  session: null, paused: false, busy: false, last: null, admin: null, notice: null };

  /* ---- formatting ---- */
  const NUMBER = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const int = (v) => (v === null || v === undefined ? "–" : NUMBER.format(Math.round(v)));
  const pct = (v) => (v === null || v === undefined ? "–" : (v * 100).toFixed(1) + "%");
  const usd = (v) => (v === null || v === undefined ? "–" : "$" + v.toFixed(v === 0 || Math.abs(v) >= 1 ? 2 : 4));
  const compact = (v) => (v >= 1e6 ? (v / 1e6).toFixed(v >= 1e7 ? 0 : 1) + "M" : v >= 1e3 ? (v / 1e3).toFixed(v >= 1e4 ? 0 : 1) + "k" : String(Math.round(v)));
  // formatters made once: a locale formatter per call costs more than drawing the whole chart
  const DAY = new Intl.DateTimeFormat("en-GB", { day: "2-digit", month: "short" });
  const DAY_TIME = new Intl.DateTimeFormat("en-GB", { day: "2-digit", month: "short", hour: "2-digit", minute: "2-digit" });
  const TIME = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit" });
  const SECONDS = new Intl.DateTimeFormat("en-GB", { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  const clock = (t, step) => {
    const d = new Date(t * 1000);
    if (step >= 86400) return DAY.format(d);
    return (step >= 3600 && state.window !== "24h" ? DAY_TIME : TIME).format(d);
  };
  // a long session id keeps its start and its end (ids often differ at the end only), cut in the middle
  const shortId = (id) => {
    const width = matchMedia("(max-width: 640px)").matches ? 16 : 28, chars = Array.from(id);  // by code point
    if (chars.length <= width) return id;
    const head = Math.ceil((width - 1) / 2);
    return chars.slice(0, head).join("") + "…" + chars.slice(chars.length - (width - 1 - head)).join("");
  };
  const ago = (t) => {
    const s = Math.max(0, Math.floor(Date.now() / 1000 - t));
    return s < 60 ? s + " s ago" : s < 3600 ? Math.floor(s / 60) + " min ago" : s < 86400 ? Math.floor(s / 3600) + " h ago" : Math.floor(s / 86400) + " d ago";
  };

  /* ---- DOM ---- */
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "onclick") node.addEventListener("click", v);
      else if (k === "class") node.className = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c === null || c === undefined ? "" : String(c)));
    return node;
  }
  // a row with `onRow` opens on a click anywhere in it, or on Enter once focused (Tab reaches it)
  function table(el, columns, rows, onRow, rowLabel) {
    const head = h("tr", {}, ...columns.map(([label, , cls]) => h("th", { class: cls || "" }, label)));
    const body = rows.map((row) => {
      const cells = columns.map(([, value, cls], i) => {
        const content = value(row);
        return h("td", { class: cls || "" }, i === 0 && onRow ? h("span", { class: "link" }, content) : content);
      });
      if (!onRow) return h("tr", {}, ...cells);
      const tr = h("tr", { class: "clickable", tabindex: "0", title: rowLabel(row) }, ...cells);
      tr.addEventListener("click", () => onRow(row));
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); onRow(row); } });
      return tr;
    });
    el.replaceChildren(h("thead", {}, head), h("tbody", {}, ...body));
    scrollHints();
  }

  /* a table wider than its panel scrolls inside it: a fade and "scroll →" say so until its end is in view */
  function scrollHints() {
    for (const wrap of document.querySelectorAll(".table-wrap")) {
      const more = wrap.scrollWidth - wrap.clientWidth - wrap.scrollLeft > 2;
      wrap.parentElement.classList.toggle("more", more);
    }
  }

  /* ---- the API ---- */
  async function api(path, params) {
    const query = new URLSearchParams(Object.entries(params || {}).filter(([, v]) => v !== null && v !== undefined && v !== ""));
    const response = await fetch(path + (query.toString() ? "?" + query : ""), {
      headers: { Authorization: "Bearer " + state.token }, cache: "no-store" });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (!response.ok) {
      const message = (body && body.error && body.error.message) || `HTTP ${response.status}`;
      const err = new Error(message);
      err.status = response.status;
      err.code = body && body.error && body.error.code;
      throw err;
    }
    return body;
  }

  /* ---- the view's state in the URL fragment (never the token) ---- */
  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    state.window = ["15m", "1h", "24h", "7d", "30d"].includes(p.get("window")) ? p.get("window") : null;
    state.tenant = p.get("tenant") || null;
    state.session = p.get("session") || null;
    state.offset = Math.max(0, parseInt(p.get("offset") || "0", 10) || 0);
  }
  function writeHash() {
    const p = new URLSearchParams({ window: state.window });
    if (state.tenant) p.set("tenant", state.tenant);
    if (state.offset) p.set("offset", String(state.offset));
    if (state.session) p.set("session", state.session);
    history.replaceState(null, "", "#" + p);
  }

  /* ---- rendering ---- */
  function headline(totals) {
    const values = {
      tokens_saved: [int(totals.tokens_saved), `${int(totals.tokens_before)} raw → ${int(totals.tokens_after)} forwarded; ` +
        `${int(totals.text_tokens_saved)} text, ${int(totals.image_tokens_saved)} images`],
      cost_billed_usd: [usd(totals.bill.usd.total), `uncached ${usd(totals.bill.usd.uncached)} · reads ${usd(totals.bill.usd.cache_read)} · ` +
        `writes ${usd(totals.bill.usd.cache_write_5m + totals.bill.usd.cache_write_1h)} · output ${usd(totals.bill.usd.output)}`],
      cost_saved_usd: [usd(totals.counterfactual.saved_usd), `${usd(totals.counterfactual.usd.total)} raw history (est.) → ` +
        `${usd(totals.counterfactual.billed_usd)} billed, over ${int(totals.counterfactual.turns)} turns`],
      forwarded_ratio: [pct(totals.forwarded_ratio), "of the raw tokens went upstream"],
      prefix_reuse: [pct(totals.prefix_reuse), totals.prefix_tokens !== undefined ? `${int(totals.prefix_tokens)} tokens in cacheable prefixes` : ""],
      reload_rate: [pct(totals.reload_rate), `${int(totals.reload_rounds)} reload rounds, ${int(totals.searches)} searches`],
      requests: [int(totals.requests), `${int(totals.errors)} errors`],
    };
    for (const card of document.querySelectorAll("#headline .card")) {
      const [value, sub] = values[card.dataset.field];
      card.querySelector(".value").textContent = value;
      card.querySelector(".sub").textContent = sub;
    }
  }

  const PARTS = [["uncached", "Uncached input"], ["cache_read", "Cache reads"], ["cache_write_5m", "Writes 5 min"],
    ["cache_write_1h", "Writes 1 h"], ["output", "Output"]];

  function bill(totals) {
    const b = totals.bill, cf = totals.counterfactual, calls = b.calls;
    const rows = [...PARTS.map(([part, name]) => ({ name, part })), { name: "Total", part: "total" }];
    const tokens = (split, part) => part === "total" ? Object.values(split.tokens).reduce((a, n) => a + n, 0) : split.tokens[part];
    table($("bill-table"), [
      ["", (r) => r.name], ["Tokens", (r) => int(r.part === "total" ? b.tokens.input + b.tokens.output : b.tokens[r.part]), "num opt"],
      ["Billed", (r) => usd(b.usd[r.part]), "num"],
      ["Of which summaries", (r) => usd(calls.summary.usd[r.part]), "num opt"],
      ["Of which keep-alive", (r) => usd(calls.keepalive.usd[r.part]), "num opt"],
      ["Raw history (est.)", (r) => usd(cf.usd[r.part]), "num"],
      ["Raw history tokens (est.)", (r) => int(tokens(cf, r.part)), "num opt"],
    ], rows);
    const plural = (n, word) => `${int(n)} ${word}${n === 1 ? "" : "s"}`;
    $("bill-note").textContent = (b.turns_without_usage ? `${plural(b.turns_without_usage, "turn")} (${plural(b.answers_without_usage, "upstream answer")}) reported no usage: ` +
      "they are counted, not billed here, and not in the estimate." : b.answers ? "Every upstream answer reported its usage." : "No upstream answer yet.") +
      (b.models.length ? " By model: " + b.models.map((m) => `${m.model} ${usd(m.usd)}`).join(", ") + "." : "");
  }

  // Observe mode: forwarded as received, what the proxy would have done beside it (an estimate)
  function observed(totals) {
    const o = totals.observed;
    $("observed").hidden = !o;
    if (!o) return;
    const would = o.would_bill;
    table($("observed-table"), [
      ["", (r) => r.name], ["Sent (billed)", (r) => r.sent, "num"], ["Would have sent (est.)", (r) => r.would, "num"],
    ], [
      { name: "Requests", sent: int(o.requests), would: int(o.requests) },
      { name: "Tokens", sent: int(o.tokens_forwarded), would: int(o.tokens_would_forward) },
      { name: "Cost", sent: usd(o.bill.usd.total), would: would.turns ? usd(would.usd.total) : "–" },
    ]);
    const saved = o.would_save_usd === null ? "no upstream answer reported usage yet" : `${usd(o.would_save_usd)} would have been saved`;
    $("observed-note").textContent = `Observe mode forwarded ${int(o.requests)} request(s) as received: ` +
      `${int(o.tokens_would_save)} tokens and ${saved} (estimated from the billed usage, over ${int(would.turns)} turns).`;
  }

  // The holdout: control (forwarded unchanged) against managed sessions, with intervals and a plain verdict
  function holdout(stats) {
    const ho = stats.holdout;
    const counted = ho ? ho.arms.control.sessions + ho.arms.managed.sessions : 0;
    $("holdout").hidden = !ho || (!ho.fraction && !counted);
    if ($("holdout").hidden) return;
    const num = (v) => (v === null || v === undefined ? "–" : Math.abs(v) >= 100 ? int(v) : v.toFixed(2));
    const shown = (figure, v) => (figure === "cost" ? usd(v) : figure === "ended" ? pct(v) : num(v));
    const signed = (figure, v) => (v === null ? "–" : (v > 0 ? "+" : v < 0 ? "−" : "") + shown(figure, Math.abs(v)));
    table($("holdout-table"), [
      ["", (f) => f.label], ["Control", (f) => shown(f.figure, f.control), "num"],
      ["Managed", (f) => shown(f.figure, f.managed), "num"], ["Difference", (f) => signed(f.figure, f.difference), "num"],
      ["95 % interval", (f) => (ho.arms.control.sessions && ho.arms.managed.sessions ? `${signed(f.figure, f.low)} to ${signed(f.figure, f.high)}` : "–"), "num"],
      ["Verdict", (f) => f.verdict],
    ], ho.figures);
    $("holdout-verdict").textContent = ho.verdict;
    $("holdout-verdict").className = ho.enough ? "" : "muted";
    $("holdout-sessions").textContent = `${int(ho.arms.control.sessions)} control and ${int(ho.arms.managed.sessions)} managed ` +
      `session(s) compared (${int(ho.arms.control.turns)} and ${int(ho.arms.managed.turns)} turns); at least ${int(ho.min_sessions)} ` +
      `in each arm before a difference is claimed. Holdout: ${pct(ho.fraction)} of sessions.`;
  }

  function charts(stats) {
    const series = stats.series;
    const label = (i) => clock(series[i].t, stats.step);
    const count = series.length;
    OffloadCharts.lines($("chart-tokens"), {
      count, label: "Raw and forwarded tokens over time", xLabel: label, yFormat: compact,
      series: [
        { name: "Raw", cls: "c-raw", values: series.map((p) => p.tokens_before) },
        { name: "Forwarded", cls: "c-fwd", values: series.map((p) => p.tokens_after) },
      ],
      title: (i) => `${label(i)}\nRaw: ${int(series[i].tokens_before)}\nForwarded: ${int(series[i].tokens_after)}\nRequests: ${int(series[i].requests)}`,
    });
    const byAction = (p, key) => Object.entries(p.actions || {}).reduce((a, [name, n]) =>
      a + (key === "pending" ? (name.endsWith("-pending") ? n : 0) : name === key ? n : 0), 0);
    OffloadCharts.bars($("chart-actions"), {
      count, label: "Offload actions and reload rounds over time", xLabel: label, yFormat: compact,
      stacks: ACTIONS.map(([key, name, cls]) => ({ name, cls, values: series.map((p) => byAction(p, key)) })),
      line: { name: "Reload rounds", cls: "c-reload", values: series.map((p) => p.reload_rounds) },
      title: (i) => `${label(i)}\n` + ACTIONS.map(([key, name]) => `${name}: ${byAction(series[i], key)}`).join("\n") + `\nReload rounds: ${series[i].reload_rounds}`,
    });
  }

  function health(stats) {
    const t = stats.totals, s = t.summaries, hl = stats.health || {};
    const rows = [
      ["Store", hl.store === undefined ? "–" : hl.store ? "reachable" : "UNREACHABLE", hl.store === false],
      ["Summaries made", int(s.made)],
      ["Summaries reused", int(s.reused)],
      ["Summaries failed", int(s.failed), s.failed > 0],
      ["Stalls avoided (summary pending)", int(t.stalls_avoided)],
      ["Compactions emulated", int((t.emulated || {}).compactions)],
      ["Context edits emulated", int((t.emulated || {}).context_edits)],
      ["Store warnings", int(t.store_warnings), t.store_warnings > 0],
      ["Errors", int(t.errors), t.errors > 0],
    ];
    if (hl.scheduler) {
      rows.push(["Summary jobs running / queued (this worker, now)", `${hl.scheduler.running} / ${hl.scheduler.queued}`]);
      rows.push(["Oldest summary job (now)", hl.scheduler.oldest_seconds.toFixed(1) + " s", hl.scheduler.oldest_seconds > 60]);
      rows.push(["Summary jobs dropped (this worker, since start)", int(hl.scheduler.dropped), hl.scheduler.dropped > 0]);
    }
    if (stats.recorder) {
      rows.push(["Statistics held / dropped (this worker, since start)", `${int(stats.recorder.queued)} / ${int(stats.recorder.dropped)}`, stats.recorder.dropped > 0]);
    }
    $("health-list").replaceChildren(...rows.map(([k, v, bad]) => h("div", {}, h("dt", {}, k), h("dd", { class: bad ? "bad" : "" }, v))));
  }

  function tenants(stats) {
    const rows = stats.tenants || [];
    $("tenants").hidden = !state.admin || state.tenant !== null;
    table($("tenants-table"), [
      ["Tenant", (r) => r.label || r.name], ["Requests", (r) => int(r.totals.requests), "num opt"],
      ["Raw tokens", (r) => int(r.totals.tokens_before), "num"], ["Forwarded", (r) => int(r.totals.tokens_after), "num"],
      ["Saved", (r) => int(r.totals.tokens_saved), "num opt"], ["Fwd / raw", (r) => pct(r.totals.forwarded_ratio), "num"],
      ["Billed", (r) => usd(r.totals.cost_billed_usd), "num opt"], ["Saved (est.)", (r) => usd(r.totals.cost_saved_usd), "num opt"],
      ["Reload rate", (r) => pct(r.totals.reload_rate), "num opt"],
      ...(rows.some((r) => r.totals.observed) ? [["Observed", (r) => r.totals.observed ? int(r.totals.observed.requests) : "", "num opt"]] : []),
    ], rows, (r) => { state.tenant = r.tenant; state.offset = 0; state.session = null; refresh(); },
    (r) => `Open the sessions of ${r.label || r.name} (namespace ${r.tenant})`);
    if (!rows.length) $("tenants-table").append(h("caption", {}, "No tenant sent a managed or observed request in this window."));
    else if (stats.tenants_truncated) $("tenants-table").append(h("caption", {}, `The ${int(rows.length)} tenants with most raw tokens; there were more.`));
  }

  function sessions(page) {
    $("sessions").hidden = false;
    $("sessions-count").textContent = `(${int(page.total)})`;
    table($("sessions-table"), [
      ["Session", (r) => shortId(r.id)], ["Last active", (r) => ago(r.last_seen), "opt"], ["Turns", (r) => int(r.turns), "num"],
      ["Raw tokens", (r) => int(r.tokens_before), "num"], ["Forwarded", (r) => int(r.tokens_after), "num"],
      ["Fwd / raw", (r) => pct(r.forwarded_ratio), "num"], ["Reload rounds", (r) => int(r.reload_rounds), "num opt"],
      ...(page.data.some((r) => r.observed) ? [["Observed", (r) => r.observed ? int(r.observed.requests) : "", "num opt"]] : []),
      ["Model", (r) => Object.keys(r.models || {}).join(", ") + (r.models_other ? ` +${int(r.models_other)} more` : ""), "opt"],
      ["Billed", (r) => usd(r.cost_billed_usd + (r.observed ? r.observed.bill.usd.total : 0)), "num opt"],
    ], page.data, (r) => { state.session = r.id; refresh(); }, (r) => `Open session ${r.id}`);
    if (!page.data.length) $("sessions-table").append(h("caption", {}, "No session yet: sessions are named by the X-Offload-Session header or by their first messages."));
    const last = Math.min(page.total, page.offset + page.data.length);
    $("page").textContent = page.total ? `${int(page.offset + 1)}–${int(last)} of ${int(page.total)}` : "";
    $("prev").disabled = page.offset <= 0;
    $("next").disabled = !page.has_more;
  }

  function session(detail) {
    $("session").hidden = false;
    $("session-id").textContent = detail.id;
    const o = detail.observed;
    const observedText = o ? ` · ${int(o.requests)} observed: ${int(o.tokens_forwarded)} forwarded as received, ${int(o.tokens_would_forward)} would have been` : "";
    $("session-summary").textContent = `${int(detail.turns)} turns (last ${int(detail.turns_kept)} kept) · ${int(detail.tokens_before)} raw → ${int(detail.tokens_after)} forwarded (${pct(detail.forwarded_ratio)})${observedText} · ${int(detail.reload_rounds)} reload rounds · last active ${ago(detail.last_seen)}`;
    const turns = detail.data;
    // an observed turn went out as received (its raw tokens); its tokens_after and action are what the proxy would have done
    const sent = (t) => t.observed ? t.tokens_before : t.tokens_after;
    const action = (t) => t.observed ? `observed (would: ${t.action})` : t.action;
    const label = (i) => String(detail.turns - turns.length + i + 1);
    OffloadCharts.lines($("chart-session"), {
      count: turns.length, label: "Tokens per turn of this session", xLabel: label, yFormat: compact,
      series: [
        { name: "Raw", cls: "c-raw", values: turns.map((t) => t.tokens_before) },
        { name: "Forwarded", cls: "c-fwd", values: turns.map(sent) },
      ],
      markers: turns.flatMap((t, i) => t.action === "none" || t.observed ? [] : [{ i, value: t.tokens_after, cls: t.action.includes("compress") ? "c-compress" : "c-compact" }]),
      legendExtra: [{ name: "Compaction", cls: "c-compact" }, { name: "Compression", cls: "c-compress" }],
      title: (i) => `Turn ${label(i)} · ${action(turns[i])}\nRaw: ${int(turns[i].tokens_before)}\nForwarded: ${int(sent(turns[i]))}` +
        (turns[i].observed ? `\nWould have forwarded: ${int(turns[i].tokens_after)}` : "") + `\nRefs: ${turns[i].refs} · Reload rounds: ${turns[i].reload_rounds}`,
    });
    table($("turns-table"), [
      ["Turn", (t) => label(turns.indexOf(t))], ["Time", (t) => SECONDS.format(new Date(t.time * 1000)), "opt"],
      ["Route", (t) => t.route, "opt"], ["Model", (t) => t.model || "", "opt"], ["Action", action],
      ["Raw", (t) => int(t.tokens_before), "num"], ["Forwarded", (t) => int(sent(t)), "num"],
      ...(turns.some((t) => t.observed) ? [["Would forward", (t) => t.observed ? int(t.tokens_after) : "", "num opt"]] : []),
      ["Billed input", (t) => billedInput(t), "num"], ["Output", (t) => t.bill && t.bill.answers ? int(t.bill.output) : "–", "num opt"],
      ["Refs", (t) => int(t.refs), "num opt"], ["Reloads", (t) => int(t.reload_rounds), "num opt"], ["Status", (t) => t.status, "num opt"],
    ], [...turns].reverse());
  }

  function billedInput(t) {
    const b = t.bill;
    if (!b || (!b.answers && !b.unreported)) return "–";
    if (b.unreported) return "no usage";
    const input = b.uncached + b.cache_read + b.cache_write_5m + b.cache_write_1h;
    return `${int(input)} (${int(b.cache_read)} read, ${int(b.cache_write_5m + b.cache_write_1h)} written)`;
  }

  /* ---- the loop ---- */
  async function refresh() {
    if (!state.token) return;
    if (state.busy) { state.again = true; return; }  // a click during a refresh: once more after it
    state.busy = true;
    state.again = false;
    try {
      if (state.admin === null) await probe();
      if (!state.admin) state.tenant = null;
      if (state.window === null) state.window = await fitWindow();
      writeHash();
      for (const b of document.querySelectorAll("#windows button")) b.classList.toggle("on", b.dataset.window === state.window);
      const stats = await api(STATS, { window: state.window, tenant: state.tenant });
      $("scope").replaceChildren(h("span", { class: "scope-name", title: stats.tenant ? `namespace ${stats.tenant}` : "" },
        stats.tenant ? `Tenant ${stats.label || stats.name}` : "All tenants"));
      if (state.admin && stats.tenant) $("scope").append(" ", h("button", { type: "button", class: "quiet", onclick: () => { state.tenant = null; state.session = null; state.offset = 0; refresh(); } }, "All tenants"));
      headline(stats.totals);
      bill(stats.totals);
      observed(stats.totals);
      holdout(stats);
      charts(stats);
      health(stats);
      tenants(stats);
      if (stats.tenant) {
        const page = await api("/v1/offload/sessions", { tenant: state.admin ? stats.tenant : null, offset: state.offset, limit: PAGE });
        sessions(page);
        // nothing ever recorded for this key: often a mistyped token where any key is a tenant's own
        $("hint").hidden = state.admin || page.total > 0 || stats.totals.requests > 0;
      } else {
        $("hint").hidden = true;
        $("sessions").hidden = true;
      }
      if (stats.tenant && state.session) {
        try {
          session(await api("/v1/offload/sessions/" + encodeURIComponent(state.session), { tenant: state.admin ? stats.tenant : null }));
        } catch (e) {
          if (e.status !== 404) throw e;
          state.session = null;
          $("session").hidden = true;
        }
      } else {
        $("session").hidden = true;
      }
      state.last = new Date();
      $("updated").replaceChildren(`Updated ${SECONDS.format(state.last)}`,
        state.paused ? " · paused" : h("span", { class: "every" }, ` · every ${REFRESH_MS / 1000} s`));
      $("error").textContent = state.notice || "";
      $("error").hidden = !state.notice;
      state.notice = null;
      scrollHints();
      document.body.dataset.loaded = String((+document.body.dataset.loaded || 0) + 1);
    } catch (e) {
      if (e.status === 401 || e.status === 403) {
        signOut(e.message);
      } else if ((e.code === "tenant_not_found" && state.tenant) || (e.code === "invalid_parameter" && state.offset)) {
        // the address named a tenant or a page the API refuses: back to a view that loads, saying why
        state.notice = e.message;
        if (e.code === "tenant_not_found") state.tenant = null;
        state.offset = 0;
        state.session = null;
        state.again = true;
      } else {
        $("error").textContent = "Could not refresh: " + e.message;
        $("error").hidden = false;
      }
    } finally {
      state.busy = false;
      if (state.again) refresh();
    }
  }

  /* who is looking: the admin reads any tenant, a tenant only its own */
  async function probe() {
    state.admin = (await api(STATS, { window: "1h" })).viewer === "admin";
  }

  /* the window that fits the data: 15 m while all of it is in the last 15 minutes (or there is
     none), 1 h while there is less than an hour of it, else the shortest of 24 h, 7 d and 30 d
     holding its first request; the visitor's choice from then on */
  async function fitWindow() {
    const tenant = state.admin ? state.tenant : null;
    try {
      for (const window of ["24h", "7d", "30d"]) {
        const stats = await api(STATS, { window, tenant });
        if (stats.first_seen === null || stats.first_seen === undefined) continue;
        if (window !== "24h") return window;
        // 15m is the minute holding now and the 14 before it (first_seen is a minute's start)
        if (stats.first_seen >= Math.floor(stats.now / 60) * 60 - 14 * 60) return "15m";
        return stats.now - stats.first_seen < 3600 ? "1h" : "24h";
      }
      return "15m";
    } catch (e) {
      if (e.status === 401 || e.status === 403) throw e;
      return "24h";  // the view's own request says what is wrong
    }
  }

  function show(signedIn) {
    $("signin").hidden = signedIn;
    $("board").hidden = !signedIn;
    document.body.classList.toggle("signed-in", signedIn);
    for (const id of ["windows", "pause", "signout"]) $(id).hidden = !signedIn;
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    delete document.body.dataset.loaded;  // nothing drawn for the next token yet
    state.token = null;
    state.admin = null;
    show(false);
    $("signin-error").textContent = message || "";
    $("scope").textContent = "";
    $("updated").textContent = "";
  }

  async function signIn(event) {
    event.preventDefault();
    state.token = $("token").value.trim();
    $("token").value = "";
    try {
      await probe();
    } catch (e) {
      return signOut(e.status === 401 || e.status === 403 ? e.message : "Could not reach the proxy: " + e.message);
    }
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $("signin-error").textContent = "";
    show(true);
    refresh();
  }

  document.addEventListener("DOMContentLoaded", () => {
    readHash();
    $("signin").addEventListener("submit", signIn);
    $("signout").addEventListener("click", () => signOut(""));
    $("pause").addEventListener("click", () => {
      state.paused = !state.paused;
      $("pause").textContent = state.paused ? "Resume" : "Pause";
      refresh();
    });
    for (const b of document.querySelectorAll("#windows button")) {
      b.addEventListener("click", () => { state.window = b.dataset.window; refresh(); });
    }
    $("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); refresh(); });
    $("next").addEventListener("click", () => { state.offset += PAGE; refresh(); });
    $("session-close").addEventListener("click", () => { state.session = null; refresh(); });
    for (const wrap of document.querySelectorAll(".table-wrap")) wrap.addEventListener("scroll", scrollHints, { passive: true });
    let resize = null;
    window.addEventListener("resize", () => { scrollHints(); clearTimeout(resize); resize = setTimeout(refresh, 200); });
    setInterval(() => { if (!state.paused && !document.hidden) refresh(); }, REFRESH_MS);
    if (state.token) { show(true); refresh(); } else { show(false); }
  });
})();
