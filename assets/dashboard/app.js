// The uwf dashboard: draws the page the path names from the JSON API, and keeps it live with
// server-sent events. Everything the store holds (prompts, outputs, logs) is put into the page
// as text (textContent), never as HTML.

const page = document.getElementById('page');
const readOnly = document.body.dataset.mode === 'read-only';

// ---- helpers ----------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElementNS(
    tag === 'svg' || attrs.svg ? 'http://www.w3.org/2000/svg' : 'http://www.w3.org/1999/xhtml', tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'svg' || v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs = {}, ...children) {
  return el(tag, { ...attrs, svg: true }, ...children);
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.hints = (body && body.hints) || [];
  }
}

async function api(path, options = {}) {
  const init = { method: options.method || 'GET', headers: {} };
  // Who acts: the name given on the answer form (kept for this browser), else the server
  // records `dashboard`.
  const by = localStorage.getItem('uwf-by');
  if (init.method !== 'GET' && by) init.headers['x-uwf-by'] = encodeURIComponent(by);
  if (options.json !== undefined) {
    init.body = JSON.stringify(options.json);
    init.headers['content-type'] = 'application/json';
  } else if (options.body !== undefined) {
    init.body = options.body;
    init.headers['content-type'] = 'text/plain';
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = { error: text }; }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function errorBox(err) {
  return el('div', { class: 'error', role: 'alert' },
    err.message, ...(err.hints || []).map((h) => el('div', { class: 'muted', text: 'hint: ' + h })));
}

function ago(ms) {
  if (!ms) return '';
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

function duration(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function statusSpan(status) {
  return el('span', { class: `status status-${status}`, text: status });
}

function go(path) {
  history.pushState(null, '', path);
  route();
}

// Links inside the page go through the router (no reload).
document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a[href^="/"]');
  if (!a || a.target || e.ctrlKey || e.metaKey || e.shiftKey || a.getAttribute('href').startsWith('/n/')) return;
  e.preventDefault();
  go(a.getAttribute('href'));
});
window.addEventListener('popstate', () => route());

// Streams of the page on screen, closed when another page is drawn.
let streams = [];
function stream(url, handlers) {
  const source = new EventSource(url);
  for (const [name, fn] of Object.entries(handlers)) source.addEventListener(name, fn);
  streams.push(source);
  return source;
}

function show(...children) {
  page.replaceChildren(...children);
}

// ---- awaiting count in the navigation ---------------------------------------------------

let countTimer = null;
async function refreshAwaiting() {
  clearTimeout(countTimer);
  countTimer = setTimeout(async () => {
    const badge = document.getElementById('awaiting');
    try {
      const { count } = await api('/api/threads/count?status=awaiting');
      badge.replaceChildren(el('a', { href: '/?status=awaiting', text: `${count} awaiting a person` }));
      badge.hidden = count === 0;
    } catch { badge.hidden = true; }
  }, 200);
}

// ---- Threads -----------------------------------------------------------------------------

const STATUSES = ['', 'active', 'running', 'awaiting', 'over-budget', 'failed', 'done', 'killed', 'rebased'];

async function threadsPage() {
  const params = new URLSearchParams(location.search);
  const filters = el('form', { class: 'filters', id: 'filters' },
    el('select', { name: 'status', 'aria-label': 'status' },
      STATUSES.map((s) => el('option', { value: s, selected: params.get('status') === s && s !== '', text: s || 'any status' }))),
    el('input', { name: 'workflow', placeholder: 'workflow', value: params.get('workflow') || '' }),
    el('input', { name: 'parent', placeholder: 'parent thread', value: params.get('parent') || '', size: 14 }),
    el('input', { name: 'q', placeholder: 'search id, workflow, prompt', value: params.get('q') || '', size: 30 }),
    el('label', { class: 'muted' }, 'since ', el('input', { type: 'date', name: 'since', 'aria-label': 'started since', value: params.get('since') || '' })),
    el('button', { type: 'submit', text: 'Filter' }));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(filters)) if (v) q.set(k, v);
    go('/' + (q.toString() ? '?' + q : ''));
  });
  const body = el('tbody');
  // Ticking rows (or the header's box, for the whole page) offers the bulk actions; the filter
  // itself can be acted on too, every thread it matches.
  const pickAll = el('input', { type: 'checkbox', id: 'pick-all', 'aria-label': 'select every row shown' });
  const table = el('table', { id: 'threads' },
    el('thead', {}, el('tr', {}, readOnly ? null : el('th', {}, pickAll),
      ['thread', 'workflow', 'status', 'next', 'steps', 'updated', 'prompt'].map((h) => el('th', { text: h })))),
    body);
  const bulk = el('div', { class: 'actions', id: 'bulk', hidden: readOnly });
  const bulkNote = el('div', { id: 'bulk-note' });
  const picked = () => [...body.querySelectorAll('input.pick:checked')].map((c) => c.dataset.id);
  function drawBulk() {
    if (readOnly) return;
    const ids = picked();
    const filtered = ['status', 'workflow', 'q', 'since', 'parent'].some((k) => params.get(k));
    const ask = (action, target, label) => {
      bulkNote.replaceChildren(el('span', { class: 'confirm', id: 'bulk-confirm' },
        `${action[0].toUpperCase()}${action.slice(1)} ${label}? `,
        action === 'kill' ? 'Killed threads are archived and cannot be resumed. ' : '',
        el('button', { id: 'bulk-yes', class: action === 'kill' ? 'danger' : '', text: `${action} them`, onclick: () => runBulk(action, target) }), ' ',
        el('button', { id: 'bulk-no', text: 'Cancel', onclick: () => bulkNote.replaceChildren() })));
      document.getElementById('bulk-no').focus();
    };
    bulk.replaceChildren(
      el('span', { class: 'muted', id: 'picked', text: ids.length ? `${ids.length} selected:` : 'select rows, or act on the filter:' }),
      ...['queue', 'pause', 'resume', 'kill'].map((a) => el('button', {
        id: `bulk-${a}`, class: a === 'kill' ? 'danger' : '', text: a, disabled: !ids.length,
        onclick: () => ask(a, { threads: ids }, `${ids.length} thread(s)`) })),
      filtered ? el('button', { id: 'bulk-filter', text: 'act on every match…', onclick: async () => {
        const f = Object.fromEntries(['status', 'workflow', 'q', 'since', 'parent'].filter((k) => params.get(k)).map((k) => [k, params.get(k)]));
        bulkNote.replaceChildren(el('span', { class: 'confirm', id: 'bulk-choose' }, 'Every thread this filter matches: ',
          ...['queue', 'pause', 'resume', 'kill'].map((a) => el('button', { id: `bulk-filter-${a}`, class: a === 'kill' ? 'danger' : '', text: a,
            onclick: () => ask(a, { filter: f }, 'every thread the filter matches') })), ' ',
          el('button', { id: 'bulk-no', text: 'Cancel', onclick: () => bulkNote.replaceChildren() })));
      } }) : '');
  }
  async function runBulk(action, target) {
    bulkNote.replaceChildren(el('span', { class: 'muted', text: `${action}…` }));
    try {
      const r = await api(`/api/bulk/${action}`, { method: 'POST', json: target });
      bulkNote.replaceChildren(el('div', { id: 'bulk-result' },
        `${action}: ${r.done} of ${r.matched} done`, r.more ? ` (${r.more} more not acted on: narrow the filter)` : '',
        r.refused.length ? el('ul', { class: 'muted' }, r.refused.map((x) => el('li', { text: `${x.thread}: ${x.error}` }))) : ''));
      pickAll.checked = false;
      await load();
    } catch (err) { bulkNote.replaceChildren(errorBox(err)); }
  }
  pickAll.addEventListener('change', () => { body.querySelectorAll('input.pick').forEach((c) => { c.checked = pickAll.checked; }); drawBulk(); });
  body.addEventListener('change', (e) => { if (e.target.classList.contains('pick')) drawBulk(); });
  const notice = el('div', { class: 'notice', id: 'news', hidden: true });
  const pager = el('div', { class: 'pager' });
  const start = el('div', { class: 'actions' });
  if (!readOnly) start.append(el('a', { href: '/workflows', text: 'Start a thread…' }));
  const keys = el('p', { class: 'muted keys' }, el('kbd', { text: '/' }), ' search · ', el('kbd', { text: 'j' }), ' ', el('kbd', { text: 'k' }),
    ' down and up · ', el('kbd', { text: 'Enter' }), ' open');
  show(el('h1', { text: 'Threads' }), filters, start, bulk, bulkNote, notice, table, pager, keys);

  // The keyboard: `/` to search, j/k to move through the rows, Enter to open one. Keys typed
  // into a field are the field's.
  let selected = -1;
  function select(i) {
    const trs = [...body.querySelectorAll('tr[data-id]')];
    if (!trs.length) return;
    selected = Math.max(0, Math.min(trs.length - 1, i));
    trs.forEach((tr, k) => { tr.classList.toggle('selected', k === selected); tr.setAttribute('aria-selected', String(k === selected)); });
    trs[selected].scrollIntoView({ block: 'nearest' });
  }
  function onKey(e) {
    if (!document.body.contains(body)) { document.removeEventListener('keydown', onKey); return; }
    if (e.ctrlKey || e.metaKey || e.altKey || e.target.closest('input, textarea, select, [contenteditable]')) return;
    if (e.key === '/') { e.preventDefault(); filters.elements.q.focus(); filters.elements.q.select(); }
    else if (e.key === 'j') select(selected + 1);
    else if (e.key === 'k') select(selected - 1);
    else if (e.key === 'Enter' && selected >= 0) {
      const tr = body.querySelectorAll('tr[data-id]')[selected];
      if (tr) go(`/threads/${tr.dataset.id}`);
    }
  }
  document.addEventListener('keydown', onKey);

  // The page is in the URL (`cursor`), and the cursors of the pages before it in the history
  // entry, so Back and Reload return to the same page.
  const cursors = (history.state && history.state.cursors) || [];
  let cursor = params.get('cursor') || '';
  function turn() {
    const q = new URLSearchParams(params);
    if (cursor) q.set('cursor', cursor); else q.delete('cursor');
    history.pushState({ cursors: [...cursors] }, '', '/' + (q.toString() ? '?' + q : ''));
    load();
  }
  const rows = new Map();

  // Children of sub-workflows are listed under their parent: a row with some has a toggle that
  // shows them, indented by depth.
  function kids(t, tr) {
    const n = (t.children || []).length;
    if (!n) return '';
    const button = el('button', { class: 'kids', 'aria-expanded': 'false', title: 'sub-workflow children', text: `▸ ${n}` });
    button.addEventListener('click', async () => {
      const open = button.getAttribute('aria-expanded') === 'true';
      for (const r of body.querySelectorAll(`tr[data-under="${t.thread}"]`)) r.remove();
      button.setAttribute('aria-expanded', String(!open));
      button.textContent = `${open ? '▸' : '▾'} ${n}`;
      if (open) return;
      let data;
      try { data = await api(`/api/threads/${t.thread}/children`); } catch (err) { tr.after(el('tr', { 'data-under': t.thread }, el('td', { colspan: 8 }, errorBox(err)))); return; }
      let after = tr;
      for (const c of data.items) {
        const row = el('tr', { class: `child depth-${Math.min(c.depth, 4)}`, 'data-under': t.thread, 'data-child': c.thread }, cells(c, null));
        after.after(row);
        after = row;
      }
    });
    return button;
  }

  function cells(t, tr) {
    return [
      readOnly ? null : el('td', {}, tr ? el('input', { type: 'checkbox', class: 'pick', 'data-id': t.thread, 'aria-label': `select ${t.thread}` }) : null),
      el('td', { class: 'id' }, el('a', { href: `/threads/${t.thread}`, text: t.thread }), tr ? kids(t, tr) : null),
      el('td', { text: t.workflow }),
      el('td', {}, statusSpan(t.status)),
      el('td', { text: t.runningRole ? `${t.runningRole} (running)` : (t.next || '') }),
      el('td', { class: 'steps', text: t.steps }),
      el('td', { class: 'muted', title: t.updatedAt ? new Date(t.updatedAt).toISOString() : '', text: ago(t.updatedAt) }),
      el('td', { text: t.prompt || '' }),
    ];
  }

  // The rows shown, asked again every two seconds while the tab is visible: a step starting
  // changes no index row, yet its thread turns "running" within that time. One page, never
  // the whole store.
  async function recheck() {
    if (document.visibilityState !== 'visible' || !document.body.contains(body)) return;
    const q = new URLSearchParams(params);
    q.delete('cursor');
    if (cursor) q.set('cursor', cursor);
    q.set('limit', '50');
    let data;
    try { data = await api('/api/threads?' + q); } catch { return; }
    for (const t of data.items) {
      const tr = rows.get(t.thread);
      if (!tr) continue;
      const shown = JSON.stringify([t.status, t.runningRole, t.next, t.steps]);
      if (tr.dataset.shown !== shown) { tr.dataset.shown = shown; redraw(tr, t); }
    }
  }
  const timer = setInterval(() => { if (!document.body.contains(body)) clearInterval(timer); else recheck(); }, 2000);

  // A row drawn again keeps its tick.
  function redraw(tr, t) {
    const was = tr.querySelector('input.pick');
    tr.replaceChildren(...cells(t, tr).filter(Boolean));
    const now = tr.querySelector('input.pick');
    if (was && now) now.checked = was.checked;
  }

  async function load() {
    const q = new URLSearchParams(params);
    q.delete('cursor');
    if (cursor) q.set('cursor', cursor);
    q.set('limit', '50');
    let data;
    try { data = await api('/api/threads?' + q); } catch (err) { body.replaceChildren(el('tr', {}, el('td', { colspan: 8 }, errorBox(err)))); return; }
    rows.clear();
    selected = -1;
    body.replaceChildren(...data.items.map((t) => {
      const tr = el('tr', { 'data-id': t.thread, 'data-shown': JSON.stringify([t.status, t.runningRole, t.next, t.steps]) });
      tr.append(...cells(t, tr).filter(Boolean));
      rows.set(t.thread, tr);
      return tr;
    }));
    if (data.items.length === 0) body.append(el('tr', {}, el('td', { colspan: 8, class: 'muted', text: '(no threads)' })));
    drawBulk();
    pager.replaceChildren(
      cursors.length ? el('button', { id: 'newer', text: '← newer', onclick: () => { cursor = cursors.pop(); turn(); } }) : '',
      data.next ? el('button', { id: 'older', text: 'older →', onclick: () => { cursors.push(cursor); cursor = data.next; turn(); } }) : '',
      el('span', { class: 'muted', text: `${data.items.length} shown` }));
  }

  let news = 0;
  stream('/api/events', {
    changed: async (e) => {
      const { threads } = JSON.parse(e.data);
      refreshAwaiting();
      for (const id of threads) {
        const tr = rows.get(id);
        if (!tr) { if (!cursor) { news += 1; notice.hidden = false; notice.replaceChildren(`${news} thread(s) started or changed elsewhere `, el('button', { text: 'show', onclick: () => { news = 0; notice.hidden = true; load(); } })); } continue; }
        try {
          const t = await api(`/api/threads/${id}`);
          t.updatedAt = Date.now();
          t.prompt = tr.lastChild.textContent;
          redraw(tr, t);
        } catch { /* gone: the next load says so */ }
      }
    },
  });
  await load();
}

