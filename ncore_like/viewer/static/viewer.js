// ncore-like view: the page. Plain JavaScript, no framework, no build step; it draws on
// canvases. The server sends JSON (the tree, a node's details) and binary previews (see
// ncore_like/viewer/_previews.py for their layout).
"use strict";

// -- small helpers ---------------------------------------------------------------------

const $ = (selector, root = document) => root.querySelector(selector);

// node.replaceChildren, leaving out missing children (the DOM would write "null").
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((child) => child !== null && child !== undefined && child !== false));
  return node;
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "style") Object.assign(node.style, value); // CSSOM: the policy forbids style attributes
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else if (key in node) node[key] = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function api(name, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) query.set(key, value);
  return `/api/${name}?${query}`;
}

class ApiError extends Error {
  constructor(name, message) {
    super(message);
    this.name = name;
  }
}

async function failure(response) {
  try {
    const body = await response.json();
    return new ApiError(body.error || `HTTP ${response.status}`, body.message || response.statusText);
  } catch (_) {
    return new ApiError(`HTTP ${response.status}`, response.statusText);
  }
}

async function getJSON(name, params) {
  const response = await fetch(api(name, params));
  if (!response.ok) throw await failure(response);
  return response.json();
}

function errorBox(error) {
  return el("div", { class: "error", role: "alert", text: `${error.name}: ${error.message}` });
}

function formatBytes(size) {
  if (size === null || size === undefined) return "–";
  if (size < 1024) return `${size} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = size;
  for (const unit of units) {
    value /= 1024;
    if (value < 1024 || unit === "TiB") return `${value.toFixed(1)} ${unit}`;
  }
  return `${size} B`;
}

function formatNumber(value) {
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  const text = Math.abs(value) >= 1e6 || (Math.abs(value) < 1e-3 && value !== 0) ? value.toExponential(4) : value.toPrecision(6);
  return text.includes("e") ? text : text.replace(/\.?0+$/, "");
}

function shapeText(shape) {
  return `(${shape.join(", ")}${shape.length === 1 ? "," : ""})`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Viridis, by five anchors: value in [0, 1] -> [r, g, b].
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function viridis(t) {
  const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const a = VIRIDIS[i], b = VIRIDIS[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

// Percentile of the finite values of a strided column (a sample is enough for bounds).
function percentiles(data, stride, column, count, qs) {
  const step = Math.max(1, Math.floor(count / 20000));
  const sample = [];
  for (let i = 0; i < count; i += step) {
    const v = data[i * stride + column];
    if (Number.isFinite(v)) sample.push(v);
  }
  if (!sample.length) return qs.map(() => 0);
  sample.sort((a, b) => a - b);
  return qs.map((q) => sample[Math.min(sample.length - 1, Math.floor(q * (sample.length - 1)))]);
}

// Tick values for an axis: about `count` round numbers in [low, high].
function ticks(low, high, count = 5) {
  if (!(high > low)) return [low];
  const raw = (high - low) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(low / step) * step; v <= high + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

// -- binary previews ---------------------------------------------------------------------

async function fetchPreview(path, view, index) {
  const response = await fetch(api("preview", { path, view, index }));
  if (!response.ok) throw await failure(response);
  const buffer = await response.arrayBuffer();
  const length = new DataView(buffer).getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 4, length)));
  const offset = 4 + length;
  let data = null;
  if (header.dtype === "float64") data = new Float64Array(buffer, offset);
  else if (header.dtype === "float32") data = new Float32Array(buffer, offset);
  else if (header.dtype === "uint8") data = new Uint8Array(buffer, offset);
  return { header, data };
}

// -- the tree ----------------------------------------------------------------------------

const state = { tree: null, selected: null, cleanup: [] };

function treeItem(node) {
  const hasMembers = node.kind === "group" && node.members.length > 0;
  const label = node.kind === "group" ? `${node.name || "/"}${node.path ? "/" : ""}` : node.name;
  let meta = "";
  if (node.kind === "group" && node.frames) meta = `${node.frames} frames`;
  else if (node.kind === "blob") meta = `blob, ${formatBytes(node.shape.length ? node.shape[0] : 0)}`;
  else if (node.kind === "array") meta = `${node.dtype} ${shapeText(node.shape)}`;
  const item = el(
    "li",
    { "data-kind": node.kind },
    el("span", {
      class: "twisty",
      text: hasMembers ? "▾" : "",
      onclick: (event) => {
        const li = event.target.closest("li");
        li.classList.toggle("collapsed");
        event.target.textContent = li.classList.contains("collapsed") ? "▸" : "▾";
      },
    }),
    el("a", { href: hashOf(node.path), "data-path": node.path, "data-kind": node.kind, text: label }),
    meta ? el("span", { class: "meta", text: meta }) : null,
  );
  if (hasMembers) item.append(el("ul", {}, node.members.map(treeItem)));
  return item;
}

function renderTree(document_) {
  const nav = $("#tree");
  fill(nav, el("ul", {}, treeItem(document_.tree)));
  const name = $("#archive-name");
  name.textContent = document_.name.replace(/\/+$/, "").split("/").pop() || document_.name;
  name.title = document_.name;
  const facts = [];
  if (document_.file_size !== null) facts.push(formatBytes(document_.file_size));
  if (document_.checksums !== null) facts.push(document_.checksums ? "CRC32C per record" : "no checksums");
  $("#archive-facts").textContent = facts.join(" · ");
  document.title = `ncore-like view: ${document_.name}`;
}

function markSelected(path) {
  for (const link of document.querySelectorAll("#tree a.selected")) link.classList.remove("selected");
  const link = document.querySelector(`#tree a[data-path="${CSS.escape(path)}"]`);
  if (link) link.classList.add("selected");
}

