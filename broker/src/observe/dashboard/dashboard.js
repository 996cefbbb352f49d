// The fleetlink dashboard. Plain JS, no framework, no build step: this file is
// put into the page at build time (cmake/EmbedDashboard.cmake).
//
// Data flow:
//  * one EventSource on /v1/events (all types but command_output) keeps the page
//    current; on every (re)connect the page reads GET /v1/rigs once;
//  * an event about a rig marks it dirty; dirty rigs are read again at most once a
//    second (GET /v1/rigs/{rig} for a few, GET /v1/rigs for many);
//  * "unresponsive" is the one state the broker derives from time (an old
//    unacknowledged command, missed pongs) with no event: every 3 s the page asks
//    GET /v1/rigs?state=unresponsive, a short answer;
//  * the rigs table is virtualised: only the rows in view (plus a few) are in the
//    DOM, between two spacer rows, so 20,000 rigs cost what 40 do to draw.
"use strict";

const TOKEN_KEY = "fleetlink-token";
const SYNC_MIN_MS = 1000;        // dirty rigs are read again at most this often
const FEW_RIGS = 40;             // at most this many dirty rigs: one GET each; more: the whole list
const UNRESPONSIVE_MS = 3000;    // the unresponsive check
const OVERSCAN = 10;             // rows drawn above and below the visible ones
const JOB_RIGS_SHOWN = 1000;     // a job's rig list shows at most this many rows
const MAIN_TYPES = "rig_connected,rig_disconnected,rig_event,command_acked,command_running,command_done,drain_started";

const $ = (id) => document.getElementById(id);

// What the browser test reads: counts and the main thread's time per activity.
const stats = {
  events: 0, eventMs: 0, renders: 0, renderMs: 0, syncs: 0, syncMs: 0, fullSyncs: [],
  firstRenderAt: null, rigsLoaded: 0,
};
window.fleetlinkDashboard = { stats };

// ---- the control API -------------------------------------------------------

let token = localStorage.getItem(TOKEN_KEY) || "";

class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.error)) || ("HTTP " + status));
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = {};
  if (token) headers["Authorization"] = "Bearer " + token;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch (e) { parsed = { detail: text }; }
  if (res.status === 401) needToken(parsed);
  if (!res.ok) throw new ApiError(res.status, parsed);
  return { status: res.status, body: parsed };
}

function needToken(body) {
  $("auth").hidden = false;
  $("auth-why").textContent = body && body.reason === "bad_token"
    ? "the broker refused this token" : "the control API needs a token";
}

function eventsUrl(query) {
  let url = "/v1/events?" + query;
  if (token) url += "&access_token=" + encodeURIComponent(token);  // EventSource sends no headers
  return url;
}

// ---- small helpers ---------------------------------------------------------

function esc(s) {
  return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function age(ms) {
  if (ms === null || ms === undefined) return "never";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s ago";
  if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m ago";
  return Math.floor(s / 86400) + "d ago";
}

// UUIDv7s of one era share their leading (time) digits: the tail tells boots apart.
function shortId(id) { return id ? "…" + id.replace(/-/g, "").slice(-10) : ""; }

let toastTimer = null;
function toast(text, ok) {
  const t = $("toast");
  t.textContent = new Date().toLocaleTimeString() + " — " + text;
  t.className = ok ? "ok" : "err";
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.textContent = ""; t.className = ""; }, 60000);
}

function kvList(text) {
  const out = {};
  for (const part of text.split(/[,\n]/)) {
    const p = part.trim();
    if (!p) continue;
    const eq = p.indexOf("=");
    if (eq < 0) out[p] = null; else out[p.slice(0, eq).trim()] = p.slice(eq + 1).trim();
  }
  return out;
}