// ---- the workflow graph --------------------------------------------------------------------
//
// Drawn top to bottom in ranks: a role's rank is its longest distance from $START over the
// edges that do not go back, and $END is alone at the bottom. An edge across several ranks
// bends through a slot of its own in each rank it crosses, so no edge passes behind a node;
// an edge back up runs below its role, along a lane left of every node, and into its target
// from above; a self-loop sits on its role's right. Every edge ends in an arrowhead and is
// labelled with its condition's name ("otherwise" for the edge taken when none matches).

const G = { W: 128, H: 32, RANK: 64, SLOT: 34, DUMMY: 14, LANE: 12, PAD: 12 };

let measure = null;
function textWidth(text) {
  measure = measure || document.createElement('canvas').getContext('2d');
  measure.font = '11px system-ui, sans-serif';
  return Math.ceil(measure.measureText(text).width) + 4;
}

function graphLayout(graph) {
  const roles = graph.roles.filter((r) => r !== '$START' && r !== '$END');
  const nodes = ['$START', ...roles, '$END'];
  const known = new Set(nodes);
  const edges = graph.edges.filter((e) => known.has(e.from) && known.has(e.to)).map((e, i) => ({ ...e, i }));
  const out = new Map(nodes.map((n) => [n, []]));
  for (const e of edges) out.get(e.from).push(e);
  // Back edges close a cycle in a depth-first walk from $START, edges taken as written.
  const state = new Map();
  const found = [];
  const visit = (n) => {
    state.set(n, 'open');
    found.push(n);
    for (const e of out.get(n)) {
      if (e.to === n) { e.kind = 'self'; continue; }
      const s = state.get(e.to);
      if (s === 'open') e.kind = 'back';
      else if (!s) visit(e.to);
    }
    state.set(n, 'done');
  };
  visit('$START');
  for (const n of nodes) if (!state.has(n)) visit(n);
  for (const e of edges) e.kind = e.kind || 'down';
  const down = edges.filter((e) => e.kind === 'down');
  const rank = new Map(nodes.map((n) => [n, 0]));
  for (let k = 0; k < nodes.length; k++) {
    for (const e of down) if (rank.get(e.to) < rank.get(e.from) + 1) rank.set(e.to, rank.get(e.from) + 1);
  }
  const bottom = Math.max(0, ...nodes.filter((n) => n !== '$END').map((n) => rank.get(n))) + 1;
  rank.set('$END', Math.max(rank.get('$END'), bottom));
  const ranks = Math.max(...rank.values()) + 1;
  // Items per rank: nodes, and one slot for each rank a long edge crosses.
  const layers = Array.from({ length: ranks }, () => []);
  for (const n of found) layers[rank.get(n)].push({ id: n, node: true });
  for (const e of down) {
    e.via = [];
    for (let r = rank.get(e.from) + 1; r < rank.get(e.to); r++) {
      const item = { id: `#${e.i}@${r}`, node: false, edge: e };
      layers[r].push(item);
      e.via.push(item);
    }
  }
  // Fewer crossings: order each rank by where its neighbours sit, down and up a few times.
  const neighbours = new Map();
  const link = (a, b) => {
    if (!neighbours.has(a)) neighbours.set(a, { up: [], down: [] });
    if (!neighbours.has(b)) neighbours.set(b, { up: [], down: [] });
    neighbours.get(a).down.push(b);
    neighbours.get(b).up.push(a);
  };
  for (const e of down) {
    const chain = [e.from, ...e.via.map((v) => v.id), e.to];
    for (let k = 1; k < chain.length; k++) link(chain[k - 1], chain[k]);
  }
  const order = new Map();
  const number = () => layers.forEach((l) => l.forEach((item, i) => order.set(item.id, i)));
  number();
  const sortBy = (layer, side) => {
    const at = (item) => {
      const ns = (neighbours.get(item.id) || { up: [], down: [] })[side];
      return ns.length ? ns.reduce((s, n) => s + order.get(n), 0) / ns.length : order.get(item.id);
    };
    const keyed = layer.map((item) => [at(item), order.get(item.id), item]);
    keyed.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    layer.splice(0, layer.length, ...keyed.map((k) => k[2]));
  };
  for (let pass = 0; pass < 4; pass++) {
    for (let r = 1; r < ranks; r++) { sortBy(layers[r], 'up'); number(); }
    for (let r = ranks - 2; r >= 0; r--) { sortBy(layers[r], 'down'); number(); }
  }
  // Places: ranks centred on the widest; back edges' lanes on the left; loops on the right.
  const back = edges.filter((e) => e.kind === 'back');
  const left = G.PAD + back.length * G.LANE + (back.length ? G.LANE : 0);
  const widthOf = (l) => l.reduce((w, item) => w + (item.node ? G.W : G.DUMMY), 0) + Math.max(0, l.length - 1) * G.SLOT;
  const inner = Math.max(...layers.map(widthOf));
  const pos = new Map();
  layers.forEach((l, r) => {
    let x = left + (inner - widthOf(l)) / 2;
    for (const item of l) {
      const w = item.node ? G.W : G.DUMMY;
      pos.set(item.id, { x, y: G.PAD + r * (G.H + G.RANK), w, h: G.H });
      x += w + G.SLOT;
    }
  });
  return { nodes, edges, rank, ranks, pos, left, inner, back };
}

