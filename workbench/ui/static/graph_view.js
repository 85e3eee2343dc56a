// Graph view front end: shows the SVG Python laid out, pans/zooms it, and turns clicks
// into changes of the synced `selected` trait (Python does everything else).
//   click: select that node only (click it again when it is the only one: select none)
//   shift-click: add / remove it
//   double-click: collapse the composite it belongs to / expand a collapsed one
//   wheel: zoom at the cursor; drag: pan; "fit": whole graph in view

function button(text, title, onClick) {
  const b = document.createElement("button");
  b.className = "wb-graph-button";
  b.textContent = text;
  b.title = title;
  b.addEventListener("click", onClick);
  return b;
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
  viewport.append(stage, legend, tools);
  el.appendChild(viewport);

  let scale = 1, tx = 0, ty = 0, fitted = false;
  const apply = () => {
    stage.style.transform = `translate(${tx}px, ${ty}px) scale(${scale})`;
  };
  const svgSize = () => {
    const svg = stage.querySelector("svg");
    if (!svg || !svg.viewBox || !svg.viewBox.baseVal) return null;
    return { w: svg.viewBox.baseVal.width, h: svg.viewBox.baseVal.height };
  };
  // whole: the whole graph in view ("fit"); otherwise fit the width and show the top,
  // the first view of a long chain, whose boxes would be unreadably small when whole
  const fit = (whole = true) => {
    const s = svgSize();
    const vw = viewport.clientWidth, vh = viewport.clientHeight;
    if (!s || !s.w || !s.h || !vw || !vh) return false;
    scale = whole ? Math.min(vw / s.w, vh / s.h, 1.5) : Math.min(vw / s.w, 1.5);
    tx = (vw - s.w * scale) / 2;
    ty = s.h * scale <= vh ? (vh - s.h * scale) / 2 : 8;
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
  tools.append(
    button("fit", "show the whole graph", () => fit()),
    button("+", "zoom in", () => zoomAt(viewport.clientWidth / 2, viewport.clientHeight / 2, 1.25)),
    button("−", "zoom out", () => zoomAt(viewport.clientWidth / 2, viewport.clientHeight / 2, 0.8)),
  );

  const markSelected = () => {
    const sel = new Set(model.get("selected"));
    const members = model.get("members") || {};
    for (const g of stage.querySelectorAll("g.node")) {
      const ids = members[g.id] || [g.id];
      g.classList.toggle("wb-selected", ids.length > 0 && ids.every((i) => sel.has(i)));
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
  let drawn = null;   // the size of the drawing the user's pan/zoom was made on
  const draw = () => {
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
    if (!fitted || changed) fitted = fit(false);
    if (s) drawn = s;
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
    if (g) model.send({ type: "toggle", id: g.id });
  });

  // -- pan and zoom ----------------------------------------------------------
  viewport.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = viewport.getBoundingClientRect();
    zoomAt(e.clientX - r.left, e.clientY - r.top, Math.exp(-e.deltaY * 0.0015));
  }, { passive: false });
  let down = null;
  viewport.addEventListener("pointerdown", (e) => {
    if (e.button !== 0 || e.target.closest(".wb-graph-tools, .wb-legend")) return;
    down = { x: e.clientX, y: e.clientY, tx, ty };
    dragged = false;
  });
  const onMove = (e) => {
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
    down = null;
    viewport.classList.remove("wb-dragging");
    setTimeout(() => { dragged = false; }, 0);   // after the click that ends the drag
  };
  window.addEventListener("pointermove", onMove);
  window.addEventListener("pointerup", onUp);

  // the view may be attached before it has a size: fit once it gets one
  const ro = new ResizeObserver(() => { if (!fitted) fitted = fit(false); });
  ro.observe(viewport);

  model.on("change:svg", draw);
  model.on("change:selected", markSelected);
  model.on("change:members", markSelected);
  model.on("change:legend", drawLegend);
  model.on("change:legend_title", drawLegend);
  draw();
  drawLegend();
  return () => {
    window.removeEventListener("pointermove", onMove);
    window.removeEventListener("pointerup", onUp);
    ro.disconnect();
  };
}

export default { render };
