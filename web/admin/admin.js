// The operator dashboard: nodes and sessions of the whole cluster, refreshed every second,
// with drain / make ready, kill, a live WHEP preview of any WebRTC or WHIP session, and its
// swap options, changed live (PATCH), beside the processors its node loaded.
//
// Admin role only: the token comes from `#token=...` (kept in localStorage, like the live
// page). Without one, or when the server answers 401, the page asks to sign in; on 403 it
// says the admin role is required. Rows are keyed by id and updated in place (no flicker,
// an inline "Kill now?" survives refreshes). Stable hooks for tests and scripts:
//   tr[data-node-id] / tr[data-session-id] (data-state, data-owner, data-protocol),
//   td[data-col=...], the fps cell's data-fps-in / data-fps-out,
//   button[data-action="drain" | "ready" | "preview" | "options" | "kill" | "confirm-kill" | "cancel-kill"],
//   #preview-video, #preview-close, #auth-message (data-reason "signin" | "forbidden"),
//   #session-options (data-session-id) with [name=<option>] fields, #options-apply,
//   #options-status (data-state "ok" | "error" | "pending"), #options-processors,
//   #options-people li[data-person-id] with select[name="map:<person id>"] (options.faces_map).
import { ApiError, SwapcastClient, pageToken, preferCodec, waitForIceGathering } from '/web/swapcast-client.js';

const POLL_MS = 1000;
const KILL_CONFIRM_MS = 6000;
const KILLED_GRACE_MS = 5000; // a killed session's row is not brought back by a refresh already under way
const STAGES = ['track', 'identity', 'prepare', 'run', 'paste'];
const STAGE_LABEL = { track: 'track', identity: 'id', prepare: 'prep', run: 'run', paste: 'paste' };
const FACE_LINKS_MS = 5 * 60 * 1000; // the face list's thumbnail links last ~10 minutes: fetch fresh ones halfway

const $ = (id) => document.getElementById(id);
const el = {
  status: $('status'),
  statusText: $('status-text'),
  updated: $('updated'),
  auth: $('auth-message'),
  authTitle: $('auth-title'),
  authText: $('auth-text'),
  message: $('message'),
  messageText: $('message-text'),
  messageClose: $('message-close'),
  dashboard: $('dashboard'),
  nodesTable: $('nodes-table'),
  nodesBody: $('nodes-body'),
  nodesEmpty: $('nodes-empty'),
  sessionsTable: $('sessions-table'),
  sessionsBody: $('sessions-body'),
  sessionsEmpty: $('sessions-empty'),
  sum: { nodes: $('sum-nodes'), sessions: $('sum-sessions'), fps: $('sum-fps'), dropped: $('sum-dropped') },
  preview: $('preview'),
  previewVideo: $('preview-video'),
  previewImage: $('preview-image'),
  previewClose: $('preview-close'),
  previewPlaceholder: $('preview-placeholder'),
  previewPlaceholderText: $('preview-placeholder-text'),
  previewCaption: $('preview-caption'),
  previewInfo: $('preview-info'),
  previewOwner: $('preview-owner'),
  previewNode: $('preview-node'),
  previewConnection: $('preview-connection'),
  options: $('session-options'),
  optionsForm: $('options-form'),
  optionsFields: $('options-fields'),
  optionsCaption: $('options-caption'),
  optionsStatus: $('options-status'),
  optionsApply: $('options-apply'),
  optionsRevert: $('options-revert'),
  optionsClose: $('options-close'),
  optionsRtmp: $('options-rtmp'),
  optionsProcessors: $('options-processors'),
  optionsPeople: $('options-people'),
  optionsPeopleList: $('options-people-list'),
};

const token = pageToken();
const client = new SwapcastClient({ token });
const state = {
  stopped: false, // signed out or not an admin: refreshing ends
  timer: null,
  refreshing: false,
  loaded: false,
  sessions: new Map(), // id -> the latest session JSON
  faces: new Map(), // face id -> {id, name, thumbnail_url}: the pictures in the session rows
  facesFetchedAt: -Infinity,
  order: new Map(), // id -> first-seen number: rows keep their place
  seen: 0,
  killed: new Map(), // id -> time of the kill
  preview: null, // {sessionId, pc, location}
  nodes: new Map(), // id -> the latest node JSON (its processors, for the options panel)
  optionsFor: null, // the session whose options panel is open
  optionsEdited: false, // the panel holds changes not applied yet: refreshes leave its fields alone
  optionsBusy: false,
  messageKind: null, // 'refresh' (cleared by the next good refresh) or 'action'
};

// --- formatting ------------------------------------------------------------------------------

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
const fmt = (v, digits = 0) => (isNum(v) ? v.toFixed(digits) : '–');
const shortId = (id) => (id && id.length > 10 ? `${id.slice(0, 8)}…` : id || '–');