// Where an edge leaves or enters a node: along its bottom (leaving) or top (entering), spread
// in the order of where the other ends sit, edges from the lanes first.
function ports(layout) {
  const { edges, pos } = layout;
  const sides = new Map();
  const add = (node, side, e, key) => {
    const k = `${node} ${side}`;
    if (!sides.has(k)) sides.set(k, []);
    sides.get(k).push({ e, key });
  };
  for (const e of edges) {
    if (e.kind === 'self') continue;
    const first = e.kind === 'down' && e.via.length ? pos.get(e.via[0].id) : pos.get(e.to);
    const last = e.kind === 'down' && e.via.length ? pos.get(e.via[e.via.length - 1].id) : pos.get(e.from);
    add(e.from, 'out', e, e.kind === 'back' ? -1e6 - e.i : first.x + first.w / 2);
    add(e.to, 'in', e, e.kind === 'back' ? -1e6 - e.i : last.x + last.w / 2);
  }
  for (const [k, list] of sides) {
    const [node, side] = k.split(' ');
    const p = pos.get(node);
    list.sort((a, b) => a.key - b.key);
    list.forEach(({ e }, i) => {
      const x = p.x + (p.w * (i + 1)) / (list.length + 1);
      if (side === 'out') e.start = { x, y: p.y + p.h };
      else e.end = { x, y: p.y };
    });
  }
}

