// Filter box and pages over every paged table (div.paged); without scripts every row shows.
document.querySelectorAll("div.paged").forEach(function (box) {
  var size = parseInt(box.dataset.pageSize, 10) || 50;
  var rows = Array.prototype.slice.call(box.querySelectorAll("tbody tr"));
  var keys = rows.map(function (r) { return r.textContent.toLowerCase(); });
  var filter = box.querySelector("input.filter");
  var info = box.querySelector(".info");
  var prev = box.querySelector("button.prev");
  var next = box.querySelector("button.next");
  var shown = rows, page = 0;
  function draw() {
    var pages = Math.max(1, Math.ceil(shown.length / size));
    page = Math.min(Math.max(page, 0), pages - 1);
    var first = page * size, last = Math.min(shown.length, first + size);
    rows.forEach(function (r) { r.hidden = true; });
    for (var i = first; i < last; i++) { shown[i].hidden = false; }
    info.textContent = (shown.length ? (first + 1) + "–" + last : "0") + " of " + shown.length
      + (shown.length < rows.length ? " (filtered from " + rows.length + ")" : "")
      + " · page " + (page + 1) + " of " + pages;
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }
  filter.addEventListener("input", function () {
    var q = filter.value.trim().toLowerCase();
    shown = q ? rows.filter(function (r, i) { return keys[i].indexOf(q) >= 0; }) : rows;
    page = 0;
    draw();
  });
  prev.addEventListener("click", function () { page -= 1; draw(); });
  next.addEventListener("click", function () { page += 1; draw(); });
  draw();
});