function globRegex(glob) {
  const rx = glob.replace(/[.+^${}()|\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".");
  return new RegExp("^" + rx + "$", "i");
}

// ---- the rigs --------------------------------------------------------------

const rigs = new Map();   // rig_id -> rig JSON (+ _t: performance.now() when read)
let order = [];           // every rig id, sorted
let orderDirty = true;
let view = [];            // the ids the filters let through, in order
let viewDirty = true;
let rowHeight = 27;       // measured after the first rows are drawn
let renderQueued = false;

function putRig(r, t) {
  r._t = t;
  if (!rigs.has(r.rig_id)) orderDirty = true;
  rigs.set(r.rig_id, r);
  viewDirty = true;
}

function rigFilter() {
  const idText = $("f-rig").value.trim();
  const state = $("f-state").value;
  const labels = kvList($("f-label").value);
  const labelKeys = Object.keys(labels);
  let idTest = null;
  if (idText) {
    if (/[*?]/.test(idText)) {
      const rx = globRegex(idText);
      idTest = (id) => rx.test(id);
    } else {
      const needle = idText.toLowerCase();
      idTest = (id) => id.toLowerCase().includes(needle);
    }
  }
  return (r) => {
    if (state && r.state !== state) return false;
    if (idTest && !idTest(r.rig_id)) return false;
    for (const k of labelKeys) {
      const have = r.labels ? r.labels[k] : undefined;
      if (have === undefined || (labels[k] !== null && have !== labels[k])) return false;
    }
    return true;
  };
}

function recompute() {
  if (orderDirty) {
    order = Array.from(rigs.keys()).sort();
    orderDirty = false;
  }
  const pass = rigFilter();
  const next = [];
  const counts = { connected: 0, unresponsive: 0, draining: 0, offline: 0 };
  for (const id of order) {
    const r = rigs.get(id);
    counts[r.state] = (counts[r.state] || 0) + 1;
    if (pass(r)) next.push(id);
  }
  view = next;
  viewDirty = false;
  $("summary").textContent = rigs.size + " rigs: " + counts.connected + " connected, " +
    counts.unresponsive + " unresponsive, " + counts.draining + " draining, " + counts.offline + " offline";
  $("summary").dataset.total = rigs.size;
  for (const k of Object.keys(counts)) $("summary").dataset[k] = counts[k];
  $("rig-count").textContent = "showing " + view.length + " of " + rigs.size;
}

function rigRow(r, now) {
  const since = now - r._t;
  const labels = Object.entries(r.labels || {})
    .map(([k, v]) => '<span class="label">' + esc(k) + "=" + esc(v) + "</span>").join("");
  const lastAck = r.last_ack_age_ms === null || r.last_ack_age_ms === undefined ? "never"
    : age(r.last_ack_age_ms + since);
  const offline = r.state === "offline";
  const seen = offline
    ? (r.last_seen_age_ms === null || r.last_seen_age_ms === undefined ? "" : "last seen " + age(r.last_seen_age_ms + since))
    : "now";
  const why = r.unresponsive_because ? esc(r.unresponsive_because) : esc(r.state);
  const act = offline ? "" :
    '<button type="button" data-act="reconnect" data-rig="' + esc(r.rig_id) + '">Force reconnect</button> ';
  return '<tr class="rig st-' + esc(r.state) + '" data-rig="' + esc(r.rig_id) + '">' +
    '<td class="mono" title="' + esc(r.rig_id) + (r.broker ? " on broker " + esc(r.broker) : "") + '">' + esc(r.rig_id) + "</td>" +
    '<td class="state"><span class="badge" title="' + why + '">' + esc(r.state) + "</span></td>" +
    "<td>" + labels + "</td>" +
    "<td>" + esc(r.agent_version) + "</td>" +
    '<td class="mono boot" title="' + esc(r.boot_id) + '">' + esc(shortId(r.boot_id)) + "</td>" +
    '<td class="num">' + esc(r.last_ack_seq) + "</td>" +
    '<td title="' + esc(r.last_ack_at || "") + '">' + lastAck + "</td>" +
    '<td class="num unacked">' + esc(r.unacked) + "</td>" +
    '<td class="num">' + esc(r.outbox_depth) + "/" + esc(r.outbox_capacity) + "</td>" +
    '<td class="seen" title="' + esc(r.last_seen_at || "") + '">' + seen + "</td>" +
    "<td>" + act + '<button type="button" data-act="send" data-rig="' + esc(r.rig_id) + '">Send…</button></td></tr>';
}

function render() {
  renderQueued = false;
  if ($("view-rigs").hidden) return;
  const t0 = performance.now();
  if (viewDirty || orderDirty) recompute();
  const vp = $("rig-viewport");
  const first = Math.max(0, Math.floor(vp.scrollTop / rowHeight) - OVERSCAN);
  const shown = Math.ceil(vp.clientHeight / rowHeight) + 2 * OVERSCAN;
  const last = Math.min(view.length, first + shown);
  const now = performance.now();
  const pad = (px) => px > 0 ? '<tr class="pad"><td colspan="11" style="height:' + px + 'px"></td></tr>' : "";
  let html = pad(first * rowHeight);
  for (let i = first; i < last; i++) html += rigRow(rigs.get(view[i]), now);
  html += pad((view.length - last) * rowHeight);
  $("rigs").innerHTML = html;
  const row = $("rigs").querySelector("tr.rig");
  if (row && Math.abs(row.offsetHeight - rowHeight) > 0.5 && row.offsetHeight > 0) {
    rowHeight = row.offsetHeight;  // the real height, so the spacers match
    queueRender();
  }
  stats.renders++;
  const spent = performance.now() - t0;
  stats.renderMs += spent;
  if (stats.firstRenderAt === null && rigs.size > 0) {
    stats.firstRenderAt = performance.now();
    stats.rigsLoaded = rigs.size;
  }
}

function queueRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(render);
}