function cubic(a, b) {
  const m = (a.y + b.y) / 2;
  return { d: ` C${a.x},${m} ${b.x},${m} ${b.x},${b.y}`, at: (t) => {
    const u = 1 - t;
    return { x: u * u * u * a.x + 3 * u * u * t * a.x + 3 * u * t * t * b.x + t * t * t * b.x,
      y: u * u * u * a.y + 3 * u * u * t * m + 3 * u * t * t * m + t * t * t * b.y };
  } };
}

function graphSvg(graph, path, current, done) {
  const layout = graphLayout(graph);
  const { nodes, edges, pos, left, inner, ranks } = layout;
  ports(layout);
  const conditions = graph.conditions || {};
  const outCount = new Map();
  for (const e of edges) outCount.set(e.from, (outCount.get(e.from) || 0) + 1);
  // Runs in the gap below rank r, one height each.
  const gapUse = new Map();
  const gapY = (r) => {
    const k = gapUse.get(r) || 0;
    gapUse.set(r, k + 1);
    return G.PAD + r * (G.H + G.RANK) + G.H + 10 + ((k * 9) % (G.RANK - 20));
  };
  const boxes = nodes.map((n) => pos.get(n));
  const labels = [];
  const free = (b) => b.x >= 1 && b.y >= 1 && ![...boxes, ...labels].some((o) => b.x < o.x + o.w && o.x < b.x + b.w && b.y < o.y + o.h && o.y < b.y + b.h);
  let right = left + inner;
  for (const e of edges) {
    const from = pos.get(e.from);
    const candidates = [];
    if (e.kind === 'down') {
      const points = [e.start, ...e.via.flatMap((v) => { const p = pos.get(v.id); return [{ x: p.x + p.w / 2, y: p.y }, { x: p.x + p.w / 2, y: p.y + p.h }]; }), e.end];
      let d = `M${points[0].x},${points[0].y}`;
      for (let k = 1; k < points.length; k++) {
        if (k % 2 === 0) { d += ` L${points[k].x},${points[k].y}`; continue; }
        const c = cubic(points[k - 1], points[k]);
        d += c.d;
        for (const t of [0.3, 0.5, 0.7, 0.15, 0.85]) candidates.push(c.at(t));
      }
      e.d = d;
    } else if (e.kind === 'back') {
      const lane = left - G.LANE * (layout.back.indexOf(e) + 1);
      const y1 = gapY(layout.rank.get(e.from));
      const y2 = gapY(layout.rank.get(e.to) - 1);
      const r = 5;
      e.d = `M${e.start.x},${e.start.y} L${e.start.x},${y1 - r} Q${e.start.x},${y1} ${e.start.x - r},${y1} L${lane + r},${y1} Q${lane},${y1} ${lane},${y1 - r}`
        + ` L${lane},${y2 + r} Q${lane},${y2} ${lane + r},${y2} L${e.end.x - r},${y2} Q${e.end.x},${y2} ${e.end.x},${y2 + r} L${e.end.x},${e.end.y}`;
      for (const t of [0.2, 0.5, 0.8, 0.05, 0.95]) candidates.push({ x: lane + (e.start.x - lane) * t, y: y1 });
      for (const t of [0.3, 0.6]) candidates.push({ x: lane + (e.end.x - lane) * t, y: y2 });
    } else {
      const x = from.x + from.w, y1 = from.y + 7, y2 = from.y + from.h - 7;
      e.d = `M${x},${y1} C${x + 34},${y1 - 12} ${x + 34},${y2 + 12} ${x},${y2}`;
      candidates.push({ x: x + 30, y: from.y + from.h / 2, anchor: 'loop' });
    }
    // The label: the condition's name, beside the edge where it covers no node and no label.
    const name = e.condition || (outCount.get(e.from) > 1 ? 'otherwise' : null);
    if (name) {
      const w = textWidth(name), h = 13;
      let box = null;
      for (const c of candidates) {
        const tries = c.anchor === 'loop' ? [{ x: c.x, y: c.y - h / 2 }] : [{ x: c.x + 4, y: c.y - h / 2 }, { x: c.x - w - 4, y: c.y - h / 2 }];
        box = tries.map((b) => ({ ...b, w, h })).find(free);
        if (box) break;
      }
      if (!box) {
        const c = candidates[0];
        box = { x: c.x + 4, y: c.y - h / 2, w, h };
        for (let k = 0; k < 40 && !free(box); k++) box = { ...box, y: box.y + h };
      }
      labels.push(box);
      e.label = { name, box };
      right = Math.max(right, box.x + w);
    }
    if (e.kind === 'self') right = Math.max(right, from.x + from.w + 40);
  }
  const width = Math.ceil(right + G.PAD);
  const height = Math.ceil(Math.max(G.PAD + ranks * (G.H + G.RANK) - G.RANK + G.PAD, ...labels.map((b) => b.y + b.h + G.PAD)));
  const walked = ['$START', ...path];
  if (done) walked.push('$END');
  const taken = new Set();
  for (let i = 1; i < walked.length; i++) taken.add(walked[i - 1] + '→' + walked[i]);
  if (current) taken.add(walked[walked.length - 1] + '→' + current);
  const marker = (id) => svg('marker', { id, viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse', markerUnits: 'userSpaceOnUse' },
    svg('path', { d: 'M0,0 L10,5 L0,10 z', class: id }));
  const root = svg('svg', { id: 'graph', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'workflow graph' },
    svg('defs', {}, marker('arrow'), marker('arrow-taken')));
  for (const e of edges) {
    const on = taken.has(e.from + '→' + e.to);
    const expr = e.condition ? ` if ${e.condition}${conditions[e.condition] ? `: ${conditions[e.condition]}` : ''}` : (outCount.get(e.from) > 1 ? ' otherwise' : '');
    const g = svg('g', { class: 'edge-group', 'data-from': e.from, 'data-to': e.to, 'data-kind': e.kind },
      svg('title', { text: `${e.from} → ${e.to}${expr}` }),
      svg('path', { d: e.d, class: 'edge' + (on ? ' taken' : ''), 'marker-end': `url(#${on ? 'arrow-taken' : 'arrow'})` }));
    if (e.label) {
      const b = e.label.box;
      g.append(svg('text', { class: 'edge-label' + (on ? ' taken' : ''), x: b.x + 2, y: b.y + b.h - 3, text: e.label.name }));
    }
    root.append(g);
  }
  for (const n of nodes) {
    const p = pos.get(n);
    const cls = 'node' + (n === current ? ' current' : '') + (walked.includes(n) ? ' visited' : '');
    root.append(svg('g', { class: cls, 'data-role': n, transform: `translate(${p.x},${p.y})` },
      svg('rect', { width: p.w, height: p.h, rx: 6 }),
      svg('text', { x: p.w / 2, y: p.h / 2 + 4, 'text-anchor': 'middle', text: n })));
  }
  return root;
}

// ---- Thread --------------------------------------------------------------------------------

// A live log as a terminal shows it: chunks joined as they were written (a line may come in
// pieces), and a carriage return going back to the start of its line (a progress line
// rewriting itself). A chunk ending in \r waits for the next, which may start with \n.
class LogView {
  constructor() { this.text = ''; this.held = ''; }
  add(chunk) {
    let text = this.held + chunk;
    this.held = '';
    if (text.endsWith('\r')) { this.held = '\r'; text = text.slice(0, -1); }
    this.text = (this.text + text).replace(/\r\n/g, '\n').replace(/[^\n]*\r/g, '');
    // Keep the page light: the end of a long log.
    if (this.text.length > 200000) this.text = this.text.slice(-150000);
  }
}

// Outputs read as YAML (long strings as blocks of text) or as JSON; the choice is remembered.
function formatToggle(redraw) {
  const button = (format) => el('button', { class: 'format', id: `format-${format}`, 'aria-pressed': String(outputFormat() === format), text: format.toUpperCase(),
    onclick: (e) => { localStorage.setItem('uwf-output-format', format); for (const b of e.target.parentNode.children) b.setAttribute('aria-pressed', String(b.id === `format-${format}`)); redraw(); } });
  return el('span', { class: 'toggle', role: 'group', 'aria-label': 'show outputs as' }, button('yaml'), button('json'));
}
function outputFormat() { return localStorage.getItem('uwf-output-format') === 'json' ? 'json' : 'yaml'; }
function outputText(s) { return outputFormat() === 'json' || s.outputYaml == null ? JSON.stringify(s.output, null, 2) : s.outputYaml; }

// A step's Markdown body, rendered and cleaned by the server (`src/serve/markdown.rs`), parsed
// here as an inert document and moved into the page.
function markdownBlock(html) {
  const doc = new DOMParser().parseFromString(`<div>${html}</div>`, 'text/html');
  const box = el('div', { class: 'markdown body' });
  box.append(...doc.body.firstChild.childNodes);
  return box;
}

// The steps as a timeline: each a bar from when its agent started to when the step was written
// (its own duration), on one time axis, so the waits between steps show as gaps.
function stepBars(steps) {
  const timed = steps.filter((s) => s.at && s.durationMs != null);
  if (!timed.length) return '';
  const from = Math.min(...timed.map((s) => s.at - s.durationMs));
  const to = Math.max(...timed.map((s) => s.at));
  const W = 640, ROW = 18, LEFT = 150;
  const span = Math.max(1, to - from);
  const x = (t) => LEFT + ((t - from) / span) * (W - LEFT - 8);
  const box = svg('svg', { id: 'step-timeline', viewBox: `0 0 ${W} ${timed.length * ROW + 22}`, width: '100%', role: 'img',
    'aria-label': `timeline of ${timed.length} step(s) over ${duration(span)}` });
  timed.forEach((s, i) => {
    const y = i * ROW + 4;
    const x0 = x(s.at - s.durationMs), x1 = x(s.at);
    box.append(svg('text', { x: 4, y: y + 12, class: 'bar-label', text: `${s.index} · ${s.role}` }),
      svg('rect', { x: x0, y, width: Math.max(2, x1 - x0), height: ROW - 6, rx: 2, class: 'bar', 'data-index': s.index, 'data-ms': s.durationMs },
        svg('title', { text: `step ${s.index} · ${s.role} · agent ${s.agent} · took ${duration(s.durationMs)}` })));
  });
  box.append(svg('text', { x: LEFT, y: timed.length * ROW + 18, class: 'bar-axis', text: '0' }),
    svg('text', { x: W - 8, y: timed.length * ROW + 18, class: 'bar-axis', 'text-anchor': 'end', text: duration(span) }));
  return box;
}

async function threadPage(id) {
  const head = el('div', { id: 'summary' });
  const actions = el('div', { class: 'actions', id: 'actions' });
  const graphBox = el('div', { id: 'graph-box' });
  const whyBox = el('div', { id: 'why' });
  const timeline = el('div', { id: 'timeline' });
  const bars = el('div', { id: 'step-bars' });
  const log = el('pre', { id: 'log', 'aria-label': 'live log' });
  const message = el('div', { id: 'message' });
  show(el('h1', {}, 'Thread ', el('code', { text: id })), head, actions, message,
    el('div', { class: 'grid' },
      el('section', {}, el('h2', { text: 'Graph' }), graphBox, el('h2', { text: 'Why next' }), whyBox),
      el('section', {}, el('h2', { text: 'Live log' }), log)),
    el('h2', {}, 'Steps ', formatToggle(() => refresh())), bars, timeline);

  let thread = null;
  async function act(action) {
    message.replaceChildren(el('span', { class: 'muted', text: `${action}…` }));
    try {
      const r = await api(`/api/threads/${id}/${action}`, { method: 'POST' });
      message.replaceChildren(el('span', { class: 'muted', text: `${action}: ${r.status || (r.running ? 'running' : r.role || 'ok')}` }));
      await refresh();
    } catch (err) { message.replaceChildren(errorBox(err)); }
  }

  // A thread's `cost` (`docs/LLM.md#tokens-cost-and-budgets`): tokens, then dollars or "cost unknown".
  function costText(c) {
    const usd = (x) => `$${x.toFixed(x < 1 ? 4 : 2)}`;
    const cost = c.costUsd != null ? usd(c.costUsd) : c.steps ? (c.costKnownUsd != null ? `cost unknown (at least ${usd(c.costKnownUsd)})` : 'cost unknown') : '$0';
    return `${c.tokens} tokens (${c.input} in, ${c.output} out, ${c.cached} cached) · ${cost}`;
  }
  function budgetText(b) {
    if (!b) return 'none';
    return [b.maxTokens != null ? `${b.maxTokens} tokens` : '', b.maxCost != null ? `$${b.maxCost.toFixed(2)}` : ''].filter(Boolean).join(', ');
  }

  async function refresh() {
    let t, steps, why;
    try {
      [t, steps, why] = await Promise.all([
        api(`/api/threads/${id}`), api(`/api/threads/${id}/steps`), api(`/api/threads/${id}/why`).catch((err) => ({ error: err.message, trace: [] }))]);
    } catch (err) { head.replaceChildren(errorBox(err)); return; }
    thread = t;
    const lineage = [];
    if (t.parent) lineage.push(el('span', {}, 'parent ', el('a', { href: `/threads/${t.parent.thread || t.parent}`, text: t.parent.thread || t.parent })));
    if (t.origin && t.origin.thread) lineage.push(el('span', {}, 'forked from ', el('a', { href: `/threads/${t.origin.thread}`, text: t.origin.thread })));
    if (t.rebasedFrom) lineage.push(el('span', {}, 'rebased from ', el('a', { href: `/threads/${t.rebasedFrom}`, text: t.rebasedFrom })));
    if (t.rebasedOnto) lineage.push(el('span', {}, 'rebased onto ', el('a', { id: 'rebased-onto', href: `/threads/${t.rebasedOnto}`, text: t.rebasedOnto })));
    for (const c of t.children || []) lineage.push(el('span', {}, 'child ', el('a', { href: `/threads/${c}`, text: c })));
    lineage.push(el('a', { href: `/?parent=${id}`, text: 'threads from this one' }));
    const current = t.runningRole || (t.done ? null : t.next);
    head.replaceChildren(
      el('p', {}, statusSpan(t.status), t.paused ? el('span', { class: 'status status-paused', id: 'paused', text: 'paused' }) : '', ' · workflow ', el('a', { href: `/workflows/${t.workflow}`, text: t.workflow }),
        ' · next ', el('strong', { id: 'next', text: t.next || '—' }), ` · ${t.steps} step(s)`,
        t.awaiting ? el('span', {}, ' · ', el('a', { href: `/threads/${id}/answer`, id: 'answer-link', text: `answer as ${t.awaiting}` })) : ''),
      lineage.length ? el('p', { class: 'muted' }, ...lineage.flatMap((x, i) => (i ? [' · ', x] : [x]))) : '',
      t.workdir || t.agents ? el('p', { class: 'muted', id: 'context' },
        t.workdir ? `runs in ${t.workdir}` : '',
        t.workdir && t.agents ? ' · ' : '',
        t.agents ? `agents: ${Object.entries(t.agents).map(([r, a]) => `${r}=${a}`).join(', ')}` : '') : '',
      t.by || t.lastAction ? el('p', { class: 'muted', id: 'authors' },
        t.by ? `started by ${t.by}` : '',
        t.by && t.lastAction ? ' · ' : '',
        t.lastAction ? `last: ${t.lastAction.event} by ${t.lastAction.by}, ${ago(t.lastAction.at)}` : '') : '',
      (t.acts || []).length ? el('details', { id: 'acts' }, el('summary', { text: `Who did what (${t.acts.length})` }),
        el('ol', {}, t.acts.map((a) => el('li', { title: new Date(a.at).toISOString() }, el('strong', { text: a.by }), ` ${a.event} · ${ago(a.at)}`)))) : '',
      t.cost ? el('p', { class: 'muted', id: 'cost' }, `spent ${costText(t.cost)}`,
        t.childrenCost ? ` · sub-workflows ${costText(t.childrenCost)}` : '',
        ` · budget ${budgetText(t.budget)}`) : '',
      t.error ? el('div', { class: 'error', id: 'thread-error', text: t.error }) : '',
      el('details', {}, el('summary', { text: 'Prompt' }), el('pre', { id: 'prompt', text: t.prompt })));
    actions.replaceChildren();
    if (!readOnly && !t.done) {
      for (const a of ['step', 'run', 'queue', t.paused ? 'resume' : 'pause']) actions.append(el('button', { id: `do-${a}`, text: a, onclick: () => act(a) }));
      // Killing archives the thread for good: it asks first.
      actions.append(el('button', { id: 'do-kill', class: 'danger', text: 'kill', onclick: () => {
        message.replaceChildren(el('span', { class: 'confirm', id: 'confirm-kill' },
          'Kill this thread? It stops and is archived as killed; it cannot be resumed (fork it to go on). ',
          el('button', { id: 'confirm-kill-yes', class: 'danger', text: 'Kill it', onclick: () => act('kill') }), ' ',
          el('button', { id: 'confirm-kill-no', text: 'Cancel', onclick: () => message.replaceChildren() })));
        document.getElementById('confirm-kill-no').focus();
      } }));
    }
    graphBox.replaceChildren(graphSvg(t.graph, t.path, current, t.status === 'done'));
    whyBox.replaceChildren(
      why.error ? el('div', { class: 'error', text: why.error }) : '',
      el('ol', {}, (why.trace || []).map((x) => el('li', { class: x.matched ? '' : 'muted' },
        `→ ${x.to} `, x.condition ? el('code', { text: `${x.condition} ${x.expression || ''}` }) : '', ` ${x.verdict}`))),
      why.next ? el('p', {}, 'next: ', el('strong', { text: why.next })) : '');
    timeline.replaceChildren(...steps.steps.slice().reverse().map((s) => {
      const prev = s.index > 1 ? `${id}:${s.index - 1}` : null;
      return el('article', { class: 'step', 'data-hash': s.hash, 'data-index': s.index },
        el('header', {},
          el('strong', { text: `${s.index} · ${s.role}` }), el('span', { class: 'muted', text: `agent ${s.agent}` }),
          el('span', { class: 'muted took', title: 'how long the step itself took (its agent\'s run)', text: s.durationMs == null ? 'took —' : `took ${duration(s.durationMs)}` }),
          s.tokens ? el('span', { class: 'muted tokens', title: `${s.tokens.input} in (${s.tokens.cached} cached), ${s.tokens.output} out${s.tokens.model ? ` · ${s.tokens.model}` : ''}`, text: `${s.tokens.input + s.tokens.output} tokens` }) : '',
          el('span', { class: 'muted', title: `${new Date(s.at).toISOString()} · ${duration(s.sincePreviousMs)} after ${s.index > 1 ? 'the previous step' : 'the thread started'}`, text: ago(s.at) }),
          el('a', { href: `/n/${s.hash}`, text: s.hash }),
          prev ? el('a', { href: `/diff?a=${encodeURIComponent(prev)}&b=${encodeURIComponent(`${id}:${s.index}`)}`, text: 'diff with previous' }) : '',
          readOnly ? '' : el('button', { class: 'fork', text: 'fork from here', onclick: () => fork(s.hash) })),
        s.bodyHtml ? markdownBlock(s.bodyHtml) : '',
        el('pre', { class: 'output', 'data-format': outputFormat(), text: outputText(s) }));
    }));
    if (!steps.steps.length) timeline.append(el('p', { class: 'muted', text: '(no steps yet)' }));
    bars.replaceChildren(stepBars(steps.steps));
  }

  async function fork(hash) {
    try {
      const r = await api(`/api/steps/${hash}/fork`, { method: 'POST' });
      go(`/threads/${r.thread}`);
    } catch (err) { message.replaceChildren(errorBox(err)); }
  }

  await refresh();
  const logView = new LogView();
  let lastHead = thread && thread.head;
  stream(`/api/threads/${id}/live`, {
    log: (e) => {
      logView.add(JSON.parse(e.data));
      log.textContent = logView.text;
      log.scrollTop = log.scrollHeight;
    },
    thread: async (e) => {
      const t = JSON.parse(e.data);
      refreshAwaiting();
      if (t.head !== lastHead || !thread || t.status !== thread.status || t.runningRole !== thread.runningRole || !!t.paused !== !!thread.paused) {
        lastHead = t.head;
        await refresh();
      }
    },
    end: (e) => { e.target.close(); },
  });
}

// ---- Answer --------------------------------------------------------------------------------

// One field of an answer form, from the property's schema. Nothing is chosen for the person:
// choices and yes/no start unset ("— choose —"), and an optional one can be left so; the
// schema's bounds become the browser's own checks, made before anything is sent.
function field(name, schema, required) {
  const label = el('label', { for: `f-${name}`, text: name + (required ? ' *' : '') });
  const help = schema.description ? el('div', { class: 'muted', text: schema.description }) : '';
  const unset = el('option', { value: '', text: required ? '— choose —' : '— leave unset —' });
  let input;
  if (schema.enum) {
    input = el('select', { id: `f-${name}`, name, required }, unset, schema.enum.map((v) => el('option', { value: JSON.stringify(v), text: String(v) })));
  } else if (schema.type === 'boolean') {
    input = el('select', { id: `f-${name}`, name, required }, unset, el('option', { value: 'true', text: 'yes (true)' }), el('option', { value: 'false', text: 'no (false)' }));
  } else if (schema.type === 'number' || schema.type === 'integer') {
    input = el('input', { id: `f-${name}`, name, type: 'number', required, step: schema.type === 'integer' ? '1' : 'any', min: schema.minimum, max: schema.maximum });
  } else if (schema.type === 'string') {
    input = el('textarea', { id: `f-${name}`, name, rows: 3, cols: 60, required, minlength: schema.minLength, maxlength: schema.maxLength });
  } else if (schema.type === 'array' && schema.items && schema.items.type === 'string') {
    input = el('textarea', { id: `f-${name}`, name, rows: 3, cols: 60, required, placeholder: 'one per line' });
  } else {
    input = el('textarea', { id: `f-${name}`, name, rows: 3, cols: 60, required, placeholder: 'JSON' });
  }
  input.dataset.kind = schema.enum ? 'enum' : (schema.type === 'array' && schema.items && schema.items.type === 'string') ? 'lines' : (schema.type || 'json');
  return el('p', {}, label, el('br'), input, help);
}

function readField(input) {
  const kind = input.dataset.kind;
  if (input.value === '') return undefined;
  if (kind === 'boolean') return input.value === 'true';
  if (kind === 'enum') return JSON.parse(input.value);
  if (kind === 'number' || kind === 'integer') return Number(input.value);
  if (kind === 'string') return input.value;
  if (kind === 'lines') return input.value.split('\n').map((l) => l.trim()).filter(Boolean);
  return JSON.parse(input.value);
}

async function answerPage(id) {
  let q;
  try { q = await api(`/api/threads/${id}/question`); } catch (err) {
    show(el('h1', {}, 'Answer ', el('a', { href: `/threads/${id}`, text: id })), errorBox(err));
    return;
  }
  const schema = q.schema || {};
  const props = schema.type === 'object' && schema.properties ? schema.properties : null;
  const required = new Set(schema.required || []);
  // Fields in the order the workflow's author wrote them (the server's `fields`).
  const order = (q.fields && q.fields.length ? q.fields : Object.keys(props || {})).filter((n) => props && props[n]);
  const form = el('form', { id: 'answer-form' });
  // Above the fields, so a refusal is seen where the person looks next.
  const error = el('div', { id: 'answer-error', class: 'error', role: 'alert' });
  form.append(error);
  if (props) {
    for (const name of order) form.append(field(name, props[name], required.has(name)));
  } else {
    form.append(el('p', {}, el('label', { for: 'f-json', text: 'answer (JSON)' }), el('br'), el('textarea', { id: 'f-json', name: 'json', rows: 8, cols: 70, required: true })));
  }
  // No `name`: the answer's fields are the inputs that have one.
  const by = el('input', { id: 'answer-by', type: 'text', maxlength: 64, value: localStorage.getItem('uwf-by') || '', placeholder: 'dashboard' });
  form.append(el('p', {}, el('label', { for: 'answer-by', text: 'your name' }), ' ', by));
  form.append(el('button', { type: 'submit', id: 'submit-answer', text: `Answer as ${q.role}`, disabled: readOnly }));
  const refuse = (err) => { error.replaceChildren(errorBox(err)); error.scrollIntoView({ block: 'center' }); };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.replaceChildren();
    if (!form.reportValidity()) return;
    let answer;
    try {
      if (props) {
        answer = {};
        for (const input of form.querySelectorAll('[name]')) {
          const v = readField(input);
          if (v !== undefined) answer[input.name] = v;
        }
      } else {
        answer = JSON.parse(form.querySelector('#f-json').value);
      }
    } catch (err) { refuse(new Error('not valid JSON: ' + err.message)); return; }
    if (by.value.trim()) localStorage.setItem('uwf-by', by.value.trim()); else localStorage.removeItem('uwf-by');
    try {
      await api(`/api/threads/${id}/answer`, { method: 'POST', body: JSON.stringify(answer) });
      go(`/threads/${id}`);
    } catch (err) { refuse(err); }
  });
  show(el('h1', {}, 'Answer ', el('a', { href: `/threads/${id}`, text: id }), ` as ${q.role}`),
    el('details', { open: true }, el('summary', { text: 'What the thread asks' }),
      q.asksHtml != null ? Object.assign(markdownBlock(q.asksHtml), { id: 'question' }) : el('pre', { id: 'question', text: q.prompt })),
    q.howToAnswer ? el('details', {}, el('summary', { text: 'Answering from a terminal or a mount' }), el('pre', { id: 'how-to-answer', text: q.howToAnswer })) : '',
    form);
}

