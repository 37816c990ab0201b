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

const STATUSES = ['', 'active', 'running', 'awaiting', 'failed', 'done', 'killed', 'rebased'];

async function threadsPage() {
  const params = new URLSearchParams(location.search);
  const filters = el('form', { class: 'filters', id: 'filters' },
    el('select', { name: 'status', 'aria-label': 'status' },
      STATUSES.map((s) => el('option', { value: s, selected: params.get('status') === s && s !== '', text: s || 'any status' }))),
    el('input', { name: 'workflow', placeholder: 'workflow', value: params.get('workflow') || '' }),
    el('input', { name: 'parent', placeholder: 'parent thread', value: params.get('parent') || '', size: 14 }),
    el('input', { name: 'q', placeholder: 'search id, workflow, prompt', value: params.get('q') || '', size: 30 }),
    el('button', { type: 'submit', text: 'Filter' }));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(filters)) if (v) q.set(k, v);
    go('/' + (q.toString() ? '?' + q : ''));
  });
  const body = el('tbody');
  const table = el('table', { id: 'threads' },
    el('thead', {}, el('tr', {}, ['thread', 'workflow', 'status', 'next', 'steps', 'updated', 'prompt'].map((h) => el('th', { text: h })))),
    body);
  const notice = el('div', { class: 'notice', id: 'news', hidden: true });
  const pager = el('div', { class: 'pager' });
  const start = el('div', { class: 'actions' });
  if (!readOnly) start.append(el('a', { href: '/workflows', text: 'Start a thread…' }));
  show(el('h1', { text: 'Threads' }), filters, start, notice, table, pager);

  const cursors = []; // the cursors of the pages before this one
  let cursor = params.get('cursor') || '';
  const rows = new Map();

  function cells(t) {
    return [
      el('td', {}, el('a', { href: `/threads/${t.thread}`, text: t.thread })),
      el('td', { text: t.workflow }),
      el('td', {}, statusSpan(t.status)),
      el('td', { text: t.runningRole ? `${t.runningRole} (running)` : (t.next || '') }),
      el('td', { text: t.steps }),
      el('td', { class: 'muted', title: t.updatedAt ? new Date(t.updatedAt).toISOString() : '', text: ago(t.updatedAt) }),
      el('td', { text: t.prompt || '' }),
    ];
  }

  async function load() {
    const q = new URLSearchParams(params);
    q.delete('cursor');
    if (cursor) q.set('cursor', cursor);
    q.set('limit', '50');
    let data;
    try { data = await api('/api/threads?' + q); } catch (err) { body.replaceChildren(el('tr', {}, el('td', { colspan: 7 }, errorBox(err)))); return; }
    rows.clear();
    body.replaceChildren(...data.items.map((t) => {
      const tr = el('tr', { 'data-id': t.thread }, cells(t));
      rows.set(t.thread, tr);
      return tr;
    }));
    if (data.items.length === 0) body.append(el('tr', {}, el('td', { colspan: 7, class: 'muted', text: '(no threads)' })));
    pager.replaceChildren(
      cursors.length ? el('button', { id: 'newer', text: '← newer', onclick: () => { cursor = cursors.pop(); load(); } }) : '',
      data.next ? el('button', { id: 'older', text: 'older →', onclick: () => { cursors.push(cursor); cursor = data.next; load(); } }) : '',
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
          tr.replaceChildren(...cells(t));
        } catch { /* gone: the next load says so */ }
      }
    },
  });
  await load();
}

// ---- the workflow graph --------------------------------------------------------------------