// ---- keeping the rigs current ---------------------------------------------

const dirty = new Set();
let needFull = true;
let syncTimer = null;
let lastSync = -SYNC_MIN_MS;  // the first read goes at once
let syncing = false;

function scheduleSync() {
  if (syncTimer !== null || syncing) return;
  const wait = Math.max(0, lastSync + SYNC_MIN_MS - performance.now());
  syncTimer = setTimeout(sync, wait);
}

async function sync() {
  syncTimer = null;
  syncing = true;
  lastSync = performance.now();
  try {
    if (needFull || dirty.size > FEW_RIGS) {
      needFull = false;
      dirty.clear();
      await fullSync();
    } else if (dirty.size > 0) {
      const ids = Array.from(dirty);
      dirty.clear();
      await Promise.all(ids.map(async (id) => {
        try {
          const t = performance.now();
          const { body } = await api("GET", "/v1/rigs/" + encodeURIComponent(id));
          const t1 = performance.now();
          delete body.unacked_commands;
          putRig(body, t);
          stats.syncMs += performance.now() - t1;
        } catch (e) {
          if (e.status === 404) { rigs.delete(id); orderDirty = true; viewDirty = true; }
        }
      }));
    }
    stats.syncs++;
    queueRender();
  } catch (e) {
    if (e.status !== 401) toast("reading the rigs: " + e.message, false);
  } finally {
    syncing = false;
    if (needFull || dirty.size > 0) scheduleSync();
  }
}

async function fullSync() {
  const t0 = performance.now();
  const headers = token ? { "Authorization": "Bearer " + token } : {};
  const res = await fetch("/v1/rigs", { headers });
  const text = await res.text();
  const t1 = performance.now();
  const body = JSON.parse(text);
  if (res.status === 401) needToken(body);
  if (!res.ok) throw new ApiError(res.status, body);
  const t2 = performance.now();
  const seen = new Set();
  for (const r of body.rigs || []) { putRig(r, t0); seen.add(r.rig_id); }
  for (const id of Array.from(rigs.keys())) if (!seen.has(id)) rigs.delete(id);
  orderDirty = true;
  viewDirty = true;
  const t3 = performance.now();
  stats.syncMs += t3 - t1;
  stats.fullSyncs.push({ rigs: body.rigs.length, bytes: text.length, fetch_ms: t1 - t0, parse_ms: t2 - t1, apply_ms: t3 - t2 });
}

async function checkUnresponsive() {
  if (document.hidden) return;
  try {
    const t = performance.now();
    const { body } = await api("GET", "/v1/rigs?state=unresponsive");
    const now = new Set();
    for (const r of body.rigs || []) {
      now.add(r.rig_id);
      const had = rigs.get(r.rig_id);
      if (!had || had.state !== r.state || had.unacked !== r.unacked) putRig(r, t);
    }
    for (const [id, r] of rigs) if (r.state === "unresponsive" && !now.has(id)) dirty.add(id);
    if (dirty.size) scheduleSync();
    if (viewDirty) queueRender();
  } catch (e) { /* the event stream's status says when the broker is away */ }
}

