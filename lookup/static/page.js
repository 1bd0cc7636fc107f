// The page's script (lookup/page.py): it asks this server's JSON API and shows its answers as the
// JSON says them; it computes no privacy number itself.  Curves (eps against n, eps against rounds)
// are SVG built by one drawing code from /v1/eps answers asked one after the other (never more than
// one live place held by a curve).  The page's state is kept in its URL query with the API's
// parameter names (plus endpoint and curve_*), a permalink.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("page-data").textContent);
  const REQUIRED = {eps: ["eps0", "n", "delta"], delta: ["eps0", "n", "eps"], "eps0-max": ["eps", "n", "delta"]};
  const OPTIONS = ["max_slack", "live"];
  const COMPOSITION = ["rounds", "sample_rate"];  // of /v1/eps only
  const POINTS = 13;  // n values per series, log-spaced
  const ROUND_POINTS = 7;  // rounds values of the rounds curve, log-spaced
  const ROUNDS_MAX = 1000000;  // the API's largest rounds
  const MAX_SERIES = 6;
  const PALETTE = ["#1f5fa8", "#c2561a", "#2e8540", "#8a3ea8", "#a8871f", "#1f9aa8"];
  const SOURCES = {
    "table": "read from the precomputed table at the grid corner on the safe side (eps0 rounded up, " +
      "n and delta rounded down, the delta chord above the curve)",
    "certified estimate": "the table's answer refined by the engine: an estimate, then certified by an " +
      "exact evaluation",
    "slice": "read from an eps0 slice: the engine's certified values at this exact eps0, computed once by " +
      "the server and read with the table's conservative rules",
    "live": "computed now by the engine (outside the table's grid, or a mechanism the table does not hold)",
  };
  const SVG = "http://www.w3.org/2000/svg";
  const ask = document.getElementById("ask");
  const curve = document.getElementById("curve");
  const roundsForm = document.getElementById("rounds-curve");
  // each curve: its form's fields (in the permalink once drawn), its plot, and what is drawn:
  // series [{label, points: [{x, eps, lower, refined}]}]; generation: a new Draw abandons the old one
  const CURVES = {
    n: {form: curve, fields: ["curve_eps0", "curve_n", "curve_delta"], plot: "plot", progress: "progress",
      xTitle: "n (users)", aria: "certified eps against n, log axes", series: [], drawn: false, generation: 0},
    rounds: {form: roundsForm, fields: ["curve_rounds"], plot: "rounds-plot", progress: "rounds-progress",
      xTitle: "T (rounds composed)", aria: "certified eps against rounds, log axes", series: [], drawn: false,
      generation: 0},
  };

  function node(namespace, tag, attrs, children) {
    const out = namespace ? document.createElementNS(namespace, tag) : document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) out.setAttribute(name, String(value));
    out.append(...(children || []));
    return out;
  }
  const el = (tag, attrs, ...children) => node(null, tag, attrs, children);
  const svg = (tag, attrs, ...children) => node(SVG, tag, attrs, children);
  const input = (form, name) => form.elements.namedItem(name);

  // ------------------------------------------------------------ the form
  function showParams(values) {
    const box = document.getElementById("params");
    box.replaceChildren();
    for (const p of DATA.mechanisms[input(ask, "mechanism").value] || []) {
      const field = el("input", {name: p.name, autocomplete: "off", "data-param": ""});
      if (p.default !== null && p.default !== undefined) field.placeholder = String(p.default);
      field.value = values[p.name] || "";
      box.append(el("label", {"data-field": p.name}, p.name + " ",
        el("small", {}, p.help + (p.required ? "" : " (optional)")), field,
        el("span", {class: "error", "data-error": p.name})));
    }
  }

  function optional(endpoint) {
    return endpoint === "eps" ? [...OPTIONS, ...COMPOSITION] : OPTIONS;
  }

  function showFields() {
    const endpoint = input(ask, "endpoint").value;
    const shown = [...REQUIRED[endpoint], ...optional(endpoint)];
    for (const label of ask.querySelectorAll("label[data-field]")) {
      if (label.parentElement.id !== "params") label.hidden = !shown.includes(label.dataset.field);
    }
  }

  // the form's question as the API's query (endpoint: the form's, or "eps" for a curve)
  function question(endpoint = input(ask, "endpoint").value) {
    const query = new URLSearchParams({mechanism: input(ask, "mechanism").value});
    for (const field of ask.querySelectorAll("input[data-param]")) {
      if (field.value.trim()) query.set(field.name, field.value.trim());
    }
    for (const name of REQUIRED[endpoint]) query.set(name, input(ask, name).value.trim());
    for (const name of optional(endpoint)) {
      if (input(ask, name).value.trim()) query.set(name, input(ask, name).value.trim());
    }
    return {endpoint, query};
  }

  function setPermalink() {
    const {endpoint, query} = question();
    const state = new URLSearchParams({endpoint, ...Object.fromEntries(query)});
    for (const c of Object.values(CURVES)) {
      if (c.drawn) for (const name of c.fields) state.set(name, input(c.form, name).value.trim());
    }
    history.replaceState(null, "", "?" + state);
    document.getElementById("permalink").href = location.href;
  }

  // ------------------------------------------------------------ the API
  async function call(url) {
    let response;
    try {
      response = await fetch(url, {headers: {Accept: "application/json"}});
    } catch (err) {
      return {status: 0, body: {error: "the server cannot be reached (" + err.message + ")"}};
    }
    let body;
    try {
      body = await response.json();
    } catch (err) {
      body = {error: "the server answered " + response.status + " without JSON"};
    }
    return {status: response.status, body, retry: response.headers.get("Retry-After")};
  }

  // The 400 message names the parameter: "missing parameter 'n'", "eps0 must be ..., got eps0=-1",
  // "unknown mechanism='krx'", "weights must ...".  Its span: spans[name], else the fallback.
  function showError(result, spans, fallback) {
    const message = (result.body && result.body.error) || "HTTP " + result.status;
    if (result.status === 503) {
      fallback.textContent = "The server is busy: " + message + ". It asks to wait " +
        (result.retry || "a few") + " s; please try again then.";
      return;
    }
    const names = [];
    const quoted = /parameter '(\w+)'/.exec(message);
    if (quoted) names.push(quoted[1]);
    for (const match of message.matchAll(/(\w+)=/g)) names.push(match[1]);
    const first = /^(\w+) /.exec(message);
    if (first) names.push(first[1]);
    const name = names.find((n) => spans[n]);
    const span = name ? spans[name] : fallback;
    span.textContent = message;
    const details = span.closest("details");
    if (details) details.open = true;
    const field = span.parentElement.querySelector("input, select");
    if (name && field) field.setAttribute("aria-invalid", "true");
  }

  function errorSpans(form, rename) {
    const spans = {};
    for (const span of form.querySelectorAll("[data-error]")) {
      if (!span.closest("[hidden]")) spans[rename(span.dataset.error)] = span;
    }
    return spans;
  }

  function clearErrors() {
    for (const span of document.querySelectorAll("[data-error]")) span.textContent = "";
    for (const field of document.querySelectorAll("[aria-invalid]")) field.removeAttribute("aria-invalid");
  }

  // ------------------------------------------------------------ one question
  async function onAsk(event) {
    if (event) event.preventDefault();
    clearErrors();
    setPermalink();
    const {endpoint, query} = question();
    const url = "v1/" + endpoint + "?" + query;
    const result = await call(url);
    const box = document.getElementById("answer");
    if (result.status !== 200) {
      box.hidden = true;
      showError(result, errorSpans(ask, (n) => n), ask.querySelector("[data-error=form]"));
      return;
    }
    showAnswer(endpoint, result.body, url);
    box.hidden = false;
  }

  function shown(value) {
    if (value === null || value === undefined) return "unknown";
    if (typeof value === "object") {
      const known = Object.entries(value).filter(([, v]) => v !== null);
      return known.map(([k, v]) => k + "=" + shown(v)).join(", ") || "none";
    }
    return String(value);
  }

  function showAnswer(endpoint, body, url) {
    const rows = Object.entries(body).flatMap(([key, value]) =>
      [el("dt", {}, key), el("dd", {"data-key": key}, shown(value))]);
    document.querySelector("#answer dl").replaceChildren(...rows);
    const mechanism = input(ask, "mechanism").value;
    const what = endpoint === "eps0-max"
      ? "the certified eps at this eps0 is at most the target eps"
      : "an upper bound, never below the exact value of the analysis of " + mechanism +
        "; the lower bound (where known) is a value the exact one is not below";
    const note = body.certified ? "Certified: " + what + "." : "Not certified: this value carries no guarantee.";
    const pending = body.refined === false ? " Not refined yet (refined: false): the table's certified answer with " +
      "its slack, given at once while the server refines it; ask again in a moment for a tighter value." : "";
    const composed = body.rounds ? ` Composed over ${body.rounds} rounds` + (body.sample_rate ? ", each user " +
      `taking part with probability ${body.sample_rate}` : "") + " (privacy-loss distributions, dp-accounting)." : "";
    const via = body.via ? ` Via ${body.via}: the ${body.via} row's certified answer (it holds for every ` +
      `eps0-LDP randomizer), the table having none for ${mechanism} here; its lower bound is not one for ` +
      `${mechanism}, so none is given.` : "";
    document.getElementById("note").textContent = note + " Source " + body.source + ": " +
      (SOURCES[body.source] || "composition of rounds") + "." + via + composed + pending;
    const link = document.getElementById("api-link");
    link.href = url;
    link.textContent = "/" + url;
  }

  // ------------------------------------------------------------ the curves
  function complain(form, name, text) {
    form.querySelector(`[data-error=${name}]`).textContent = text;
  }

  // ``count`` integers log-spaced from ``from`` to ``to``, rounded, each once
  function logSpaced(from, to, count) {
    const lo = Math.log10(from), hi = Math.log10(to);
    return [...new Set(Array.from({length: count}, (_, i) => Math.round(10 ** (lo + (hi - lo) * i / (count - 1)))))];
  }

  async function onDraw(event) {
    if (event) event.preventDefault();
    clearErrors();
    const eps0s = input(curve, "curve_eps0").value.split(",").map((s) => s.trim()).filter(Boolean);
    const range = input(curve, "curve_n").value.split(",").map((s) => Number(s.trim()));
    if (eps0s.length < 1 || eps0s.length > MAX_SERIES) {
      return complain(curve, "curve_eps0", `give 1 to ${MAX_SERIES} values`);
    }
    if (range.length !== 2 || !(range[0] >= 1) || !(range[1] > range[0])) {
      return complain(curve, "curve_n", "give two numbers: from >= 1, then to > from");
    }
    const {query: base} = question("eps");
    for (const name of COMPOSITION) base.delete(name);  // one round: the rounds curve is below
    const plan = eps0s.map((eps0) => ({label: `eps0 = ${eps0}`, points: logSpaced(range[0], range[1], POINTS).map(
      (n) => [n, {eps0, n: String(n), delta: input(curve, "curve_delta").value.trim()}])}));
    await collect(CURVES.n, base, plan);
  }

  async function onRounds(event) {
    if (event) event.preventDefault();
    clearErrors();
    const range = input(roundsForm, "curve_rounds").value.split(",").map((s) => Number(s.trim()));
    if (range.length !== 2 || !Number.isInteger(range[0]) || !Number.isInteger(range[1]) || !(range[0] >= 1) ||
        !(range[1] > range[0]) || range[1] > ROUNDS_MAX) {
      return complain(roundsForm, "curve_rounds", `give two integers: from >= 1, then to > from, at most ${ROUNDS_MAX}`);
    }
    const {query: base} = question("eps");
    const rate = base.get("sample_rate");
    const label = `eps0 = ${base.get("eps0")}, n = ${base.get("n")}` + (rate ? `, sample rate ${rate}` : "");
    await collect(CURVES.rounds, base, [{label, points: logSpaced(range[0], range[1], ROUND_POINTS).map(
      (rounds) => [rounds, {rounds: String(rounds)}])}]);
  }

  // Ask /v1/eps for each point of each series of ``plan`` ([{label, points: [[x, {name: value}]]}],
  // the values set on ``base``), one after the other, plotting each series as it is complete; a
  // refused or bad point stops the curve with its message beside the field it names.
  async function collect(c, base, plan) {
    const generation = ++c.generation;
    c.drawn = true;
    setPermalink();
    c.series = plan.map((s) => ({label: s.label, points: []}));
    const progress = document.getElementById(c.progress);
    const spans = {...errorSpans(ask, (n) => n), ...errorSpans(c.form, (n) => n.replace("curve_", ""))};
    const total = plan.reduce((sum, s) => sum + s.points.length, 0);
    let done = 0;
    for (const [i, s] of plan.entries()) {
      for (const [x, values] of s.points) {
        const query = new URLSearchParams(base);
        query.delete("eps");
        for (const [name, value] of Object.entries(values)) query.set(name, value);
        const result = await call("v1/eps?" + query);
        if (generation !== c.generation) return;
        if (result.status !== 200) {
          progress.textContent = "";
          showError(result, spans, c.form.querySelector("[data-error=curve]"));
          plot(c);
          return;
        }
        c.series[i].points.push({x, eps: result.body.eps, lower: result.body.eps_lower,
          refined: result.body.refined !== false});
        progress.textContent = `${++done} of ${total} answers`;
      }
      plot(c);
    }
  }

  function logScale(lo, hi, from, to) {
    const a = Math.log10(lo), b = Math.log10(hi);
    return (v) => from + (to - from) * (Math.log10(v) - a) / (b - a);
  }

  function domain(values) {
    let lo = Math.min(...values), hi = Math.max(...values);
    if (hi / lo < 1.2) { lo /= 1.1; hi *= 1.1; }
    return [lo, hi];
  }

  // 1, 2, 5 or 1..9 times powers of ten inside [lo, hi]: at least 3 when the range allows, at most 9
  function ticks(lo, hi) {
    let out = [];
    for (const steps of [[1], [1, 2, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]]) {
      out = [];
      for (let k = Math.floor(Math.log10(lo)); k <= Math.ceil(Math.log10(hi)); k++) {
        for (const m of steps) {
          const v = Number((m * 10 ** k).toPrecision(1));
          if (v >= lo && v <= hi) out.push(v);
        }
      }
      if (out.length >= 3) break;
    }
    while (out.length > 9) out = out.filter((_, i) => i % 2 === 0);
    return out.length >= 2 ? out : [lo, hi].map((v) => Number(v.toPrecision(2)));
  }

  function label(v) {
    return v >= 1e4 || v < 1e-3 ? v.toExponential().replace(/\.?0*e\+?/, "e") : String(v);
  }

  function plot(c) {
    const box = document.getElementById(c.plot);
    const points = c.series.flatMap((s) => s.points).filter((p) => p.eps > 0);
    if (!points.length) { box.replaceChildren(); return; }
    const width = Math.max(280, Math.min(box.clientWidth || 640, 960));
    const height = Math.round(width * (width < 560 ? 0.85 : 0.55));
    const m = {left: 58, right: 14, top: 12, bottom: 46};
    const [xlo, xhi] = domain(points.map((p) => p.x));
    const [ylo, yhi] = domain(points.flatMap((p) => (p.lower > 0 ? [p.eps, p.lower] : [p.eps])));
    const x = logScale(xlo, xhi, m.left, width - m.right);
    const y = logScale(ylo, yhi, height - m.bottom, m.top);
    const root = svg("svg", {viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": c.aria});
    for (const t of ticks(xlo, xhi)) {
      root.append(svg("line", {class: "gridline", x1: x(t), x2: x(t), y1: m.top, y2: height - m.bottom}),
        svg("text", {class: "tick", x: x(t), y: height - m.bottom + 16, "text-anchor": "middle"}, label(t)));
    }
    for (const t of ticks(ylo, yhi)) {
      root.append(svg("line", {class: "gridline", x1: m.left, x2: width - m.right, y1: y(t), y2: y(t)}),
        svg("text", {class: "tick", x: m.left - 6, y: y(t) + 4, "text-anchor": "end"}, label(t)));
    }
    root.append(svg("text", {class: "axis", x: (m.left + width - m.right) / 2, y: height - 8, "text-anchor": "middle"},
      c.xTitle),
    svg("text", {class: "axis", x: 14, y: (m.top + height - m.bottom) / 2, "text-anchor": "middle",
      transform: `rotate(-90 14 ${(m.top + height - m.bottom) / 2})`}, "certified ε"));
    const legend = el("ul", {class: "legend"});
    let banded = false;
    c.series.forEach((s, i) => {
      const color = PALETTE[i % PALETTE.length];
      const shownPoints = s.points.filter((p) => p.eps > 0);
      const band = shownPoints.filter((p) => p.lower > 0);
      if (band.length > 1) {
        banded = true;
        const edge = [...band.map((p) => [x(p.x), y(p.eps)]), ...band.reverse().map((p) => [x(p.x), y(p.lower)])];
        root.append(svg("polygon", {class: "band", fill: color, points: edge.map((xy) => xy.join(",")).join(" ")}));
      }
      root.append(svg("polyline", {class: "line", stroke: color,
        points: shownPoints.map((p) => `${x(p.x)},${y(p.eps)}`).join(" ")}));
      for (const p of shownPoints) {
        root.append(svg("circle", {class: p.refined ? "point" : "point unrefined", fill: p.refined ? color : "#fff",
          stroke: color, cx: x(p.x), cy: y(p.eps), r: 3, "data-series": s.label, "data-refined": p.refined,
          "data-x": p.x, "data-eps": p.eps, "data-lower": p.lower === null ? "" : p.lower},
        svg("title", {}, `${s.label}, ${c.xTitle.split(" ")[0]}=${p.x}: eps=${p.eps}, lower=${shown(p.lower)}` +
          (p.refined ? "" : " (not refined yet)"))));
      }
      const swatch = el("span", {class: "swatch"});
      swatch.style.background = color;
      legend.append(el("li", {}, swatch, s.label));
    });
    if (banded) legend.append(el("li", {}, el("span", {class: "swatch band-swatch"}), "band: lower bound to certified eps"));
    if (points.some((p) => !p.refined)) {
      legend.append(el("li", {}, el("span", {class: "hollow"}), "hollow: not refined yet (the table's answer; draw again)"));
    }
    box.replaceChildren(root, legend);
  }

  // ------------------------------------------------------------ start: defaults or the permalink
  function start() {
    const coverage = DATA.coverage || {};
    const select = input(ask, "mechanism");
    for (const name of Object.keys(DATA.mechanisms)) select.add(new Option(name, name));
    const [row, ...given] = ((coverage.mechanisms || [])[0] || "").split(" ");
    const [nlo, nhi] = coverage.n || [100, 1e9];
    const [dlo, dhi] = coverage.delta || [1e-12, 1e-3];
    const delta = dlo <= 1e-8 && 1e-8 <= dhi ? "1e-8" : String(dlo);
    const defaults = {endpoint: "eps", mechanism: row || select.value, eps0: "1", eps: "0.5", delta,
      n: String(Math.round(Math.sqrt(nlo * nhi))), curve_eps0: "0.5,1,2", curve_n: `${nlo},${nhi}`, curve_delta: delta,
      curve_rounds: "1,1000"};
    const state = Object.fromEntries(new URLSearchParams(location.search));
    // a permalink gives the mechanism's parameters itself; otherwise those of the table's first row
    const values = {...defaults, ...(location.search ? state : Object.fromEntries(given.map((g) => g.split("="))))};
    for (const form of [ask, curve, roundsForm]) {
      for (const [name, value] of Object.entries(values)) {
        const field = input(form, name);
        if (field && !field.dataset.param) field.value = value;
      }
    }
    showParams(values);
    showFields();
    if (OPTIONS.some((name) => values[name])) ask.querySelector("details").open = true;
    select.addEventListener("change", () => showParams({}));
    input(ask, "endpoint").addEventListener("change", showFields);
    ask.addEventListener("submit", onAsk);
    curve.addEventListener("submit", onDraw);
    roundsForm.addEventListener("submit", onRounds);
    let timer;
    window.addEventListener("resize", () => {
      clearTimeout(timer);
      timer = setTimeout(() => Object.values(CURVES).forEach(plot), 150);
    });
    document.getElementById("table-info").textContent = [coverage.title, (coverage.mechanisms || []).join(", "),
      coverage.eps0 && `eps0 ${coverage.eps0[0]} to ${coverage.eps0[1]}`, `n ${nlo} to ${nhi}`,
      `delta ${dlo} to ${dhi}`].filter(Boolean).join("; ");
    (async () => {  // one request at a time, as a person would ask
      if (state.mechanism) await onAsk();
      if (state.curve_eps0) await onDraw();
      if (state.curve_rounds) await onRounds();
    })();
  }

  start();
})();
