// Graph view front end: shows the SVG Python laid out, pans/zooms it, and turns clicks
// into changes of the synced `selected` trait (Python does everything else).
//   click: select that node only (click it again when it is the only one: select none)
//   shift-click: add / remove it
//   double-click: collapse the innermost composite/scope it belongs to / expand a
//     collapsed one; shift-double-click: collapse the container around it
//   ctrl+wheel / pinch (or the wheel after a click inside): zoom at the cursor; a plain
//     wheel scrolls the notebook; drag: pan; "fit": the graph, or (too large to read
//     whole) its width at a readable zoom around what is in view
//   minimap (right of the view, beside it): the whole drawing and the visible region;
//     click or drag in it to move there
//   `focus` ([box id, n]) from Python (search): centre that box at a readable zoom
//   SVG / PNG: download the drawing
//   a restarted kernel: a banner says the app is dead and how to reopen it
//   breadcrumb (top left, under the buttons): the scopes and composite around the
//     selected node; clicking one collapses it into one box
//   source map: hovering a node highlights the code panel's lines computing it (lines
//     carry data-nodes, see source_map.py); hovering a line highlights its nodes,
//     clicking it centres them

const MIN_READABLE = 0.5;   // below this zoom the 9 pt labels cannot be read
const MAX_FIT = 1.5;
const CLAMP = 48;           // px of the drawing a redraw always leaves in view

function button(text, title, onClick) {
  const b = document.createElement("button");
  b.className = "wb-graph-button";
  b.textContent = text;
  b.title = title;
  b.addEventListener("click", onClick);
  return b;
}

function download(blob, name) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

