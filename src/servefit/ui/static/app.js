// servefit ui: hand-written, no third-party code. The page's state is its query string (the
// flags of `servefit plan`, without the dashes); every edit re-plans through /api/plan.
// Every string from the server is put on the page as text (textContent), never as markup;
// the charts are SVG documents built and escaped by the server, parsed as SVG.
"use strict";

const FIELDS = [
  "model", "gpu", "gpu-memory-gib", "gpu-bandwidth-gbps", "tensor-parallel-size",
  "pipeline-parallel-size", "data-parallel-size", "max-model-len", "max-num-seqs", "max-num-batched-tokens",
  "gpu-memory-utilization", "kv-cache-dtype", "dtype", "quantization", "speculative-config",
  "acceptance-rate", "enable-prefix-caching",
  "enforce-eager", "enable-expert-parallel", "enable-lora", "max-loras", "max-lora-rank",
  "input-len", "output-len", "concurrency", "request-rate", "prefix-len", "turns",
  "image-size", "images-per-request", "context", "target-concurrency", "slo-ttft-ms", "slo-tpot-ms", "usd-per-gpu-hour", "offline",
];
// a control's value that is the CLI's default is left out of the URL
const DEFAULTS = { "kv-cache-dtype": "auto", dtype: "auto", "enable-prefix-caching": "true" };
const SEED = { model: "Qwen/Qwen3.6-27B-FP8", gpu: "A40", "max-model-len": "32768",
  "max-num-seqs": "128" };
const DEBOUNCE_MS = 40;
const GIB = 2 ** 30;

const $ = (id) => document.getElementById(id);
const page = { view: "plan", run: "", seq: 0, timer: 0, inputAt: 0, planned: null,
  models: new Set() };

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fmtInt(v) { return Math.round(v).toLocaleString("en-US"); }
function fmtNum(v, digits) {
  return Number(v).toLocaleString("en-US", { minimumFractionDigits: digits,
    maximumFractionDigits: digits });
}
function fmtS(v) { return v >= 10 ? `${fmtNum(v, 1)} s` : `${fmtNum(v * 1e3, 1)} ms`; }
function fmtBytes(v) { return `${fmtNum(v / GIB, 2)} GiB`; }

function setValue(id, text, raw) {
  const node = $(id);
  node.textContent = text;
  node.dataset.value = raw === undefined ? "" : String(raw);
}

// ---- state <-> form <-> URL ------------------------------------------------------------

function readForm() {
  const params = new URLSearchParams();
  for (const key of FIELDS) {
    const input = $(key);
    let value = input.type === "checkbox" ? String(input.checked) : input.value.trim();
    if (input.type === "checkbox" && !input.checked && !(key in DEFAULTS)) value = "";
    if (value === "" || DEFAULTS[key] === value) continue;
    params.set(key, value);
  }
  return params;
}

function writeForm(params) {
  for (const key of FIELDS) {
    const input = $(key);
    const value = params.get(key);
    if (input.type === "checkbox") {
      input.checked = value === null ? (DEFAULTS[key] === "true") : value === "true";
    } else if (input.tagName === "SELECT") {
      const fallback = key === "gpu" ? "" : (DEFAULTS[key] || "");
      if (value !== null && ![...input.options].some((o) => o.value === value)) {
        input.append(new Option(value, value));
      }
      input.value = value === null ? fallback : value;
    } else {
      input.value = value === null ? "" : value;
    }
  }
}

function pageParams() {
  const params = readForm();
  if (page.view !== "plan") params.set("view", page.view);
  if (page.run) params.set("run", page.run);
  for (const key of ["compare-models", "compare-gpus"]) {
    const value = $(key).value.trim();
    if (value) params.set(key, value);
  }
  if (page.view === "fit") {  // the fit view's own fields, their defaults left out
    for (const key of FIT_FIELDS) {
      const value = $(key).value.trim();
      if (value && !(key === "fit-top" && value === "20") && !(key === "fit-task" && value === "chat")) {
        params.set(key, value);
      }
    }
  }
  return params;
}

function syncUrl() {
  const query = pageParams().toString();
  const url = `${location.pathname}${query ? `?${query}` : ""}`;
  history.replaceState(null, "", url);
  $("permalink").href = url;
  const plan = readForm().toString();
  $("export-json").href = `/api/plan.json?${plan}`;
  $("export-html").href = `/api/report.html?${plan}&download=1`;
}

// ---- talking to the server -------------------------------------------------------------

