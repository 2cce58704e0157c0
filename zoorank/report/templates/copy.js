// Copy buttons (button.copy): the text of data-copy to the clipboard; without the Clipboard API
// (a page opened from a file in some browsers) a hidden text area and the copy command.
document.querySelectorAll("button.copy").forEach(function (button) {
  var label = button.textContent;
  function said(ok) {
    button.textContent = ok ? "Copied" : "Select it to copy";
    setTimeout(function () { button.textContent = label; }, 1500);
  }
  function fallback(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    said(ok);
  }
  button.addEventListener("click", function () {
    var text = button.getAttribute("data-copy");
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { said(true); },
                                               function () { fallback(text); });
    } else {
      fallback(text);
    }
  });
});