// ---- Diff ----------------------------------------------------------------------------------

function diffPre(text) {
  return el('pre', { id: 'diff', class: 'diff' }, text.split('\n').map((line) => el('span', {
    class: line.startsWith('+') && !line.startsWith('+++') ? 'add' : line.startsWith('-') && !line.startsWith('---') ? 'del' : line.startsWith('@@') ? 'hunk' : '',
    text: line + '\n',
  })));
}

async function diffPage() {
  const params = new URLSearchParams(location.search);
  const form = el('form', { class: 'filters', id: 'diff-form' },
    el('input', { name: 'a', placeholder: 'step A (hash or THREAD:N)', value: params.get('a') || '', size: 34 }),
    el('input', { name: 'b', placeholder: 'step B', value: params.get('b') || '', size: 34 }),
    el('button', { type: 'submit', text: 'Compare' }));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams(new FormData(form));
    go('/diff?' + q);
  });
  const out = el('div', { id: 'diff-out' });
  show(el('h1', { text: 'Diff' }), form, out);
  if (params.get('a') && params.get('b')) {
    try {
      const r = await api('/api/diff?' + new URLSearchParams({ a: params.get('a'), b: params.get('b') }));
      out.replaceChildren(el('p', { class: 'muted' }, el('a', { href: `/n/${r.a}`, text: r.a }), ' → ', el('a', { href: `/n/${r.b}`, text: r.b })),
        r.diff ? diffPre(r.diff) : el('p', { id: 'diff', text: 'The two steps are the same.' }));
    } catch (err) { out.replaceChildren(errorBox(err)); }
  }
}