let events = null;
let retryMs = 500;

function onEvent(msg) {
  const t0 = performance.now();
  let e;
  try { e = JSON.parse(msg.data); } catch (err) { return; }
  stats.events++;
  const r = e.rig_id ? rigs.get(e.rig_id) : undefined;
  if (e.type === "rig_connected") {
    if (r) {  // what the event says, now; the rest comes with the next read
      r.state = "connected"; r.connected = true; r.boot_id = e.detail || r.boot_id; r._t = t0;
      r.last_seen_age_ms = 0; viewDirty = true;
    }
    dirty.add(e.rig_id);
  } else if (e.type === "rig_disconnected") {
    if (r) { r.state = "offline"; r.connected = false; r.last_seen_age_ms = 0; r._t = t0; viewDirty = true; }
    dirty.add(e.rig_id);
  } else if (e.type === "drain_started") {
    needFull = true;
  } else if (e.rig_id) {
    dirty.add(e.rig_id);
  }
  if (e.cmd_id && e.type === "command_done") jobsChanged();
  scheduleSync();
  if (viewDirty) queueRender();
  stats.eventMs += performance.now() - t0;
}

function connectEvents() {
  if (events) events.close();
  const es = new EventSource(eventsUrl("types=" + MAIN_TYPES));
  events = es;
  es.onopen = () => {
    retryMs = 500;
    $("conn").textContent = "live";
    $("conn").className = "conn up";
    needFull = true;  // whatever happened while away
    scheduleSync();
  };
  for (const type of MAIN_TYPES.split(",")) es.addEventListener(type, onEvent);
  es.onmessage = onEvent;
  es.onerror = () => {
    $("conn").textContent = "reconnecting…";
    $("conn").className = "conn down";
    if (es.readyState === EventSource.CLOSED) {  // refused (401?): the browser gives up; we retry
      es.close();
      api("GET", "/v1/rigs?rig=-").catch(() => {});  // shows the token field if that is why
      setTimeout(connectEvents, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    }
  };
}

// ---- force reconnect, with an in-page confirmation -------------------------

function confirmDialog(text) {
  return new Promise((resolve) => {
    const d = $("confirm");
    $("confirm-text").textContent = text;
    d.returnValue = "";
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
    d.showModal();
  });
}

async function forceReconnect(rigId) {
  const ok = await confirmDialog("Close " + rigId + "'s connection? The rig reconnects by itself; " +
                                 "unacknowledged commands are sent again.");
  if (!ok) { toast("reconnect " + rigId + ": cancelled", true); return; }
  try {
    const { status, body } = await api("POST", "/v1/rigs/" + encodeURIComponent(rigId) + "/reconnect");
    toast("reconnect " + rigId + ": " + status + " " + JSON.stringify(body), true);
  } catch (e) {
    toast("reconnect " + rigId + ": " + e.status + " " + JSON.stringify(e.body), false);
  }
  dirty.add(rigId);
  scheduleSync();
}

$("rigs").addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-act]");
  if (!b) return;
  if (b.dataset.act === "reconnect") forceReconnect(b.dataset.rig);
  if (b.dataset.act === "send") {
    $("s-mode-rig").checked = true;
    sendMode();
    $("s-rig").value = b.dataset.rig;
    location.hash = "#send";
  }
});
$("rig-viewport").addEventListener("scroll", queueRender, { passive: true });
for (const id of ["f-rig", "f-state", "f-label"]) {
  $(id).addEventListener("input", () => { viewDirty = true; $("rig-viewport").scrollTop = 0; queueRender(); });
}
window.addEventListener("resize", queueRender);
// Ages ("12s ago") move on: redraw the visible rows once a second (cheap: ~40 rows).
setInterval(() => { if (!document.hidden) queueRender(); }, 1000);

// ---- sending a command or a job --------------------------------------------

function sendMode() {
  const set = $("s-mode-set").checked;
  document.querySelector(".mode-rig").hidden = set;
  document.querySelector(".mode-set").hidden = !set;
}
$("s-mode-rig").addEventListener("change", sendMode);
$("s-mode-set").addEventListener("change", sendMode);

