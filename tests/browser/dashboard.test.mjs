// The dashboard in a real browser: Debian's chromium (/usr/bin/chromium) driven by
// playwright-core (which downloads no browser). Started by
// tests/integration/test_dashboard_browser.py, which runs the broker and the rigs
// and passes them in the environment:
//   FLEETLINK_URL        the broker's control URL (http://127.0.0.1:PORT)
//   FLEETLINK_TOKEN      its control token ("" for none)
//   DASH_SCENARIO        "functional" (real agents) or "scale" (rigsim fleets)
//   DASH_ARTIFACTS       where screenshots go
//   functional: DASH_RIGS (every rig, comma-separated), DASH_FROZEN (the SIGSTOPped
//               one), DASH_JOB_RIGS (the job's targets), DASH_LIVE_RIG (runs "slow")
//   scale:      DASH_EXPECT (rigs), DASH_RUNS (page loads), DASH_BURST_SIZE (rigs of one rigsim);
//               it prints "NEED <step>" and the driver answers on stdin with "DONE <step>"
// Prints one line "DASHBOARD_RESULT <json>" with what it measured.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const URL = process.env.FLEETLINK_URL;
const TOKEN = process.env.FLEETLINK_TOKEN || "";
const SCENARIO = process.env.DASH_SCENARIO || "functional";
const ARTIFACTS = process.env.DASH_ARTIFACTS || path.join(path.dirname(fileURLToPath(import.meta.url)), "artifacts");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

assert.ok(URL, "FLEETLINK_URL is not set: run this from tests/integration/test_dashboard_browser.py");
assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/install-deps.sh (apt-get install chromium)`);
fs.mkdirSync(ARTIFACTS, { recursive: true });

const result = { scenario: SCENARIO, screenshots: [] };

async function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "fleetlink-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  // The page may fetch nothing but this broker.
  const outside = [];
  context.on("request", (req) => { if (!req.url().startsWith(URL)) outside.push(req.url()); });
  return { context, profile, outside };
}

async function shot(page, name) {
  const file = path.join(ARTIFACTS, `${SCENARIO}-${String(result.screenshots.length + 1).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: file, fullPage: false });
  result.screenshots.push(file);
  console.log(`screenshot: ${file}`);
}

const row = (rig) => `#rigs tr.rig[data-rig="${rig}"]`;

