// The live tail of the session page: server-sent events from the wake-up feed.
(function () {
  var table = document.getElementById("tail");
  if (!table || !window.EventSource) return;
  var status = document.getElementById("tail-status");
  var src = new EventSource(table.getAttribute("data-src"));
  src.onopen = function () { status.textContent = "following: new events appear here"; };
  src.onerror = function () { status.textContent = "reconnecting…"; };
  src.onmessage = function (m) {
    var e = JSON.parse(m.data);
    var tr = document.createElement("tr");
    tr.className = "tail-event";
    [String(e.index), e.type, e.created_at].forEach(function (v) {
      var td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    });
    var td = document.createElement("td"), pre = document.createElement("pre");
    pre.textContent = e.payload; td.appendChild(pre); tr.appendChild(td);
    table.appendChild(tr);
  };
})();

// The overview's charts: the serving process's samples of the last hour
// (/stats.json), one polyline per consumer, drawn as inline SVG.
(function () {
  var box = document.getElementById("charts");
  if (!box) return;
  var NS = "http://www.w3.org/2000/svg";
  var colors = ["#2f6fd6", "#d6452f", "#2f9e5a", "#9a4fd6", "#d6a12f", "#3aa8b8"];
  function el(name, attrs) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function draw(data) {
    var samples = data.samples || [], names = {};
    samples.forEach(function (s) { for (var c in s.consumers) names[c] = true; });
    var list = Object.keys(names).sort();
    var legend = document.getElementById("chart-legend");
    legend.textContent = samples.length + " samples" + (samples.length ? " since " + new Date(samples[0].at).toLocaleTimeString() : "") + " · ";
    list.forEach(function (c, i) {
      var span = document.createElement("span");
      span.className = "legend legend-" + (i % colors.length);
      span.textContent = "■ " + c + " ";
      legend.appendChild(span);
    });
    var end = Date.now(), start = end - 3600 * 1000;
    document.querySelectorAll("svg.chart").forEach(function (svg) {
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      var key = svg.getAttribute("data-key"), top = 0;
      samples.forEach(function (s) { for (var c in s.consumers) top = Math.max(top, s.consumers[c][key]); });
      top = top > 0 ? top : 1;
      svg.appendChild(el("rect", { x: 40, y: 5, width: 555, height: 125, fill: "#fff", stroke: "#ccd" }));
      var label = el("text", { x: 36, y: 14, "text-anchor": "end", "font-size": 10 });
      label.textContent = String(Math.round(top * 10) / 10);
      svg.appendChild(label);
      var zero = el("text", { x: 36, y: 130, "text-anchor": "end", "font-size": 10 });
      zero.textContent = "0";
      svg.appendChild(zero);
      var ago = el("text", { x: 40, y: 145, "font-size": 10 });
      ago.textContent = "-60 min";
      svg.appendChild(ago);
      var now = el("text", { x: 595, y: 145, "text-anchor": "end", "font-size": 10 });
      now.textContent = "now";
      svg.appendChild(now);
      list.forEach(function (c, i) {
        var pts = [];
        samples.forEach(function (s) {
          var v = s.consumers[c];
          if (!v) return;
          var x = 40 + 555 * Math.max(0, (Date.parse(s.at) - start) / (end - start));
          var y = 130 - 120 * (v[key] / top);
          pts.push(x.toFixed(1) + "," + y.toFixed(1));
        });
        if (!pts.length) return;
        var line = el("polyline", { points: pts.join(" "), fill: "none", stroke: colors[i % colors.length], "stroke-width": 2, "class": "series", "data-consumer": c });
        svg.appendChild(line);
        if (pts.length === 1) {
          var p = pts[0].split(",");
          svg.appendChild(el("circle", { cx: p[0], cy: p[1], r: 3, fill: colors[i % colors.length] }));
        }
      });
    });
  }
  function load() {
    fetch(box.getAttribute("data-src")).then(function (r) { return r.json(); }).then(draw).catch(function () {});
  }
  load();
  setInterval(load, 10000);
})();

// A bulk retry or skip's progress: polls the run's JSON until it is done.
(function () {
  var job = document.getElementById("job");
  if (!job) return;
  function set(id, v) { document.getElementById(id).textContent = String(v); }
  function poll() {
    fetch(job.getAttribute("data-src")).then(function (r) { return r.json(); }).then(function (v) {
      set("job-redriven", v.redriven); set("job-sessions", v.sessions); set("job-missed", v.missed);
      if (v.failed) { set("job-state", "stopped: " + v.failed + " (reload to resume)"); return; }
      if (v.done) {
        set("job-state", "done");
        var bar = document.getElementById("job-bar");
        bar.max = 1; bar.value = 1;
        return;
      }
      setTimeout(poll, 500);
    }).catch(function () { setTimeout(poll, 2000); });
  }
  poll();
})();