// -- a node's details --------------------------------------------------------------------

function factsTable(rows) {
  return el(
    "table",
    { class: "facts" },
    rows.filter(([, value]) => value !== undefined).map(([label, value]) => el("tr", {}, el("th", { text: label }), el("td", { text: value }))),
  );
}

function attributesBlock(attributes, title = "attributes") {
  const keys = Object.keys(attributes || {});
  return el(
    "div",
    { class: "attributes-block" },
    el("h3", { text: `${title} (${keys.length})` }),
    keys.length ? el("pre", { class: "attributes", text: JSON.stringify(attributes, null, 2) }) : el("p", { class: "muted", text: "none" }),
  );
}

function renderDetails(details) {
  const section = $("#details");
  const rows = [["kind", details.kind]];
  if (details.path === "" && state.tree) rows.push(["location", state.tree.name]);
  if (details.kind === "group") {
    rows.push(["zarr format", String(details.zarr_format)]);
    const m = details.members;
    rows.push(["members", `${m.group} groups, ${m.array} arrays, ${m.blob} blobs`]);
    if (details.frames) rows.push(["frames", `${details.frames.length} (a timeline below)`]);
  } else {
    rows.push(["shape", shapeText(details.shape)], ["dtype", details.dtype], ["chunks", shapeText(details.chunks)]);
    rows.push(["codecs", details.codecs.label]);
    rows.push(["raw size", formatBytes(details.nbytes)]);
    const stored = details.stored_bytes;
    const ratio = stored ? ` (ratio ${(details.nbytes / stored).toFixed(2)})` : "";
    rows.push(["stored size", stored === null ? "not summed (very many chunks)" : `${formatBytes(stored)}${ratio}`]);
    rows.push(["chunks stored", details.chunks_stored === null ? "–" : `${details.chunks_stored} of ${details.chunks_total}`]);
  }
  const chain = details.codecs ? details.codecs.chain : [];
  fill(section, 
    el("h2", { text: `/${details.path}` }),
    factsTable(rows),
    chain.length
      ? el("details", {}, el("summary", { class: "muted", text: "codecs as stored" }), el("pre", { class: "attributes", text: JSON.stringify(chain, null, 2) }))
      : null,
    attributesBlock(details.attributes),
  );
}

// -- blobs: images or hex ----------------------------------------------------------------

// Blobs fetched (or being fetched) by path, a few around the frame shown.
const blobs = new Map();
const BLOBS_KEPT = 24;

function loadBlob(path) {
  let entry = blobs.get(path);
  if (!entry) {
    entry = fetch(api("blob", { path })).then(async (response) => {
      if (!response.ok) throw await failure(response);
      const type = response.headers.get("Content-Type").split(";")[0];
      const size = Number(response.headers.get("X-Blob-Size"));
      const blob = await response.blob();
      return { path, type, size, blob, url: type.startsWith("image/") ? URL.createObjectURL(blob) : null };
    });
    entry.catch(() => blobs.delete(path)); // errors are not kept: the next look asks again
    blobs.set(path, entry);
  } else {
    blobs.delete(path); // most recently used last
    blobs.set(path, entry);
  }
  while (blobs.size > BLOBS_KEPT) {
    const [oldest, promise] = blobs.entries().next().value;
    blobs.delete(oldest);
    promise.then((b) => b.url && URL.revokeObjectURL(b.url), () => {});
  }
  return entry;
}