async function api(path, params) {
  const response = await fetch(`${path}?${params.toString()}`);
  const body = await response.json();
  if (!response.ok) {
    const error = new Error(body.error || response.statusText);
    error.field = body.field || "";
    throw error;
  }
  return body;
}

function showError(error) {
  for (const node of document.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
  if (error.field && $(error.field)) $(error.field).setAttribute("aria-invalid", "true");
  $("status").textContent = error.message;
  $("status").className = "error";
}

function schedulePlan(event) {
  // a model id being typed is planned when it is a catalog id, else when the field is left
  // (or Enter pressed): a half-typed Hub id would be a Hub request per keystroke
  const target = event && event.target;
  if (target && target.id === "model" && event.type === "input" && !page.models.has(target.value.trim())) {
    return;
  }
  if (!page.inputAt) page.inputAt = event ? event.timeStamp : performance.now();
  clearTimeout(page.timer);
  page.timer = setTimeout(replan, DEBOUNCE_MS);
}

async function replan() {
  const params = readForm();
  const query = params.toString();
  syncUrl();
  if (query === page.planned) { // a blur's change, a run of this deployment: nothing to plan
    page.inputAt = 0;
    if (page.view === "runs" && page.run) openRun(page.run);
    return;
  }
  const seq = ++page.seq;
  const inputAt = page.inputAt || performance.now();
  page.inputAt = 0;
  if (!params.get("model") || (!params.get("gpu") && !params.get("gpu-memory-gib"))) return;
  const body = document.body.dataset;
  $("view-plan").classList.add("stale");
  try {
    // first the capacity (milliseconds): verdict, memory, KV cache, command
    const capacity = await api("/api/capacity", params);
    if (seq !== page.seq) return; // a later edit is on its way
    renderCapacity(capacity.plan);
    body.capacityMs = (performance.now() - inputAt).toFixed(1);
    body.capacityQuery = query;
    // then the speed, cost, charts and checklist (the serving simulation)
    const started = performance.now();
    const view = await api("/api/plan", params);
    if (seq !== page.seq) return;
    renderPlan(view);
    page.planned = query;
    for (const node of document.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
    const done = performance.now();
    body.updateMs = (done - inputAt).toFixed(1);
    body.fetchRenderMs = (done - started).toFixed(1);
    body.planQuery = query;
    $("status").className = "";
    $("status").textContent = `capacity in ${body.capacityMs} ms, speed and cost in ${body.updateMs} ms`;
  } catch (error) {
    if (seq === page.seq) showError(error);
  } finally {
    if (seq === page.seq) $("view-plan").classList.remove("stale");
  }
  if (page.view === "runs" && page.run) openRun(page.run);
}

// ---- rendering -------------------------------------------------------------------------

function svgInto(box, markup) {
  box.replaceChildren();
  if (!markup) return;
  const doc = new DOMParser().parseFromString(markup, "image/svg+xml");
  if (doc.documentElement.nodeName === "svg") box.append(document.importNode(doc.documentElement, true));
}

function renderCapacity(plan) {
  const m = plan.memory;
  const verdict = plan.verdict;
  $("headline").textContent = verdict ? verdict.headline : (plan.fits ? "fits" : "does not fit");
  $("verdict").className = `verdict ${plan.fits ? "fits" : "nofit"}`;
  $("verdict").dataset.fits = String(plan.fits);
  $("reasons").replaceChildren(...(verdict ? verdict.reasons : plan.problems).map((r) => el("li", r)));
  const margin = verdict && verdict.margin;
  const advice = verdict && verdict.edge_advice && verdict.edge_advice.length
    ? ` Out of the edge: ${verdict.edge_advice.join(" or ")}.` : "";
  $("margin").textContent = margin ? `Margin: ${margin.text}.${advice}` : "";
  setValue("kv-tokens", fmtInt(m.kv_cache_tokens), m.kv_cache_tokens);
  setValue("max-concurrency", `${fmtNum(m.max_concurrency, 2)}x`, m.max_concurrency);
  setValue("weights", fmtBytes(m.weights_bytes_per_gpu), m.weights_bytes_per_gpu);
  setValue("kv-memory", fmtBytes(m.kv_cache_memory_bytes), m.kv_cache_memory_bytes);
  $("vllm-command").textContent = plan.vllm_command;
  const rec = plan.recommendation;
  $("recommendation").hidden = !rec;
  if (rec) {
    $("changes").replaceChildren(...rec.changes.map((c) =>
      el("li", `${c.flag}: ${c.before} -> ${c.after}${c.gives_up ? ` (gives up ${c.gives_up})` : ""}`)));
    $("recommended-command").textContent = rec.vllm_command;
  }
}

function renderPlan(view) {
  const plan = view.plan;
  const perf = plan.performance;
  renderCapacity(plan);
  if (perf) {
    setValue("ttft", fmtS(perf.ttft_s), perf.ttft_s);
    setValue("decode-rate", `${fmtNum(perf.decode_tok_per_s, 1)} tok/s`, perf.decode_tok_per_s);
    setValue("throughput", `${fmtNum(perf.output_throughput_tok_per_s, 0)} tok/s`,
      perf.output_throughput_tok_per_s);
    setValue("bound", perf.bound, perf.bound);
    $("bound-detail").textContent = `prefill ${perf.prefill_bound}; decode ${perf.decode_bound}`;
    const bands = perf.error_bands || {};
    $("bands").textContent = "Measured error: " + [["ttft", "TTFT"], ["tpot", "TPOT"], ["throughput", "throughput"]]
      .map(([k, label]) => `${label} ${bands[k] ? bands[k].text : "unvalidated"}`).join("; ");
  } else {
    for (const id of ["ttft", "decode-rate", "throughput"]) setValue(id, "-");
    setValue("bound", "-");
    $("bound-detail").textContent = plan.performance_note || "";
    $("bands").textContent = "";
  }
  const economics = (view.rows.find(([section]) => section === "Economics") || [null, []])[1];
  const perTask = economics.find(([k]) => k === "per successful task");
  setValue("cost-task", perTask ? perTask[1] : "-");
  renderMachine(view.machine);
  svgInto($("chart-memory-box"), view.charts.memory);
  svgInto($("chart-curve-box"), view.charts.curve);
  renderChecklist(view.rows);
  $("findings").replaceChildren(...view.findings.map((f) => {
    const box = el("div", null, "finding");
    box.append(el("b", f.verdict), ` (${f.phase}): ${f.evidence}. `, el("i", "Remedy"), `: ${f.remedy}.`);
    return box;
  }));
  $("cli").textContent = view.cli;
}

function renderMachine(m) {
  const cards = [
    ["memory", fmtBytes(m.memory_bytes)],
    ["bandwidth", `${fmtInt(m.memory_bandwidth_bytes_per_s / 1e9)} GB/s`],
    ["16-bit compute", m.peak_16bit_flops_per_s ? `${fmtInt(m.peak_16bit_flops_per_s / 1e12)} TFLOP/s` : "-"],
    ["interconnect", m.interconnect_bandwidth_bytes_per_s ? `${fmtInt(m.interconnect_bandwidth_bytes_per_s / 1e9)} GB/s` : "-"],
  ];
  $("machine").replaceChildren(...cards.map(([k, v]) => {
    const card = el("div", null, "card");
    card.append(el("div", k, "k"), el("div", v, "v"));
    return card;
  }));
}

function renderChecklist(rows) {
  const parts = [];
  for (const [section, items] of rows) {
    parts.push(el("h2", section));
    const table = el("table");
    for (const [k, v] of items) {
      const tr = el("tr");
      tr.append(el("td", k, "k"), el("td", v));
      table.append(tr);
    }
    parts.push(table);
  }
  $("checklist").replaceChildren(...parts);
}

// ---- fit -------------------------------------------------------------------------------

const FIT_FIELDS = ["fit-gpu", "fit-task", "fit-context", "fit-search", "fit-gguf", "fit-top"];

async function runFit() {
  syncUrl();
  const params = new URLSearchParams();
  for (const key of FIT_FIELDS) {
    const value = $(key).value.trim();
    if (value) params.set(key, value);
  }
  $("status").className = "";
  $("status").textContent = "fitting the catalog...";
  try {
    const doc = await api("/api/fit", params);
    const body = $("fit-table").tBodies[0];
    body.replaceChildren(...doc.rows.map((r) => {
      const tr = el("tr");
      const cells = [r.model, r.weights, `${fmtNum(r.total_params / 1e9, 1)} B`,
        r.fits ? "yes" : `no: ${r.problem}`, fmtInt(r.context_tokens),
        fmtInt(r.largest_context_tokens), fmtNum(r.max_concurrency, 1),
        r.decode_tok_per_s ? fmtInt(r.decode_tok_per_s) : "-",
        `servefit plan ${r.model} --gpu ${doc.gpu} ${r.plan_args.join(" ")}`];
      tr.append(...cells.map((c) => el("td", c)));
      return tr;
    }));
    $("fit-skipped").replaceChildren(...doc.skipped.map((line) => el("li", line)));
    $("status").textContent = `${doc.rows.filter((r) => r.fits).length} of ${doc.rows.length} shown fit on ${doc.gpu}`;
  } catch (error) {
    showError(error);
  }
}

// ---- compare and runs ------------------------------------------------------------------

async function runCompare() {
  syncUrl();
  const params = readForm();
  params.delete("model");
  params.delete("gpu");
  params.set("compare-models", $("compare-models").value.trim());
  params.set("compare-gpus", $("compare-gpus").value.trim());
  try {
    const doc = await api("/api/compare", params);
    const body = $("compare-table").tBodies[0];
    body.replaceChildren(...doc.rows.map((r) => {
      const p = r.performance;
      const tr = el("tr");
      const cells = [r.model, r.num_gpus > 1 ? `${r.num_gpus} x ${r.gpu}` : r.gpu,
        r.fits ? "fits" : `no: ${r.problem}`, fmtBytes(r.memory_bytes),
        `${fmtInt(r.memory_bandwidth_bytes_per_s / 1e9)} GB/s`,
        r.peak_16bit_flops_per_s ? `${fmtInt(r.peak_16bit_flops_per_s / 1e12)} TFLOP/s` : "-",
        r.interconnect_bandwidth_bytes_per_s ? `${fmtInt(r.interconnect_bandwidth_bytes_per_s / 1e9)} GB/s` : "-",
        p ? fmtS(p.ttft_s) : "-", p ? fmtS(p.tpot_s) : "-",
        p ? `${fmtNum(p.output_throughput_tok_per_s, 0)} tok/s` : "-", p ? p.bound : "-"];
      tr.append(...cells.map((c) => el("td", c)));
      return tr;
    }));
    $("compare-explain").replaceChildren(...doc.explanation.map((line) => el("li", line)));
    $("status").className = "";
    $("status").textContent = "compared";
  } catch (error) {
    showError(error);
  }
}

function renderRuns(runs) {
  $("runs").replaceChildren(...runs.map((run) => {
    const li = el("li");
    const button = el("button", `Open ${run.kind} run ${run.id}: ${run.name}`);
    button.type = "button";
    button.addEventListener("click", () => {
      if (run.model && run.gpu) {
        openFields({ model: run.model, gpu: run.gpu, "max-model-len": run["max-model-len"] || "" },
          run.id);
      } else {
        page.run = run.id;
        openRun(run.id);
      }
    });
    li.append(button);
    if (run.model) li.append(el("span", ` ${run.model} on ${run.gpu}`, "muted"));
    return li;
  }));
  if (!runs.length) $("runs").append(el("li", "No run registered.", "muted"));
}

function tokS(v) { return v === null || v === undefined ? "-" : `${fmtNum(v, 0)} tok/s`; }
function secs(v) { return v === null || v === undefined ? "-" : fmtS(v); }

function openFields(fields, runId) {
  writeForm(new URLSearchParams(fields));
  page.run = runId;
  replan();
}

async function loadHistory() {
  let runs = [];
  let enabled = true;
  try {
    ({ runs, enabled } = await api("/api/history", new URLSearchParams()));
  } catch (error) {
    showError(error);
  }
  $("history-table").tBodies[0].replaceChildren(...runs.map((run) => {
    const tr = el("tr");
    const f = run.fields;
    tr.append(el("td", run.created_utc.slice(0, 19).replace("T", " ")), el("td", run.kind),
      el("td", f.model), el("td", f.gpu || "-"), el("td", tokS(run.predicted.output_tok_per_s)),
      el("td", tokS(run.measured.output_tok_per_s)));
    const actions = el("td");
    if (run.can_open) {
      const open = el("button", `Open ${run.id}`);
      open.type = "button";
      open.addEventListener("click", () => openFields(f, run.id));
      actions.append(open, " ");
    }
    const over = el("button", `Over time ${run.id}`);
    over.type = "button";
    over.addEventListener("click", () => showSeries(run.deployment_key));
    actions.append(over);
    tr.append(actions);
    return tr;
  }));
  if (!runs.length) {
    const tr = el("tr");
    tr.append(el("td", enabled ? "No run recorded yet (plan --save, bench, up and report record runs)."
      : "The page was started with --no-history.", "muted"));
    $("history-table").tBodies[0].replaceChildren(tr);
  }
}

async function showSeries(key) {
  try {
    const view = await api("/api/history/series", new URLSearchParams({ key }));
    $("series").hidden = false;
    $("series-title").textContent = `Over time: ${key}`;
    svgInto($("chart-history-box"), view.chart);
    $("series-table").tBodies[0].replaceChildren(...view.runs.map((run) => {
      const tr = el("tr");
      tr.append(...[run.created_utc.slice(0, 19).replace("T", " "), run.kind,
        tokS(run.predicted.output_tok_per_s), tokS(run.measured.output_tok_per_s),
        secs(run.predicted.ttft_mean_s), secs(run.measured.ttft_mean_s)].map((c) => el("td", c)));
      return tr;
    }));
  } catch (error) {
    showError(error);
  }
}

function openRun(runId) {
  const params = readForm();
  params.set("run", runId);
  $("run-report").src = `/api/report.html?${params.toString()}`;
  syncUrl();
}

function showView(view) {
  page.view = view;
  for (const tab of document.querySelectorAll(".tab")) {
    tab.setAttribute("aria-pressed", String(tab.dataset.view === view));
  }
  for (const name of ["plan", "compare", "fit", "runs"]) $(`view-${name}`).hidden = name !== view;
  if (view === "fit" && !page.fitGpuSet && $("gpu").value) {
    $("fit-gpu").value = $("gpu").value;  // first opened: the plan's GPU
    page.fitGpuSet = true;
  }
  if (view === "compare") {
    if (!$("compare-models").value) $("compare-models").value = $("model").value;
    if (!$("compare-gpus").value) $("compare-gpus").value = $("gpu").value || "A40";
  }
  if (view === "runs") {
    loadHistory();
    if (page.run) openRun(page.run);
  }
  syncUrl();
}

// ---- uploads ---------------------------------------------------------------------------

async function upload(file) {
  if (!file) return;
  try {
    const response = await fetch(`/api/upload?name=${encodeURIComponent(file.name)}`,
      { method: "POST", body: await file.arrayBuffer() });
    const body = await response.json();
    if (!response.ok) throw Object.assign(new Error(body.error), { field: "config-file" });
    $("model").value = body.model;
    $("upload-name").textContent = body.name;
    replan();
  } catch (error) {
    showError(error);
  }
}

// ---- start -----------------------------------------------------------------------------

async function start() {
  const catalog = await (await fetch("/api/catalog")).json();
  page.models = new Set(catalog.models);
  $("model-list").replaceChildren(...catalog.models.map((id) => new Option(id, id)));
  const gpuOption = (g) =>
    new Option(`${g.name} (${fmtInt(g.memory_bytes / GIB)} GiB)${g.provisional ? " ?" : ""}`, g.name);
  $("gpu").append(...catalog.gpus.map(gpuOption));
  $("fit-gpu").append(...catalog.gpus.map(gpuOption));
  renderRuns(catalog.runs);
  const params = new URLSearchParams(location.search);
  writeForm(params.get("model") ? params : new URLSearchParams(SEED));
  for (const key of ["compare-models", "compare-gpus"]) $(key).value = params.get(key) || "";
  for (const key of FIT_FIELDS) if (params.get(key)) $(key).value = params.get(key);
  page.fitGpuSet = Boolean(params.get("fit-gpu"));
  page.run = params.get("run") || "";
  showView(["compare", "fit", "runs"].includes(params.get("view")) ? params.get("view") : "plan");
  $("form").addEventListener("input", schedulePlan);
  $("form").addEventListener("change", schedulePlan);
  $("form").addEventListener("submit", (e) => e.preventDefault());
  $("model").addEventListener("keydown", (e) => { if (e.key === "Enter") schedulePlan(); });
  $("config-file").addEventListener("change", (e) => { e.stopPropagation(); upload(e.target.files[0]); });
  $("example").addEventListener("click", (e) => {
    writeForm(new URLSearchParams(SEED));
    schedulePlan(e);
  });
  $("copy-command").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText($("vllm-command").textContent);
      $("status").textContent = "command copied";
    } catch (error) {
      $("status").textContent = "select the command and copy it (the clipboard is not available here)";
    }
  });
  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => showView(tab.dataset.view));
  }
  $("compare-run").addEventListener("click", runCompare);
  $("fit-run").addEventListener("click", runFit);
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    upload(e.dataTransfer.files[0]);
  });
  await replan();
  if (page.view === "compare" && $("compare-models").value) runCompare();
  if (page.view === "fit") runFit();
}

document.addEventListener("DOMContentLoaded", () => {
  start().catch((error) => showError(error));
});
