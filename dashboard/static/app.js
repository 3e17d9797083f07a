// The dashboard's only script: selection helpers and confirmations for
// action forms. Pages work without it.
(function () {
  "use strict";
  function refresh(form) {
    var any = form.querySelector('input[name="id"]:checked') !== null;
    form.querySelectorAll("[data-needs-selection]").forEach(function (b) { b.disabled = !any; });
  }
  document.querySelectorAll("form.selection").forEach(function (form) {
    refresh(form);
    form.addEventListener("change", function (e) {
      if (e.target.matches("[data-select-all]")) {
        form.querySelectorAll('input[name="id"]').forEach(function (c) { c.checked = e.target.checked; });
      }
      refresh(form);
    });
  });
  document.querySelectorAll("button[data-confirm]").forEach(function (b) {
    b.addEventListener("click", function (e) {
      if (!window.confirm(b.getAttribute("data-confirm"))) { e.preventDefault(); }
    });
  });
})();
