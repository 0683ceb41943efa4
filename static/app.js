// jobvisor's web UI behaviour, loaded from the node (no inline script: the pages' CSP
// allows scripts from 'self' only). It adds the session's CSRF token to every htmx request,
// shows a failed request's message (as text), pauses the runs list's polling while runs are
// ticked, and draws the charts (uPlot) from /ui/charts, redrawing them in place.
(function () {
  'use strict';

  function csrf() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute('content') : '';
  }

  document.addEventListener('htmx:configRequest', function (e) {
    e.detail.headers['X-CSRF-Token'] = csrf();
  });

  var flashTimer = null;
  function flash(text) {
    var f = document.getElementById('flash');
    if (!f) { return; }
    f.textContent = text;
    f.hidden = false;
    clearTimeout(flashTimer);
    flashTimer = setTimeout(function () { f.hidden = true; }, 8000);
  }

  // An error answer is a small page; its message is read as text, never as markup.
  document.addEventListener('htmx:responseError', function (e) {
    var xhr = e.detail.xhr;
    var text = 'the request failed (' + xhr.status + ')';
    try {
      var doc = new DOMParser().parseFromString(xhr.responseText, 'text/html');
      var m = doc.querySelector('.error-message');
      if (m) { text = m.textContent; } else if (xhr.responseText && xhr.responseText.length < 300) { text = xhr.responseText; }
    } catch (_) { /* keep the status */ }
    flash(text);
  });
  document.addEventListener('htmx:sendError', function () {
    flash('the node did not answer');
  });

  // A poll must not wipe the runs someone is ticking.
  document.addEventListener('htmx:beforeRequest', function (e) {
    var elt = e.detail.elt;
    if (elt && elt.id === 'runs-table' && elt.querySelector('input[type=checkbox]:checked')) {
      e.preventDefault();
    }
  });

  // Flash notes fade on their own.
  document.addEventListener('htmx:load', function (e) {
    var f = document.getElementById('flash');
    if (f && !f.hidden && e.detail.elt && e.detail.elt.contains(f)) {
      clearTimeout(flashTimer);
      flashTimer = setTimeout(function () { f.hidden = true; }, 8000);
    }
  });

  var COLOURS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c'];

  function options(el, d) {
    var series = [{}];
    d.series.forEach(function (s, i) {
      var c = COLOURS[i % COLOURS.length];
      series.push({
        label: s.label,
        stroke: c,
        width: 2,
        fill: d.bars ? c + '55' : undefined,
        paths: d.bars && uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.8, 40] }) : undefined,
        spanGaps: false,
        points: { show: d.x.length < 3 }
      });
    });
    return {
      width: Math.max(el.clientWidth, 240),
      height: 170,
      series: series,
      // With one sample uPlot spans its time axis over 1,000 days (86400 / ms with ms = 1e-3):
      // a minute either side of it instead.
      scales: { x: { time: true, range: function (u, min, max) {
        return u.data[0].length === 1 ? [u.data[0][0] - 60, u.data[0][0] + 60] : [min, max];
      } } },
      axes: [{}, { label: d.unit, size: 60 }],
      legend: { live: false }
    };
  }

  function draw(el) {
    if (!document.body.contains(el)) { clearInterval(el._timer); return; }
    fetch(el.getAttribute('data-chart'), { credentials: 'same-origin', headers: { 'Accept': 'application/json' } })
      .then(function (r) { if (!r.ok) { throw new Error('chart data: ' + r.status); } return r.json(); })
      .then(function (d) {
        var data = [d.x].concat(d.series.map(function (s) { return s.values; }));
        var values = 0;
        d.series.forEach(function (s) { s.values.forEach(function (v) { if (v !== null) { values += 1; } }); });
        if (el._plot) {
          el._plot.setData(data);
        } else {
          el.textContent = '';
          el._plot = new uPlot(options(el, d), data, el);
        }
        el.setAttribute('data-points', String(values));
        // The note goes right under its own chart, whatever else shares the chart's box.
        var next = el.nextElementSibling;
        var empty = next && next.classList.contains('chart-empty') ? next : null;
        if (values === 0 && !empty) {
          var p = document.createElement('p');
          p.className = 'chart-empty';
          p.textContent = 'no samples in this range yet';
          el.insertAdjacentElement('afterend', p);
        } else if (values > 0 && empty) {
          empty.remove();
        }
      })
      .catch(function (err) { el.setAttribute('data-error', String(err)); });
  }

  function charts(root) {
    if (typeof uPlot === 'undefined') { return; }
    var list = root.querySelectorAll ? root.querySelectorAll('[data-chart]') : [];
    Array.prototype.forEach.call(list, function (el) {
      if (el._timer) { return; }
      draw(el);
      el._timer = setInterval(function () { draw(el); }, 10000);
    });
  }

  document.addEventListener('htmx:load', function (e) { charts(e.detail.elt); });
  document.addEventListener('DOMContentLoaded', function () { charts(document); });
  window.addEventListener('resize', function () {
    Array.prototype.forEach.call(document.querySelectorAll('[data-chart]'), function (el) {
      if (el._plot) { el._plot.setSize({ width: Math.max(el.clientWidth, 240), height: 170 }); }
    });
  });
})();
