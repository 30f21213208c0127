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
