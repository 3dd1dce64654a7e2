// kith dashboard. Every element is built with textContent: peer IDs, user
// agents, profile names, reasons and outputs come from other machines and
// are never parsed as HTML. The page talks only to its own origin.
"use strict";

const API = "/api/v1/a2a";
let csrf = "";
let refreshTimer = 0;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "title") e.title = v;
    else if (k === "type") e.type = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function short(id) { return id && id.length > 16 ? id.slice(0, 8) + "…" + id.slice(-6) : (id || ""); }

function ago(from, to) {
  const s = Math.max(0, ((to ? new Date(to) : new Date()) - new Date(from)) / 1000);
  return s < 60 ? s.toFixed(1) + " s" : s < 3600 ? Math.floor(s / 60) + " min" : (s / 3600).toFixed(1) + " h";
}

async function get(path) {
  const r = await fetch(API + path, { credentials: "same-origin" });
  if (r.status === 401) { showLogin(); throw new Error("signed out"); }
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

async function post(path, body) {
  const r = await fetch(API + path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Kith-CSRF": csrf },
    body: JSON.stringify(body),
  });
  if (!r.ok) {
    let msg = String(r.status);
    try { msg = (await r.json()).error || msg; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return r.json();
}

function showLogin() {
  document.getElementById("app").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("bad-token").hidden = location.hash !== "#bad-token";
}

function fill(id, rows) {
  const tb = document.querySelector("#" + id + " tbody");
  tb.replaceChildren(...rows);
}

function renderNode(info, st) {
  const dl = document.getElementById("node");
  const add = (k, ...v) => [el("dt", {}, k), el("dd", {}, ...v)];
  const addrs = el("div", { class: "mono" });
  for (const a of info.addrs || []) addrs.append(el("div", {}, a));
  dl.replaceChildren(
    ...add("Peer ID", el("span", { class: "mono", "data-field": "peer-id" }, info.peer_id)),
    ...add("Version", info.version),
    ...add("Reachability", st.reachability || "unknown"),
    ...add("NAT", "TCP " + (st.nat_tcp || "unknown") + ", UDP " + (st.nat_udp || "unknown")),
    ...add("Relay", st.relay_service ? "this node is a relay" : ((st.relay_addrs || []).length + " reservation(s)")),
    ...add("Addresses", addrs),
    ...add("Profiles", (info.profiles || []).join(", ") || "none"),
  );
}

function renderPeers(peers, st, disc) {
  const conn = new Map((st.peers || []).map((p) => [p.id, p]));
  const dp = new Map((disc.peers || []).map((p) => [p.id, p]));
  document.getElementById("peer-count").textContent = "(" + peers.length + ")";
  fill("peers", peers.map((p) => {
    const c = conn.get(p.id);
    const d = dp.get(p.id);
    const actions = el("td", {});
    for (const [label, change] of [["allow", { access: "allow" }], ["deny", { access: "deny" }], ["trust", { trust: "trusted" }]]) {
      const b = el("button", { type: "button", "data-action": label }, label);
      b.addEventListener("click", () => act(p.id, change));
      actions.append(b);
    }
    const load = d && d.load ? d.load.active + " active, " + d.load.free_slots + " free" : "";
    return el("tr", { "data-peer": p.id },
      el("td", { class: "mono", title: p.id }, short(p.id)),
      el("td", {}, (p.sources || []).join(", ")),
      el("td", { "data-field": "trust" }, p.trust),
      el("td", { "data-field": "access", class: p.access }, p.access),
      el("td", {}, c ? c.path : (p.connected ? "connected" : el("span", { class: "muted" }, "offline"))),
      el("td", {}, c && c.rtt_ms ? c.rtt_ms.toFixed(1) + " ms" : ""),
      el("td", {}, load),
      el("td", { class: "agent", "data-field": "agent" }, c ? c.agent || "" : ""),
      actions);
  }));
}

async function act(id, change) {
  const err = document.getElementById("action-error");
  err.hidden = true;
  try {
    await post("/peers/" + encodeURIComponent(id), change);
  } catch (e) {
    err.textContent = "Could not change " + short(id) + ": " + e.message;
    err.hidden = false;
  }
  refresh();
}

function renderTree(nodes) {
  const item = (n) => {
    const li = el("li", { "data-delegation": n.id, "data-state": n.state, "data-remote": String(!!n.remote) },
      n.remote ? el("span", { class: "icon net", title: "remote: runs on another node" }) : el("span", { class: "icon local", title: "local" }),
      el("span", { class: "state " + n.state }, n.state), " ",
      el("strong", {}, n.profile), " ",
      el("span", { class: "muted" }, n.role), " ",
      n.peer ? el("span", { class: "mono", title: n.peer }, "peer " + short(n.peer) + " ") : null,
      el("span", {}, ago(n.created_at, n.terminal ? n.updated_at : null)), " ",
      el("span", {}, (n.usage ? n.usage.total : 0) + "/" + n.budget + " tokens"),
      n.reason ? el("div", { class: "muted reason" }, n.reason) : null);
    if (n.children && n.children.length) li.append(el("ul", {}, ...n.children.map(item)));
    return li;
  };
  const ul = document.getElementById("tree");
  const sorted = [...nodes].sort((a, b) => new Date(b.created_at) - new Date(a.created_at)).slice(0, 200);
  ul.replaceChildren(...(sorted.length ? sorted.map(item) : [el("li", { class: "muted" }, "no delegations yet")]));
}

function renderGPU(g) {
  const dl = document.getElementById("gpu");
  dl.replaceChildren(
    el("dt", {}, "Inventory"), el("dd", {}, g.no_gpu ? "none: " + g.no_gpu : (g.inventory || "")),
    el("dt", {}, "Headroom"), el("dd", {}, g.headroom_mib + " MiB"));
  fill("leases", (g.leases || []).map((l) => el("tr", {},
    el("td", {}, l.id), el("td", { class: "mono" }, l.owner), el("td", {}, l.vram_mib + " MiB"),
    el("td", {}, l.local ? "local" : "remote"), el("td", { class: "mono" }, l.device))));
}

function renderCounters(disc) {
  const rows = [];
  for (const [k, v] of Object.entries(disc.dropped || {}).sort()) rows.push(el("tr", {}, el("td", {}, "dropped " + k), el("td", {}, v)));
  for (const [k, v] of Object.entries(disc.rejected || {}).sort()) rows.push(el("tr", {}, el("td", {}, "refused assertion " + k), el("td", {}, v)));
  if (!rows.length) rows.push(el("tr", {}, el("td", { class: "muted" }, "nothing dropped"), el("td", {}, "0")));
  fill("counters", rows);
}

let busy = false;
async function refresh() {
  if (busy) { schedule(); return; }
  busy = true;
  try {
    const [info, peers, st, disc, tree, gpu] = await Promise.all(
      ["/node", "/peers", "/status", "/discovery", "/tree", "/gpu"].map(get));
    renderNode(info, st);
    renderPeers(peers, st, disc);
    renderTree(tree);
    renderGPU(gpu);
    renderCounters(disc);
  } catch (e) {
    console.log("refresh:", e.message);
  } finally {
    busy = false;
  }
}

// schedule coalesces a burst of events into one refresh.
function schedule() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refresh, 150);
}

function live() {
  const badge = document.getElementById("live");
  const es = new EventSource(API + "/events");
  es.onopen = () => { badge.textContent = "live"; badge.className = "badge on"; };
  es.onmessage = schedule;
  es.onerror = () => { badge.textContent = "reconnecting"; badge.className = "badge off"; };
}

async function start() {
  const r = await fetch("session", { credentials: "same-origin" });
  if (!r.ok) { showLogin(); return; }
  csrf = (await r.json()).csrf;
  if (location.hash) history.replaceState(null, "", location.pathname);
  document.getElementById("login").hidden = true;
  document.getElementById("app").hidden = false;
  const out = document.getElementById("logout");
  out.hidden = false;
  out.addEventListener("click", async () => {
    await fetch("logout", { method: "POST", credentials: "same-origin", headers: { "X-Kith-CSRF": csrf } });
    location.reload();
  });
  await refresh();
  live();
  // Peers, RTTs and NAT change without a delegation event.
  setInterval(refresh, 3000);
}

start();
