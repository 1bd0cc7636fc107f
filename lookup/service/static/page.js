// The page's script (lookup/service/page.py): it asks this server's JSON API and shows its answers; it
// computes no privacy number itself.  Numbers are shown to 4 significant digits rounded in the
// direction that keeps each one true (a certified eps or delta up, a lower bound or the largest
// eps0 down), the exact JSON one click away.  An answer "refined": false is asked again until the
// server has refined it.  An answer is never shown as current beside a question it does not
// answer: the form changing greys it, Ask clears it, a superseded response is dropped.  Curves
// (eps against n, eps against rounds) are SVG built by one drawing code from /v1/eps answers asked
// one after the other (never more than one live place held by a curve), titled with what they
// show and cleared when the question they depend on changes.  The page's state is kept in its
// URL query with the API's parameter names (plus endpoint and curve_*), a permalink.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("page-data").textContent);
  const REQUIRED = {eps: ["eps0", "n", "delta"], delta: ["eps0", "n", "eps"], "eps0-max": ["eps", "n", "delta"]};
  const OPTIONS = ["max_slack", "live"];
  const COMPOSITION = ["rounds", "sample_rate"];  // of /v1/eps only
  const WITHOUT = DATA.without || {};  // the fields a mechanism takes no value for (gaussian: eps0, sample_rate)
  const POINTS = 13;  // n values per series, log-spaced
  const ROUND_POINTS = 7;  // rounds values of the rounds curve, log-spaced
  const ROUNDS_MAX = 1000000;  // the API's largest rounds
  const MAX_SERIES = 6;
  const DIGITS = 4;  // significant digits shown
  const POLL_MS = 300;  // an answer "refined": false is asked again this often ...
  const REFINE_MS = 20000;  // ... for at most this long
  const PALETTE = ["#1f5fa8", "#c2561a", "#2e8540", "#8a3ea8", "#a8871f", "#1f9aa8"];
  // the default question: k-RR over 10 categories, a local eps0 of 1, a million users, delta 1e-8
  // (well below 1/n); docs/page.md says why
  const DEFAULT = {mechanism: "krr", k: "10", eps0: "1", n: "1000000", delta: "1e-8"};
  const SOURCES = {
    "table": "read from the precomputed table, on the safe side",
    "certified estimate": "the table's answer refined by the engine: an estimate, then certified by an exact " +
      "evaluation",
    "slice": "read from an eps0 slice: the engine's certified values at this exact eps0",
    "live": "computed now by the engine",
  };
  const SVG = "http://www.w3.org/2000/svg";
  const ask = document.getElementById("ask");
  const curve = document.getElementById("curve");
  const roundsForm = document.getElementById("rounds-curve");
  const box = document.getElementById("answer");
  // each curve: its form's fields (in the permalink once drawn), its plot, what it depends on in
  // the question form (its basis), and what is drawn: series [{label, points: [{x, url, eps,
  // lower, refined}]}]; generation: a new Draw, or a change of the form, abandons the old one
  const CURVES = {
    n: {form: curve, fields: ["curve_eps0", "curve_n", "curve_delta"], plot: "plot", progress: "progress",
      basis: ["mechanism", "params", ...OPTIONS], xTitle: "n (users)", aria: "certified eps against n, log axes",
      series: [], drawn: false, generation: 0},
    rounds: {form: roundsForm, fields: ["curve_rounds"], plot: "rounds-plot", progress: "rounds-progress",
      basis: ["mechanism", "params", ...OPTIONS, "eps0", "n", "delta", "sample_rate"], xTitle: "T (rounds composed)",
      aria: "certified eps against rounds, log axes", series: [], drawn: false, generation: 0},
  };
  // the answer shown: {url, endpoint, body}; asking: the generation of the latest question (a
  // response to an older one is dropped); phase: asking, refining, done
  const shownAnswer = {url: null, endpoint: null, body: null, phase: "done", message: ""};
  let asking = 0;

  function node(namespace, tag, attrs, children) {
    const out = namespace ? document.createElementNS(namespace, tag) : document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) out.setAttribute(name, String(value));
    out.append(...(children || []));
    return out;
  }
  const el = (tag, attrs, ...children) => node(null, tag, attrs, children);
  const svg = (tag, attrs, ...children) => node(SVG, tag, attrs, children);
  const input = (form, name) => form.elements.namedItem(name);
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  // a mechanism's fields hidden and never sent, and its parameter in place of eps0 (gaussian's sigma) if any;
  // both for the form's mechanism unless one is named
  const without = (name = input(ask, "mechanism").value) => WITHOUT[name] || [];
  const replacing = (name = input(ask, "mechanism").value) => (DATA.mechanisms[name] || []).find(
    (p) => p.replaces === "eps0");
  // the number a series of the curves is drawn for: eps0, or the parameter in its place
  const seriesOf = (name) => (replacing(name) || {name: "eps0"}).name;

  // ------------------------------------------------------------ numbers shown
  // ``x`` to DIGITS significant digits: "up" never below x (a certified eps or delta), "down" never
  // above it (a lower bound, the largest eps0), "near" the nearest (a label); what is shown reads
  // back (as a double) on the right side of the JSON's value
  function fmt(x, way = "near") {
    if (typeof x !== "number") return x === null || x === undefined ? "unknown" : String(x);
    if (!Number.isFinite(x) || x === 0) return String(x);
    if (x < 0) return "-" + fmt(-x, {up: "down", down: "up"}[way] || way);
    let s = x.toPrecision(DIGITS);
    if ((way === "up" && Number(s) < x) || (way === "down" && Number(s) > x)) {
      const [mantissa, exponent] = x.toExponential(DIGITS - 1).split("e");
      let m = Math.round(Number(mantissa) * 10 ** (DIGITS - 1)) + (way === "up" ? 1 : -1);
      let e = Number(exponent);
      if (m >= 10 ** DIGITS) { m /= 10; e += 1; }
      if (m < 10 ** (DIGITS - 1)) { m = m * 10 + 9; e -= 1; }
      const digits = String(m);
      s = `${digits[0]}.${digits.slice(1)}e${e}`;
    }
    return readable(Number(s));
  }

  function readable(v) {
    return v >= 1e6 || v < 1e-3 ? v.toExponential().replace("e+", "e") : String(v);
  }

  const percent = (slack) => String(Number((slack * 100).toPrecision(2))) + "%";  // an estimate: the nearest

  // ------------------------------------------------------------ the form
  function showParams(values) {
    const params = document.getElementById("params");
    params.replaceChildren();
    for (const p of DATA.mechanisms[input(ask, "mechanism").value] || []) {
      if (p.fixed) {  // stated, not asked (gaussian's inputs = unit), with why no other value is offered
        params.append(el("p", {class: "fixed", "data-field": p.name}, `${p.name} = ${p.default} `,
          el("small", {}, p.help)));
        continue;
      }
      const field = el("input", {name: p.name, autocomplete: "off", "data-param": ""});
      if (p.default !== null && p.default !== undefined) field.placeholder = String(p.default);
      field.value = values[p.name] || "";
      params.append(el("label", {"data-field": p.name}, p.name + " ",
        el("small", {}, p.help + (p.required ? "" : " (optional)")), field,
        el("span", {class: "error", "data-error": p.name})));
    }
  }

  function optional(endpoint) {
    return endpoint === "eps" ? [...OPTIONS, ...COMPOSITION] : OPTIONS;
  }

  function showFields() {
    const endpoint = input(ask, "endpoint").value;
    const shown = [...REQUIRED[endpoint], ...optional(endpoint)].filter((name) => !without().includes(name));
    for (const label of ask.querySelectorAll("label[data-field]")) {
      if (label.parentElement.id !== "params") label.hidden = !shown.includes(label.dataset.field);
    }
    document.getElementById("curve-series").textContent = seriesOf();
  }

  // the form's question as the API's query (endpoint: the form's, or "eps" for a curve)
  function question(endpoint = input(ask, "endpoint").value) {
    const query = new URLSearchParams({mechanism: input(ask, "mechanism").value});
    for (const field of ask.querySelectorAll("input[data-param]")) {
      if (field.value.trim()) query.set(field.name, field.value.trim());
    }
    for (const name of REQUIRED[endpoint]) {
      if (!without().includes(name)) query.set(name, input(ask, name).value.trim());
    }
    for (const name of optional(endpoint)) {
      if (!without().includes(name) && input(ask, name).value.trim()) query.set(name, input(ask, name).value.trim());
    }
    return {endpoint, query};
  }

  const params = (query) => [...query].filter(([name]) => DATA.mechanisms[query.get("mechanism")]?.some(
    (p) => p.name === name));
  // "krr k=10": the mechanism and its parameters as asked
  const mechanismOf = (query) => [query.get("mechanism"), ...params(query).map(([k, v]) => `${k}=${v}`)].join(" ");

  // what a curve depends on in the question form, as one string
  function basis(c) {
    const {query} = question("eps");
    return JSON.stringify(c.basis.map((name) => (name === "params" ? params(query) : query.get(name))));
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

  function clearErrors(...forms) {
    for (const form of forms) {
      for (const span of form.querySelectorAll("[data-error]")) span.textContent = "";
      for (const field of form.querySelectorAll("[aria-invalid]")) field.removeAttribute("aria-invalid");
    }
  }

  // ------------------------------------------------------------ one question
  const url = () => (({endpoint, query}) => "v1/" + endpoint + "?" + query)(question());

  async function onAsk(event) {
    if (event) event.preventDefault();
    clearErrors(ask);
    setPermalink();
    const generation = ++asking;
    const {endpoint} = question();
    const asked = url();
    Object.assign(shownAnswer, {url: asked, endpoint, body: null, phase: "asking", message: ""});
    for (const id of ["asked", "headline", "note", "json"]) document.getElementById(id).replaceChildren();
    box.querySelector("dl").replaceChildren();
    box.hidden = false;
    status();
    const result = await call(asked);
    if (generation !== asking) return;  // a newer question was asked meanwhile
    if (result.status !== 200) {
      box.hidden = true;
      Object.assign(shownAnswer, {url: null, body: null, phase: "done"});
      status();
      showError(result, errorSpans(ask, (n) => n), ask.querySelector("[data-error=form]"));
      return;
    }
    showAnswer(endpoint, result.body, asked);
    if (result.body.refined === false) await refineAnswer(generation, endpoint, asked);
    else finish("");
  }

  function finish(message) {
    Object.assign(shownAnswer, {phase: "done", message});
    status();
  }

  // "refined": false: the table's certified answer given at once while the server refines it and
  // keeps the result; asked again every POLL_MS until it comes (at most REFINE_MS)
  async function refineAnswer(generation, endpoint, asked) {
    const started = Date.now();
    let tries = 0;
    while (Date.now() - started < REFINE_MS) {
      Object.assign(shownAnswer, {phase: "refining", message: tries ? `asked again ${tries} times` : ""});
      status();
      await sleep(POLL_MS);
      if (generation !== asking) return;
      const result = await call(asked);
      if (generation !== asking) return;
      tries += 1;
      if (result.status !== 200) {
        return finish("Not refined: asking again got " + (result.status === 503 ? "the server busy" :
          "HTTP " + result.status) + "; the answer below stands (certified, with its slack).");
      }
      showAnswer(endpoint, result.body, asked);
      if (result.body.refined !== false) {
        return finish(`Refined by the server in ${((Date.now() - started) / 1000).toFixed(1)} s.`);
      }
    }
    finish(`Not refined within ${REFINE_MS / 1000} s: the answer below stands (certified, with its slack); ` +
      "ask again later for a tighter one.");
  }

  // the answer box's state (data-state: asking, refining, current, stale) and its status line;
  // stale: the form no longer asks the question shown
  function status() {
    const line = document.getElementById("answer-status");
    const stale = shownAnswer.url !== null && shownAnswer.url !== url();
    let state = shownAnswer.phase === "done" ? "current" : shownAnswer.phase;
    let text = {asking: "Asking the server…", refining: "Refining… the answer below is the table's certified " +
      "one, given at once; the server is computing a tighter one and this page asks again every " +
      `${POLL_MS / 1000} s (${shownAnswer.message || "up to " + REFINE_MS / 1000 + " s"}).`,
    current: shownAnswer.message}[state];
    if (stale && shownAnswer.body) {
      state = "stale";
      text = "The form has changed: the answer below is to the question it names, not to the form above. " +
        "Press Ask for the new question.";
    }
    if (shownAnswer.url === null) state = "empty";
    box.dataset.state = state;
    box.setAttribute("aria-busy", String(state === "asking" || state === "refining"));
    line.textContent = text || "";
  }

  // the question the server answered, as it parsed it (the answer's "asked"), never the text typed:
  // a look-alike digit in a permalink shows as what the server read (or is refused with a 400)
  function parsedQuery(body) {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(body.asked || {})) query.set(name, String(value));
    return query;
  }

  // the question asked, in words
  function askedText(endpoint, query) {
    const what = {eps: "ε at δ", delta: "δ at ε", "eps0-max": "the largest ε0 for a target ε"}[endpoint];
    const rest = [...query].filter(([name]) => name !== "mechanism" && !params(query).some(([p]) => p === name));
    return `Answer to: ${what}, ${mechanismOf(query)}, ` + rest.map(([k, v]) => `${k} = ${v}`).join(", ");
  }

  function showAnswer(endpoint, body, asked) {
    Object.assign(shownAnswer, {body});
    const query = parsedQuery(body);
    document.getElementById("asked").textContent = askedText(endpoint, query);
    document.getElementById("headline").replaceChildren(...headline(endpoint, body, query));
    const note = document.getElementById("note");
    const {kind, text} = explain(endpoint, body, query);
    note.dataset.kind = kind;
    note.textContent = text;
    const rows = Object.entries(body).flatMap(([key, value]) => [el("dt", {}, key),
      el("dd", {"data-key": key}, el("span", {class: "value"}, shown(endpoint, key, value)), " ",
        el("span", {class: "gloss"}, gloss(endpoint, key, value, body, query)))]);
    box.querySelector("dl").replaceChildren(...rows);
    document.getElementById("json").textContent = JSON.stringify(body, null, 1);
    const link = document.getElementById("api-link");
    link.href = asked;
    link.textContent = "/" + asked;
  }

  // each field's value as shown: numbers rounded on the side that keeps them true
  const WAYS = {eps: "up", delta: "up", eps_lower: "down", delta_lower: "down"};  // slack: an estimate
  function shown(endpoint, key, value) {
    if (value === null || value === undefined) return "unknown";
    if (key === "asked") {  // the question as the server parsed it, every number in full
      return Object.entries(value).filter(([, v]) => v !== null).map(([k, v]) => `${k}=${v}`).join(", ");
    }
    if (typeof value === "object") {
      const known = Object.entries(value).filter(([, v]) => v !== null);
      return known.map(([k, v]) => k + "=" + (Number.isInteger(v) ? String(v) : fmt(v))).join(", ") || "none";
    }
    if (typeof value !== "number") return String(value);
    if (key === "eps0") return fmt(value, endpoint === "eps0-max" ? "down" : "near");
    if (key === "rounds") return String(value);
    return fmt(value, WAYS[key] || "near");
  }

  // the headline: the certified number in words, rounded on its safe side
  function headline(endpoint, body, query) {
    const strong = (text) => el("strong", {}, text);
    const nowrap = (text) => el("span", {class: "nowrap"}, text);
    if (endpoint === "eps0-max") {
      return ["Largest certified ε0: ", strong(fmt(body.eps0, "down")), ` (for ε ≤ ${query.get("eps")} at `,
        nowrap(`δ = ${query.get("delta")}`), `, n = ${query.get("n")})`];
    }
    const [name, other, symbol, at] = endpoint === "delta" ? ["delta", "eps", "δ", "ε"] : ["eps", "delta", "ε", "δ"];
    const lower = body[name + "_lower"];
    const out = [`${symbol} ≤ `, strong(fmt(body[name], "up")), " at ", nowrap(`${at} = ${query.get(other)}`)];
    if (body.rounds) out.push(` for all ${body.rounds} rounds together`);
    if (typeof lower === "number" && lower > 0) out.push(` (the exact ${symbol} is at least ${fmt(lower, "down")})`);
    if (!body.certified) out.push(" — not certified");
    return out;
  }

  // what the answer means, for its kind of question: [kind, text]
  function explain(endpoint, body, query) {
    const mechanism = mechanismOf(query);
    const c = body.corner || {};
    const what = body.rounds ? "composed" : endpoint;
    const kind = `${what}/${body.via ? "via-" + body.via : body.source}`;
    const out = [];
    if (!body.certified) {
      out.push("Not certified: this value carries no guarantee; do not rely on it as a privacy bound.");
    } else if (endpoint === "eps0-max") {
      out.push(`Certified: with a local ε0 up to the value above, ${mechanism} meets ε ≤ ${query.get("eps")} ` +
        "(the exact ε of its shuffle analysis is not above the target); the true largest ε0 may be larger, never " +
        "smaller.");
    } else {
      const symbol = endpoint === "delta" ? "δ" : "ε";
      out.push(`Certified: an upper bound, never below the exact ${symbol} of ${mechanism}'s shuffle analysis` +
        (body.rounds ? ` over ${body.rounds} rounds composed` : "") + "; shown rounded up.");
    }
    const onGrid = (name, label, way) => (c[name] === null || c[name] === undefined ? "" :
      Number(query.get(name)) === c[name] ? `${label} ${query.get(name)} on the grid` :
        `${label} rounded ${way} to the grid (${fmt(c[name])})`);
    if (body.via) {
      out.push(`Via ${body.via}: the table has no answer for ${mechanism} here, so this is the ${body.via} ` +
        "bound, which holds for every ε0-LDP randomizer (the standard clone), hence for this one too: certified, " +
        `often looser than ${mechanism}'s own. There is no lower bound for this mechanism (the generic one bounds ` +
        "the clone, not it).");
    }
    if (body.rounds) {
      const rate = body.sample_rate ? `, each user taking part in a round with probability ${body.sample_rate}` : "";
      out.push(body.source === "table"
        ? `Composed over ${body.rounds} rounds from the table: its certified privacy curve at ` +
          `${onGrid("eps0", "ε0", "up")} and ${onGrid("n", "n", "down")}, all its grid deltas at once, composed ` +
          `by privacy-loss distributions (dp-accounting); δ = ${query.get("delta")} is for all the rounds ` +
          "together. There is no δ corner: the whole curve is composed, not read between two grid deltas."
        : `Computed now by the engine: ${body.rounds} rounds composed at your exact ` +
          `${(replacing(query.get("mechanism")) || {name: "ε0"}).name} and n${rate} ` +
          `(privacy-loss distributions, dp-accounting); δ = ${query.get("delta")} is for all the rounds together.`);
      out.push("A composed answer has no lower bound.");
    } else if (body.source === "table") {
      if (endpoint === "eps") {
        const chord = c.delta === c.delta_upper ? onGrid("delta", "δ", "down") : `δ between the grid deltas ` +
          `${fmt(c.delta)} and ${fmt(c.delta_upper)}, read on the chord between them (a straight line in ` +
          "(e^ε, δ), above the convex privacy curve)";
        const grid = Number(query.get("eps0")) === c.eps0 && Number(query.get("n")) === c.n &&
          Number(query.get("delta")) === c.delta && c.delta === c.delta_upper;
        out.push(grid ? "Read from the precomputed table: the question is one of its grid points (nothing rounded)."
          : `Read from the precomputed table on the safe side: ${onGrid("eps0", "ε0", "up")}, ` +
            `${onGrid("n", "n", "down")}, ${chord}. Each rounding can only raise ε, so ε stays an upper bound.`);
      } else if (endpoint === "delta") {
        out.push(`Read from the precomputed table on the safe side: ${onGrid("eps0", "ε0", "up")}, ` +
          `${onGrid("n", "n", "down")}, and δ at ε = ${query.get("eps")} read on the chord between the two grid ` +
          "deltas around it (above the convex privacy curve), rounded up.");
      } else {
        out.push("Read from the precomputed table on the safe side: the largest grid ε0 whose certified ε (n " +
          "rounded down, δ on the chord) meets the target, so ε0 is rounded down to the grid, and any ε0 up to it " +
          "meets the target. (An ε0 equal to the target ε is always safe: an ε0-LDP randomizer is ε0-DP after " +
          "shuffling.)");
      }
      if (endpoint === "eps" && body.eps === Number(query.get("eps0"))) {
        out.push("Here ε is ε0 itself: an ε0-LDP randomizer is ε0-DP after shuffling, so ε is never above ε0, and " +
          "the table certifies nothing smaller at this corner.");
      }
      if (body.edge) {
        out.push("Edge: read at the edge of the table's grid in the safe direction: certified, but how much " +
          (endpoint === "eps0-max" ? "larger the engine's ε0 would be" : "tighter the engine would be") + " is unknown.");
      }
    } else if (body.source === "certified estimate") {
      out.push(endpoint === "eps0-max"
        ? "A certified estimate: the largest ε0 estimated from the table, then certified by an exact evaluation " +
          "of the engine at that ε0 (its ε meets the target)."
        : "A certified estimate: the table's answer refined by the engine, an estimate at your exact parameters " +
          "(no rounding to the grid) certified by an exact evaluation of the engine.");
    } else if (body.source === "slice") {
      out.push("Read from an ε0 slice: the engine's certified values at your exact ε0 (no rounding of ε0), " +
        "computed once by the server over fine n and δ axes, read on the safe side (n rounded down, the chord " +
        "between deltas).");
    } else if (body.source === "live") {
      out.push(endpoint === "eps0-max"
        ? "Live: the engine's certified search for the largest ε0 at your exact n and δ (no table rounding)."
        : "Live: computed now by the engine at your exact parameters (no table rounding): outside the table's " +
          "grid, or a mechanism or parameter the table does not hold.");
    }
    if (typeof body.slack === "number" && body.slack > 0) {
      out.push(endpoint === "eps0-max"
        ? `Slack ${percent(body.slack)}: the engine might certify an ε0 up to this much larger.`
        : `Slack ${percent(body.slack)}: the answer may be up to this much above what the engine would certify ` +
          "now; safe, only looser.");
    }
    if (body.refined === false) {
      out.push("Not refined yet: the table's certified answer, given at once while the server computes a tighter " +
        "one (this page asks again until it comes).");
    }
    if (body.note) out.push("Server's note: " + body.note);
    return {kind, text: out.join(" ")};
  }

  // one short line in plain words per field: what it means for the guarantee
  function gloss(endpoint, key, value, body, query) {
    const symbol = endpoint === "delta" ? "δ" : "ε";
    switch (key) {
      case "asked":
        return "the question as the server read it: the numbers this answer is for";
      case "eps":
        return body.rounds ? `all ${body.rounds} rounds together lose at most this ε (certified; rounded up)`
          : "the privacy loss ε is at most this (certified; rounded up)";
      case "delta":
        return `the δ of the (ε, δ) guarantee at ε = ${query.get("eps")} is at most this (certified; rounded up)`;
      case "eps_lower":
      case "delta_lower":
        if (value === null) {
          return body.via ? `none for ${query.get("mechanism")}: the ${body.via} one bounds the clone, not it`
            : body.rounds ? "none: composed answers carry no lower bound" : "unknown: no lower bound here";
        }
        return value > 0 ? `the exact ${symbol} of this analysis is at least this: no certified value can be ` +
          "smaller (rounded down)" : "0: no useful lower bound here";
      case "eps0":
        return "the largest local ε0 certified to meet the target ε: any ε0 up to this is safe (rounded down)";
      case "certified":
        return value ? "a guarantee: " + (endpoint === "eps0-max" ? "never above the largest safe ε0" :
          `never below the exact ${symbol} of the analysis`) : "no guarantee: do not rely on this value";
      case "source":
        return "where it came from: " + (SOURCES[value] || "the server's " + value);
      case "corner": {
        const known = Object.values(value || {}).some((v) => v !== null);
        return known ? "the grid point the table was read at, on the safe side" : "none: not read at a grid point";
      }
      case "slack":
        if (value === null) {
          return (body.rounds ? "not estimated for composed answers" : body.edge ? "unknown at the grid's edge" :
            "unknown") + ": safe, but how much looser than the engine is not known";
        }
        if (value === 0) return "none: as tight as the engine";
        return endpoint === "eps0-max" ? `the engine might certify an ε0 up to ${percent(value)} larger`
          : `may be up to ${percent(value)} above what the engine would certify now: safe, only looser`;
      case "edge":
        return value ? "read at the edge of the table's grid, in the safe direction: certified, maybe loose"
          : "not at the grid's edge";
      case "refined":
        return value === false ? "not yet: the table's safe answer given at once; a tighter one is coming" :
          "refined by the engine";
      case "via":
        return "the generic bound: it holds for every ε0-LDP randomizer, so for this one; no lower bound for it";
      case "rounds":
        return `rounds composed: ε is for all of them together, δ = ${query.get("delta")} for all`;
      case "sample_rate":
        return "each user takes part in each round with this probability";
      case "note":
        return "the server's remark about this answer";
      default:
        return "";
    }
  }

  // the question form changed: the answer shown greyed (or current again), dependent curves cleared
  function onQuestionChange() {
    status();
    for (const c of Object.values(CURVES)) {
      if (c.drawn && c.drawnBasis !== basis(c)) clearCurve(c, "The question changed: press Draw for its curve.");
    }
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

  function clearCurve(c, message) {
    c.generation += 1;  // a drawing in progress stops
    c.drawn = false;
    c.series = [];
    c.title = "";
    const plotBox = document.getElementById(c.plot);
    plotBox.replaceChildren();
    setState(c, "cleared");
    document.getElementById(c.progress).textContent = message;
    setPermalink();
  }

  async function onDraw(event) {
    if (event) event.preventDefault();
    clearErrors(curve, ask);
    const eps0s = input(curve, "curve_eps0").value.split(",").map((s) => s.trim()).filter(Boolean);
    const series = seriesOf();  // one series per eps0, or per sigma (gaussian)
    const range = input(curve, "curve_n").value.split(",").map((s) => Number(s.trim()));
    if (eps0s.length < 1 || eps0s.length > MAX_SERIES) {
      return complain(curve, "curve_eps0", `give 1 to ${MAX_SERIES} values`);
    }
    if (range.length !== 2 || !(range[0] >= 1) || !(range[1] > range[0])) {
      return complain(curve, "curve_n", "give two numbers: from >= 1, then to > from");
    }
    const {query: base} = question("eps");
    for (const name of [...COMPOSITION, series]) base.delete(name);  // one round: the rounds curve is below
    const delta = input(curve, "curve_delta").value.trim();
    const title = `${mechanismOf(base)}: certified ε against n at δ = ${delta}, one round` + settings(base);
    const plan = eps0s.map((value) => ({label: `${series} = ${value}`, points: logSpaced(range[0], range[1],
      POINTS).map((n) => [n, {[series]: value, n: String(n), delta}])}));
    await collect(CURVES.n, base, plan, title, (name) => (name === "curve_eps0" ? series : name.replace("curve_", "")));
  }

  // the table or engine settings of a curve's question, in words ("" for the defaults)
  function settings(query) {
    return OPTIONS.filter((name) => query.get(name)).map((name) => `, ${name} ${query.get(name)}`).join("");
  }

  async function onRounds(event) {
    if (event) event.preventDefault();
    clearErrors(roundsForm, ask);
    const range = input(roundsForm, "curve_rounds").value.split(",").map((s) => Number(s.trim()));
    if (range.length !== 2 || !Number.isInteger(range[0]) || !Number.isInteger(range[1]) || !(range[0] >= 1) ||
        !(range[1] > range[0]) || range[1] > ROUNDS_MAX) {
      return complain(roundsForm, "curve_rounds", `give two integers: from >= 1, then to > from, at most ${ROUNDS_MAX}`);
    }
    const {query: base} = question("eps");
    const rate = base.get("sample_rate");
    const local = replacing() ? "" : `ε0 ${base.get("eps0")}, `;  // gaussian: its sigma is in mechanismOf
    const series = seriesOf();
    const label = `${series} = ${base.get(series)}, n = ${base.get("n")}` + (rate ? `, sample rate ${rate}` : "");
    const title = `${mechanismOf(base)}: certified ε of T rounds composed, ${local}n ` +
      `${base.get("n")}, δ = ${base.get("delta")} for all T rounds together` +
      (rate ? `, each user in a round with probability ${rate}` : "") + settings(base);
    await collect(CURVES.rounds, base, [{label, points: logSpaced(range[0], range[1], ROUND_POINTS).map(
      (rounds) => [rounds, {rounds: String(rounds)}])}], title);
  }

  // Ask /v1/eps for each point of each series of ``plan`` ([{label, points: [[x, {name: value}]]}],
  // the values set on ``base``), one after the other, plotting each series as it is complete; a
  // refused or bad point stops the curve with its message beside the field it names (the curve's
  // fields named as the API's parameters by ``names``).  Then the points answered "refined": false
  // are asked again until refined (at most REFINE_MS).
  async function collect(c, base, plan, title, names = (name) => name.replace("curve_", "")) {
    const generation = ++c.generation;
    c.drawn = true;
    c.drawnBasis = basis(c);
    c.title = title;
    setPermalink();
    c.series = plan.map((s) => ({label: s.label, points: []}));
    const plotBox = document.getElementById(c.plot);
    plotBox.replaceChildren();
    setState(c, "drawing");
    const progress = document.getElementById(c.progress);
    progress.textContent = "Asking the server…";
    const spans = {...errorSpans(ask, (n) => n), ...errorSpans(c.form, names)};
    const total = plan.reduce((sum, s) => sum + s.points.length, 0);
    let done = 0;
    for (const [i, s] of plan.entries()) {
      for (const [x, values] of s.points) {
        const query = new URLSearchParams(base);
        query.delete("eps");
        for (const [name, value] of Object.entries(values)) query.set(name, value);
        const url = "v1/eps?" + query;
        const result = await call(url);
        if (generation !== c.generation) return;
        if (result.status !== 200) {
          progress.textContent = "";
          setState(c, "error");
          showError(result, spans, c.form.querySelector("[data-error=curve]"));
          plot(c);
          return;
        }
        c.series[i].points.push({x, url, ...point(result.body)});
        progress.textContent = `${++done} of ${total} answers`;
      }
      plot(c);
    }
    const started = Date.now();
    for (let pending = unrefined(c); pending.length; pending = unrefined(c)) {
      if (Date.now() - started > REFINE_MS) {
        progress.textContent = `${total} answers; ${pending.length} not refined within ${REFINE_MS / 1000} s ` +
          "(hollow: the table's certified answers, safe but maybe loose)";
        setState(c, "done");
        return;
      }
      setState(c, "refining");
      progress.textContent = `${total} answers; refining ${pending.length} (hollow)…`;
      await sleep(POLL_MS);
      for (const p of pending) {
        const result = await call(p.url);
        if (generation !== c.generation) return;
        if (result.status === 200) Object.assign(p, point(result.body));
      }
      plot(c);
    }
    progress.textContent = `${total} of ${total} answers`;
    setState(c, "done");
  }

  // the plot's state (data-state: drawing, refining, done, error, cleared), its progress busy while drawing
  function setState(c, state) {
    document.getElementById(c.plot).dataset.state = state;
    document.getElementById(c.progress).toggleAttribute("data-busy", state === "drawing" || state === "refining");
  }

  const point = (body) => ({eps: body.eps, lower: body.eps_lower, refined: body.refined !== false});
  const unrefined = (c) => c.series.flatMap((s) => s.points).filter((p) => !p.refined);

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
    const plotBox = document.getElementById(c.plot);
    const points = c.series.flatMap((s) => s.points).filter((p) => p.eps > 0);
    if (!points.length) { plotBox.replaceChildren(); return; }
    const width = Math.max(280, Math.min(plotBox.clientWidth || 640, 960));
    const height = Math.round(width * (width < 560 ? 0.85 : 0.55));
    const [xlo, xhi] = domain(points.map((p) => p.x));
    const xTicks = ticks(xlo, xhi);
    // room on the right for half the last x tick's label (12 px text: about 7.2 px a character)
    const m = {left: 58, right: Math.max(14, Math.ceil(label(xTicks[xTicks.length - 1]).length * 3.6) + 3), top: 12,
      bottom: 46};
    const [ylo, yhi] = domain(points.flatMap((p) => (p.lower > 0 ? [p.eps, p.lower] : [p.eps])));
    const x = logScale(xlo, xhi, m.left, width - m.right);
    const y = logScale(ylo, yhi, height - m.bottom, m.top);
    const root = svg("svg", {viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": `${c.aria}: ${c.title}`});
    for (const t of xTicks) {
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
        svg("title", {}, `${s.label}, ${c.xTitle.split(" ")[0]}=${p.x}: ε ≤ ${fmt(p.eps, "up")}` +
          (p.lower > 0 ? `, exact ε ≥ ${fmt(p.lower, "down")}` : "") + (p.refined ? "" : " (refining)"))));
      }
      const swatch = el("span", {class: "swatch"});
      swatch.style.background = color;
      legend.append(el("li", {}, swatch, s.label));
    });
    if (banded) legend.append(el("li", {}, el("span", {class: "swatch band-swatch"}), "band: lower bound to certified ε"));
    if (points.some((p) => !p.refined)) {
      legend.append(el("li", {}, el("span", {class: "hollow"}),
        "hollow: not refined yet (the table's certified answer; the page asks again)"));
    }
    // "δ = 1e-8" kept on one line
    const title = c.title.split(/([εδ]0? = [^ ,]+)/).map((part, i) => (i % 2 ? el("span", {class: "nowrap"}, part) : part));
    plotBox.replaceChildren(el("p", {class: "plot-title"}, ...title), root, legend);
  }

  // ------------------------------------------------------------ start: defaults or the permalink
  function start() {
    const coverage = DATA.coverage || {};
    const select = input(ask, "mechanism");
    for (const name of Object.keys(DATA.mechanisms)) select.add(new Option(name, name));
    const [row, ...given] = ((coverage.mechanisms || [])[0] || "").split(" ");
    const [nlo, nhi] = coverage.n || [100, 1e9];
    const [dlo, dhi] = coverage.delta || [1e-12, 1e-3];
    const [elo, ehi] = coverage.eps0 || [0, Infinity];
    const delta = dlo <= 1e-8 && 1e-8 <= dhi ? "1e-8" : String(dlo);
    // the default question where the registry has k-RR, else the table's first row
    const first = DATA.mechanisms.krr ? {...DEFAULT, delta} : {mechanism: row || select.value, eps0: "1",
      n: String(Math.round(Math.sqrt(nlo * nhi))), delta, ...Object.fromEntries(given.map((g) => g.split("=")))};
    const defaults = {endpoint: "eps", eps: "0.5", ...first, curve_eps0: "0.5,1,2", curve_n: `${nlo},${nhi}`,
      curve_delta: delta, curve_rounds: "1,1000"};
    const state = Object.fromEntries(new URLSearchParams(location.search));
    // a permalink gives the mechanism's parameters itself
    const values = location.search ? {...defaults, ...state} : defaults;
    for (const form of [ask, curve, roundsForm]) {
      for (const [name, value] of Object.entries(values)) {
        const field = input(form, name);
        if (field && !field.dataset.param) field.value = value;
      }
    }
    showParams(location.search ? state : values);
    showFields();
    if (OPTIONS.some((name) => values[name])) ask.querySelector("details").open = true;
    select.addEventListener("change", () => {
      showParams({});
      showFields();
    });
    input(ask, "endpoint").addEventListener("change", showFields);
    for (const type of ["input", "change"]) {
      ask.addEventListener(type, onQuestionChange);
      for (const c of Object.values(CURVES)) {
        c.form.addEventListener(type, () => {
          if (c.drawn) clearCurve(c, "The curve's settings changed: press Draw.");
        });
      }
    }
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
    // the default question is asked at once where the table holds it (a table answer: microseconds)
    const inside = (v, lo, hi) => lo <= Number(v) && Number(v) <= hi;
    const held = !location.search && (coverage.mechanisms || []).includes(mechanismOf(new URLSearchParams(first))) &&
      inside(first.eps0, elo, ehi) && inside(first.n, nlo, nhi) && inside(first.delta, dlo, dhi);
    (async () => {  // one request at a time, as a person would ask
      if (state.mechanism || held) await onAsk();
      if (state.curve_eps0) await onDraw();
      if (state.curve_rounds) await onRounds();
    })();
  }

  start();
})();
