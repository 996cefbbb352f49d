#include "observe/dashboard.hpp"

namespace fleetlink::broker {
namespace {

// Kept as one literal so the broker serves it from memory with no file I/O.
// The token (when the control API needs one) is typed once and kept in the
// browser's localStorage; every fetch sends it as a Bearer token.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fleetlink broker</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
  h1 { font-size: 1.3rem; margin: 0 0 .3rem 0; }
  #summary { color: #555; margin-bottom: 1rem; }
  table { border-collapse: collapse; width: 100%; font-size: .9rem; }
  th, td { text-align: left; padding: .3rem .6rem; border-bottom: 1px solid #ddd; white-space: nowrap; }
  th { background: #f3f3f3; position: sticky; top: 0; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  tr.unresponsive td { background: #fff0f0; }
  tr.draining td { background: #fffbe6; }
  .state { font-weight: 600; }
  .unresponsive .state { color: #b00020; }
  .connected .state { color: #137333; }
  code { font-size: .85rem; }
  #error { color: #b00020; margin: .5rem 0; }
  #auth { display: none; margin: .5rem 0; }
  button { cursor: pointer; }
  input[type=text] { width: 14rem; }
</style>
</head>
<body>
<h1>fleetlink broker</h1>
<div id="summary">loading…</div>
<div id="auth">Control token: <input id="token" type="password" autocomplete="off">
  <button id="save-token">Use token</button></div>
<div>Filter: <input id="filter" type="text" placeholder="rig id or state"></div>
<div id="error"></div>
<table>
  <thead><tr>
    <th>Rig</th><th>State</th><th>Boot ID</th><th>Version</th><th>Last ack seq</th>
    <th>Last ack</th><th>Outbox</th><th>Unacked</th><th>Peer</th><th></th>
  </tr></thead>
  <tbody id="rigs"></tbody>
</table>
<script>
"use strict";
const POLL_MS = 2000;
let token = localStorage.getItem("fleetlink-token") || "";

function headers() {
  return token ? { "Authorization": "Bearer " + token } : {};
}

function age(ms) {
  if (ms === null || ms === undefined) return "never";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s ago";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m ago";
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

async function reconnect(rigId, button) {
  button.disabled = true;
  try {
    const res = await fetch("/v1/rigs/" + encodeURIComponent(rigId) + "/reconnect",
                            { method: "POST", headers: headers() });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(body.detail || body.error || ("HTTP " + res.status));
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "reconnect " + rigId + ": " + e.message;
  }
  setTimeout(refresh, 300);
}

function render(rigs) {
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const tbody = document.getElementById("rigs");
  const rows = [];
  let unresponsive = 0;
  rigs.sort((a, b) => a.rig_id.localeCompare(b.rig_id));
  for (const r of rigs) {
    if (r.state !== "connected") unresponsive += r.state === "unresponsive" ? 1 : 0;
    if (filter && !(r.rig_id.toLowerCase().includes(filter) || r.state.includes(filter))) continue;
    const tr = document.createElement("tr");
    tr.className = r.state;
    tr.appendChild(cell(r.rig_id));
    tr.appendChild(cell(r.state, "state"));
    const boot = cell(r.boot_id ? r.boot_id.slice(0, 13) + "…" : "");
    boot.title = r.boot_id || "";
    tr.appendChild(boot);
    tr.appendChild(cell(r.agent_version));
    tr.appendChild(cell(String(r.last_ack_seq), "num"));
    const ack = cell(age(r.last_ack_age_ms));
    ack.title = r.last_ack_at || "";
    tr.appendChild(ack);
    tr.appendChild(cell(r.outbox_depth + "/" + r.outbox_capacity, "num"));
    tr.appendChild(cell(String(r.unacked), "num"));
    tr.appendChild(cell(r.peer));
    const td = document.createElement("td");
    const b = document.createElement("button");
    b.textContent = "Force reconnect";
    b.addEventListener("click", () => reconnect(r.rig_id, b));
    td.appendChild(b);
    tr.appendChild(td);
    rows.push(tr);
  }
  tbody.replaceChildren(...rows);
  document.getElementById("summary").textContent =
    rigs.length + " rigs, " + unresponsive + " unresponsive — updated " +
    new Date().toLocaleTimeString();
}

async function refresh() {
  try {
    const res = await fetch("/v1/rigs", { headers: headers() });
    if (res.status === 401) {
      document.getElementById("auth").style.display = "block";
      throw new Error("the control API needs a token");
    }
    const body = await res.json();
    if (!res.ok) throw new Error(body.detail || body.error || ("HTTP " + res.status));
    document.getElementById("error").textContent = "";
    render(body.rigs || []);
  } catch (e) {
    document.getElementById("error").textContent = e.message;
  }
}

document.getElementById("save-token").addEventListener("click", () => {
  token = document.getElementById("token").value;
  localStorage.setItem("fleetlink-token", token);
  document.getElementById("auth").style.display = "none";
  refresh();
});
document.getElementById("filter").addEventListener("input", refresh);
refresh();
setInterval(refresh, POLL_MS);
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view dashboard_html() noexcept { return kPage; }

}  // namespace fleetlink::broker
