package ui_test

import (
	"github.com/chromedp/chromedp"
)

// codesWrapJS lists the reason codes (.code) that the browser wraps
// anywhere but after a colon or at a space between codes, from where each
// character is drawn.
const codesWrapJS = `(() => {
  const bad = [];
  for (const el of document.querySelectorAll('.code')) {
    const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let prevTop = null, prev = ' ', seen = '';
    for (let n = w.nextNode(); n; n = w.nextNode()) {
      for (let i = 0; i < n.data.length; i++) {
        const ch = n.data[i];
        if (/\s/.test(ch)) { prev = ch; continue; }
        const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
        const rect = r.getClientRects()[0];
        if (!rect) continue;
        if (prevTop !== null && rect.top > prevTop + 2 && prev !== ':' && !/\s/.test(prev)) {
          bad.push(el.textContent.trim() + ' breaks after "' + seen.slice(-16) + '"');
        }
        prevTop = rect.top; prev = ch; seen += ch;
      }
    }
  }
  return bad;
})()`

// filtersAlignedJS lists the filter forms whose controls do not all sit
// at the same distance below the top of their label (a hint on a line of
// its own pushes its control down and its label up), or whose labels of
// one row start at different heights (a select shorter than an input).
const filtersAlignedJS = `(() => {
  const bad = [];
  for (const f of document.querySelectorAll('form.filters')) {
    const offs = [...f.querySelectorAll('label')].filter(l => l.getClientRects().length).map(l => {
      const c = l.control || l.querySelector('input, select');
      return c ? {label: l.textContent.trim().split(/\s*\n/)[0], off: Math.round(c.getBoundingClientRect().top - l.getBoundingClientRect().top)} : null;
    }).filter(x => x);
    if (offs.some(o => Math.abs(o.off - offs[0].off) > 1)) bad.push(f.getAttribute('action') + ': ' + JSON.stringify(offs));
    // Labels of one row (the form aligns their bottoms) start at one height.
    const rows = {};
    for (const l of f.querySelectorAll('label')) {
      const r = l.getBoundingClientRect();
      if (!r.height) continue;
      (rows[Math.round(r.bottom)] ||= []).push({label: l.textContent.trim().split(/\s*\n/)[0], top: Math.round(r.top)});
    }
    for (const row of Object.values(rows)) {
      if (row.some(l => Math.abs(l.top - row[0].top) > 1)) bad.push(f.getAttribute('action') + ' label tops: ' + JSON.stringify(row));
    }
  }
  return bad;
})()`

// createAlignedJS lists the create forms (datasets, harnesses) where, in
// one row of the form's grid (a row ends where the next label starts
// left of it), the labels' words or their controls start at different
// heights: a hint on a line of its own pushes its label up, a taller
// control pushes it up too.
const createAlignedJS = `(() => {
  const bad = [];
  const textTop = l => { const g = document.createRange(); g.selectNodeContents(l.firstChild); return g.getBoundingClientRect().top; };
  for (const f of document.querySelectorAll('form.create')) {
    const rows = [];
    let left = Infinity;
    for (const l of f.querySelectorAll('label:not(.check)')) {
      const r = l.getBoundingClientRect();
      const c = l.control || l.querySelector('input, select, textarea');
      if (!r.height || !c) continue;
      if (r.left <= left) rows.push([]);
      left = r.left;
      rows.at(-1).push({label: l.textContent.trim().split(/\s*\n/)[0], text: Math.round(textTop(l)), control: Math.round(c.getBoundingClientRect().top)});
    }
    for (const row of rows) {
      if (row.some(l => Math.abs(l.text - row[0].text) > 1 || Math.abs(l.control - row[0].control) > 1)) bad.push(f.getAttribute('action') + ': ' + JSON.stringify(row));
    }
  }
  return bad;
})()`

// checkLayout fails when a page's reason codes wrap inside a word or its
// filter or create form's labels and controls do not line up.
func (tb *tab) checkLayout(page string) {
	tb.t.Helper()
	for _, b := range eval[[]string](tb, codesWrapJS) {
		tb.t.Errorf("%s: a reason code wraps inside a word: %s", page, b)
	}
	for _, b := range eval[[]string](tb, filtersAlignedJS) {
		tb.t.Errorf("%s: a filter form's labels and controls do not line up: %s", page, b)
	}
	for _, b := range eval[[]string](tb, createAlignedJS) {
		tb.t.Errorf("%s: a create form's labels do not line up: %s", page, b)
	}
}

// atWidth runs fn with the page drawn at a width of w CSS pixels, then
// restores the window's size.
func (tb *tab) atWidth(w int64, fn func()) {
	tb.t.Helper()
	tb.do(chromedp.EmulateViewport(w, 900))
	defer tb.do(chromedp.EmulateViewport(1280, 900))
	fn()
}