function graphSvg(graph, path, current) {
  const nodes = ['$START', ...graph.roles, '$END'];
  const out = new Map(nodes.map((n) => [n, []]));
  for (const e of graph.edges) if (out.has(e.from)) out.get(e.from).push(e.to);
  // Columns by distance from the start.
  const depth = new Map([['$START', 0]]);
  const queue = ['$START'];
  while (queue.length) {
    const n = queue.shift();
    for (const m of out.get(n) || []) if (!depth.has(m)) { depth.set(m, depth.get(n) + 1); queue.push(m); }
  }
  let maxDepth = Math.max(...depth.values());
  for (const n of nodes) if (!depth.has(n)) depth.set(n, ++maxDepth);
  if (depth.get('$END') <= Math.max(...[...depth].filter(([k]) => k !== '$END').map(([, v]) => v))) {
    depth.set('$END', Math.max(...[...depth].filter(([k]) => k !== '$END').map(([, v]) => v)) + 1);
  }
  const columns = new Map();
  for (const n of nodes) { const d = depth.get(n); if (!columns.has(d)) columns.set(d, []); columns.get(d).push(n); }
  const W = 130, H = 34, GX = 50, GY = 22;
  const pos = new Map();
  let rowsMax = 0;
  for (const [d, ns] of columns) { ns.forEach((n, i) => pos.set(n, { x: 10 + d * (W + GX), y: 10 + i * (H + GY) })); rowsMax = Math.max(rowsMax, ns.length); }
  const width = 20 + (Math.max(...columns.keys()) + 1) * (W + GX);
  const height = 20 + rowsMax * (H + GY);
  const walked = ['$START', ...path];
  const taken = new Set();
  for (let i = 1; i < walked.length; i++) taken.add(walked[i - 1] + '→' + walked[i]);
  if (current) taken.add(walked[walked.length - 1] + '→' + current);
  const root = svg('svg', { id: 'graph', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'workflow graph' });
  for (const e of graph.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const back = x2 <= a.x;
    const d = back
      ? `M${a.x + W / 2},${a.y + H} C${a.x + W / 2},${a.y + H + 40} ${b.x + W / 2},${b.y + H + 40} ${b.x + W / 2},${b.y + H}`
      : `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`;
    root.append(svg('path', { d, class: 'edge' + (taken.has(e.from + '→' + e.to) ? ' taken' : '') },
      svg('title', { text: e.condition ? `${e.from} → ${e.to} if ${e.condition}` : `${e.from} → ${e.to}` })));
  }
  for (const n of nodes) {
    const p = pos.get(n);
    const cls = 'node' + (n === current ? ' current' : '') + (walked.includes(n) ? ' visited' : '');
    root.append(svg('g', { class: cls, 'data-role': n, transform: `translate(${p.x},${p.y})` },
      svg('rect', { width: W, height: H, rx: 6 }),
      svg('text', { x: W / 2, y: H / 2 + 4, 'text-anchor': 'middle', text: n })));
  }
  return root;
}

// ---- Thread --------------------------------------------------------------------------------

async function threadPage(id) {
  const head = el('div', { id: 'summary' });
  const actions = el('div', { class: 'actions', id: 'actions' });
  const graphBox = el('div', { id: 'graph-box' });
  const whyBox = el('div', { id: 'why' });
  const timeline = el('div', { id: 'timeline' });
  const log = el('pre', { id: 'log', 'aria-label': 'live log' });
  const message = el('div', { id: 'message' });
  show(el('h1', {}, 'Thread ', el('code', { text: id })), head, actions, message,
    el('div', { class: 'grid' },
      el('section', {}, el('h2', { text: 'Graph' }), graphBox, el('h2', { text: 'Why next' }), whyBox),
      el('section', {}, el('h2', { text: 'Live log' }), log)),
    el('h2', { text: 'Steps' }), timeline);

  let thread = null;
  async function act(action) {
    message.replaceChildren(el('span', { class: 'muted', text: `${action}…` }));
    try {
      const r = await api(`/api/threads/${id}/${action}`, { method: 'POST' });
      message.replaceChildren(el('span', { class: 'muted', text: `${action}: ${r.status || (r.running ? 'running' : r.role || 'ok')}` }));
      await refresh();
    } catch (err) { message.replaceChildren(errorBox(err)); }
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
      t.error ? el('div', { class: 'error', id: 'thread-error', text: t.error }) : '',
      el('details', {}, el('summary', { text: 'Prompt' }), el('pre', { id: 'prompt', text: t.prompt })));
    actions.replaceChildren();
    if (!readOnly && !t.done) {
      for (const a of ['step', 'run', 'queue', t.paused ? 'resume' : 'pause', 'kill']) actions.append(el('button', { id: `do-${a}`, text: a, onclick: () => act(a) }));
    }
    graphBox.replaceChildren(graphSvg(t.graph, t.path, current));
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
          el('span', { class: 'muted', title: `${new Date(s.at).toISOString()} · ${duration(s.sincePreviousMs)} after ${s.index > 1 ? 'the previous step' : 'the thread started'}`, text: ago(s.at) }),
          el('a', { href: `/n/${s.hash}`, text: s.hash }),
          prev ? el('a', { href: `/diff?a=${encodeURIComponent(prev)}&b=${encodeURIComponent(`${id}:${s.index}`)}`, text: 'diff with previous' }) : '',
          readOnly ? '' : el('button', { class: 'fork', text: 'fork from here', onclick: () => fork(s.hash) })),
        el('pre', { class: 'output', text: JSON.stringify(s.output, null, 2) }));
    }));
    if (!steps.steps.length) timeline.append(el('p', { class: 'muted', text: '(no steps yet)' }));
  }

  async function fork(hash) {
    try {
      const r = await api(`/api/steps/${hash}/fork`, { method: 'POST' });
      go(`/threads/${r.thread}`);
    } catch (err) { message.replaceChildren(errorBox(err)); }
  }

  await refresh();
  let lastHead = thread && thread.head;
  stream(`/api/threads/${id}/live`, {
    log: (e) => {
      log.append(document.createTextNode(e.data + '\n'));
      // Keep the page light: the end of a long log.
      if (log.textContent.length > 200000) log.textContent = log.textContent.slice(-150000);
      log.scrollTop = log.scrollHeight;
    },
    thread: async (e) => {
      const t = JSON.parse(e.data);
      if (t.head !== lastHead || !thread || t.status !== thread.status || t.runningRole !== thread.runningRole || !!t.paused !== !!thread.paused) {
        lastHead = t.head;
        await refresh();
      }
    },
    end: (e) => { e.target.close(); },
  });
}

