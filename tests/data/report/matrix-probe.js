(function () {
  // Names whose characters sit on more than one line (across the line direction: top for
  // horizontal text, left for vertical text): a word broken mid-word.
  function brokenWords(el) {
    var broken = [];
    var walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    var node;
    while ((node = walker.nextNode())) {
      var vertical = getComputedStyle(node.parentElement).writingMode.indexOf("vertical") === 0;
      var text = node.textContent, last = null;
      for (var i = 0; i < text.length; i++) {
        if (/\s/.test(text[i])) { last = null; continue; }
        var range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        var rect = range.getBoundingClientRect();
        var across = vertical ? rect.left : rect.top;
        if (last !== null && Math.abs(across - last) > 2) { broken.push(text.trim()); break; }
        last = across;
      }
    }
    return broken;
  }
  var table = document.getElementById("matrix");
  var found = { page: document.documentElement.scrollWidth, viewport: window.innerWidth,
    right: Math.ceil(table.getBoundingClientRect().right), broken: [] };
  table.querySelectorAll("th, td").forEach(function (cell) {
    found.broken = found.broken.concat(brokenWords(cell));
  });
  var out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
})();
