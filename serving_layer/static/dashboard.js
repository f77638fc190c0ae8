// Tally dashboard. Without ?video=: the platform overview (/v1/overview, refreshed every few
// seconds). With ?video=<id>: that video's live counters (server-sent events), its views per
// bucket, trending and its refused views. A figure of recent speed buckets says so (the answers'
// `scope`), and a video's page says when a batch corrected its count. Plain DOM and SVG: no
// library, works offline.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const OVERVIEW_EVERY_MS = 3000;
const FIELDS = ["views", "likes", "dislikes", "unique_viewers", "watching_now"];
const video = new URLSearchParams(location.search).get("video");

// ---- formatting -------------------------------------------------------------------------------

function fmt(n) { return Number(n).toLocaleString("en-US"); }

// A rate with the digits that matter: 2 decimals below 10, 1 below 1,000, none above.
function fmtRate(x) {
  if (x < 10) return x.toFixed(2);
  if (x < 1000) return x.toFixed(1);
  return fmt(Math.round(x));
}

function fmtPercent(share) { return (share * 100).toFixed(1); }

function fmtDuration(secs) {
  const s = Math.max(0, Math.floor(secs));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function iso(ms) { return new Date(ms).toISOString().replace(".000Z", "Z"); }

// The x axis label of a bucket start: seconds for buckets under a minute, the day for a day or more.
function clock(ms, bucketMs) {
  const text = new Date(ms).toISOString();
  if (bucketMs < 60000) return text.slice(11, 19);
  if (bucketMs < 86400000) return text.slice(11, 16);
  return text.slice(5, 10);
}

function setText(id, text) { document.getElementById(id).textContent = text; }

function build(node, attrs, text) {
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

function el(tag, attrs = {}, text = null) { return build(document.createElement(tag), attrs, text); }

function svgEl(tag, attrs = {}, text = null) { return build(document.createElementNS(SVG, tag), attrs, text); }

function videoLink(id) { return el("a", { href: `/dashboard?video=${encodeURIComponent(id)}` }, id); }

// ---- charts: axes, ticks, times ----------------------------------------------------------------

// Round tick steps (1, 2, 5 × 10^k) from 0 to at least `max`.
function ticks(max, count = 4) {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  const out = [];
  for (let t = 0; t < max + step / 2; t += step) out.push(Number(t.toPrecision(12)));
  if (out[out.length - 1] < max) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
  return out;
}

function tickLabel(v) { return v >= 1000 ? fmt(v) : String(v); }

// Draw axes, grid and labels in `svg` for `n` buckets starting at `starts`; returns the geometry
// the series are drawn with: x(i) the left edge of bucket i, width of a bucket, y(value).
function frame(svg, starts, bucketMs, max, yTitle) {
  const width = Math.max(svg.clientWidth || 600, 320);
  const height = 230;
  const m = { left: 58, right: 30, top: 12, bottom: 46 };
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.replaceChildren();
  const plotW = width - m.left - m.right;
  const plotH = height - m.top - m.bottom;
  const ys = ticks(max);
  const top = ys[ys.length - 1];
  const n = Math.max(starts.length, 1);
  const band = plotW / n;
  const geo = {
    x: (i) => m.left + i * band,
    band,
    y: (v) => m.top + plotH - (v / top) * plotH,
    bottom: m.top + plotH,
  };
  const grid = svgEl("g", { class: "grid" });
  const yAxis = svgEl("g", { class: "axis" });
  for (const t of ys) {
    const y = geo.y(t);
    grid.appendChild(svgEl("line", { x1: m.left, x2: width - m.right, y1: y, y2: y }));
    yAxis.appendChild(svgEl("text", { x: m.left - 6, y: y + 4, "text-anchor": "end" }, tickLabel(t)));
  }
  yAxis.appendChild(svgEl("line", { x1: m.left, x2: m.left, y1: m.top, y2: geo.bottom }));
  yAxis.appendChild(
    svgEl("text", {
      class: "title",
      transform: `translate(14 ${m.top + plotH / 2}) rotate(-90)`,
      "text-anchor": "middle",
    }, yTitle),
  );
  const xAxis = svgEl("g", { class: "axis" });
  xAxis.appendChild(svgEl("line", { x1: m.left, x2: width - m.right, y1: geo.bottom, y2: geo.bottom }));
  // About one time label per 90 px, counted back from the last bucket (the current one).
  const every = Math.max(1, Math.ceil(n / Math.max(1, Math.floor(plotW / 90))));
  starts.forEach((start, i) => {
    if ((n - 1 - i) % every !== 0) return;
    const x = geo.x(i) + band / 2;
    xAxis.appendChild(svgEl("line", { x1: x, x2: x, y1: geo.bottom, y2: geo.bottom + 4 }));
    xAxis.appendChild(svgEl("text", { x, y: geo.bottom + 16, "text-anchor": "middle" }, clock(start, bucketMs)));
  });
  const secs = bucketMs / 1000;
  const span = secs < 60 ? `${secs} s` : secs < 3600 ? `${secs / 60} min` : `${secs / 3600} h`;
  xAxis.appendChild(
    svgEl("text", { class: "title", x: m.left + plotW / 2, y: height - 6, "text-anchor": "middle" },
      `bucket start (UTC), buckets of ${span}`),
  );
  svg.append(grid, yAxis, xAxis);
  return geo;
}

// ---- the platform overview ---------------------------------------------------------------------

let lastOverview = null;

function overviewSeries(answer) {
  // Per bucket, counts over the seconds the bucket covers: a whole bucket, the last one up to now.
  const secs = answer.points.map((p) => Math.max(Math.min(answer.bucket_ms, answer.as_of - p.start_ms + 1), 1) / 1000);
  return [
    { cls: "events", name: "events accepted/s", values: answer.points.map((p, i) => p.events / secs[i]) },
    { cls: "views", name: "views counted/s", values: answer.points.map((p, i) => p.views / secs[i]) },
    { cls: "refused", name: "views refused/s", values: answer.points.map((p, i) => p.rejected / secs[i]) },
  ];
}

function drawOverviewChart(answer) {
  const svg = document.getElementById("ov-chart");
  const starts = answer.points.map((p) => p.start_ms);
  const series = overviewSeries(answer);
  const max = Math.max(0, ...series.flatMap((s) => s.values));
  const geo = frame(svg, starts, answer.bucket_ms, max, "per second");
  for (const s of series) {
    const xy = s.values.map((v, i) => [geo.x(i) + geo.band / 2, geo.y(v)]);
    svg.appendChild(svgEl("polyline", { class: `line ${s.cls}`, points: xy.map((p) => p.join(",")).join(" ") }));
    xy.forEach(([x, y], i) => {
      const dot = svgEl("circle", { class: `dot ${s.cls}`, cx: x, cy: y, r: 2.6 });
      dot.appendChild(svgEl("title", {}, `${iso(starts[i])}: ${fmtRate(s.values[i])} ${s.name}`));
      svg.appendChild(dot);
    });
  }
}

function showOverview(answer) {
  lastOverview = answer;
  const section = document.getElementById("overview");
  section.dataset.asOf = String(answer.as_of);
  const windowText = `the last ${fmtDuration(answer.window_secs)}`;
  setText("ov-events-rate", fmtRate(answer.events_per_sec));
  setText("ov-events-sub", `${fmt(answer.events)} events in ${windowText}`);
  setText("ov-views-rate", fmtRate(answer.views_per_sec));
  setText("ov-views-sub", `${fmt(answer.views)} views in ${windowText}`);

  const bots = answer.bot_share;
  setText("ov-bot-share", bots.share === null ? "–" : fmtPercent(bots.share));
  setText("ov-bot-sub", `${fmt(bots.rejected_views)} of ${fmt(bots.judged_views)} judged views`);
  const botRows = document.querySelector("#ov-bots tbody");
  botRows.replaceChildren();
  if (!bots.by_reason.length) botRows.appendChild(el("tr")).appendChild(el("td", {}, "none refused"));
  for (const row of bots.by_reason) {
    const tr = botRows.insertRow();
    tr.dataset.reason = row.reason;
    tr.insertCell().textContent = row.reason.replaceAll("_", " ");
    const bar = tr.insertCell();
    bar.className = "bar-cell";
    bar.appendChild(el("span", { class: "share-bar", style: `width:${(row.share * 100).toFixed(1)}%` }));
    const n = tr.insertCell(); n.className = "n views"; n.textContent = fmt(row.views);
    const pct = tr.insertCell(); pct.className = "n share"; pct.textContent = `${fmtPercent(row.share)} %`;
  }

  const lag = answer.consumer_lag;
  setText("ov-lag", lag.total === null ? "–" : fmt(lag.total));
  setText("ov-lag-sub", lag.total === null ? "broker did not answer" : `${lag.partitions.length} partitions of ${lag.topic}`);
  const lagRows = document.querySelector("#ov-partitions tbody");
  lagRows.replaceChildren();
  for (const p of lag.partitions) {
    const tr = lagRows.insertRow();
    tr.dataset.partition = String(p.partition);
    tr.insertCell().textContent = String(p.partition);
    for (const [cls, value] of [["end", p.end_offset], ["next", p.next_offset], ["lag", p.lag]]) {
      const cell = tr.insertCell();
      cell.className = `n ${cls}`;
      cell.textContent = value === null ? "–" : fmt(value);
    }
  }

  const batch = answer.batch;
  const facts = document.getElementById("ov-batch");
  facts.replaceChildren();
  if (batch === null) {
    setText("ov-batch-age", "–");
    setText("ov-batch-sub", "no batch published yet");
    facts.append(el("dt", {}, "run"), el("dd", {}, "none published yet: the counts are the speed layer's alone"));
  } else {
    setText("ov-batch-age", fmtDuration(batch.age_secs));
    setText("ov-batch-sub", batch.stale ? "older than the speed retention" : "since its cutoff");
    for (const [name, value] of [
      ["run", batch.run_id],
      ["rules", batch.rules_version],
      ["cutoff", iso(batch.cutoff)],
      ["published", iso(batch.published_at)],
      ["age", `${fmtDuration(batch.age_secs)} since the cutoff${batch.stale ? " (stale)" : ""}`],
    ]) facts.append(el("dt", {}, name), el("dd", { "data-fact": name }, value));
  }

  const scopes = answer.scopes;
  setText("ov-scope", `Events, views and refused views above: ${scopes.counts.text}.`);
  setText("ov-chart-scope", scopes.counts.text);
  setText("ov-bots-scope", scopes.bot_share.text);
  setText("ov-rising-scope", scopes.rising.text);
  setText("ov-top-scope", scopes.top.text);
  const top = document.getElementById("ov-top");
  top.replaceChildren();
  for (const v of answer.top) {
    // The total is the video page's; the window's views (what orders the list) stand beside it.
    const li = el("li");
    li.append(
      videoLink(v.video_id),
      el("span", { class: "window", title: scopes.top.text }, `+${fmt(v.window_views)} in the window`),
      el("span", { class: "n", title: "total, as on the video's page" }, `${fmt(v.views)} views`),
    );
    top.appendChild(li);
  }
  if (!answer.top.length) top.appendChild(el("li", { class: "empty" }, "no views in the window"));
  const rising = document.getElementById("ov-rising");
  rising.replaceChildren();
  for (const v of answer.rising) {
    const li = el("li");
    const rate = `${fmtRate(v.views_per_minute)}/min, was ${fmtRate(v.baseline_per_minute)} · ×${fmtRate(v.rise)}`;
    li.append(videoLink(v.video_id), el("span", { class: "n" }, rate));
    rising.appendChild(li);
  }
  if (!answer.rising.length) rising.appendChild(el("li", { class: "empty" }, "no views in the window"));
  const milestones = document.getElementById("ov-milestones");
  milestones.replaceChildren();
  for (const m of answer.milestones || []) {
    const li = el("li");
    const when = `${m.step_display} views · run ${m.run_id} · ${m.announced ? "announced" : "not announced yet"}`;
    li.append(videoLink(m.video_id), el("span", { class: "n" }, when));
    milestones.appendChild(li);
  }
  if (!(answer.milestones || []).length) milestones.appendChild(el("li", { class: "empty" }, "none reached yet"));

  const bucketSecs = answer.bucket_ms / 1000;
  setText("ov-asof", `${answer.window_buckets} buckets of ${fmtDuration(bucketSecs)} · as of ${iso(answer.as_of)}`);
  const degraded = document.getElementById("ov-degraded");
  degraded.hidden = !answer.degraded.length;
  degraded.textContent = answer.degraded.join(" · ");
  drawOverviewChart(answer);
}

async function refreshOverview() {
  const status = document.getElementById("status");
  const windowBuckets = document.getElementById("ov-window").value;
  try {
    const answer = await fetch(`/v1/overview?window_buckets=${windowBuckets}`);
    const body = await answer.json();
    if (!answer.ok) {
      status.textContent = body.errors ? body.errors.map((e) => e.reason).join("; ") : `error ${answer.status}`;
      return;
    }
    showOverview(body);
    status.textContent = `updated ${iso(body.as_of).slice(11, 19)} UTC`;
  } catch (error) {
    status.textContent = `serving API not reachable (${error.message})`;
  }
}

function startOverview() {
  document.getElementById("overview").hidden = false;
  document.getElementById("to-overview").classList.add("current");
  document.title = "Tally — platform overview";
  const windowParam = new URLSearchParams(location.search).get("window");
  const select = document.getElementById("ov-window");
  if (windowParam && [...select.options].some((o) => o.value === windowParam)) select.value = windowParam;
  select.addEventListener("change", () => {
    history.replaceState(null, "", `?window=${select.value}`);
    refreshOverview();
  });
  refreshOverview();
  setInterval(refreshOverview, OVERVIEW_EVERY_MS);
}

// ---- one video ---------------------------------------------------------------------------------

let lastSeries = null;

function showStats(stats) {
  for (const f of FIELDS) {
    const cell = document.getElementById(f);
    // The readable count ("1.2M") where the answer has one; the exact number on hover.
    cell.textContent = stats[`${f}_display`] ?? fmt(stats[f]);
    cell.title = `${fmt(stats[f])} exactly`;
  }
  const cutoff = stats.batch_cutoff ? iso(stats.batch_cutoff) : "none yet";
  setText("asof", `as of ${iso(stats.as_of)} · batch cutoff ${cutoff}` + (stats.approx ? " · approximate" : ""));
  showCorrection(stats);
  const body = document.querySelector("#rejected tbody");
  body.replaceChildren();
  const reasons = Object.entries(stats.rejected || {}).sort((a, b) => b[1] - a[1]);
  if (!reasons.length) body.appendChild(el("tr")).appendChild(el("td", {}, "none"));
  for (const [reason, n] of reasons) {
    const row = body.insertRow();
    row.insertCell().textContent = reason.replaceAll("_", " ");
    const cell = row.insertCell(); cell.className = "n"; cell.textContent = fmt(n);
  }
}

// Say when the served batch corrected the speed layer's count of the buckets before its cutoff
// (the count moved at its publish: a bot burst the batch refused, most often).
function showCorrection(stats) {
  const note = document.getElementById("corrected");
  const n = stats.corrected_by_batch;
  note.hidden = !n;
  if (!n) return;
  const batch = `The batch up to ${iso(stats.batch_cutoff)} (run ${stats.batch_run_id})`;
  note.textContent = n > 0
    ? `${batch} took ${fmt(n)} views off the speed layer's count before its cutoff: views it refused ` +
      "(a bot burst, say) that the speed layer had counted. The count fell by that much when it was published."
    : `${batch} added ${fmt(-n)} views the speed layer had not counted before its cutoff. ` +
      "The count rose by that much when it was published.";
}

function drawVideoChart(answer) {
  const svg = document.getElementById("chart");
  const points = answer.points;
  const geo = frame(svg, points.map((p) => p.start_ms), answer.bucket_ms, Math.max(0, ...points.map((p) => p.views)), "views");
  points.forEach((p, i) => {
    const y = geo.y(p.views);
    const bar = svgEl("rect", {
      class: `bar ${p.source}`,
      x: geo.x(i) + Math.min(1, geo.band / 4),
      y,
      width: Math.max(geo.band - Math.min(2, geo.band / 2), 0.5),
      height: geo.bottom - y,
    });
    bar.appendChild(svgEl("title", {}, `${iso(p.start_ms)}: ${fmt(p.views)} views, ${fmt(p.rejected)} refused (${p.source})`));
    svg.appendChild(bar);
  });
}

async function refreshVideoChart() {
  const answer = await fetch(`/v1/videos/${encodeURIComponent(video)}/timeseries?buckets=60`);
  if (!answer.ok) return;
  lastSeries = await answer.json();
  drawVideoChart(lastSeries);
}

async function refreshTrending() {
  const answer = await fetch("/v1/trending?limit=10");
  if (!answer.ok) return;
  const body = await answer.json();
  setText("trending-scope", `views in the window: ${body.scope.text}`);
  const list = document.getElementById("trending");
  list.replaceChildren();
  for (const entry of body.videos) {
    const item = el("li");
    item.append(videoLink(entry.video_id), ` — ${fmt(entry.views)} views in the window`);
    list.appendChild(item);
  }
}

function startVideo() {
  document.getElementById("video-view").hidden = false;
  document.getElementById("video").value = video;
  setText("video-name", video);
  document.title = `Tally — ${video}`;
  const status = document.getElementById("status");
  const source = new EventSource(`/v1/videos/${encodeURIComponent(video)}/live`);
  source.addEventListener("open", () => { status.textContent = "live"; });
  let views = null;
  source.addEventListener("stats", (e) => {
    status.textContent = "live";
    const stats = JSON.parse(e.data);
    showStats(stats);
    if (views !== null && stats.views !== views) refreshVideoChart();  // new views: the chart follows
    views = stats.views;
  });
  source.addEventListener("error", () => { status.textContent = "reconnecting…"; });
  refreshVideoChart();
  refreshTrending();
  setInterval(refreshVideoChart, 5000);
  setInterval(refreshTrending, 5000);
}

window.addEventListener("resize", () => {
  if (lastOverview) drawOverviewChart(lastOverview);
  if (lastSeries) drawVideoChart(lastSeries);
});

if (video) startVideo(); else startOverview();