// ---- Answer --------------------------------------------------------------------------------

function field(name, schema, required) {
  const label = el('label', { for: `f-${name}`, text: name + (required ? ' *' : '') });
  const help = schema.description ? el('div', { class: 'muted', text: schema.description }) : '';
  let input;
  if (schema.enum) {
    input = el('select', { id: `f-${name}`, name }, schema.enum.map((v) => el('option', { value: JSON.stringify(v), text: String(v) })));
  } else if (schema.type === 'boolean') {
    input = el('input', { id: `f-${name}`, name, type: 'checkbox' });
  } else if (schema.type === 'number' || schema.type === 'integer') {
    input = el('input', { id: `f-${name}`, name, type: 'number', step: schema.type === 'integer' ? '1' : 'any' });
  } else if (schema.type === 'string') {
    input = el('textarea', { id: `f-${name}`, name, rows: 3, cols: 60 });
  } else if (schema.type === 'array' && schema.items && schema.items.type === 'string') {
    input = el('textarea', { id: `f-${name}`, name, rows: 3, cols: 60, placeholder: 'one per line' });
  } else {
    input = el('textarea', { id: `f-${name}`, name, rows: 3, cols: 60, placeholder: 'JSON' });
  }
  input.dataset.kind = schema.enum ? 'enum' : (schema.type === 'array' && schema.items && schema.items.type === 'string') ? 'lines' : (schema.type || 'json');
  return el('p', {}, label, el('br'), input, help);
}

function readField(input) {
  const kind = input.dataset.kind;
  if (kind === 'boolean') return input.checked;
  if (input.value === '') return undefined;
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
  const form = el('form', { id: 'answer-form' });
  const error = el('div', { id: 'answer-error', class: 'error' });
  if (props) {
    for (const [name, s] of Object.entries(props)) form.append(field(name, s, required.has(name)));
  } else {
    form.append(el('p', {}, el('label', { for: 'f-json', text: 'answer (JSON)' }), el('br'), el('textarea', { id: 'f-json', name: 'json', rows: 8, cols: 70 })));
  }
  // No `name`: the answer's fields are the inputs that have one.
  const by = el('input', { id: 'answer-by', type: 'text', maxlength: 64, value: localStorage.getItem('uwf-by') || '', placeholder: 'dashboard' });
  form.append(el('p', {}, el('label', { for: 'answer-by', text: 'your name' }), ' ', by));
  form.append(el('button', { type: 'submit', id: 'submit-answer', text: `Answer as ${q.role}`, disabled: readOnly }));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.replaceChildren();
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
    } catch (err) { error.replaceChildren(errorBox(new Error('not valid JSON: ' + err.message))); return; }
    if (by.value.trim()) localStorage.setItem('uwf-by', by.value.trim()); else localStorage.removeItem('uwf-by');
    try {
      await api(`/api/threads/${id}/answer`, { method: 'POST', body: JSON.stringify(answer) });
      go(`/threads/${id}`);
    } catch (err) { error.replaceChildren(errorBox(err)); }
  });
  show(el('h1', {}, 'Answer ', el('a', { href: `/threads/${id}`, text: id }), ` as ${q.role}`),
    el('details', { open: true }, el('summary', { text: 'What the thread asks' }), el('pre', { id: 'question', text: q.prompt })),
    form, error);
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

async function workflowsPage() {
  let data;
  try { data = await api('/api/workflows'); } catch (err) { show(el('h1', { text: 'Workflows' }), errorBox(err)); return; }
  show(el('h1', { text: 'Workflows' }), el('table', { id: 'workflows' },
    el('thead', {}, el('tr', {}, ['name', 'hash', 'versions', 'registered'].map((h) => el('th', { text: h })))),
    el('tbody', {}, data.items.map((w) => el('tr', {},
      el('td', {}, el('a', { href: `/workflows/${w.name}`, text: w.name })),
      el('td', {}, el('a', { href: `/n/${w.hash}`, text: w.hash })),
      el('td', { text: w.versions }), el('td', { class: 'muted', text: ago(w.registeredAt) }))))),
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