function render({ model, el }) {
  el.classList.add("wb-graph-root");
  const viewport = document.createElement("div");
  viewport.className = "wb-graph";
  const stage = document.createElement("div");
  stage.className = "wb-stage";
  const legend = document.createElement("div");
  legend.className = "wb-legend";
  const tools = document.createElement("div");
  tools.className = "wb-graph-tools";
  const minimap = document.createElement("div");
  minimap.className = "wb-minimap";
  const miniImg = document.createElement("img");
  miniImg.alt = "";
  miniImg.draggable = false;
  const miniView = document.createElement("div");
  miniView.className = "wb-minimap-view";
  minimap.append(miniImg, miniView);
  const crumbs = document.createElement("div");
  crumbs.className = "wb-crumbs";
  viewport.append(stage, legend, tools, crumbs);
  // the minimap sits beside the drawing, not over it (over it, a long graph's minimap
  // covered a strip of the graph itself)
  const row = document.createElement("div");
  row.className = "wb-graph-row";
  row.append(viewport, minimap);
  el.appendChild(row);

  let scale = 1, tx = 0, ty = 0, fitted = false;
  const zoomLabel = document.createElement("span");
  zoomLabel.className = "wb-zoom";
  const svgSize = () => {
    const svg = stage.querySelector("svg");
    if (!svg || !svg.viewBox || !svg.viewBox.baseVal) return null;
    return { w: svg.viewBox.baseVal.width, h: svg.viewBox.baseVal.height };
  };
  const apply = () => {
    stage.style.transform = `translate(${tx}px, ${ty}px) scale(${scale})`;
    viewport.dataset.scale = scale.toFixed(4);
    zoomLabel.textContent = `${Math.round(scale * 100)}%`;
    drawMiniView();
  };
  // the layout point at the centre of the view
  const viewCentre = () => ({
    x: (viewport.clientWidth / 2 - tx) / scale, y: (viewport.clientHeight / 2 - ty) / scale,
  });
  const centreAt = (x, y) => {
    tx = viewport.clientWidth / 2 - x * scale;
    ty = viewport.clientHeight / 2 - y * scale;
    apply();
  };
  // whole: the "fit" button: the whole graph when it can be read whole, else its
  // width (at least MIN_READABLE) around the region in view -- a 1,000-op chain
  // whole is 3% and shows nothing; the minimap shows the whole.
  // Otherwise (a new drawing): the same width fit, showing the top.
  const fit = (whole = true) => {
    const s = svgSize();
    const vw = viewport.clientWidth, vh = viewport.clientHeight;
    if (!s || !s.w || !s.h || !vw || !vh) return false;
    const all = Math.min(vw / s.w, vh / s.h, MAX_FIT);
    if (whole && all >= MIN_READABLE) {
      scale = all;
      tx = (vw - s.w * scale) / 2;
      ty = (vh - s.h * scale) / 2;
      apply();
      return true;
    }
    const c = viewCentre();
    scale = Math.max(MIN_READABLE, Math.min(vw / s.w, whole ? 1 : MAX_FIT));
    tx = s.w * scale <= vw ? (vw - s.w * scale) / 2 : vw / 2 - Math.min(Math.max(c.x, 0), s.w) * scale;
    if (s.h * scale <= vh) ty = (vh - s.h * scale) / 2;
    else if (!whole || !fitted) ty = 8;
    else ty = vh / 2 - Math.min(Math.max(c.y, vh / 2 / scale), s.h - vh / 2 / scale) * scale;
    apply();
    return true;
  };
  const zoomAt = (mx, my, k) => {
    const ns = Math.min(8, Math.max(0.02, scale * k));
    tx = mx - (mx - tx) * (ns / scale);
    ty = my - (my - ty) * (ns / scale);
    scale = ns;
    apply();
  };

  // -- export ------------------------------------------------------------------
  const fileStem = () => (model.get("name") || "graph").replace(/[^A-Za-z0-9_-]/g, "_") || "graph";
  const svgText = () => {
    const svg = model.get("svg");
    return svg.startsWith("<?xml") ? svg : '<?xml version="1.0" encoding="UTF-8"?>\n' + svg;
  };
  const savePng = () => {
    const s = svgSize();
    if (!s) return;
    const url = URL.createObjectURL(new Blob([svgText()], { type: "image/svg+xml" }));
    const img = new Image();
    img.onload = () => {
      // twice the layout size, within what a canvas may hold
      const k = Math.min(2, 16000 / s.w, 16000 / s.h, Math.sqrt(1.2e8 / (s.w * s.h)));
      const c = document.createElement("canvas");
      c.width = Math.max(1, Math.round(s.w * k));
      c.height = Math.max(1, Math.round(s.h * k));
      const ctx = c.getContext("2d");
      ctx.fillStyle = "#ffffff";
      ctx.fillRect(0, 0, c.width, c.height);
      ctx.drawImage(img, 0, 0, c.width, c.height);
      URL.revokeObjectURL(url);
      c.toBlob((b) => b && download(b, `${fileStem()}.png`), "image/png");
    };
    img.src = url;
  };
  tools.append(
    button("fit", "fit the graph (large graphs: their width at a readable zoom; the minimap shows the whole)", () => fit()),
    button("+", "zoom in", () => zoomAt(viewport.clientWidth / 2, viewport.clientHeight / 2, 1.25)),
    button("−", "zoom out", () => zoomAt(viewport.clientWidth / 2, viewport.clientHeight / 2, 0.8)),
    zoomLabel,
    button("SVG", "download the drawing as SVG (app.save_graph('g.svg') writes it from Python)",
           () => download(new Blob([svgText()], { type: "image/svg+xml" }), `${fileStem()}.svg`)),
    button("PNG", "download the drawing as PNG (app.save_graph('g.png') writes it from Python)", savePng),
  );

  // -- minimap -------------------------------------------------------------------
  const MINI_W = 120;
  let mini = null;   // {w, h, sx, sy}: its size in px and px per layout unit on each axis
  let miniUrl = null;
  const drawMiniMap = () => {
    const s = svgSize();
    if (miniUrl) URL.revokeObjectURL(miniUrl);
    miniUrl = null;
    if (!s || !s.w || !s.h) { minimap.style.display = "none"; mini = null; return; }
    const vh = viewport.clientHeight || 520;
    const maxH = Math.max(40, vh - 2);     // as tall as the view beside it
    // at most 120 px wide: beside the drawing, every pixel it takes is the drawing's
    const k = Math.min(MINI_W / s.w, maxH / s.h);
    // very long or very wide drawings: each axis clamped to a usable size (stretched)
    const w = Math.min(MINI_W, Math.max(40, s.w * k)), h = Math.min(maxH, Math.max(40, s.h * k));
    mini = { w, h, sx: w / s.w, sy: h / s.h };
    minimap.style.display = "";
    minimap.style.width = `${w}px`;
    minimap.style.height = `${h}px`;
    // the same SVG as an image (no second copy of the node ids in the page)
    const src = model.get("svg").replace("<svg ", '<svg preserveAspectRatio="none" ');
    miniUrl = URL.createObjectURL(new Blob([src], { type: "image/svg+xml" }));
    miniImg.src = miniUrl;
    drawMiniView();
  };
  function drawMiniView() {
    if (!mini) return;
    const x0 = -tx / scale, y0 = -ty / scale;
    const x1 = x0 + viewport.clientWidth / scale, y1 = y0 + viewport.clientHeight / scale;
    const cl = (v, hi) => Math.min(Math.max(v, 0), hi);
    // nothing to navigate while the whole drawing is in view: the minimap steps aside
    const whole = x0 <= 1 && y0 <= 1 && x1 >= mini.w / mini.sx - 1 && y1 >= mini.h / mini.sy - 1;
    minimap.style.visibility = whole && !miniDown ? "hidden" : "";
    const l = cl(x0 * mini.sx, mini.w), r = cl(x1 * mini.sx, mini.w);
    const t = cl(y0 * mini.sy, mini.h), b = cl(y1 * mini.sy, mini.h);
    miniView.style.left = `${l}px`;
    miniView.style.top = `${t}px`;
    miniView.style.width = `${Math.max(2, r - l)}px`;
    miniView.style.height = `${Math.max(2, b - t)}px`;
  }
  let miniDown = false;
  const miniMove = (e) => {
    if (!mini) return;
    const r = minimap.getBoundingClientRect();
    centreAt((e.clientX - r.left) / mini.sx, (e.clientY - r.top) / mini.sy);
  };
  minimap.addEventListener("pointerdown", (e) => {
    if (e.button !== 0) return;
    e.stopPropagation();
    e.preventDefault();
    miniDown = true;
    miniMove(e);
  });

  // -- selection marks -------------------------------------------------------------
  const markSelected = () => {
    const sel = new Set(model.get("selected"));
    const members = model.get("members") || {};
    for (const g of stage.querySelectorAll("g.node")) {
      const ids = members[g.id] || [g.id];
      const n = ids.filter((i) => sel.has(i)).length;
      g.classList.toggle("wb-selected", ids.length > 0 && n === ids.length);
      // a collapsed box holding part of the selection (a search hit inside it)
      g.classList.toggle("wb-has-selected", n > 0 && n < ids.length);
    }
  };
  const drawLegend = () => {
    const entries = model.get("legend") || [];
    legend.replaceChildren();
    legend.style.display = entries.length ? "" : "none";
    if (!entries.length) return;
    const title = document.createElement("div");
    title.className = "wb-legend-title";
    title.textContent = model.get("legend_title");
    legend.appendChild(title);
    for (const e of entries) {
      const row = document.createElement("div");
      row.className = "wb-legend-row";
      const sw = document.createElement("span");
      sw.className = "wb-legend-swatch";
      sw.style.background = e.color;
      const label = document.createElement("span");
      label.textContent = e.label;
      row.append(sw, label);
      legend.appendChild(row);
    }
  };

  // -- breadcrumb: the containers around the selected node; a click closes one ------
  const drawCrumbs = () => {
    const list = model.get("crumbs") || [];
    crumbs.replaceChildren();
    crumbs.style.display = list.length ? "" : "none";
    list.forEach(([id, label], i) => {
      if (i) crumbs.append(" › ");
      const b = document.createElement("button");
      b.className = "wb-crumb";
      b.textContent = label;          // model text: as text, never markup
      b.title = `${id}: collapse ${label} into one box`;
      b.dataset.id = id;
      b.addEventListener("click", () => model.send({ type: "collapse", id }));
      crumbs.append(b);
    });
  };

  // -- focus (search) ------------------------------------------------------------
  // the drawn box of a node id: itself, or the collapsed box holding it
  const boxOf = (id) => {
    const own = stage.querySelector(`g.node[id="${CSS.escape(id)}"], g.cluster[id="${CSS.escape(id)}"]`);
    if (own) return own;
    const members = model.get("members") || {};
    for (const [box, ids] of Object.entries(members)) {
      if (ids.includes(id)) return stage.querySelector(`g.node[id="${CSS.escape(box)}"]`);
    }
    return null;
  };
  const layoutCentre = (g) => {
    const r = g.getBoundingClientRect(), sr = stage.getBoundingClientRect();
    return { x: (r.left + r.width / 2 - sr.left) / scale, y: (r.top + r.height / 2 - sr.top) / scale };
  };
  let pendingFocus = null;
  const applyFocus = () => {
    if (!pendingFocus) return;
    const g = boxOf(pendingFocus);
    if (!g || !viewport.clientWidth) return;   // not drawn yet: draw() comes back here
    pendingFocus = null;
    const c = layoutCentre(g);
    if (scale < 1) scale = 1;
    fitted = true;
    centreAt(c.x, c.y);
    g.classList.remove("wb-focus");
    void g.getBoundingClientRect();   // restart the flash
    g.classList.add("wb-focus");
    setTimeout(() => g.classList.remove("wb-focus"), 2000);
  };
  const onFocus = () => {
    const f = model.get("focus") || [];
    if (f.length) {
      pendingFocus = String(f[0]);
      setTimeout(applyFocus, 0);   // after a redraw sent with it
    }
  };

  // The view after a redraw: the part the user acted on stays where it was on screen
  // (the box double-clicked, else the first selected node, found again in the new
  // drawing even inside a collapsed box), and the view never rests on blank space --
  // a pan kept across a redraw that shrank the drawing left it showing nothing.
  let toggled = null;   // where the last double-click was: anchorAt(its box)
  const anchorAt = (g, id) => {
    const r = g.getBoundingClientRect(), vr = viewport.getBoundingClientRect();
    const x = r.left + r.width / 2 - vr.left, y = r.top + r.height / 2 - vr.top;
    const inView = x >= 0 && y >= 0 && x <= vr.width && y <= vr.height;
    return { id, x, y, inView };
  };
  const anchorBefore = () => {
    const a = toggled;
    toggled = null;
    if (a) return a;
    const id = (model.get("selected") || [])[0];
    const g = id ? boxOf(id) : null;
    return g ? anchorAt(g, id) : null;
  };
  const placeAnchor = (a, resized) => {
    const g = a ? boxOf(a.id) : null;
    if (!g || !(a.inView || resized)) return;
    const c = layoutCentre(g);
    if (a.inView) { tx = a.x - c.x * scale; ty = a.y - c.y * scale; }
    else centreAt(c.x, c.y);
  };
  // at least CLAMP px (or all) of the drawing stays inside the view
  const clampView = () => {
    const s = svgSize();
    const vw = viewport.clientWidth, vh = viewport.clientHeight;
    if (!s || !s.w || !s.h || !vw || !vh) return;
    const w = s.w * scale, h = s.h * scale;
    const mx = Math.min(CLAMP, w, vw), my = Math.min(CLAMP, h, vh);
    tx = Math.min(Math.max(tx, mx - w), vw - mx);
    ty = Math.min(Math.max(ty, my - h), vh - my);
    apply();
  };

  let drawn = null;   // the size of the drawing the user's pan/zoom was made on
  const draw = () => {
    const anchor = fitted && !pendingFocus ? anchorBefore() : null;
    // the SVG is Graphviz output of a DOT text whose model-provided strings were escaped
    stage.innerHTML = model.get("svg");
    const svg = stage.querySelector("svg");
    const s = svg ? svgSize() : null;
    if (s) {   // size in CSS px = layout units, so the transform alone sets the zoom
      svg.setAttribute("width", `${s.w}px`);
      svg.setAttribute("height", `${s.h}px`);
    }
    markSelected();
    // keep the user's pan/zoom across small changes (a fuse redraws a few boxes); a
    // drawing a quarter larger or smaller (auto, collapse, split) is fitted again
    const changed = s && drawn && (Math.abs(s.w / drawn.w - 1) > 0.25
                                   || Math.abs(s.h / drawn.h - 1) > 0.25);
    if ((!fitted || changed) && !pendingFocus) fitted = fit(false);
    if (fitted && !pendingFocus) {
      placeAnchor(anchor, changed);
      clampView();
    }
    if (s) drawn = s;
    drawMiniMap();
    applyFocus();
  };

  // -- selection -------------------------------------------------------------
  let dragged = false;
  const nodeOf = (target) => {
    const g = target.closest ? target.closest("g.node") : null;
    return g && !g.classList.contains("wb-io") ? g : null;
  };
  stage.addEventListener("click", (e) => {
    if (dragged || e.detail > 1) return;   // end of a pan, or 2nd click of a double-click
    const g = nodeOf(e.target);
    if (!g) return;
    const ids = (model.get("members") || {})[g.id] || [g.id];
    let sel = model.get("selected").slice();
    const all = ids.every((i) => sel.includes(i));
    if (e.shiftKey) {
      sel = all ? sel.filter((i) => !ids.includes(i)) : sel.concat(ids.filter((i) => !sel.includes(i)));
    } else {
      sel = all && sel.length === ids.length ? [] : ids.slice();
    }
    model.set("selected", sel);
    model.save_changes();
  });
  stage.addEventListener("dblclick", (e) => {
    const g = nodeOf(e.target);
    if (!g) return;
    // (kept where it is when the redraw comes: found again by its first node, drawn
    // itself once a box opens, inside the new box once one closes)
    toggled = anchorAt(g, ((model.get("members") || {})[g.id] || [g.id])[0]);
    model.send({ type: "toggle", id: g.id, outer: e.shiftKey });
  });

  // -- source map: node <-> lines of the code panel of the same app ---------------
  const appRoot = () => el.closest(".wb-app");
  const clearHot = (sel, cls) => {
    const root = appRoot();
    if (root) for (const x of root.querySelectorAll(sel)) x.classList.remove(cls);
  };
  let hovered = null;        // ids of the node (box) under the pointer
  let codeWatch = null;      // re-marks lines when the code panel shows another kernel
  const markLines = () => {
    const root = appRoot();
    if (!root) return;
    clearHot(".wb-line.wb-line-hot", "wb-line-hot");
    if (!hovered) return;
    for (const line of root.querySelectorAll(".wb-line[data-nodes]")) {
      if (line.dataset.nodes.split(" ").some((i) => hovered.has(i))) line.classList.add("wb-line-hot");
    }
  };
  stage.addEventListener("mouseover", (e) => {
    const g = nodeOf(e.target);
    const root = appRoot();
    if (!g || !root) return;
    hovered = new Set((model.get("members") || {})[g.id] || [g.id]);
    markLines();
    if (!codeWatch) {   // (a click on the node shows its kernel while the pointer stays)
      codeWatch = new MutationObserver((records) => {
        if (hovered && records.some((r) => r.target.closest && r.target.closest(".wb-code-panel"))) markLines();
      });
      codeWatch.observe(root, { childList: true, subtree: true });
    }
  });
  stage.addEventListener("mouseout", (e) => {
    if (nodeOf(e.target) && !nodeOf(e.relatedTarget || document.body)) {
      hovered = null;
      clearHot(".wb-line.wb-line-hot", "wb-line-hot");
    }
  });
  const lineOf = (e) => {
    const line = e.target.closest ? e.target.closest(".wb-line[data-nodes]") : null;
    return line && appRoot() && line.closest(".wb-app") === appRoot() ? line : null;
  };
  const onLineOver = (e) => {
    const line = lineOf(e);
    if (!line) return;
    for (const g of stage.querySelectorAll("g.wb-source-hot")) g.classList.remove("wb-source-hot");
    for (const id of line.dataset.nodes.split(" ")) {
      const g = boxOf(id);
      if (g) g.classList.add("wb-source-hot");
    }
  };
  const onLineOut = (e) => {
    if (lineOf(e)) {
      for (const g of stage.querySelectorAll("g.wb-source-hot")) g.classList.remove("wb-source-hot");
    }
  };
  const onLineClick = (e) => {
    const line = lineOf(e);
    if (!line) return;
    pendingFocus = line.dataset.nodes.split(" ")[0];
    applyFocus();
    onLineOver(e);
  };
  document.addEventListener("mouseover", onLineOver);
  document.addEventListener("mouseout", onLineOut);
  document.addEventListener("click", onLineClick);

  // -- pan and zoom ----------------------------------------------------------
  // The wheel scrolls the notebook, as over any other output; it zooms with ctrl (a
  // trackpad pinch arrives as ctrl+wheel) or after a click inside the view, until the
  // pointer leaves it -- as embedded map viewers do. A plain wheel says how, once in a
  // while, without stopping the scroll.
  let engaged = false, hintTimer = null;
  const hint = document.createElement("div");
  hint.className = "wb-wheel-hint";
  hint.textContent = "ctrl + wheel zooms (or click the graph first)";
  viewport.appendChild(hint);
  viewport.addEventListener("pointerdown", () => { engaged = true; });
  viewport.addEventListener("pointerleave", () => { engaged = false; });
  viewport.addEventListener("wheel", (e) => {
    if (!(e.ctrlKey || e.metaKey || engaged)) {
      hint.classList.add("wb-shown");
      clearTimeout(hintTimer);
      hintTimer = setTimeout(() => hint.classList.remove("wb-shown"), 1500);
      return;
    }
    e.preventDefault();
    const r = viewport.getBoundingClientRect();
    zoomAt(e.clientX - r.left, e.clientY - r.top, Math.exp(-e.deltaY * 0.0015));
  }, { passive: false });
  let down = null;
  viewport.addEventListener("pointerdown", (e) => {
    if (e.button !== 0 || e.target.closest(".wb-graph-tools, .wb-legend, .wb-minimap, .wb-crumbs")) return;
    down = { x: e.clientX, y: e.clientY, tx, ty };
    dragged = false;
  });
  const onMove = (e) => {
    if (miniDown) { miniMove(e); return; }
    if (!down) return;
    const dx = e.clientX - down.x, dy = e.clientY - down.y;
    if (!dragged && Math.hypot(dx, dy) < 4) return;
    dragged = true;
    viewport.classList.add("wb-dragging");
    tx = down.tx + dx;
    ty = down.ty + dy;
    apply();
  };
  const onUp = () => {
    miniDown = false;
    down = null;
    viewport.classList.remove("wb-dragging");
    setTimeout(() => { dragged = false; }, 0);   // after the click that ends the drag
  };
  window.addEventListener("pointermove", onMove);
  window.addEventListener("pointerup", onUp);

  // the view may be attached before it has a size: fit once it gets one
  let lastHeight = 0;
  const ro = new ResizeObserver(() => {
    if (!fitted) fitted = fit(false);
    if (viewport.clientHeight !== lastHeight) {   // the minimap's height follows the view's
      lastHeight = viewport.clientHeight;
      drawMiniMap();
    }
    applyFocus();
    drawMiniView();
  });
  ro.observe(viewport);

  // The kernel restarted (or died and was restarted): the widget manager marks every
  // model's comm dead, and clicks would reach nothing -- say so over the view and dim
  // the app's controls, with how to reopen it, rather than look alive.
  model.on("comm_live_update", () => {
    if (viewport.querySelector(".wb-dead-banner")) return;
    const banner = document.createElement("div");
    banner.className = "wb-dead-banner";
    banner.textContent = "The kernel behind this workbench stopped (restarted or shut " +
      "down): its controls do nothing now. Run the cell again (Run > Run All Cells) " +
      "to reopen it.";
    viewport.appendChild(banner);
    const app = el.closest(".wb-app");
    if (app) app.classList.add("wb-dead");
  });
  model.on("change:svg", draw);
  model.on("change:selected", markSelected);
  model.on("change:members", markSelected);
  model.on("change:legend", drawLegend);
  model.on("change:legend_title", drawLegend);
  model.on("change:focus", onFocus);
  model.on("change:crumbs", drawCrumbs);
  // why a box asked to be collapsed is drawn open (Python's round_trips.py)
  const note = document.createElement("div");
  note.className = "wb-layout-note";
  viewport.appendChild(note);
  const drawNote = () => {
    note.textContent = model.get("note") || "";
    note.style.display = note.textContent ? "" : "none";
  };
  model.on("change:note", drawNote);
  drawNote();
  draw();
  drawLegend();
  drawCrumbs();
  onFocus();
  return () => {
    window.removeEventListener("pointermove", onMove);
    window.removeEventListener("pointerup", onUp);
    document.removeEventListener("mouseover", onLineOver);
    document.removeEventListener("mouseout", onLineOut);
    document.removeEventListener("click", onLineClick);
    if (miniUrl) URL.revokeObjectURL(miniUrl);
    if (codeWatch) codeWatch.disconnect();
    ro.disconnect();
  };
}

export default { render };
