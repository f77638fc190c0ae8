// Tally dashboard: live counters over server-sent events, a per-bucket chart, trending, refusals.
"use strict";

const FIELDS = ["views", "likes", "dislikes", "unique_viewers", "watching_now"];
let source = null;
let video = new URLSearchParams(location.search).get("video");

function fmt(n) { return Number(n).toLocaleString("en-US"); }

function show(stats) {
  for (const f of FIELDS) {
    const cell = document.getElementById(f);
    // The readable count ("1.2M") where the answer has one; the exact number on hover.
    cell.textContent = stats[`${f}_display`] ?? fmt(stats[f]);
    cell.title = `${fmt(stats[f])} exactly`;
  }
  const cutoff = stats.batch_cutoff ? new Date(stats.batch_cutoff).toISOString() : "none yet";
  document.getElementById("asof").textContent =
    `as of ${new Date(stats.as_of).toISOString()} · batch cutoff ${cutoff}` + (stats.approx ? " · approximate" : "");
  const body = document.querySelector("#rejected tbody");
  body.replaceChildren();
  const reasons = Object.entries(stats.rejected || {}).sort((a, b) => b[1] - a[1]);
  if (!reasons.length) body.innerHTML = "<tr><td>none</td></tr>";
  for (const [reason, n] of reasons) {
    const row = body.insertRow();
    row.insertCell().textContent = reason.replaceAll("_", " ");
    const cell = row.insertCell(); cell.className = "n"; cell.textContent = fmt(n);
  }
}

function watch(id) {
  video = id;
  document.getElementById("video").value = id;
  history.replaceState(null, "", `?video=${encodeURIComponent(id)}`);
  if (source) source.close();
  source = new EventSource(`/v1/videos/${encodeURIComponent(id)}/live`);
  const status = document.getElementById("status");
  source.addEventListener("open", () => { status.textContent = "live"; });
  source.addEventListener("stats", (e) => { status.textContent = "live"; show(JSON.parse(e.data)); });
  source.addEventListener("error", () => { status.textContent = "reconnecting…"; });
  chart();
}

async function chart() {
  if (!video) return;
  const answer = await fetch(`/v1/videos/${encodeURIComponent(video)}/timeseries?buckets=60`);
  if (!answer.ok) return;
  const points = (await answer.json()).points;
  const svg = document.getElementById("chart");
  svg.replaceChildren();
  const max = Math.max(1, ...points.map((p) => p.views));
  const width = 600 / Math.max(points.length, 1);
  points.forEach((p, i) => {
    const h = (p.views / max) * 150;
    const bar = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    bar.setAttribute("x", String(i * width + 1));
    bar.setAttribute("y", String(160 - h));
    bar.setAttribute("width", String(Math.max(width - 2, 1)));
    bar.setAttribute("height", String(h));
    bar.setAttribute("class", `bar ${p.source}`);
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = `${new Date(p.start_ms).toISOString()}: ${p.views} views (${p.source})`;
    bar.appendChild(title);
    svg.appendChild(bar);
  });
}

async function trending() {
  const answer = await fetch("/v1/trending?limit=10");
  if (!answer.ok) return;
  const list = document.getElementById("trending");
  list.replaceChildren();
  const top = (await answer.json()).videos;
  for (const entry of top) {
    const item = document.createElement("li");
    item.textContent = `${entry.video_id} — ${fmt(entry.views)} views`;
    item.addEventListener("click", () => watch(entry.video_id));
    list.appendChild(item);
  }
  if (!video && top.length) watch(top[0].video_id);
}

document.getElementById("pick").addEventListener("submit", (e) => {
  e.preventDefault();
  const id = document.getElementById("video").value.trim();
  if (id) watch(id);
});

if (video) watch(video);
trending();
setInterval(trending, 5000);
setInterval(chart, 5000);
