// The app's charts: plotly.js figures (JSON built in Python, workbench/ui/charts.py),
// one <div> each, redrawn with Plotly.react when `figures` changes and resized with
// the app. `evalPlotly` is prepended by plots.py; the bundle (the plotly package's own)
// comes as the `plotly` trait when this page has none yet.

function render({ model, el }) {
  el.classList.add("wb-charts");
  const divs = [];
  const note = document.createElement("div");
  note.className = "wb-charts-note";
  el.appendChild(note);
  // plotly.js is evaluated once per page and kept on globalThis; the first app asks
  // Python for the bundle (the `plotly` trait), later ones reuse it
  let Plotly = globalThis.__wbPlotly;
  let asked = false;
  const load = () => {
    if (Plotly !== undefined) return;
    const code = model.get("plotly");
    if (code) {
      try { Plotly = globalThis.__wbPlotly = evalPlotly(code); } catch (e) { Plotly = null; }
    } else if (!asked) {
      asked = true;
      model.send({ type: "need_plotly" });
    }
  };
  const draw = () => {
    const missing = model.get("missing");
    if (!missing) load();
    note.textContent = missing || (Plotly ? "" : Plotly === null || model.get("plotly")
      ? "plotly.js did not load: charts are off" : "loading the charts…");
    note.style.display = note.textContent ? "" : "none";
    if (!Plotly) return;
    const figs = model.get("figures") || [];
    while (divs.length < figs.length) {
      const d = document.createElement("div");
      d.className = "wb-chart";
      el.appendChild(d);
      divs.push(d);
    }
    while (divs.length > figs.length) {
      const d = divs.pop();
      Plotly.purge(d);
      d.remove();
    }
    figs.forEach((f, i) => {
      Plotly.react(divs[i], f.data, f.layout,
                   { responsive: true, displaylogo: false, displayModeBar: false });
    });
  };
  // the output area may be laid out after the first draw (or resized): follow its width
  let pending = false;
  const ro = new ResizeObserver(() => {
    if (pending || !Plotly) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      for (const d of divs) if (d.data && d.offsetWidth) Plotly.Plots.resize(d);
    });
  });
  ro.observe(el);
  model.on("change:plotly", draw);
  model.on("change:figures", draw);
  model.on("change:missing", draw);
  draw();
  return () => {
    ro.disconnect();
    if (Plotly) for (const d of divs) Plotly.purge(d);
  };
}

export default { render };