function share(text) {  // a number, or a share as given ("10%")
  const t = text.trim();
  if (!t) return undefined;
  return /^\d+$/.test(t) ? Number(t) : t;
}

$("send-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const kind = $("s-kind").value.trim();
  const args = {};
  for (const [k, v] of Object.entries(kvList($("s-args").value))) args[k] = v === null ? "" : v;
  $("s-submit").disabled = true;
  try {
    if ($("s-mode-rig").checked) {
      const rig = $("s-rig").value.trim();
      const { status, body } = await api("POST", "/v1/rigs/" + encodeURIComponent(rig) + "/commands", { kind, args });
      toast("command " + body.cmd_id + " to " + rig + ": " + status + " " + body.state, true);
      dirty.add(rig);
      scheduleSync();
      location.hash = "#cmd/" + encodeURIComponent(body.cmd_id);
    } else {
      const targets = {};
      const ids = $("s-ids").value.split(",").map((s) => s.trim()).filter(Boolean);
      if (ids.length) targets.ids = ids;
      if ($("s-glob").value.trim()) targets.glob = $("s-glob").value.trim();
      const labels = kvList($("s-labels").value);
      if (Object.keys(labels).length) {
        targets.labels = {};
        for (const [k, v] of Object.entries(labels)) targets.labels[k] = v === null ? "" : v;
      }
      const req = { kind, args, targets };
      const mc = share($("s-maxc").value), me = share($("s-maxe").value), dl = share($("s-deadline").value);
      if (mc !== undefined) req.max_concurrency = mc;
      if (me !== undefined) req.max_errors = me;
      if (dl !== undefined) req.deadline_s = dl;
      const { status, body } = await api("POST", "/v1/jobs", req);
      toast("job " + body.job_id + ": " + status + " " + body.state + ", " + body.counts.total + " rigs", true);
      location.hash = "#job/" + encodeURIComponent(body.job_id);
    }
  } catch (e) {
    toast("send: " + (e.status || "") + " " + (e.body ? JSON.stringify(e.body) : e.message), false);
  } finally {
    $("s-submit").disabled = false;
  }
});

// ---- jobs ------------------------------------------------------------------

let jobTimer = null;
let jobsQueued = false;

function countsText(c) {
  if (!c) return "";
  return Object.entries(c).filter(([k, v]) => k !== "total" && v > 0).map(([k, v]) => k + " " + v).join(", ");
}

async function loadJobs() {
  try {
    const { body } = await api("GET", "/v1/jobs?limit=50");
    const rows = (body.jobs || []).map((j) =>
      '<tr data-job="' + esc(j.job_id) + '"><td class="mono">' + esc(j.job_id) + "</td>" +
      '<td><span class="badge st-' + esc(j.state) + '">' + esc(j.state) + "</span></td>" +
      "<td>" + esc(j.kind) + "</td><td>" + esc(j.created_at) + "</td>" +
      '<td class="num">' + esc(j.counts ? j.counts.total : "") + "</td><td>" + esc(countsText(j.counts)) + "</td></tr>");
    document.querySelector("#jobs tbody").innerHTML = rows.join("");
  } catch (e) {
    if (e.status !== 401) toast("jobs: " + e.message, false);
  }
}

async function loadJob(id) {
  clearTimeout(jobTimer);
  try {
    const { body: j } = await api("GET", "/v1/jobs/" + encodeURIComponent(id));
    $("job-detail").hidden = false;
    $("job-id").textContent = j.job_id;
    $("job-state").textContent = j.state;
    $("job-state").className = "badge st-" + j.state;
    $("job-detail").dataset.state = j.state;
    $("job-counts").textContent = "total " + j.counts.total + ": " + countsText(j.counts) +
      " — max_concurrency " + j.max_concurrency + ", max_errors " + (j.max_errors === null ? "none" : j.max_errors) +
      ", deadline " + j.deadline_at;
    const list = j.rigs || [];
    const rows = list.slice(0, JOB_RIGS_SHOWN).map((r) =>
      '<tr data-rig="' + esc(r.rig_id) + '" data-outcome="' + esc(r.outcome) + '"><td class="mono">' + esc(r.rig_id) +
      "</td><td>" + esc(r.outcome) + "</td><td>" + esc(r.state || "") + "</td><td>" +
      (r.cmd_id ? '<a class="mono" href="#cmd/' + encodeURIComponent(r.cmd_id) + '">' + esc(shortId(r.cmd_id)) + "</a>" +
        ' <a class="artifacts-link" href="#cmd/' + encodeURIComponent(r.cmd_id) + '" title="output, result and artifacts">files</a>' : "") +
      "</td><td>" + esc([r.error, r.detail].filter(Boolean).join(": ")) + "</td></tr>");
    document.querySelector("#job-rigs tbody").innerHTML = rows.join("");
    $("job-more").textContent = list.length > JOB_RIGS_SHOWN ? (list.length - JOB_RIGS_SHOWN) + " more rigs not shown" : "";
    if (j.state === "running" && currentJob === id) jobTimer = setTimeout(() => loadJob(id), 1000);
  } catch (e) {
    toast("job " + id + ": " + e.message, false);
  }
}