function ago(epochSeconds) {
  if (!isNum(epochSeconds)) return '–';
  const s = Math.max(0, Date.now() / 1000 - epochSeconds);
  if (s < 60) return `${s.toFixed(0)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}

/** Set a node's text only when it changed: no needless layout, selection or screen-reader churn. */
function setText(node, text) {
  const value = String(text);
  if (node.textContent !== value) node.textContent = value;
}

function setAttr(node, name, value) {
  const v = value === null || value === undefined ? null : String(value);
  if (v === null) {
    if (node.hasAttribute(name)) node.removeAttribute(name);
  } else if (node.getAttribute(name) !== v) {
    node.setAttribute(name, v);
  }
}

function make(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key === 'text') node.textContent = value;
    else if (key in node) node[key] = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

// --- status & messages -----------------------------------------------------------------------

function setStatus(name, text) {
  setAttr(el.status, 'data-state', name);
  setText(el.statusText, text);
}

/** Tell screen readers what an action did, without a visible banner. */
function announce(text) {
  const region = $('announce');
  region.textContent = '';
  setTimeout(() => { region.textContent = text; }, 50);
}

function showMessage(text, kind = 'action') {
  el.messageText.textContent = text;
  el.message.dataset.kind = 'error';
  el.message.dataset.source = kind;
  state.messageKind = kind;
  el.message.hidden = false;
}

function clearMessage(kind = null) {
  if (kind && state.messageKind !== kind) return;
  el.message.hidden = true;
  el.messageText.textContent = '';
  state.messageKind = null;
}

el.messageClose.addEventListener('click', () => clearMessage());

const reasonOf = (err) => (err instanceof ApiError ? err.reason : err && err.message ? err.message : String(err));

const SIGN_IN_TEXT = 'This dashboard is for operators. Open it with an admin token in the address: '
  + '/admin/#token=… (a loopback `swapcast serve` prints one at start; otherwise ask whoever runs the cluster).';

/** The token's subject, for display only (the server is what checks the token). */
function tokenSubject(jwt) {
  try {
    const part = jwt.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const claims = JSON.parse(atob(part.padEnd(Math.ceil(part.length / 4) * 4, '=')));
    return typeof claims.sub === 'string' ? claims.sub : null;
  } catch {
    return null;
  }
}

function showAuthProblem(kind, detail = '') {
  state.stopped = true;
  clearTimeout(state.timer);
  closePreview();
  el.dashboard.hidden = true;
  clearMessage();
  el.auth.dataset.reason = kind;
  if (kind === 'forbidden') {
    el.authTitle.textContent = 'Admin role required';
    const who = tokenSubject(token);
    const said = detail && !/admin role required/i.test(detail) ? ` The server said: ${detail}.` : '';
    el.authText.textContent = `You are signed in${who ? ` as ${who}` : ''}, but this dashboard needs a token `
      + `with the admin role.${said} Ask an operator for an admin token.`;
    setStatus('error', 'Admin role required');
  } else {
    el.authTitle.textContent = 'Sign in required';
    el.authText.textContent = detail ? `${SIGN_IN_TEXT} The server said: ${detail}.` : SIGN_IN_TEXT;
    setStatus('error', 'Not signed in');
  }
  el.auth.hidden = false;
  setText(el.updated, '');
}

// --- keyed rows ------------------------------------------------------------------------------

/** Make `tbody` hold one row per item, in `items` order, creating, updating and removing
 *  rows in place (rows already in place are not moved: no flicker, focus kept). */
function syncRows(tbody, items, attr, create, update) {
  const existing = new Map([...tbody.rows].map((row) => [row.getAttribute(attr), row]));
  let previous = null;
  for (const item of items) {
    const id = String(item.id);
    let row = existing.get(id);
    if (!row) {
      row = create(item);
      row.setAttribute(attr, id);
    }
    existing.delete(id);
    update(row, item);
    const expected = previous ? previous.nextElementSibling : tbody.firstElementChild;
    if (expected !== row) tbody.insertBefore(row, expected);
    previous = row;
  }
  for (const row of existing.values()) row.remove();
}

function cells(row, names) {
  row.cellsByName = {};
  for (const name of names) {
    const td = make('td', { dataset: { col: name } });
    row.cellsByName[name] = td;
    row.append(td);
  }
  return row.cellsByName;
}

function badge(text, tone) {
  return make('span', { className: 'pill', dataset: { tone }, text });
}

function setBadge(cell, text, tone) {
  let pill = cell.querySelector('.pill');
  if (!pill) {
    pill = badge(text, tone);
    cell.prepend(pill);
  }
  setText(pill, text);
  setAttr(pill, 'data-tone', tone);
  return pill;
}

// --- nodes -----------------------------------------------------------------------------------

const NODE_TONE = { ready: 'ok', draining: 'warn' };

function createNodeRow(node) {
  const row = make('tr');
  const c = cells(row, ['id', 'state', 'gpu', 'processors', 'load', 'queue', 'sessions', 'fps', 'busy', 'seen', 'actions']);
  c.id.append(make('span', { className: 'mono strong' }), make('span', { className: 'sub mono' }));
  c.load.append(
    make('span', { className: 'bar', 'aria-hidden': 'true' }, [make('span', { className: 'bar-fill' })]),
    make('span', { className: 'bar-text' }),
  );
  for (const name of ['queue', 'sessions', 'fps', 'busy', 'seen']) c[name].classList.add('num');
  const drain = make('button', { type: 'button', className: 'small', dataset: { action: 'drain' }, text: 'Drain' });
  const ready = make('button', { type: 'button', className: 'small', dataset: { action: 'ready' }, text: 'Make ready' });
  drain.addEventListener('click', () => setNodeState(row, 'drain'));
  ready.addEventListener('click', () => setNodeState(row, 'ready'));
  c.actions.classList.add('actions');
  c.actions.append(drain, ready);
  return row;
}

// the FaceFusion models a node loaded from its models folder (GET /api/v1/processors)
function processorsText(processors) {
  if (!Array.isArray(processors) || !processors.length) return '–';
  return processors.map((p) => {
    if (p.kind === 'enhancer') return `enhancer ${p.model} (${p.live ? 'live too' : 'offline'})`;
    if (p.kind === 'content_gate') return `gate ${p.model} > ${fmt(p.threshold, 2)}`;
    return `${p.kind} ${p.model}`;
  }).join(' · ');
}

function updateNodeRow(row, node) {
  const c = row.cellsByName;
  const stats = node.stats || {};
  setAttr(row, 'data-state', node.state);
  setText(c.id.children[0], node.id);
  setText(c.id.children[1], node.address || '');
  setBadge(c.state, node.state || '–', NODE_TONE[node.state] || 'muted');
  setText(c.gpu, node.gpu || '–');
  setText(c.processors, processorsText(node.processors));
  const capacity = isNum(node.capacity) && node.capacity > 0 ? node.capacity : null;
  const load = isNum(node.load) ? node.load : 0;
  const share = capacity ? Math.min(1, load / capacity) : 0;
  const fill = c.load.querySelector('.bar-fill');
  const width = `${(share * 100).toFixed(0)}%`;
  if (fill.style.width !== width) fill.style.width = width;
  setAttr(fill, 'data-tone', share >= 1 ? 'bad' : share >= 0.75 ? 'warn' : 'ok');
  setText(c.load.querySelector('.bar-text'), capacity ? `${load} / ${capacity}` : String(load));
  setText(c.queue, `${fmt(node.queue_delay_ms, 1)} ms`);
  setText(c.sessions, fmt(stats.sessions_live));
  setText(c.fps, fmt(stats.fps_out, 1));
  // runner triton: the model server's own numbers (all its nodes) instead of the node's batcher
  const server = stats.model_server;
  setText(c.busy, server
    ? `Triton ${server.model}: batch ${fmt(server.mean_batch, 1)}, queue ${fmt(server.queue_ms, 1)} ms, compute ${fmt(server.compute_ms, 1)} ms`
    : isNum(stats.device_busy_pct) ? `${fmt(stats.device_busy_pct, 0)} %` : '–');
  setText(c.seen, ago(node.last_seen));
  setAttr(c.seen, 'title', isNum(node.last_seen) ? new Date(node.last_seen * 1000).toLocaleString() : null);
  const [drain, ready] = c.actions.querySelectorAll('button');
  if (!row.dataset.busy) {
    drain.hidden = node.state === 'draining';
    ready.hidden = node.state !== 'draining';
    drain.disabled = ready.disabled = false;
  }
  setAttr(drain, 'aria-label', `Drain node ${node.id}: no new sessions are placed on it`);
  setAttr(ready, 'aria-label', `Make node ${node.id} ready for new sessions`);
}

async function setNodeState(row, action) {
  const id = row.getAttribute('data-node-id');
  const buttons = row.cellsByName.actions.querySelectorAll('button');
  row.dataset.busy = '1';
  buttons.forEach((b) => { b.disabled = true; });
  try {
    const node = action === 'drain' ? await client.drainNode(id) : await client.readyNode(id);
    delete row.dataset.busy;
    if (node && node.id) updateNodeRow(row, node);
    else updateNodeRow(row, { id, state: action === 'drain' ? 'draining' : 'ready' });
    announce(action === 'drain' ? `Node ${id} is draining: no new sessions are placed on it.` : `Node ${id} is ready.`);
    // keep focus on the row's visible button
    const visible = [...buttons].find((b) => !b.hidden);
    if (visible && [...buttons].includes(document.activeElement)) visible.focus();
  } catch (err) {
    delete row.dataset.busy;
    buttons.forEach((b) => { b.disabled = false; });
    if (!handleAuthError(err)) {
      showMessage(`Node ${id} could not be ${action === 'drain' ? 'drained' : 'made ready'}: ${reasonOf(err)}`);
    }
  }
}

function renderNodes(nodes) {
  const sorted = [...nodes].sort((a, b) => String(a.id).localeCompare(String(b.id)));
  state.nodes = new Map(sorted.map((n) => [n.id, n]));
  syncRows(el.nodesBody, sorted, 'data-node-id', createNodeRow, updateNodeRow);
  el.nodesEmpty.hidden = sorted.length > 0;
  el.nodesTable.setAttribute('aria-busy', 'false');
  const ready = sorted.filter((n) => n.state === 'ready').length;
  setText(el.sum.nodes, `${ready} / ${sorted.length}`);
}

// --- sessions --------------------------------------------------------------------------------

const SESSION_TONE = { live: 'ok', placed: 'warn', orphaned: 'bad' };

function sessionState(s) {
  if (s.state) return s.state;
  if (s.protocol === 'rtmp') return s.publishing ? 'live' : 'placed'; // a node's own RTMP items
  return '–';
}

function canPreview(s) {
  return sessionState(s) === 'live';
}

function createSessionRow(session) {
  const row = make('tr');
  const c = cells(row, ['id', 'owner', 'node', 'state', 'fps', 'latency', 'stages', 'dropped', 'actions']);
  c.id.append(
    make('code', { className: 'strong' }),
    make('span', { className: 'sub' }, [
      make('img', { className: 'face-thumb', alt: '', hidden: true, width: 20, height: 20 }),
      make('span', { className: 'proto' }),
      make('span', { className: 'face-id' }),
    ]),
  );
  c.state.append(make('span', { className: 'sub' }));
  c.stages.append(
    make('span', { className: 'stagebar', 'aria-hidden': 'true' },
      STAGES.map((name) => make('span', { dataset: { stage: name } }))),
    make('span', { className: 'stagetext mono' }),
  );
  for (const name of ['fps', 'latency', 'dropped']) c[name].classList.add('num');
  c.node.classList.add('mono');

  const preview = make('button', { type: 'button', className: 'small', dataset: { action: 'preview' }, text: 'Preview' });
  const options = make('button', {
    type: 'button', className: 'small', dataset: { action: 'options' }, text: 'Options', 'aria-controls': 'session-options',
  });
  const kill = make('button', { type: 'button', className: 'small danger', dataset: { action: 'kill' }, text: 'Kill' });
  const confirm = make('button', {
    type: 'button', className: 'small danger solid', dataset: { action: 'confirm-kill' }, text: 'Kill now', hidden: true,
  });
  const cancel = make('button', { type: 'button', className: 'small', dataset: { action: 'cancel-kill' }, text: 'Cancel', hidden: true });
  const error = make('span', { className: 'row-error', role: 'status' });
  preview.addEventListener('click', () => {
    const id = row.getAttribute('data-session-id');
    if (state.preview && state.preview.sessionId === id) closePreview();
    else openPreview(id);
  });
  options.addEventListener('click', () => {
    const id = row.getAttribute('data-session-id');
    if (state.optionsFor === id) closeOptions();
    else openOptions(id);
  });
  kill.addEventListener('click', () => askKill(row));
  confirm.addEventListener('click', () => killSession(row));
  for (const button of [confirm, cancel]) {
    button.addEventListener('keydown', (event) => {
      if (event.key === 'Escape') cancelKill(row, true);
    });
  }
  cancel.addEventListener('click', () => cancelKill(row, true));
  c.actions.classList.add('actions');
  c.actions.append(preview, options, kill, confirm, cancel, error);
  return row;
}

function updateSessionRow(row, s) {
  const c = row.cellsByName;
  const stats = s.stats || null;
  const st = sessionState(s);
  setAttr(row, 'data-state', st);
  setAttr(row, 'data-owner', s.owner ?? '');
  setAttr(row, 'data-protocol', s.protocol || '');

  const idCode = c.id.children[0];
  setText(idCode, shortId(s.id));
  setAttr(idCode, 'title', s.id);
  setText(c.id.querySelector('.proto'), s.protocol || '–');
  setText(c.id.querySelector('.face-id'), s.face_id ? ` · ${s.face_id}` : s.name ? ` · key ${s.name}` : '');
  setAttr(c.id.querySelector('.face-id'), 'title', s.face_id ? 'source face' : null);
  const thumb = c.id.querySelector('.face-thumb');
  const face = s.face_id ? state.faces.get(s.face_id) : null;
  setAttr(thumb, 'src', face ? face.thumbnail_url : null); // a signed link: <img> sends no token
  setAttr(thumb, 'title', face ? face.name : null);
  thumb.hidden = !face;

  setText(c.owner, s.owner || '–');
  c.owner.classList.toggle('muted', !s.owner);
  setText(c.node, shortId(s.node_id));
  setAttr(c.node, 'title', s.node_id || null);
  setBadge(c.state, st, SESSION_TONE[st] || 'muted');
  const connection = s.connection || (s.protocol === 'rtmp' && s.publisher ? `from ${s.publisher}` : '');
  setText(c.state.querySelector('.sub'), connection && connection !== st ? connection : '');

  const fpsIn = stats ? stats.fps_in : null;
  const fpsOut = stats ? stats.fps_out : null;
  setText(c.fps, stats ? `${fmt(fpsIn, 1)} / ${fmt(fpsOut, 1)}` : '–');
  setAttr(c.fps, 'data-fps-in', isNum(fpsIn) ? fpsIn : null);
  setAttr(c.fps, 'data-fps-out', isNum(fpsOut) ? fpsOut : null);
  setText(c.latency, stats && (isNum(stats.latency_p50_ms) || isNum(stats.latency_p99_ms))
    ? `${fmt(stats.latency_p50_ms, 1)} / ${fmt(stats.latency_p99_ms, 1)} ms` : '–');

  const stages = stats && stats.stages_ms ? stats.stages_ms : null;
  const total = stages ? STAGES.reduce((sum, k) => sum + (isNum(stages[k]) ? stages[k] : 0), 0) : 0;
  for (const span of c.stages.querySelectorAll('.stagebar > span')) {
    const v = stages && isNum(stages[span.dataset.stage]) ? stages[span.dataset.stage] : 0;
    const width = total > 0 ? `${((100 * v) / total).toFixed(1)}%` : '0%';
    if (span.style.width !== width) span.style.width = width;
  }
  c.stages.classList.toggle('empty-stages', !stages);
  setText(c.stages.querySelector('.stagetext'),
    stages ? STAGES.map((k) => `${STAGE_LABEL[k]}\u00a0${fmt(stages[k], 1)}`).join(' · ') : '–');
  setAttr(c.stages, 'title', stages ? `total ${fmt(total, 1)} ms` : 'no frame swapped yet');

  setText(c.dropped, stats ? fmt(stats.frames_dropped) : '–');

  const { preview, options, kill } = actionButtons(row);
  const editing = state.optionsFor === s.id;
  setAttr(options, 'aria-pressed', editing ? 'true' : 'false');
  setAttr(options, 'aria-label', `${editing ? 'Close the options of' : 'Swap options of'} session ${s.id}`);
  const previewing = Boolean(state.preview && state.preview.sessionId === s.id);
  preview.disabled = !previewing && !canPreview(s);
  setAttr(preview, 'aria-pressed', previewing ? 'true' : 'false');
  setAttr(preview, 'title', canPreview(s) || previewing ? null
    : 'No video yet: the session has not connected');
  setAttr(preview, 'aria-label', `${previewing ? 'Close the preview of' : 'Preview'} session ${s.id}`);
  setAttr(kill, 'aria-label', `Kill session ${s.id}${s.owner ? ` of ${s.owner}` : ''}`);
  row.classList.toggle('previewing', previewing);
}

function renderSessions(sessions) {
  const now = Date.now();
  for (const [id, at] of state.killed) if (now - at > KILLED_GRACE_MS) state.killed.delete(id);
  const visible = sessions.filter((s) => s && s.id && !state.killed.has(s.id));
  for (const s of visible) if (!state.order.has(s.id)) state.order.set(s.id, state.seen++);
  const ids = new Set(visible.map((s) => s.id));
  for (const id of state.order.keys()) if (!ids.has(id)) state.order.delete(id);
  visible.sort((a, b) => state.order.get(a.id) - state.order.get(b.id));
  state.sessions = new Map(visible.map((s) => [s.id, s]));

  syncRows(el.sessionsBody, visible, 'data-session-id', createSessionRow, updateSessionRow);
  el.sessionsEmpty.hidden = visible.length > 0;
  el.sessionsTable.setAttribute('aria-busy', 'false');

  const live = visible.filter((s) => sessionState(s) === 'live').length;
  const sum = (key) => visible.reduce((acc, s) => acc + (s.stats && isNum(s.stats[key]) ? s.stats[key] : 0), 0);
  setText(el.sum.sessions, `${live}${live !== visible.length ? ` of ${visible.length}` : ''}`);
  setText(el.sum.fps, fmt(sum('fps_out'), 1));
  setText(el.sum.dropped, fmt(sum('frames_dropped')));

  if (state.optionsFor && !ids.has(state.optionsFor)) {
    closeOptions();
    announce('The session whose options were open has ended.');
  } else if (state.optionsFor && !state.optionsEdited && !state.optionsBusy) {
    fillOptions(state.sessions.get(state.optionsFor));
  }

  if (state.preview && !ids.has(state.preview.sessionId)) {
    closePreview('The previewed session has ended.');
  } else if (state.preview) {
    const s = state.sessions.get(state.preview.sessionId);
    setText(el.previewOwner, s.owner || '–');
    setText(el.previewNode, s.node_id || '–');
  }
}

// --- kill (inline confirm: no blocking dialog) ----------------------------------------------

/** A session row's action buttons by their data-action. */
function actionButtons(row) {
  const found = {};
  for (const button of row.cellsByName.actions.querySelectorAll('button[data-action]')) found[button.dataset.action] = button;
  return {
    preview: found.preview, options: found.options, kill: found.kill, confirm: found['confirm-kill'], cancel: found['cancel-kill'],
  };
}

function askKill(row) {
  const { preview, options, kill, confirm, cancel } = actionButtons(row);
  setText(row.cellsByName.actions.querySelector('.row-error'), '');
  preview.hidden = true; // the confirmation takes the row's action slot
  options.hidden = true;
  kill.hidden = true;
  confirm.hidden = false;
  cancel.hidden = false;
  confirm.focus();
  clearTimeout(row.killTimer);
  row.killTimer = setTimeout(() => cancelKill(row, false), KILL_CONFIRM_MS);
}

function cancelKill(row, focus) {
  clearTimeout(row.killTimer);
  const { preview, options, kill, confirm, cancel } = actionButtons(row);
  const hadFocus = row.contains(document.activeElement);
  preview.hidden = false;
  options.hidden = false;
  kill.hidden = false;
  confirm.hidden = true;
  cancel.hidden = true;
  confirm.disabled = cancel.disabled = kill.disabled = false;
  setText(confirm, 'Kill now');
  if (focus || hadFocus) kill.focus();
}

async function killSession(row) {
  clearTimeout(row.killTimer);
  const id = row.getAttribute('data-session-id');
  const { kill, confirm, cancel } = actionButtons(row);
  confirm.disabled = cancel.disabled = kill.disabled = true;
  setText(confirm, 'Killing…');
  if (state.preview && state.preview.sessionId === id) await closePreview();
  if (state.optionsFor === id) closeOptions();
  try {
    await client.deleteSession(id);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) { // already gone: that is what we wanted
      cancelKill(row, true);
      if (!handleAuthError(err)) {
        const reason = reasonOf(err);
        setText(row.cellsByName.actions.querySelector('.row-error'), `Kill failed: ${reason}`);
        showMessage(`Session ${id} could not be killed: ${reason}`);
      }
      return;
    }
  }
  state.killed.set(id, Date.now());
  const next = row.nextElementSibling || row.previousElementSibling;
  const hadFocus = row.contains(document.activeElement);
  row.remove();
  state.sessions.delete(id);
  state.order.delete(id);
  el.sessionsEmpty.hidden = el.sessionsBody.rows.length > 0;
  announce(`Session ${id} killed.`);
  if (hadFocus) (next ? next.querySelector('button:not([disabled]):not([hidden])') : $('sessions-title'))?.focus();
}

// --- session options (PATCH /api/v1/sessions/{id}) ------------------------------------------

// A live session's swap settings (SwapConfig in swapcast/config.py), and whether it swaps at
// all. Values are not checked here: the server checks them against that one schema and its
// 400 reason is shown as it is.
const OPTION_FIELDS = [
  { name: 'enabled', label: 'Face swap', kind: 'switch' },
  { name: 'occlusion', label: 'Occlusion', kind: 'select', choices: [['off', 'off'], ['auto', 'auto: keep what covers the face, glasses too'], ['objects', 'objects: not the glasses it wears']] },
  { name: 'mouth_mask', label: 'Keep the target\u2019s mouth', kind: 'switch' },
  { name: 'eyes', label: 'Eyes (mesh3d)', kind: 'select', choices: [['target', 'the target\u2019s own'], ['source', 'the source\u2019s']] },
  { name: 'blend', label: 'Blend (0–1)', kind: 'number', step: 0.05 },
  { name: 'feather', label: 'Feather (0–0.5)', kind: 'number', step: 0.01 },
  { name: 'colour_match', label: 'Colour match', kind: 'switch' },
  { name: 'smoothing', label: 'Smoothing', kind: 'switch' },
  { name: 'face_selection', label: 'Faces to swap', kind: 'select', choices: [['all', 'all faces'], ['largest', 'largest face only']] },
  { name: 'unmapped', label: 'People not in the map', kind: 'select', choices: [['source', 'wear the session\u2019s face'], ['keep', 'stay themselves']] },
];
const KEEP = 'keep';
const isPersonId = (name) => /^person-\d+$/.test(name);

function buildOptionFields() {
  for (const field of OPTION_FIELDS) {
    const id = `option-${field.name}`;
    const control = make('div', { className: 'control', dataset: { option: field.name } });
    if (field.kind === 'switch') {
      control.append(make('label', { className: 'switch', htmlFor: id }, [
        make('input', { type: 'checkbox', id, name: field.name, role: 'switch' }),
        make('span', { className: 'track', 'aria-hidden': 'true' }),
        make('span', { text: field.label }),
      ]));
    } else if (field.kind === 'select') {
      control.append(make('label', { htmlFor: id, text: field.label }), make('select', { id, name: field.name },
        field.choices.map(([value, text]) => make('option', { value, text }))));
    } else {
      control.append(make('label', { htmlFor: id, text: field.label }),
        make('input', { type: 'number', id, name: field.name, step: field.step, inputMode: 'decimal' }));
    }
    el.optionsFields.append(control);
  }
}

const optionInput = (name) => el.optionsForm.elements.namedItem(name);
const currentValue = (s, name) => (name === 'enabled' ? s.enabled : (s.options || {})[name]);
const changeable = (s) => s.protocol !== 'rtmp' && s.options && typeof s.options === 'object';

function setOptionsStatus(kind, text) {
  setAttr(el.optionsStatus, 'data-state', kind);
  setText(el.optionsStatus, text);
}

/** Show the session's values (and its node's processors) in the panel's fields. */
function fillOptions(s) {
  setAttr(el.options, 'data-session-id', s.id);
  setText(el.optionsCaption, `Session ${shortId(s.id)}${s.owner ? ` of ${s.owner}` : ''} on ${shortId(s.node_id)}`);
  setAttr(el.optionsCaption, 'title', s.id);
  const node = state.nodes.get(s.node_id);
  setText(el.optionsProcessors, node ? processorsText(node.processors).replace(/^–$/, 'none') : '–');
  const editable = changeable(s);
  el.optionsRtmp.hidden = s.protocol !== 'rtmp';
  for (const field of OPTION_FIELDS) {
    const input = optionInput(field.name);
    const value = currentValue(s, field.name);
    input.disabled = !editable;
    if (field.kind === 'switch') input.checked = Boolean(value);
    else input.value = value === undefined || value === null ? '' : String(value);
  }
  el.optionsApply.disabled = el.optionsRevert.disabled = !editable;
  fillPeople(s, editable);
}

/** The people the session sees, each with the face it wears in the map (a select per person). */
function fillPeople(s, editable) {
  const people = Array.isArray(s.people) ? s.people : [];
  const map = (s.options && s.options.faces_map) || {};
  el.optionsPeople.hidden = people.length === 0;
  const choices = [['', 'not mapped'], ...[...state.faces.values()].map((f) => [f.id, f.name || f.id]), [KEEP, 'keep']];
  el.optionsPeopleList.replaceChildren(...people.map((person) => {
    const select = make('select', { name: `map:${person.id}`, 'aria-label': `Face for ${person.id}`, disabled: !editable },
      choices.map(([value, text]) => make('option', { value, text })));
    select.value = map[person.id] || '';
    const img = make('img', { alt: '' });
    if (person.thumbnail_url) img.src = person.thumbnail_url;
    return make('li', { dataset: { personId: person.id } }, [
      img, make('span', { className: 'who', text: `${person.id}${person.on_screen ? '' : ' (gone)'} · wears ${person.wears}` }), select,
    ]);
  }));
}

/** The map the people selects say (reference-photo entries of the session's map kept as they are). */
function mapFromFields(s) {
  const current = (s.options && s.options.faces_map) || {};
  const map = Object.fromEntries(Object.entries(current).filter(([name]) => !isPersonId(name)));
  for (const select of el.optionsPeopleList.querySelectorAll('select[name^="map:"]')) {
    if (select.value) map[select.name.slice(4)] = select.value;
  }
  for (const [name, face] of Object.entries(current)) {
    if (isPersonId(name) && !el.optionsPeopleList.querySelector(`select[name="map:${CSS.escape(name)}"]`)) map[name] = face;
  }
  return map;
}

const sameMap = (a, b) => JSON.stringify(Object.entries(a || {}).sort()) === JSON.stringify(Object.entries(b || {}).sort());

/** The fields that differ from the session's values, as a PATCH body; a field left empty
 *  is a problem to show, not a value to send. */
function optionChanges(s) {
  const patch = {};
  const options = {};
  for (const field of OPTION_FIELDS) {
    const input = optionInput(field.name);
    let value = input.value;
    if (field.kind === 'switch') value = input.checked;
    else if (field.kind === 'number') {
      if (value.trim() === '') throw new Error(`${field.label}: enter a number`);
      value = Number(value);
    }
    if (value === currentValue(s, field.name)) continue;
    if (field.name === 'enabled') patch.enabled = value;
    else options[field.name] = value;
  }
  const map = mapFromFields(s);
  if (!sameMap(map, s.options && s.options.faces_map)) options.faces_map = map;
  if (Object.keys(options).length) patch.options = options;
  return patch;
}

function openOptions(sessionId) {
  const s = state.sessions.get(sessionId);
  if (!s) return;
  state.optionsFor = sessionId;
  state.optionsEdited = false;
  setOptionsStatus(null, '');
  fillOptions(s);
  el.options.hidden = false;
  refreshPreviewButtons();
  el.optionsForm.querySelector('input:not([disabled]), select:not([disabled])')?.focus();
}

function closeOptions() {
  state.optionsFor = null;
  state.optionsEdited = false;
  el.options.hidden = true;
  el.options.removeAttribute('data-session-id');
  setOptionsStatus(null, '');
  refreshPreviewButtons();
}

async function applyOptions() {
  const id = state.optionsFor;
  const s = id && state.sessions.get(id);
  if (!s || state.optionsBusy) return;
  let patch;
  try {
    patch = optionChanges(s);
  } catch (err) {
    setOptionsStatus('error', `Not applied: ${err.message}`);
    return;
  }
  if (!Object.keys(patch).length) {
    state.optionsEdited = false;
    setOptionsStatus('ok', 'Nothing changed.');
    return;
  }
  state.optionsBusy = true;
  el.optionsApply.disabled = true;
  setOptionsStatus('pending', 'Applying…');
  try {
    const updated = await client.updateSession(id, patch);
    const merged = { ...s, ...updated, stats: updated.stats ?? s.stats };
    if (state.sessions.has(id)) state.sessions.set(id, merged);
    state.optionsEdited = false;
    const changed = [...('enabled' in patch ? ['swap'] : []), ...Object.keys(patch.options || {})].join(', ');
    setOptionsStatus('ok', `Applied: ${changed}.`);
    announce(`Session ${id}: ${changed} changed.`);
    if (state.optionsFor === id) fillOptions(merged);
  } catch (err) {
    if (!handleAuthError(err)) setOptionsStatus('error', `Not applied: ${reasonOf(err)}`);
  } finally {
    state.optionsBusy = false;
    const current = state.optionsFor && state.sessions.get(state.optionsFor);
    el.optionsApply.disabled = !(current && changeable(current));
  }
}

el.optionsForm.addEventListener('input', () => {
  state.optionsEdited = true;
  setOptionsStatus('pending', 'Not applied yet.');
});
el.optionsForm.addEventListener('submit', (event) => {
  event.preventDefault();
  applyOptions();
});
el.optionsRevert.addEventListener('click', () => {
  const s = state.optionsFor && state.sessions.get(state.optionsFor);
  state.optionsEdited = false;
  setOptionsStatus(null, '');
  if (s) fillOptions(s);
});
el.optionsClose.addEventListener('click', () => {
  const id = state.optionsFor;
  closeOptions();
  const row = id && el.sessionsBody.querySelector(`tr[data-session-id="${CSS.escape(id)}"]`);
  row?.querySelector('button[data-action="options"]')?.focus();
});

buildOptionFields();

// --- preview (WHEP) --------------------------------------------------------------------------

function showPreviewPanel(s) {
  el.preview.dataset.state = 'connecting';
  el.previewClose.hidden = false;
  el.previewInfo.hidden = false;
  el.previewPlaceholder.hidden = false;
  el.previewPlaceholderText.textContent = 'Connecting…';
  setText(el.previewCaption, `Session ${shortId(s.id)}`);
  setAttr(el.previewCaption, 'title', s.id);
  setText(el.previewOwner, s.owner || '–');
  setText(el.previewNode, s.node_id || '–');
  setText(el.previewConnection, 'new');
  setAttr(el.previewVideo, 'aria-label', `Swapped video of session ${s.id}`);
}

/** RTMP sessions have no WHEP view: show their newest swapped picture, once a second. */
async function openPicturePreview(s) {
  const preview = { sessionId: s.id, pc: null, location: null, timer: null, url: null };
  state.preview = preview;
  const current = () => state.preview === preview;
  showPreviewPanel(s);
  refreshPreviewButtons();
  setText(el.previewConnection, 'picture every second');
  const tick = async () => {
    try {
      const blob = await client.sessionPreview(s.id);
      if (!current()) return;
      const url = URL.createObjectURL(blob);
      if (preview.url) URL.revokeObjectURL(preview.url);
      preview.url = url;
      el.previewImage.src = url;
      el.previewImage.hidden = false;
      el.previewVideo.hidden = true;
      el.preview.dataset.state = 'playing';
      el.previewPlaceholder.hidden = true;
    } catch (err) {
      if (current() && err instanceof ApiError && err.status !== 404) handleAuthError(err);
    }
  };
  await tick();
  preview.timer = setInterval(tick, 1000);
}

async function openPreview(sessionId) {
  const s = state.sessions.get(sessionId);
  if (!s) return;
  await closePreview();
  if (s.protocol === 'rtmp') {
    await openPicturePreview(s);
    return;
  }
  const preview = { sessionId, pc: null, location: null };
  state.preview = preview;
  const current = () => state.preview === preview;
  showPreviewPanel(s);
  refreshPreviewButtons();
  // the session's ice_servers (STUN, TURN with time-limited credentials), as the live page
  // uses them: a dashboard behind NAT watches through TURN
  const iceServers = await client.getSession(sessionId).then((found) => found.ice_servers || [], () => []);
  if (!current()) return;
  const pc = new RTCPeerConnection({ iceServers });
  preview.pc = pc;

  pc.addEventListener('track', (event) => {
    if (!current() || event.track.kind !== 'video') return;
    el.previewVideo.srcObject = event.streams && event.streams[0] ? event.streams[0] : new MediaStream([event.track]);
    el.previewVideo.play().catch(() => {}); // muted: autoplay is allowed
  });
  pc.addEventListener('connectionstatechange', () => {
    if (!current()) return;
    setText(el.previewConnection, pc.connectionState);
    if (pc.connectionState === 'failed') {
      el.preview.dataset.state = 'error';
      el.previewPlaceholder.hidden = false;
      el.previewPlaceholderText.textContent = 'The preview connection failed.';
    }
  });
  try {
    const transceiver = pc.addTransceiver('video', { direction: 'recvonly' });
    preferCodec(transceiver, 'video/H264');
    await pc.setLocalDescription(await pc.createOffer());
    await waitForIceGathering(pc);
    if (!current()) return;
    const answer = await client.whepView(sessionId, pc.localDescription.sdp);
    preview.location = answer.location;
    if (!current()) {
      client.whepStop(answer.location).catch(() => {});
      return;
    }
    await pc.setRemoteDescription({ type: 'answer', sdp: answer.sdp });
  } catch (err) {
    if (!current()) return;
    await closePreview();
    if (!handleAuthError(err)) showMessage(`The preview of session ${sessionId} could not be opened: ${reasonOf(err)}`);
  }
}

el.previewVideo.addEventListener('playing', () => {
  if (!state.preview) return;
  el.preview.dataset.state = 'playing';
  el.previewPlaceholder.hidden = true;
});

/** End the preview: DELETE the WHEP viewer, then close the peer connection. */
async function closePreview(reason = null) {
  const preview = state.preview;
  state.preview = null;
  el.previewVideo.srcObject = null;
  el.previewVideo.hidden = false;
  el.previewImage.hidden = true;
  el.previewImage.removeAttribute('src');
  if (preview && preview.timer) clearInterval(preview.timer);
  if (preview && preview.url) URL.revokeObjectURL(preview.url);
  el.preview.dataset.state = 'idle';
  el.previewClose.hidden = true;
  el.previewInfo.hidden = true;
  el.previewPlaceholder.hidden = false;
  el.previewPlaceholderText.textContent = reason
    || 'Choose Preview on a session to watch its swapped video here.';
  setText(el.previewCaption, 'No session');
  setAttr(el.previewCaption, 'title', null);
  refreshPreviewButtons();
  if (!preview || !preview.pc) return;
  try {
    await client.whepStop(preview.location);
  } catch (err) {
    console.warn('swapcast admin: closing the WHEP viewer failed', err);
  } finally {
    try {
      preview.pc.close();
    } catch {
      /* already closed */
    }
  }
}

function refreshPreviewButtons() {
  for (const row of el.sessionsBody.rows) {
    const s = state.sessions.get(row.getAttribute('data-session-id'));
    if (s) updateSessionRow(row, s);
  }
}

el.previewClose.addEventListener('click', () => {
  const id = state.preview && state.preview.sessionId;
  closePreview().then(() => {
    const row = id && el.sessionsBody.querySelector(`tr[data-session-id="${CSS.escape(id)}"]`);
    row?.querySelector('button[data-action="preview"]')?.focus();
  });
});

// --- refresh loop ----------------------------------------------------------------------------

function handleAuthError(err) {
  if (!(err instanceof ApiError)) return false;
  if (err.status === 401) {
    showAuthProblem('signin', err.reason);
    return true;
  }
  if (err.status === 403) {
    showAuthProblem('forbidden', err.reason);
    return true;
  }
  return false;
}

/** The faces sessions wear (name, thumbnail link): listed again when a session wears one
 *  not seen yet, or before the links expire. A failure only leaves the pictures out. */
async function refreshFaces(sessions) {
  const unknown = sessions.some((s) => s.face_id && !state.faces.has(s.face_id));
  const stale = performance.now() - state.facesFetchedAt > FACE_LINKS_MS;
  if (!unknown && !stale) return;
  if (unknown && performance.now() - state.facesFetchedAt < 5000) return; // a deleted face: not every second
  state.facesFetchedAt = performance.now();
  try {
    const faces = await client.listFaces();
    state.faces = new Map(faces.map((f) => [f.id, f]));
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) throw err;
  }
}

async function refresh() {
  if (state.stopped || state.refreshing) return;
  state.refreshing = true;
  const started = performance.now();
  try {
    // nodes first: an admin-only route, so a user token is told so at once
    const nodes = await client.listNodes();
    const sessions = await client.listSessions();
    if (Array.isArray(sessions)) await refreshFaces(sessions);
    if (state.stopped) return;
    renderNodes(Array.isArray(nodes) ? nodes : []);
    renderSessions(Array.isArray(sessions) ? sessions : []);
    if (!state.loaded) {
      state.loaded = true;
      el.dashboard.hidden = false;
    }
    el.dashboard.removeAttribute('data-stale');
    clearMessage('refresh');
    if (el.status.dataset.state !== 'live') setStatus('live', 'Live');
    setText(el.updated, `updated ${new Date().toLocaleTimeString()}`);
  } catch (err) {
    if (handleAuthError(err)) return;
    el.dashboard.dataset.stale = 'true';
    setStatus('error', 'Reconnecting…');
    showMessage(`The dashboard could not be refreshed: ${reasonOf(err)}. Retrying every second; the numbers shown are from the last refresh.`, 'refresh');
  } finally {
    state.refreshing = false;
    if (!state.stopped) {
      state.timer = setTimeout(refresh, Math.max(100, POLL_MS - (performance.now() - started)));
    }
  }
}

window.addEventListener('pagehide', () => {
  const preview = state.preview;
  if (preview) {
    state.preview = null;
    if (preview.location) {
      try {
        fetch(preview.location, { method: 'DELETE', keepalive: true, headers: client.authHeaders() }).catch(() => {});
      } catch {
        /* the page is going away */
      }
    }
    preview.pc?.close(); // none for an RTMP picture preview
  }
});

// for the console and tests: the dashboard's state, read-only use
window.swapcastAdmin = { state, refresh, closePreview };

if (!token) {
  showAuthProblem('signin');
} else {
  refresh();
}