async function functional(page) {
  const rigs = process.env.DASH_RIGS.split(",");
  const frozen = process.env.DASH_FROZEN;
  const jobRigs = process.env.DASH_JOB_RIGS.split(",");
  const liveRig = process.env.DASH_LIVE_RIG;
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));

  await page.goto(URL + "/");
  if (TOKEN) {
    // No token yet: the page asks for one (the API answered 401), then uses it.
    await page.waitForSelector("#auth:not([hidden])", { timeout: 10000 });
    await shot(page, "token-asked");
    await page.fill("#token", TOKEN);
    await page.click("#save-token");
  }
  for (const rig of rigs) await page.waitForSelector(row(rig), { timeout: 15000 });
  await page.waitForFunction(() => document.getElementById("conn").textContent === "live", null, { timeout: 10000 });
  const stored = await page.evaluate(() => localStorage.getItem("fleetlink-token"));
  assert.equal(stored, TOKEN || null);

  // Boot ids: the tail in the cell, the whole id in the tooltip.
  const boot = await page.$eval(`${row(rigs[0])} td.boot`, (td) => ({ text: td.textContent, title: td.title }));
  assert.match(boot.title, /^[0-9a-f-]{36}$/);
  assert.equal(boot.text, "…" + boot.title.replace(/-/g, "").slice(-10));
  const version = await page.$eval(`${row(rigs[0])} td:nth-child(4)`, (td) => td.textContent);
  assert.match(version, /\d+\.\d+/);

  // Filters: substring, glob, state, label.
  const shown = () => page.$$eval("#rigs tr.rig", (trs) => trs.map((tr) => tr.dataset.rig));
  await page.fill("#f-rig", rigs[0]);
  await page.waitForFunction((n) => document.querySelectorAll("#rigs tr.rig").length === n, 1);
  assert.deepEqual(await shown(), [rigs[0]]);
  await page.fill("#f-rig", "rig-?");
  await page.waitForFunction((n) => document.querySelectorAll("#rigs tr.rig").length === n, rigs.length);
  await page.fill("#f-rig", "");
  await page.fill("#f-label", "lab=b2");
  await page.waitForFunction(() => document.querySelectorAll("#rigs tr.rig").length === 1);
  assert.deepEqual(await shown(), [jobRigs[1]]);
  await page.fill("#f-label", "");

  // The frozen rig (SIGSTOP, commands waiting for its ACK) turns unresponsive.
  const t0 = Date.now();
  await page.waitForSelector(`${row(frozen)}.st-unresponsive`, { timeout: 20000 });
  result.unresponsive_seen_after_ms = Date.now() - t0;
  const state = await page.$eval(`${row(frozen)} td.state .badge`, (b) => ({ text: b.textContent, title: b.title, color: getComputedStyle(b).color }));
  assert.equal(state.text, "unresponsive");
  assert.match(state.title, /oldest unacknowledged command/);
  assert.equal(state.color, "rgb(176, 0, 32)");
  const unacked = Number(await page.$eval(`${row(frozen)} td.unacked`, (td) => td.textContent));
  assert.ok(unacked >= 3, `unacked ${unacked}`);
  await page.selectOption("#f-state", "unresponsive");
  await page.waitForFunction(() => document.querySelectorAll("#rigs tr.rig").length === 1);
  assert.deepEqual(await shown(), [frozen]);
  await shot(page, "unresponsive");
  await page.selectOption("#f-state", "");

  // Force reconnect: an in-page confirmation, then the API's answer in the status line.
  await page.click(`${row(frozen)} button[data-act="reconnect"]`);
  await page.waitForSelector("#confirm[open]");
  assert.match(await page.textContent("#confirm-text"), new RegExp(frozen));
  await shot(page, "confirm");
  await page.click("#confirm-ok");
  await page.waitForFunction((rig) => document.getElementById("toast").textContent.includes(`reconnect ${rig}: 200`), frozen, { timeout: 10000 });
  const toastText = await page.textContent("#toast");
  assert.match(toastText, /"closed":true/);
  result.reconnect_toast = toastText;
  // Its connection is closed (and the frozen agent cannot come back): offline, greyed, "last seen".
  await page.waitForSelector(`${row(frozen)}.st-offline`, { timeout: 15000 });
  assert.match(await page.$eval(`${row(frozen)} td.seen`, (td) => td.textContent), /^last seen \d+s ago$/);
  const grey = await page.$eval(`${row(frozen)} td`, (td) => getComputedStyle(td).color);
  assert.equal(grey, "rgb(107, 107, 107)");
  await shot(page, "reconnected");

  // A job from the form: a target set with limits; its per-rig results.
  await page.click('nav a[data-view="send"]');
  await page.check("#s-mode-set");
  await page.fill("#s-ids", jobRigs.join(", "));
  await page.fill("#s-kind", "suite");
  await page.fill("#s-args", "suite=quick");
  await page.fill("#s-maxc", "1");
  await page.fill("#s-maxe", "0");
  await page.fill("#s-deadline", "60");
  await page.click("#s-submit");
  await page.waitForFunction(() => location.hash.startsWith("#job/"), null, { timeout: 10000 });
  result.job_id = decodeURIComponent((await page.evaluate(() => location.hash)).slice(5));
  await page.waitForFunction(() => document.getElementById("job-state").textContent === "done", null, { timeout: 30000 });
  const outcomes = await page.$$eval("#job-rigs tbody tr", (trs) => trs.map((tr) => [tr.dataset.rig, tr.dataset.outcome, tr.children[2].textContent]));
  assert.deepEqual(outcomes.sort(), jobRigs.map((r) => [r, "ok", "succeeded"]).sort());
  assert.match(await page.textContent("#job-counts"), /total 2: ok 2 — max_concurrency 1, max_errors 0/);
  assert.ok(await page.$(`#jobs tbody tr[data-job="${result.job_id}"]`), "the job is in the list");
  await shot(page, "job");

  // A suite's output, live, in the command view.
  await page.click('nav a[data-view="send"]');
  await page.check("#s-mode-rig");
  await page.fill("#s-rig", liveRig);
  await page.fill("#s-kind", "suite");
  await page.fill("#s-args", "suite=slow");
  await page.click("#s-submit");
  await page.waitForFunction(() => location.hash.startsWith("#cmd/"), null, { timeout: 10000 });
  result.live_cmd_id = decodeURIComponent((await page.evaluate(() => location.hash)).slice(5));
  await page.waitForFunction(() => document.getElementById("cmd-output").textContent.includes("step 1"), null, { timeout: 15000 });
  const early = await page.evaluate(() => ({ out: document.getElementById("cmd-output").textContent,
                                             state: document.getElementById("cmd-state").dataset.state }));
  assert.ok(!early.out.includes("step 3"), `all output at once: ${JSON.stringify(early)}`);
  assert.ok(!["succeeded", "failed"].includes(early.state), `already final: ${JSON.stringify(early)}`);
  await shot(page, "output-live");
  await page.waitForFunction(() => document.getElementById("cmd-state").dataset.state === "succeeded", null, { timeout: 20000 });
  await page.waitForFunction(() => document.getElementById("cmd-meta").dataset.exitCode === "0", null, { timeout: 5000 });
  assert.equal(await page.textContent("#cmd-output"), "step 1\nstep 2\nstep 3\n");
  result.live_early_output = early.out;
  await shot(page, "output-done");
  assert.deepEqual(errors, [], "no script errors on the page");
}