function jobsChanged() {  // a command finished: the jobs list may have moved (at most once a second)
  if ($("view-jobs").hidden || jobsQueued) return;
  jobsQueued = true;
  setTimeout(() => { jobsQueued = false; loadJobs(); }, 1000);
}

document.querySelector("#jobs tbody").addEventListener("click", (ev) => {
  const tr = ev.target.closest("tr[data-job]");
  if (tr) location.hash = "#job/" + encodeURIComponent(tr.dataset.job);
});

// ---- one command, with its output as it comes ------------------------------

let cmdEvents = null;
let cmdOut = null;  // { id, bytes: Uint8Array, end }

const enc = new TextEncoder();
const dec = new TextDecoder();

function setOutput(offset, data) {
  cmdOut.bytes = enc.encode(data);
  cmdOut.start = offset;
  cmdOut.end = offset + cmdOut.bytes.length;
  $("cmd-output").textContent = (offset > 0 ? "[… first " + offset + " bytes not kept]\n" : "") + data;
}

function appendOutput(offset, data) {
  const b = enc.encode(data);
  const end = offset + b.length;
  if (end <= cmdOut.end) return;                         // had it already
  if (offset > cmdOut.end) { loadOutput(cmdOut.id); return; }  // a gap: read what the broker keeps
  const fresh = b.subarray(cmdOut.end - offset);
  $("cmd-output").append(dec.decode(fresh));
  cmdOut.end = end;
  const pre = $("cmd-output");
  pre.scrollTop = pre.scrollHeight;
}

async function loadOutput(id) {
  const { body } = await api("GET", "/v1/commands/" + encodeURIComponent(id) + "/output");
  if (!cmdOut || cmdOut.id !== id) return body;
  setOutput(body.offset || 0, body.data || "");
  return body;
}

function showCommandState(c) {
  $("cmd-state").textContent = c.state;
  $("cmd-state").className = "badge st-" + c.state;
  $("cmd-state").dataset.state = c.state;
  const bits = ["rig " + c.rig_id, "kind " + c.kind];
  const r = c.result;  // the RESULT, once it is in
  if (r) {
    bits.push("exit code " + r.exit_code);
    if (r.signal) bits.push("signal " + r.signal);
    if (r.detail) bits.push(r.detail);
    $("cmd-meta").dataset.exitCode = r.exit_code;
  }
  if (c.nack) bits.push("refused: " + c.nack.reason + (c.nack.detail ? " (" + c.nack.detail + ")" : ""));
  $("cmd-meta").textContent = bits.join(" · ");
  showArtifacts(c.artifacts || []);
}

// The files the rig uploaded for the command: a link each, fetched with the token
// (a plain link could not carry it) and handed to the browser as a download.
function showArtifacts(list) {
  $("cmd-artifacts").innerHTML = list.map((a) =>
    '<li><a href="#" class="artifact" data-href="' + esc(a.href) + '" data-name="' + esc(a.name) +
    '" data-store="' + esc(a.store || "broker") + '">' + esc(a.name) +
    "</a> " + esc(String(a.size)) + ' bytes <span class="mono">sha256 ' + esc(a.sha256) + "</span></li>").join("");
}

