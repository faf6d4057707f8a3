// The router's status page: polls /status every 2 s and renders it. Every value
// from the router is put in the page as text (never as HTML): host names and
// reasons come from the network. Rates and latencies are differences between two
// polls.
'use strict';

const POLL_MS = 2000;
const BUCKETS = ['≤5ms', '≤25ms', '≤100ms', '≤500ms', '≤2.5s', '>2.5s'];
const TOKEN_KEY = 'router-admin-token';
let last = null;      // the last document
let prev = null;      // the one before, with its time
let prevAt = 0;
let lastAt = 0;

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-') || k === 'title' || k === 'colspan') e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function pill(text, cls) { return el('span', { class: 'pill ' + (cls || text) }, text); }

function ago(seconds) {
  if (!isFinite(seconds) || seconds < 0) return '—';
  if (seconds < 60) return Math.round(seconds) + ' s ago';
  if (seconds < 3600) return Math.round(seconds / 60) + ' min ago';
  if (seconds < 86400) return (seconds / 3600).toFixed(1) + ' h ago';
  return (seconds / 86400).toFixed(1) + ' d ago';
}

function when(unix) { return new Date(unix * 1000).toLocaleString(); }

function num(n, digits) {
  if (n === null || n === undefined || !isFinite(n)) return '—';
  return n.toFixed(digits === undefined ? 1 : digits);
}

