// What the pages that show Jupyter widgets need beside the widget manager.
//
// 1. The theme draws its icons with Font Awesome's script, which replaces every
//    <i class="fa ..."> with an <svg>, the widgets' icons too. The play widget then
//    fails to switch its icon between play and pause (it sets the class of an <i> that
//    is gone: a TypeError on every click). In "nest" mode the <i> stays and holds the
//    drawing, so the widget can change it. This must run before Font Awesome's script,
//    which is deferred; this one is not.
//
// 2. Accessible names for the controls of the widget manager that have none.
//
// The standard widgets' play button shows only an icon, and their slider's handle
// (role="slider") is not tied to any label, so a screen reader announces an unnamed
// button and an unnamed slider (axe-core: button-name, aria-input-field-name). The
// widgets are drawn after the page loads, so an observer names them as they appear:
// the play widget's buttons in their order (play or pause, stop, repeat), a slider
// handle after the slider's tooltip (the widget's `tooltip` in Python).
window.FontAwesomeConfig = Object.assign({}, window.FontAwesomeConfig, { autoReplaceSvg: "nest" });

(function () {
  "use strict";
  // The play button's icon shows play or pause, but the page's icon script may swap the
  // icon for a drawing that no longer follows the state: name the button by its place.
  const PLAY_BUTTONS = ["Play or pause", "Stop", "Repeat"];

  function nameButtons(root) {
    root.querySelectorAll(".widget-play").forEach((play) => {
      play.querySelectorAll(":scope > button").forEach((button, i) => {
        const name = PLAY_BUTTONS[i];
        if (name && button.getAttribute("aria-label") !== name) {
          button.setAttribute("aria-label", name);
        }
      });
    });
  }

  function nameSliders(root) {
    root.querySelectorAll(".widget-slider").forEach((slider) => {
      const handle = slider.querySelector(".noUi-handle");
      const label = slider.querySelector(".widget-label");
      const name = label && (label.textContent.trim() || label.title);
      if (handle && name && handle.getAttribute("aria-label") !== name) {
        handle.setAttribute("aria-label", name);
      }
    });
  }

  function nameAll() {
    nameButtons(document);
    nameSliders(document);
  }

  new MutationObserver(nameAll).observe(document.documentElement, {
    subtree: true,
    childList: true,
    attributes: true,
    attributeFilter: ["class"],
  });
  document.addEventListener("DOMContentLoaded", nameAll);
})();