// ---- at scale ---------------------------------------------------------------

const rl = readline.createInterface({ input: process.stdin });
const answers = [];
let waiting = null;
rl.on("line", (line) => { answers.push(line.trim()); if (waiting) waiting(); });

async function need(step, timeoutMs) {
  console.log(`NEED ${step}`);
  const deadline = Date.now() + timeoutMs;
  while (!answers.includes(`DONE ${step}`)) {
    if (Date.now() > deadline) throw new Error(`the driver did not answer DONE ${step}`);
    await new Promise((r) => { waiting = r; setTimeout(r, 200); });
  }
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

async function snapshot(page) {
  return page.evaluate(() => {
    const s = window.fleetlinkDashboard.stats;
    return { events: s.events, busy: s.eventMs + s.renderMs + s.syncMs, eventMs: s.eventMs, renderMs: s.renderMs,
             syncMs: s.syncMs, renders: s.renders, full: s.fullSyncs.length, longest: window.__longest || 0 };
  });
}

async function burst(page, step, until, timeoutMs) {
  await page.evaluate(() => { window.__longest = 0; });
  const before = await snapshot(page);
  const t0 = Date.now();
  await need(step, 120000);
  await page.waitForFunction(until, null, { timeout: timeoutMs, polling: 100 });
  const wall = Date.now() - t0;
  const after = await snapshot(page);
  return { wall_ms: wall, events: after.events - before.events, busy_ms: Math.round(after.busy - before.busy),
           event_ms: Math.round(after.eventMs - before.eventMs), sync_ms: Math.round(after.syncMs - before.syncMs),
           render_ms: Math.round(after.renderMs - before.renderMs), renders: after.renders - before.renders,
           full_syncs: after.full - before.full, longest_task_ms: after.longest };
}

async function scale(context) {
  const expect = Number(process.env.DASH_EXPECT);
  const runs = Number(process.env.DASH_RUNS || 3);
  const burstSize = Number(process.env.DASH_BURST_SIZE);
  await context.addInitScript(() => {
    window.__longest = 0;
    try {
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) window.__longest = Math.max(window.__longest, e.duration);
      }).observe({ type: "longtask", buffered: true });
    } catch (e) { /* no longtask: stays 0 */ }
  });
  if (TOKEN) await context.addInitScript((t) => localStorage.setItem("fleetlink-token", t), TOKEN);
  result.loads = [];
  let page = null;
  for (let i = 0; i < runs; i++) {
    if (page) await page.close();
    page = await context.newPage();
    await page.goto(URL + "/");
    await page.waitForFunction((n) => document.getElementById("summary").dataset.total === String(n) &&
                               window.fleetlinkDashboard.stats.firstRenderAt !== null, expect, { timeout: 60000, polling: 50 });
    const load = await page.evaluate(() => {
      const s = window.fleetlinkDashboard.stats;
      const nav = performance.getEntriesByType("navigation")[0];
      return { first_render_ms: s.firstRenderAt, dom_content_loaded_ms: nav.domContentLoadedEventEnd,
               rigs: s.rigsLoaded, ...s.fullSyncs[0], rows_in_dom: document.querySelectorAll("#rigs tr.rig").length,
               longest_task_ms: window.__longest };
    });
    result.loads.push(load);
  }
  const load = result.loads.at(-1);
  assert.ok(load.rows_in_dom > 10 && load.rows_in_dom < 200, `virtualised: ${load.rows_in_dom} rows in the DOM`);
  await shot(page, "loaded");
  // Scrolled to the end: the last rig is drawn, and still only a window of rows.
  const lastRig = await page.evaluate(() => {
    const vp = document.getElementById("rig-viewport");
    vp.scrollTop = vp.scrollHeight;
    return new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => {
      const trs = document.querySelectorAll("#rigs tr.rig");
      r({ last: trs[trs.length - 1].dataset.rig, rows: trs.length });
    })));
  });
  assert.ok(lastRig.rows < 200);
  result.last_row = lastRig.last;
  // A filter at this size: from the keystroke to the drawn rows.
  result.filter_ms = await page.evaluate(async () => {
    const t0 = performance.now();
    const f = document.getElementById("f-rig");
    f.value = "simb-*";
    f.dispatchEvent(new Event("input"));
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    return performance.now() - t0;
  });
  await page.evaluate(() => { const f = document.getElementById("f-rig"); f.value = ""; f.dispatchEvent(new Event("input")); });

  // Bursts: one rigsim's rigs go (disconnect events), come back (connects), and a job to every rig.
  result.disconnect_burst = await burst(page, "disconnect-burst",
    `document.getElementById("summary").dataset.offline === "${burstSize}"`, 120000);
  await shot(page, "disconnect-burst");
  result.connect_burst = await burst(page, "connect-burst",
    `document.getElementById("summary").dataset.connected === "${expect}"`, 180000);
  // A job to every rig: an ACK and a RESULT each.
  const jobBurst = await (async () => {
    await page.evaluate(() => { window.__longest = 0; });
    const before = await snapshot(page);
    const t0 = Date.now();
    // Posted from node, not the page: the 202 lists every rig (3 MB), and parsing it is
    // not the dashboard's work.
    const res = await fetch(URL + "/v1/jobs", { method: "POST",
      headers: { "Content-Type": "application/json", ...(TOKEN ? { Authorization: "Bearer " + TOKEN } : {}) },
      body: JSON.stringify({ kind: "noop", targets: { glob: "*" }, deadline_s: 300 }) });
    const job = await res.json();
    assert.equal(res.status, 202, JSON.stringify(job).slice(0, 500));
    const want = 2 * job.counts.total;
    await page.waitForFunction((n) => window.fleetlinkDashboard.stats.events >= n, before.events + want,
                               { timeout: 240000, polling: 200 });
    // ... and the page has settled: no read pending.
    await new Promise((r) => setTimeout(r, 1500));
    const after = await snapshot(page);
    return { rigs: job.counts.total, wall_ms: Date.now() - t0 - 1500, events: after.events - before.events,
             busy_ms: Math.round(after.busy - before.busy), event_ms: Math.round(after.eventMs - before.eventMs),
             sync_ms: Math.round(after.syncMs - before.syncMs), render_ms: Math.round(after.renderMs - before.renderMs),
             full_syncs: after.full - before.full, longest_task_ms: after.longest };
  })();
  result.job_burst = jobBurst;
  result.median_first_render_ms = median(result.loads.map((l) => l.first_render_ms));
  await shot(page, "job-burst");
  await page.close();
}

test(`dashboard (${SCENARIO})`, { timeout: SCENARIO === "scale" ? 900000 : 180000 }, async () => {
  const { context, profile, outside } = await launch();
  let page = null;
  try {
    if (SCENARIO === "scale") {
      await scale(context);
    } else {
      page = await context.newPage();
      await functional(page);
    }
    assert.deepEqual(outside, [], "the page fetched nothing but the broker");
  } catch (e) {
    for (const p of context.pages()) {
      if (p.url() === "about:blank") continue;
      try { await shot(p, "failure"); } catch (err) { /* the page is gone */ }
    }
    throw e;
  } finally {
    console.log("DASHBOARD_RESULT " + JSON.stringify(result));
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
    rl.close();
  }
});