$("cmd-artifacts").addEventListener("click", async (ev) => {
  const link = ev.target.closest("a.artifact");
  if (!link) return;
  ev.preventDefault();
  try {
    if (link.dataset.store === "s3") {
      // Kept in the broker's S3 store: the broker signs a URL there, the browser goes to it.
      const r = await api("GET", link.dataset.href + "?location=1");
      window.open(r.body.location, "_blank", "noopener");
      return;
    }
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const res = await fetch(link.dataset.href, { headers });
    if (!res.ok) throw new Error("HTTP " + res.status);
    const url = URL.createObjectURL(await res.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = link.dataset.name;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    toast("artifact " + link.dataset.name + ": " + e.message, false);
  }
});

async function openCommand(id) {
  closeCommand();
  $("cmd-id").textContent = id;
  $("cmd-input").value = id;
  $("cmd-output").textContent = "";
  $("cmd-state").textContent = "";
  $("cmd-meta").textContent = "";
  $("cmd-artifacts").innerHTML = "";
  delete $("cmd-meta").dataset.exitCode;
  delete $("cmd-state").dataset.state;
  cmdOut = { id, bytes: new Uint8Array(0), start: 0, end: 0, ready: false, early: [] };
  const mine = cmdOut;
  // The stream first, then what the broker kept: nothing falls between the two.
  const es = new EventSource(eventsUrl("cmd=" + encodeURIComponent(id) + "&types=command_output,command_done,command_running,command_acked"));
  cmdEvents = es;
  const finish = async () => {
    try {
      const { body } = await api("GET", "/v1/commands/" + encodeURIComponent(id));
      if (cmdOut !== mine) return;
      showCommandState(body);
      if (body.final || ["succeeded", "failed", "timed_out", "cancelled", "undeliverable", "rejected", "interrupted"].includes(body.state)) {
        await loadOutput(id);  // the RESULT's output may hold more than the stream did
      }
    } catch (e) { toast("command " + id + ": " + e.message, false); }
  };
  es.addEventListener("command_output", (msg) => {
    const e = JSON.parse(msg.data);
    if (cmdOut !== mine) return;
    if (!mine.ready) mine.early.push(e); else appendOutput(e.offset, e.data);
  });
  for (const type of ["command_acked", "command_running"]) es.addEventListener(type, () => finish());
  es.addEventListener("command_done", () => { finish(); });
  try {
    const { body: c } = await api("GET", "/v1/commands/" + encodeURIComponent(id));
    showCommandState(c);
    await loadOutput(id);
  } catch (e) {
    toast("command " + id + ": " + e.message, false);
  }
  mine.ready = true;
  for (const e of mine.early) appendOutput(e.offset, e.data);
  mine.early = [];
  finish();
}

function closeCommand() {
  if (cmdEvents) { cmdEvents.close(); cmdEvents = null; }
  cmdOut = null;
}

$("cmd-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = $("cmd-input").value.trim();
  if (id) location.hash = "#cmd/" + encodeURIComponent(id);
});

// ---- views (the URL's #fragment) -------------------------------------------

let currentJob = null;

function route() {
  const h = location.hash.replace(/^#/, "");
  const [name, arg] = [h.split("/")[0] || "rigs", decodeURIComponent(h.split("/").slice(1).join("/"))];
  const viewName = name === "job" ? "jobs" : name;
  for (const s of document.querySelectorAll("section.view")) s.hidden = s.id !== "view-" + viewName;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === viewName);
  if (viewName !== "cmd") closeCommand();
  currentJob = null;
  clearTimeout(jobTimer);
  if (viewName === "rigs") { viewDirty = true; queueRender(); }
  if (viewName === "jobs") {
    $("job-detail").hidden = name !== "job";
    loadJobs();
    if (name === "job" && arg) { currentJob = arg; loadJob(arg); }
  }
  if (viewName === "cmd" && arg) openCommand(arg);
}
window.addEventListener("hashchange", route);

// ---- the token -------------------------------------------------------------

$("save-token").addEventListener("click", () => {
  token = $("token").value.trim();
  localStorage.setItem(TOKEN_KEY, token);
  $("auth").hidden = true;
  connectEvents();
  route();
});
$("token").addEventListener("keydown", (ev) => { if (ev.key === "Enter") $("save-token").click(); });

route();
connectEvents();
setInterval(checkUnresponsive, UNRESPONSIVE_MS);