function table(id, head, rows, empty) {
  const t = document.getElementById(id);
  t.replaceChildren();
  t.append(el('tr', {}, ...head.map(h => el('th', { class: h.startsWith('#') ? 'num' : '' }, h.replace(/^#/, '')))));
  if (rows.length === 0) {
    t.append(el('tr', {}, el('td', { class: 'empty', colspan: String(head.length) }, empty)));
    return;
  }
  for (const r of rows) t.append(r);
}

function filterText() { return document.getElementById('filter').value.trim().toLowerCase(); }

function matches(app, f) {
  if (!f) return true;
  return app.app.toLowerCase().includes(f) || app.hosts.some(h => h.includes(f));
}

// Per-second rate of a counter between the two last polls.
function rate(now, before, dt) {
  if (before === undefined || dt <= 0) return null;
  return Math.max(0, now - before) / dt;
}

function memberBefore(addr) {
  if (!prev) return undefined;
  for (const a of prev.apps) for (const m of a.members) if (m.address === addr) return m.stats;
  return undefined;
}

function mini(buckets) {
  const max = Math.max(1, ...buckets);
  const box = el('span', { class: 'mini', title: buckets.map((c, i) => BUCKETS[i] + ': ' + c).join('\n') });
  for (const c of buckets) {
    const bar = el('div');
    bar.style.height = Math.max(1, Math.round(18 * c / max)) + 'px';
    box.append(bar);
  }
  return box;
}

async function rotate(addr, direction) {
  let token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    token = window.prompt('Admin token (admin.token_file) to rotate ' + addr + ' ' + direction);
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
  }
  const path = '/backends/' + encodeURIComponent(addr) + '/rotate-' + direction;
  const r = await fetch(path, { method: 'POST', headers: { Authorization: 'Bearer ' + token } });
  if (r.status === 401) sessionStorage.removeItem(TOKEN_KEY);
  if (!r.ok) window.alert('rotate-' + direction + ' ' + addr + ': ' + r.status + ' ' + (await r.text()));
  poll();
}

function renderSummary(d, dt) {
  const t = d.totals;
  const rps = prev ? rate(t.requests, prev.totals.requests, dt) : null;
  const eps = prev ? rate(t.errors, prev.totals.errors, dt) : null;
  const dn = prev ? t.latency_count - prev.totals.latency_count : 0;
  const avg = dn > 0 ? 1000 * (t.latency_sum - prev.totals.latency_sum) / dn : null;
  const cards = [
    ['apps', t.apps], ['host names', t.hosts], ['open connections', t.open_connections],
    ['requests / s', num(rps)], ['5xx / s', num(eps)], ['avg latency ms', num(avg, 2)],
    ['requests total', t.requests],
  ];
  document.getElementById('summary').replaceChildren(...cards.map(([label, value]) =>
    el('div', { class: 'card', 'data-card': label }, el('div', { class: 'label' }, label), el('div', { class: 'value' }, value))));
}

function renderSource(d) {
  const s = d.source;
  const ev = s.events || {};
  const prop = s.propagation_count > 0 ? 1000 * s.propagation_sum / s.propagation_count : null;
  const rows = [
    ['kind', s.kind],
    ['connected', s.connected === null ? 'n/a (' + s.kind + ')' : (s.connected ? 'yes' : 'NO')],
    ['last event', s.last_event > 0 ? ago(d.now - s.last_event) : 'none yet'],
    ['propagation (avg)', prop === null ? '—' : num(prop, 2) + ' ms'],
    ['events applied', ev.applied || 0],
    ['unchanged (duplicates)', ev.unchanged || 0],
    ['ignored', ev.ignored || 0],
    ['other shard', ev.other_shard || 0],
    ['reconciled', ev.reconciled || 0],
    ['dead letters', s.dead_letters],
  ];
  const t = el('table', { id: 'source-table' });
  for (const [k, v] of rows) t.append(el('tr', {}, el('th', {}, k), el('td', { 'data-field': k }, v)));
  document.getElementById('source').replaceChildren(t);
}

function renderLatency(d) {
  // Cumulative Prometheus buckets → counts per bucket.
  const b = d.totals.latency_buckets.map(x => ({ le: x.le, count: x.count }))
    .sort((a, c) => (a.le === '+Inf' ? Infinity : +a.le) - (c.le === '+Inf' ? Infinity : +c.le));
  const counts = b.map((x, i) => x.count - (i ? b[i - 1].count : 0));
  const max = Math.max(1, ...counts);
  const box = document.getElementById('latency');
  box.replaceChildren(...b.map((x, i) => {
    const bar = el('div');
    bar.style.height = Math.round(70 * counts[i] / max) + 'px';
    const label = x.le === '+Inf' ? '>' : '≤' + (x.le < 1 ? (x.le * 1000) + 'ms' : x.le + 's');
    return el('div', { class: 'bar', title: label + ': ' + counts[i] }, bar, el('span', {}, label));
  }));
}

// The app's traffic over the router's last window (one to two minutes).
function traffic(a) {
  const t = a.traffic;
  if (!t || t.window_seconds <= 0 || t.requests_per_second === 0) {
    return el('div', { class: 'traffic muted', 'data-traffic': a.app }, 'no request in the last minutes');
  }
  const ms = s => s === null ? '–' : num(s * 1000, 1) + ' ms';
  const err = t.error_ratio === null ? '–' : num(100 * t.error_ratio, 1) + ' %';
  return el('div', { class: 'traffic', 'data-traffic': a.app },
    num(t.requests_per_second, 2) + ' req/s · 5xx ' + err + ' · p50 ' + ms(t.p50_seconds) +
    ' · p99 ' + ms(t.p99_seconds) + ' (last ' + Math.round(t.window_seconds) + ' s)');
}

function renderApps(d, dt) {
  const f = filterText();
  const shown = d.apps.filter(a => matches(a, f));
  document.getElementById('app-count').textContent = shown.length + ' of ' + d.apps.length;
  const box = document.getElementById('apps');
  if (shown.length === 0) {
    box.replaceChildren(el('p', { class: 'empty' }, d.apps.length ? 'no app matches the filter' : 'no app in the route table yet'));
    return;
  }
  box.replaceChildren(...shown.map(a => {
    const head = ['member', 'health', 'rotate', '#in flight', '#tunnels', '#req/s', '#5xx %', '#avg ms', 'latency', 'health history'];
    if (d.token_required) head.push('');
    const t = el('table');
    t.append(el('tr', {}, ...head.map(h => el('th', { class: h.startsWith('#') ? 'num' : '' }, h.replace(/^#/, '')))));
    for (const m of a.members) {
      const before = memberBefore(m.address);
      const s = m.stats;
      const dreq = before ? s.requests - before.requests : 0;
      const rps = before ? rate(s.requests, before.requests, dt) : null;
      const errPct = dreq > 0 ? 100 * (s.errors - before.errors) / dreq : null;
      const avg = dreq > 0 ? (s.latency_us - before.latency_us) / dreq / 1000 : (s.requests ? s.latency_us / s.requests / 1000 : null);
      const hist = m.history.slice(-3).reverse();
      const history = el('td', { class: 'history', title: m.history.map(h => when(h.at) + ' ' + h.from + '→' + h.to + ': ' + h.reason).join('\n') },
        ...(hist.length ? hist.map(h => el('div', {}, ago(d.now - h.at) + ' ', pill(h.to), ' ' + h.reason)) : [el('span', { class: 'muted' }, 'no transition yet')]));
      const row = el('tr', { 'data-member': m.address },
        el('td', { class: 'mono' }, m.address + (m.tls ? ' (tls)' : '')),
        el('td', {}, pill(m.health)),
        el('td', {}, pill(m.rotate)),
        el('td', { class: 'num' }, m.in_flight),
        el('td', { class: 'num' }, m.tunnels),
        el('td', { class: 'num' }, num(rps)),
        el('td', { class: 'num' }, num(errPct)),
        el('td', { class: 'num' }, num(avg, 2)),
        el('td', {}, mini(s.buckets)),
        history);
      if (d.token_required) {
        const dir = m.rotate === 'out' ? 'in' : 'out';
        row.append(el('td', {}, el('button', { onclick: () => rotate(m.address, dir), 'data-rotate': dir }, 'rotate ' + dir)));
      }
      t.append(row);
    }
    if (a.members.length === 0) t.append(el('tr', {}, el('td', { class: 'empty', colspan: String(head.length) }, 'no routed member (503)')));
    return el('div', { class: 'app', 'data-app': a.app },
      el('h3', {}, a.app, a.passthrough ? ' ' : null, a.passthrough ? pill('passthrough', 'warn') : null),
      el('div', { class: 'hosts' }, ...a.hosts.map(h => el('span', { class: 'host' }, h))),
      traffic(a),
      a.settings.length ? el('div', { class: 'settings', 'data-settings': a.app },
        ...a.settings.map(x => pill(x, 'setting')),
        a.refused ? pill(a.refused + ' refused', 'warn') : null) : null,
      t);
  }));
}

function renderTables(d) {
  table('certificates', ['name', 'source', 'expires', '#days left', 'OCSP staple'], d.certificates
    .filter(c => !filterText() || c.name.includes(filterText()))
    .sort((a, b) => a.days - b.days)
    .map(c => el('tr', { 'data-certificate': c.name },
      el('td', { class: 'mono' }, c.name), el('td', { 'data-source': c.source }, c.source),
      el('td', {}, when(c.not_after)),
      el('td', { class: 'num' }, pill(String(c.days), c.days < 7 ? 'bad' : c.days < 30 ? 'warn' : 'up')),
      el('td', { 'data-staple': c.staple_age_seconds ?? '' },
        c.staple_age_seconds == null ? '—' : ago(c.staple_age_seconds)))),
  'no certificate loaded');
  table('splits', ['name', 'shares'], Object.entries(d.splits).map(([name, w]) =>
    el('tr', { 'data-split': name }, el('td', { class: 'mono' }, name),
      el('td', {}, Object.entries(w).map(([app, n]) => app + ' ' + n).join(' · ')))), 'none');
  table('changes', ['when', '#apps', 'which'], d.changes.slice(0, 15).map(c =>
    el('tr', {}, el('td', {}, ago(d.now - c.at)), el('td', { class: 'num' }, c.apps),
      el('td', { class: 'mono' }, c.names.join(', ') + (c.apps > c.names.length ? ' …' : '')))), 'none since start');
  table('dead-letters', ['when', 'message', 'reason'], d.source.recent_dead_letters.map(x =>
    el('tr', {}, el('td', {}, ago(d.now - x.at)), el('td', { class: 'mono' }, x.file), el('td', { class: 'wrap' }, x.reason))), 'none');
  table('audit', ['when', 'client', 'action', 'target', 'result'], d.audit.slice(0, 30).map(x =>
    el('tr', { 'data-audit': x.action }, el('td', {}, ago(d.now - x.at)), el('td', { class: 'mono' }, x.client),
      el('td', {}, x.action), el('td', { class: 'mono' }, x.target), el('td', {}, x.result))), 'no admin action since start');
}

function render() {
  if (!last) return;
  const d = last;
  const dt = prev ? (lastAt - prevAt) / 1000 : 0;
  document.getElementById('version').textContent = d.version;
  const ready = document.getElementById('ready');
  ready.textContent = d.ready ? 'ready' : 'not ready';
  ready.className = 'pill ' + (d.ready ? 'ready' : 'not-ready');
  document.getElementById('updated').textContent = 'updated ' + new Date(lastAt).toLocaleTimeString();
  renderSummary(d, dt);
  renderSource(d);
  renderLatency(d);
  renderApps(d, dt);
  renderTables(d);
  document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
}

async function poll() {
  try {
    const r = await fetch('/status', { cache: 'no-store' });
    if (r.ok) {
      const d = await r.json();
      if (last) { prev = last; prevAt = lastAt; }
      last = d;
      lastAt = Date.now();
      render();
    } else {
      document.getElementById('updated').textContent = '/status answered ' + r.status;
    }
  } catch (e) {
    document.getElementById('updated').textContent = 'router unreachable: ' + e;
  }
}

function start() {
  const f = document.getElementById('filter');
  const m = /filter=([^&]*)/.exec(location.hash);
  if (m) f.value = decodeURIComponent(m[1]);
  f.addEventListener('input', () => {
    history.replaceState(null, '', f.value ? '#filter=' + encodeURIComponent(f.value) : '#');
    render();
  });
  poll();
  setInterval(poll, POLL_MS);
}

start();