// ---- Workflows -----------------------------------------------------------------------------

// What a workflow's threads spent (`cost` of `/api/workflows`), as one line.
function workflowSpent(c) {
  if (!c || !c.steps) return c && c.threads ? `none reported (${c.threads} threads)` : '—';
  const usd = (x) => `$${x.toFixed(x < 1 ? 4 : 2)}`;
  const cost = c.costUsd != null ? usd(c.costUsd) : 'cost unknown';
  const over = c.threadsCounted != null ? `the newest ${c.threadsCounted} of ${c.threads} threads` : `${c.threads} threads`;
  return `${c.tokens} tokens (${c.input} in, ${c.output} out, ${c.cached} cached) · ${cost} over ${over}`;
}

async function workflowsPage() {
  let data;
  try { data = await api('/api/workflows'); } catch (err) { show(el('h1', { text: 'Workflows' }), errorBox(err)); return; }
  show(el('h1', { text: 'Workflows' }), el('table', { id: 'workflows' },
    el('thead', {}, el('tr', {}, ['name', 'hash', 'versions', 'registered', 'spent'].map((h) => el('th', { text: h })))),
    el('tbody', {}, data.items.map((w) => el('tr', {},
      el('td', {}, el('a', { href: `/workflows/${w.name}`, text: w.name })),
      el('td', {}, el('a', { href: `/n/${w.hash}`, text: w.hash })),
      el('td', { text: w.versions }), el('td', { class: 'muted', text: ago(w.registeredAt) }),
      el('td', { class: 'muted', text: workflowSpent(w.cost) }))))),
    data.items.length ? '' : el('p', { class: 'muted', text: '(none registered: `uwf workflow put FILE`)' }));
}

