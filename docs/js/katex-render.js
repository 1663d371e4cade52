// Typeset the math that pymdownx.arithmatex (generic mode) leaves as \( ... \) and \[ ... \] in
// elements of class "arithmatex", with the KaTeX vendored in assets/katex (no other host).
(function () {
  function typeset() {
    document.querySelectorAll(".arithmatex").forEach(function (el) {
      if (el.dataset.typeset) return;
      var tex = el.textContent.trim();
      var display = tex.startsWith("\\[");
      tex = tex.slice(2, -2);
      try {
        katex.render(tex, el, { displayMode: display, throwOnError: true });
        el.dataset.typeset = "1";
      } catch (err) {
        el.classList.add("arithmatex-error");
        el.title = String(err.message || err);
      }
    });
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(typeset);   // Material's page-load stream (also fires on instant navigation)
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", typeset);
  } else {
    typeset();
  }
})();
