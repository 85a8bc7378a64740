// status_page.js — the coordinator's status page: polls /api/status once a
// second (one request at a time) and draws the run, the workers, the charts
// (Chart.js, when embedded) and the events. docs/status.md.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b',
                  '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  let token = '';
  const charts = {};

  // ?token=... (the URL the coordinator printed): kept for this tab, out of the address bar
  const q = new URLSearchParams(location.search);
  if (q.has('token')) {
    sessionStorage.setItem('ragtag-token', q.get('token'));
    history.replaceState(null, '', location.pathname);
  }
  token = sessionStorage.getItem('ragtag-token') || '';
  $('auth').addEventListener('submit', (e) => {
    e.preventDefault();
    token = $('token').value.trim();
    sessionStorage.setItem('ragtag-token', token);
    $('auth').style.display = 'none';
    poll();
  });

  const fmt = (v, d) => (v === null || v === undefined) ? '–' : Number(v).toFixed(d);
  const pct = (v) => (v === null || v === undefined) ? '–' : (100 * v).toFixed(2) + '%';
  function dur(s) {
    if (s === null || s === undefined) return '–';
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60;
    return (h ? h + 'h' : '') + (h || m ? m + 'm' : '') + (s % 60) + 's';
  }
  function cell(tr, text, cls) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function drawRun(st) {
    const r = st.run;
    $('runid').textContent = r.id.slice(0, 8);
    $('phase').textContent = '· ' + r.phase;
    const items = [
      ['model', r.model], ['data', r.data], ['mode', r.mode],
      ['epoch', r.epoch + ' / ' + r.epochs], ['batch', r.batches_done + ' / ' + r.batches_total],
      ['step', r.step], ['images/s', fmt(r.images_per_s, 0)], ['ETA (epoch)', dur(r.eta_s)],
      ['loss', fmt(r.loss, 4)], ['acc', pct(r.acc)], ['generation', r.generation],
      ['workers', r.workers + ' of ' + r.workers_wanted],
      ['lost / joined / standby', r.lost + ' / ' + r.joined + ' / ' + r.standby],
      ['elapsed', dur(r.elapsed_s)], ['links', r.links],
    ];
    const box = $('run');
    box.textContent = '';
    for (const [k, v] of items) {
      const d = document.createElement('div');
      const b = document.createElement('b');
      b.textContent = k;
      d.appendChild(b);
      d.appendChild(document.createTextNode(String(v)));
      box.appendChild(d);
    }
  }

  function drawWorkers(st) {
    const body = $('workers').tBodies[0];
    body.textContent = '';
    const batch = st.run.batch || 1;
    for (const w of st.workers) {
      const tr = document.createElement('tr');
      tr.className = 'worker ' + w.state;
      tr.dataset.name = w.name;
      cell(tr, w.rank >= 0 ? w.rank : '–');
      cell(tr, w.name, 'l');
      cell(tr, w.host, 'l');
      cell(tr, w.backend, 'l');
      cell(tr, w.device, 'l');
      cell(tr, w.threads);
      cell(tr, w.cpu_quota ? fmt(w.cpu_quota, 2) : '–');
      cell(tr, fmt(w.images_per_s, 0));
      const sh = cell(tr, '', 'l');
      const bar = document.createElement('span');
      bar.className = 'bar';
      bar.style.width = Math.round(80 * Math.min(1, w.share / batch)) + 'px';
      sh.appendChild(bar);
      sh.appendChild(document.createTextNode(w.share + (w.standby ? ' (standby)' : '')));
      cell(tr, w.link, 'l');
      cell(tr, fmt(w.heartbeat_age_s, 1) + ' s');
      cell(tr, w.steps >= 0 ? w.steps : '–');
      cell(tr, w.state, 'l');
      body.appendChild(tr);
    }
  }

  function drawEvents(st) {
    const box = $('events');
    box.textContent = '';
    for (const e of st.events.slice().reverse()) {
      const d = document.createElement('div');
      const k = document.createElement('span');
      k.className = 'k';
      k.textContent = e.kind;
      d.appendChild(document.createTextNode(new Date(e.time * 1000).toLocaleTimeString() + ' '));
      d.appendChild(k);
      d.appendChild(document.createTextNode(e.text));
      box.appendChild(d);
    }
  }

  // ---- charts -------------------------------------------------------------------------
  function chart(id, ylabel, xlabel) {
    if (charts[id]) return charts[id];
    charts[id] = new Chart($(id), {
      type: 'line',
      data: { datasets: [] },
      options: {
        animation: false, responsive: true, parsing: false, normalized: true,
        plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } } },
        scales: { x: { type: 'linear', title: { display: true, text: xlabel } },
                  y: { title: { display: true, text: ylabel } } },
        elements: { point: { radius: 2 } },
      },
    });
    return charts[id];
  }
  function series(points, x, key) {
    const out = [];
    for (const p of points)
      if (p[key] !== null && p[key] !== undefined) out.push({ x: p[x], y: p[key] });
    return out;
  }
  function setData(c, sets) {
    c.data.datasets = sets.map((s, i) => ({
      label: s.label, data: s.data, borderColor: COLORS[i % COLORS.length],
      backgroundColor: COLORS[i % COLORS.length], stepped: s.stepped || false,
      borderWidth: 1.5 }));
    c.update('none');
  }
  function drawCharts(st) {
    const ep = st.curves.epochs, log = st.curves.log, plans = st.curves.plans;
    const sets = (pts, x, keys) => keys.map(([k, label]) => ({ label, data: series(pts, x, k) }))
      .filter((s) => s.data.length);
    setData(chart('c_eloss', 'loss', 'epoch'), sets(ep, 'epoch',
      [['train_loss', 'train'], ['val_loss', 'val'], ['test_loss', 'test']]));
    setData(chart('c_eacc', 'accuracy', 'epoch'), sets(ep, 'epoch',
      [['train_acc', 'train'], ['val_acc', 'val'], ['test_acc', 'test']]));
    setData(chart('c_log', 'loss / accuracy', 'step'), sets(log, 'step',
      [['loss', 'loss'], ['acc', 'accuracy']]));
    setData(chart('c_ips', 'images/s', 'step'), sets(log, 'step', [['images_per_s', 'window']])
      .concat(sets(ep, 'step', [['images_per_s', 'epoch']])));
    const names = [];
    for (const p of plans) for (const n in p.shares) if (!names.includes(n)) names.push(n);
    const last = st.run.step;
    setData(chart('c_share', 'share', 'step'), names.map((n) => {
      const data = plans.filter((p) => n in p.shares).map((p) => ({ x: p.step, y: p.shares[n] }));
      if (data.length && last > data[data.length - 1].x) data.push({ x: last, y: data[data.length - 1].y });
      return { label: n, data, stepped: true };
    }));
    const cons = sets(ep, 'epoch', [['consensus_distance', 'consensus distance']]);
    $('f_cons').style.display = cons.length || st.run.mode === 'gossip' ? '' : 'none';
    setData(chart('c_cons', 'distance', 'epoch'), cons);
    markPainted();
  }
  // For whoever checks the page (tests): how many pixels each canvas has drawn.
  function markPainted() {
    for (const c of document.querySelectorAll('canvas')) {
      try {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
        c.dataset.painted = n;
      } catch (e) { /* not drawable yet */ }
    }
  }

  // ---- polling ------------------------------------------------------------------------
  async function poll() {
    let ok = false;
    try {
      const h = token ? { Authorization: 'Bearer ' + token } : {};
      const r = await fetch('api/status', { headers: h, cache: 'no-store' });
      if (r.status === 401) {
        $('auth').style.display = 'block';
        $('msg').textContent = token ? 'the token was refused' : '';
        return; // until a token is given
      }
      if (!r.ok) throw new Error('HTTP ' + r.status);
      const st = await r.json();
      $('msg').textContent = '';
      drawRun(st);
      drawWorkers(st);
      drawEvents(st);
      if (typeof Chart !== 'undefined') drawCharts(st);
      else { $('charts').style.display = 'none'; $('nocharts').style.display = ''; }
      document.body.dataset.updated = st.time;
      ok = st.run.phase !== 'done' && st.run.phase !== 'failed';
    } catch (e) {
      $('msg').textContent = 'no answer from the coordinator (' + e.message + '): retrying';
      ok = true;
    }
    if (ok) setTimeout(poll, 1000);
  }
  poll();
})();