// Lines of `a` and `b` compared (longest common subsequence), as `-`, `+` and ` ` lines.
function lineDiff(a, b) {
  const x = a.split('\n'), y = b.split('\n');
  const n = x.length, m = y.length;
  const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) dp[i][j] = x[i] === y[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push(' ' + x[i]); i++; j++; } else if (dp[i + 1][j] >= dp[i][j + 1]) out.push('-' + x[i++]); else out.push('+' + y[j++]);
  }
  while (i < n) out.push('-' + x[i++]);
  while (j < m) out.push('+' + y[j++]);
  return out.join('\n');
}

async function workflowPage(name) {
  let w;
  try { w = await api(`/api/workflows/${encodeURIComponent(name)}`); } catch (err) { show(el('h1', { text: name }), errorBox(err)); return; }
  const message = el('div', { id: 'message' });
  const start = el('form', { id: 'start-form' },
    el('label', { for: 'prompt', text: 'Prompt' }), el('br'),
    el('textarea', { id: 'prompt', name: 'prompt', rows: 4, cols: 70, required: true }), el('br'),
    el('label', {}, el('input', { type: 'checkbox', name: 'queue' }), ' queue it for a worker'), ' ',
    el('button', { type: 'submit', id: 'start', text: 'Start a thread' }));
  start.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const r = await api('/api/threads', { method: 'POST', json: { workflow: name, prompt: start.prompt.value, queue: start.queue.checked } });
      go(`/threads/${r.thread}`);
    } catch (err) { message.replaceChildren(errorBox(err)); }
  });
  const versions = el('ol', { id: 'versions' }, w.versions.map((v, i) => el('li', {},
    el('label', {}, el('input', { type: 'radio', name: 'va', value: v.hash, checked: i === 1 }), 'a '),
    el('label', {}, el('input', { type: 'radio', name: 'vb', value: v.hash, checked: i === 0 }), 'b '),
    el('a', { href: `/n/${v.hash}`, text: v.hash }), ' ', el('span', { class: 'muted', text: ago(v.registeredAt) }))));
  const versionDiff = el('div', { id: 'version-diff' });
  const compare = el('button', {
    text: 'Diff versions a → b', onclick: async () => {
      const a = document.querySelector('input[name=va]:checked'), b = document.querySelector('input[name=vb]:checked');
      if (!a || !b) return;
      try {
        const [na, nb] = await Promise.all([api(`/api/nodes/${a.value}`), api(`/api/nodes/${b.value}`)]);
        versionDiff.replaceChildren(diffPre(lineDiff(JSON.stringify(na.payload, null, 2), JSON.stringify(nb.payload, null, 2))));
      } catch (err) { versionDiff.replaceChildren(errorBox(err)); }
    },
  });
  show(el('h1', {}, 'Workflow ', el('code', { text: w.name })),
    el('p', { class: 'muted', id: 'workflow-cost' }, `its threads spent ${workflowSpent(w.cost)}`),
    el('p', { class: 'muted' }, 'current version ', el('a', { href: `/n/${w.hash}`, text: w.hash }),
      ' · ', el('a', { href: `/?workflow=${encodeURIComponent(w.name)}`, text: 'its threads' })),
    readOnly ? '' : el('section', {}, el('h2', { text: 'Start a thread' }), start, message),
    el('div', { class: 'grid' },
      el('section', {}, el('h2', { text: 'Graph' }), graphSvg(w.graph, [], null)),
      el('section', {}, el('h2', { text: 'Versions' }), versions, w.versions.length > 1 ? compare : '', versionDiff)),
    el('h2', { text: 'YAML' }), el('pre', { id: 'yaml', text: w.yaml }));
}

// ---- router --------------------------------------------------------------------------------

async function route() {
  refreshAwaiting();
  for (const s of streams) s.close();
  streams = [];
  const path = location.pathname;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('here', path === a.getAttribute('href') || (a.dataset.nav !== 'threads' && path.startsWith(a.getAttribute('href'))));
  let m;
  if (path === '/') await threadsPage();
  else if ((m = path.match(/^\/threads\/([^/]+)\/answer$/))) await answerPage(decodeURIComponent(m[1]));
  else if ((m = path.match(/^\/threads\/([^/]+)$/))) await threadPage(decodeURIComponent(m[1]));
  else if (path === '/diff') await diffPage();
  else if (path === '/workflows') await workflowsPage();
  else if ((m = path.match(/^\/workflows\/([^/]+)$/))) await workflowPage(decodeURIComponent(m[1]));
  else show(el('h1', { text: 'Not found' }));
  document.body.dataset.ready = path;
}

refreshAwaiting();
route();