function hexDump(bytes) {
  const lines = [];
  for (let offset = 0; offset < bytes.length; offset += 16) {
    const row = bytes.subarray(offset, offset + 16);
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = Array.from(row, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${offset.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${text}`);
  }
  return lines.join("\n");
}

// Shows a blob in `img` (an image) or `hexBox` (other bytes); `info` says what it is.
async function showBlob(loaded, img, hexBox, info) {
  hexBox.hidden = true;
  if (loaded.url) {
    img.src = loaded.url;
    try {
      await img.decode();
      img.hidden = false;
      info.textContent = `${img.naturalWidth} × ${img.naturalHeight} px · ${loaded.type} · ${formatBytes(loaded.size)}`;
      img.dataset.width = img.naturalWidth;
      img.dataset.height = img.naturalHeight;
      return;
    } catch (_) {
      img.hidden = true;
      img.removeAttribute("src");
      info.textContent = `starts like ${loaded.type} but doesn't decode as one · ${formatBytes(loaded.size)}`;
    }
  } else {
    img.hidden = true;
    img.removeAttribute("src");
    info.textContent = `binary, ${formatBytes(loaded.size)}`;
  }
  const bytes = new Uint8Array(await loaded.blob.slice(0, 4096).arrayBuffer());
  hexBox.textContent = hexDump(bytes) + (loaded.size > bytes.length ? `\n… ${loaded.size - bytes.length} more bytes` : "");
  hexBox.hidden = false;
}

function renderBlob(details) {
  const img = el("img", { id: "frame", alt: details.name, hidden: true });
  const hexBox = el("pre", { class: "hex", hidden: true });
  const info = el("p", { class: "muted", text: `blob, ${formatBytes(details.size)}: reading…` });
  const errorSlot = el("div");
  fill($("#preview"), el("h3", { text: "content" }), info, errorSlot, img, hexBox);
  loadBlob(details.path).then(
    (loaded) => showBlob(loaded, img, hexBox, info),
    (error) => {
      info.textContent = "";
      fill(errorSlot, errorBox(error));
    },
  );
}

// -- a group of frames: the timeline -----------------------------------------------------

function renderTimeline(details, start = 0) {
  const frames = details.frames;
  const fps = Number(details.attributes.fps) > 0 ? Number(details.attributes.fps) : 10;
  const slider = el("input", { type: "range", id: "frame-slider", min: 0, max: frames.length - 1, value: start, "aria-label": "frame" });
  const label = el("span", { class: "label", id: "frame-label" });
  const info = el("p", { class: "muted", id: "frame-info" });
  const errorSlot = el("div", { id: "frame-error" });
  const img = el("img", { id: "frame", alt: "frame", hidden: true });
  const hexBox = el("pre", { class: "hex", hidden: true });
  const frameAttributes = el("div", { id: "frame-attributes" });
  let current = -1;
  let shown = 0; // bumped by every request to show a frame: late answers are dropped
  let playing = false;
  const play = el("button", { id: "play", title: "play / pause (space)", text: "▶ play" });

  async function show(index) {
    index = Math.max(0, Math.min(frames.length - 1, index));
    const ticket = ++shown;
    current = index;
    slider.value = index;
    const path = frames[index];
    label.textContent = `${index + 1} / ${frames.length} · ${path.split("/").pop()}`;
    img.dataset.index = "";
    try {
      const [loaded, frameDetails] = await Promise.all([loadBlob(path), details.frame_attributes ? getJSON("node", { path }) : { attributes: {} }]);
      if (ticket !== shown) return;
      fill(errorSlot, );
      await showBlob(loaded, img, hexBox, info);
      if (ticket !== shown) return;
      img.dataset.index = index;
      img.dataset.path = path;
      const attributes = frameDetails.attributes;
      fill(frameAttributes, Object.keys(attributes).length ? attributesBlock(attributes, "frame attributes") : "");
    } catch (error) {
      if (ticket !== shown) return;
      // Never the previous frame's pixels under this frame's number.
      img.hidden = true;
      img.removeAttribute("src");
      hexBox.hidden = true;
      info.textContent = "";
      fill(errorSlot, errorBox(error));
      img.dataset.index = "";
      img.dataset.error = index;
    }
    for (let ahead = 1; ahead <= 2 && index + ahead < frames.length; ahead++) loadBlob(frames[index + ahead]).catch(() => {});
  }

  async function run() {
    playing = true;
    play.textContent = "❚❚ pause";
    play.classList.add("active");
    while (playing && current < frames.length - 1) {
      const started = performance.now();
      await show(current + 1);
      await sleep(Math.max(0, 1000 / fps - (performance.now() - started)));
    }
    stop();
  }
  function stop() {
    playing = false;
    play.textContent = "▶ play";
    play.classList.remove("active");
  }
  play.addEventListener("click", () => (playing ? stop() : run()));
  slider.addEventListener("input", () => show(Number(slider.value)));
  const keys = (event) => {
    if (event.target.tagName === "INPUT" && event.target !== slider) return;
    if (event.key === "ArrowRight") { event.preventDefault(); show(current + 1); }
    else if (event.key === "ArrowLeft") { event.preventDefault(); show(current - 1); }
    else if (event.key === " ") { event.preventDefault(); playing ? stop() : run(); }
  };
  document.addEventListener("keydown", keys);
  state.cleanup.push(() => { stop(); document.removeEventListener("keydown", keys); });

  fill($("#preview"), 
    el("h3", { text: `timeline: ${frames.length} frames at ${fps} fps` }),
    el(
      "div",
      { class: "controls" },
      el("button", { id: "first", title: "first frame", text: "|◀", onclick: () => show(0) }),
      el("button", { id: "prev", title: "previous frame (←)", text: "◀", onclick: () => show(current - 1) }),
      play,
      el("button", { id: "next", title: "next frame (→)", text: "▶|", onclick: () => show(current + 1) }),
      slider,
      label,
    ),
    info,
    errorSlot,
    img,
    hexBox,
    frameAttributes,
  );
  show(start);
}

// -- numeric arrays: statistics and plots ------------------------------------------------

function statsTable(header, labels) {
  const names = ["count", "min", "max", "mean", "std", "nan"];
  const rows = [];
  if (header.column_stats && header.column_stats.length) {
    header.column_stats.forEach((stats, i) => rows.push([labels[i] ?? String(i), stats]));
  }
  rows.push(["all", header.stats]);
  return el("div", { class: "stats-box" }, el(
    "table",
    { class: "stats", id: "stats" },
    el("tr", {}, el("th", { text: "" }), names.map((name) => el("th", { text: name }))),
    rows.map(([label, stats]) => el("tr", {}, el("th", { text: label }), names.map((name) => el("td", { text: name in stats ? formatNumber(stats[name]) : "–" })))),
  ));
}

// A canvas of width x height CSS pixels, backed by as many pixels as the screen has there
// (sharp lines and text on high-density screens).
function canvas(id, width, height, className = "") {
  const node = el("canvas", { id, class: className });
  const ratio = window.devicePixelRatio || 1;
  node.width = Math.round(width * ratio);
  node.height = Math.round(height * ratio);
  node.style.width = `${width}px`;
  node.dataset.ratio = String(ratio);
  return node;
}

// The canvas's 2-D context drawing in CSS pixels, with its size in CSS pixels and its ratio.
function surface(target) {
  const ratio = Number(target.dataset.ratio || 1);
  const ctx = target.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { ctx, W: target.width / ratio, H: target.height / ratio, ratio };
}

// A line plot of the chosen columns of (rows, k) values (or their per-bucket min and max).
function drawSeries(target, header, data, shown, labels) {
  const { ctx, W, H } = surface(target);
  const left = 64, right = 12, top = 12, bottom = 28;
  ctx.clearRect(0, 0, W, H);
  const [layers, rows, k] = header.shape;
  let low = Infinity, high = -Infinity;
  for (const c of shown) {
    for (let l = 0; l < layers; l++) {
      for (let r = 0; r < rows; r++) {
        const v = data[(l * rows + r) * k + c];
        if (Number.isFinite(v)) { if (v < low) low = v; if (v > high) high = v; }
      }
    }
  }
  if (!Number.isFinite(low)) { low = 0; high = 1; }
  if (high === low) { high += 0.5; low -= 0.5; }
  // Values far from zero next to their range (timestamps) are labelled from an offset.
  const offset = Math.abs(low) > 1e4 * (high - low) ? low : 0;
  const total = rows * header.step;
  const x = (r) => left + ((r * header.step) / Math.max(1, total - 1)) * (W - left - right);
  const y = (v) => top + (1 - (v - low) / (high - low)) * (H - top - bottom);
  ctx.strokeStyle = "#dde1e5"; ctx.fillStyle = "#6b7075"; ctx.font = "12px sans-serif"; ctx.lineWidth = 1;
  for (const t of ticks(low, high)) {
    ctx.beginPath(); ctx.moveTo(left, y(t)); ctx.lineTo(W - right, y(t)); ctx.stroke();
    ctx.textAlign = "right"; ctx.fillText(formatNumber(Number((t - offset).toPrecision(6))), left - 4, y(t) + 4);
  }
  if (offset) { ctx.textAlign = "left"; ctx.fillText(`values − ${offset}`, left + 4, top + 12); }
  ctx.textAlign = "center";
  for (const t of ticks(0, Math.max(1, total - 1 + header.rows[0]), 6)) {
    const r = (t - header.rows[0]) / header.step;
    if (r < 0 || r > rows) continue;
    ctx.fillText(String(t), x(r), H - 8);
  }
  ctx.strokeStyle = "#888"; ctx.strokeRect(left, top, W - left - right, H - top - bottom);
  shown.forEach((c, n) => {
    ctx.strokeStyle = PALETTE[n % PALETTE.length];
    ctx.lineWidth = 1.5;
    for (let l = 0; l < layers; l++) {
      ctx.beginPath();
      let drawing = false;
      for (let r = 0; r < rows; r++) {
        const v = data[(l * rows + r) * k + c];
        if (!Number.isFinite(v)) { drawing = false; continue; }
        if (drawing) ctx.lineTo(x(r), y(v)); else ctx.moveTo(x(r), y(v));
        drawing = true;
      }
      ctx.stroke();
    }
  });
  target.dataset.drawn = String(shown.length);
}

// An image of (h, w) values (viridis between the minimum and maximum) or (h, w, 3|4) colours.
function drawImage(target, header, data) {
  const [h, w, channels = 1] = header.shape;
  target.width = w;
  target.height = h;
  const ctx = target.getContext("2d");
  const image = ctx.createImageData(w, h);
  const out = image.data;
  if (header.dtype === "uint8") {
    for (let i = 0; i < w * h; i++) {
      out[4 * i] = data[i * channels];
      out[4 * i + 1] = data[i * channels + 1];
      out[4 * i + 2] = data[i * channels + 2];
      out[4 * i + 3] = channels === 4 ? data[i * channels + 3] : 255;
    }
  } else {
    const low = header.stats.min ?? 0, high = header.stats.max ?? 1;
    const span = high > low ? high - low : 1;
    for (let i = 0; i < w * h; i++) {
      const [r, g, b] = viridis((data[i] - low) / span);
      out[4 * i] = r; out[4 * i + 1] = g; out[4 * i + 2] = b; out[4 * i + 3] = Number.isFinite(data[i]) ? 255 : 0;
    }
  }
  ctx.putImageData(image, 0, 0);
  target.style.width = `${Math.min(900, Math.max(w, 300))}px`;
  target.dataset.drawn = "1";
}

// Points from above: x to the right, y up, equal scales, coloured by one column.
function drawPoints(target, header, data, colour) {
  const { ctx, W, H, ratio } = surface(target);
  const DW = target.width; // the pixels are set in the canvas's own pixels
  const [count, k] = header.shape;
  const [x0, x1] = percentiles(data, k, 0, count, [0.005, 0.995]);
  const [y0, y1] = percentiles(data, k, 1, count, [0.005, 0.995]);
  const [c0, c1] = percentiles(data, k, colour, count, [0.01, 0.99]);
  const margin = 16;
  const scale = Math.min((W - 2 * margin) / Math.max(x1 - x0, 1e-9), (H - 2 * margin - 24) / Math.max(y1 - y0, 1e-9));
  const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
  const image = ctx.createImageData(target.width, target.height);
  const out = image.data;
  for (let i = 0; i < out.length; i += 4) { out[i] = 17; out[i + 1] = 17; out[i + 2] = 17; out[i + 3] = 255; }
  let drawn = 0;
  const dot = Math.max(1, Math.round((count < 50000 ? 2 : 1) * ratio)); // sparse clouds in dots of 2x2
  const plotBottom = (H - 24) * ratio - dot;
  for (let i = 0; i < count; i++) {
    const px = Math.round((W / 2 + (data[i * k] - cx) * scale) * ratio);
    const py = Math.round(((H - 24) / 2 - (data[i * k + 1] - cy) * scale) * ratio);
    if (!(px >= 0 && px < DW && py >= 0 && py < plotBottom)) continue;
    const [r, g, b] = viridis((data[i * k + colour] - c0) / (c1 > c0 ? c1 - c0 : 1));
    for (let dy = 0; dy < dot; dy++) {
      for (let dx = 0; dx < dot && px + dx < DW; dx++) {
        const o = 4 * ((py + dy) * DW + px + dx);
        out[o] = r; out[o + 1] = g; out[o + 2] = b;
      }
    }
    drawn++;
  }
  ctx.putImageData(image, 0, 0);
  // The colour bar of the column, and a scale bar of a round length.
  const barWidth = Math.min(160, W / 3), barLeft = W - barWidth - 40;
  for (let x = 0; x < barWidth; x++) {
    const [r, g, b] = viridis(x / (barWidth - 1));
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(barLeft + x, H - 16, 1, 8);
  }
  ctx.fillStyle = "#ddd"; ctx.font = "12px sans-serif";
  ctx.textAlign = "right"; ctx.fillText(formatNumber(Number(c0.toPrecision(4))), barLeft - 4, H - 8);
  ctx.textAlign = "left"; ctx.fillText(formatNumber(Number(c1.toPrecision(4))), barLeft + barWidth + 4, H - 8);
  const target_ = (W / 5) / scale;
  const power = 10 ** Math.floor(Math.log10(target_));
  const length = [5, 2, 1].map((m) => m * power).find((v) => v <= target_) || power;
  ctx.fillRect(12, H - 14, length * scale, 2);
  ctx.fillText(`${formatNumber(length)}  (x →, y ↑)`, 18 + length * scale, H - 8);
  target.dataset.drawn = String(drawn);
}

function renderArray(details) {
  const plan = details.preview;
  const views = Object.keys(plan.views);
  const area = $("#preview");
  if (!views.length) {
    fill(area, el("p", { class: "muted", text: "no preview for this dtype" }));
    return;
  }
  let view = views[0];
  let index = 0;
  const viewButtons = el("div", { class: "controls" }, el("span", { class: "muted", text: "show as" }),
    views.map((name) => el("button", { "data-view": name, text: name, onclick: () => { view = name; index = 0; load(); } })));
  const body = el("div", { id: "preview-body" });
  fill(area, el("h3", { text: "values" }), views.length > 1 ? viewButtons : null, body);
  let loading = 0;

  async function load() {
    for (const button of viewButtons.querySelectorAll("button")) button.classList.toggle("active", button.dataset.view === view);
    const ticket = ++loading;
    const lead = plan.views[view].lead;
    const count = lead.reduce((a, b) => a * b, 1);
    let result;
    try {
      result = await fetchPreview(details.path, view, index);
    } catch (error) {
      if (ticket === loading) fill(body, errorBox(error));
      return;
    }
    if (ticket !== loading) return;
    const { header, data } = result;
    const parts = [];
    const room = Math.max(0, body.clientWidth - 2) || 900; // canvases are drawn at the size they are shown
    if (lead.length && count > 1) {
      const slider = el("input", { type: "range", id: "index-slider", min: 0, max: count - 1, value: index, "aria-label": "index" });
      slider.addEventListener("change", () => { index = Number(slider.value); load(); });
      parts.push(el("div", { class: "controls" },
        el("button", { id: "index-prev", text: "◀", onclick: () => { if (index > 0) { index--; load(); } } }),
        el("button", { id: "index-next", text: "▶", onclick: () => { if (index < count - 1) { index++; load(); } } }),
        slider,
        el("span", { class: "label", id: "index-label", text: `[${header.lead.join(", ")}] · ${index + 1} / ${count}` })));
    }
    if (header.note) parts.push(el("p", { class: "note", text: header.note }));
    if (view === "scalar") {
      parts.push(factsTable([["value", formatNumber(header.value)]]));
    } else if (view === "text") {
      parts.push(el("pre", { class: "attributes", text: header.values.join("\n") + (header.total > header.values.length ? `\n… ${header.total - header.values.length} more` : "") }));
    } else if (view === "series" || view === "columns") {
      const labels = plan.views[view].columns || ["value"];
      let shown = view === "series" ? [0] : plan.views[view].shown.slice();
      const plot = canvas("plot", Math.min(900, room), 320);
      const legend = el("div", { class: "columns", id: "columns" });
      const redraw = () => {
        drawSeries(plot, header, data, shown, labels);
        fill(legend, ...(view === "columns" ? labels.map((name, c) => {
          const box = el("input", { type: "checkbox", checked: shown.includes(c), "data-column": c });
          box.addEventListener("change", () => { shown = labels.map((_, i) => i).filter((i) => (i === c ? box.checked : shown.includes(i))); redraw(); });
          const n = shown.indexOf(c);
          return el("label", {}, box, n >= 0 ? el("span", { class: "swatch", style: { background: PALETTE[n % PALETTE.length] } }) : null, name);
        }) : []));
      };
      parts.push(plot, legend);
      if (header.envelope) parts.push(el("p", { class: "note", text: `the minimum and maximum of every ${header.step} rows` }));
      redraw();
      parts.push(el("h3", { text: "statistics" }), statsTable(header, labels));
    } else if (view === "points") {
      const labels = plan.views.points.columns;
      let colour = plan.views.points.colour;
      const side = Math.min(640, room);
      const plot = canvas("points", side, Math.round(side * 0.75), "dark");
      const select = el("select", { id: "colour-column" }, labels.map((name, c) => el("option", { value: c, text: name, selected: c === colour })));
      select.addEventListener("change", () => { colour = Number(select.value); drawPoints(plot, header, data, colour); });
      parts.push(el("div", { class: "controls" }, el("span", { class: "muted", text: `${header.shape[0]} points${header.step > 1 ? ` (every ${header.step}th)` : ""}, from above, coloured by` }), select));
      parts.push(plot);
      drawPoints(plot, header, data, colour);
      parts.push(el("h3", { text: "statistics" }), statsTable(header, labels));
    } else if (view === "image") {
      const picture = canvas("image-canvas", 1, 1, "pixels");
      parts.push(picture);
      if (header.step > 1) parts.push(el("p", { class: "note", text: `every ${header.step}th pixel` }));
      drawImage(picture, header, data);
      parts.push(el("h3", { text: "statistics" }), statsTable(header, []));
    }
    fill(body, ...parts);
  }
  load();
}

// -- navigation --------------------------------------------------------------------------

// A node's address in the page: #/ and its path, each name percent-encoded.
function hashOf(path) {
  return `#/${path.split("/").map(encodeURIComponent).join("/")}`;
}

function pathFromHash() {
  const hash = location.hash.startsWith("#/") ? location.hash.slice(2) : "";
  try {
    return hash.split("/").map(decodeURIComponent).join("/");
  } catch (_) {
    return hash;
  }
}

async function select(path) {
  for (const clean of state.cleanup.splice(0)) clean();
  state.selected = path;
  markSelected(path);
  fill($("#preview"), );
  let details;
  try {
    details = await getJSON("node", { path });
  } catch (error) {
    if (state.selected === path) fill($("#details"), errorBox(error));
    return;
  }
  if (state.selected !== path) return;
  renderDetails(details);
  if (details.kind === "group" && details.frames) renderTimeline(details);
  else if (details.kind === "blob" && details.frame_of) {
    const group = await getJSON("node", { path: details.frame_of.group });
    if (state.selected === path) renderTimeline(group, details.frame_of.index);
  } else if (details.kind === "blob") renderBlob(details);
  else if (details.kind === "array") renderArray(details);
  document.body.dataset.shown = path;
}

async function start() {
  let tree;
  try {
    tree = await getJSON("tree");
  } catch (error) {
    fill($("#tree"), errorBox(error));
    return;
  }
  state.tree = tree;
  renderTree(tree);
  document.body.dataset.tree = "1";
  performance.mark("ncore-like-view:tree"); // first paint, for scripts/bench_view.py
  window.addEventListener("hashchange", () => select(pathFromHash()));
  await select(pathFromHash());
  document.body.dataset.ready = "1";
}

start();
