// The swapcast page: camera → server (WebRTC) → swapped video, with live controls.
import { ApiError, LiveSwap, SwapcastClient, pageToken } from '/web/swapcast-client.js';

const $ = (id) => document.getElementById(id);
const el = {
  status: $('status'),
  statusText: $('status-text'),
  message: $('message'),
  messageText: $('message-text'),
  messageClose: $('message-close'),
  localVideo: $('local-video'),
  remoteVideo: $('remote-video'),
  localPlaceholder: $('local-placeholder'),
  remotePlaceholder: $('remote-placeholder'),
  start: $('start'),
  stop: $('stop'),
  swapEnabled: $('swap-enabled'),
  swapBadge: $('swap-badge'),
  blend: $('blend'),
  blendValue: $('blend-value'),
  mouthMask: $('mouth-mask'),
  faceSelection: $('face-selection'),
  faceList: $('face-list'),
  upload: $('upload'),
  uploadName: $('upload-name'),
  faceEdit: $('face-edit'),
  faceName: $('face-name'),
  faceDelete: $('face-delete'),
  uploadLabel: document.querySelector('.upload'),
  stats: $('stats'),
  showStats: $('show-stats'),
  peoplePanel: $('people-panel'),
  peopleList: $('people-list'),
  keepUnmapped: $('keep-unmapped'),
  keepChip: $('keep-chip'),
  stat: {
    fpsIn: $('stat-fps-in'),
    fpsOut: $('stat-fps-out'),
    latency: $('stat-latency'),
    swap: $('stat-swap'),
    faces: $('stat-faces'),
    stagesRow: $('stat-stages-row'),
    stages: $('stat-stages'),
    dropped: $('stat-dropped'),
    sent: $('stat-sent'),
  },
};

const client = new SwapcastClient({ token: pageToken() });
const state = {
  faces: [],
  faceId: null,
  camera: null,
  live: null,
  busy: false,
  generation: 0, // bumped by stop(): a start() still waiting for the camera gives up
  lastFramesIn: null,
  lastPollAt: null,
  people: [], // the people the live session has seen (GET /api/v1/sessions/{id}: people)
  facesMap: {}, // person id -> face id or "keep": what the session's options.faces_map holds
};

// --- messages & status ---------------------------------------------------------------

function showMessage(text, kind = 'error') {
  el.messageText.textContent = text;
  el.message.dataset.kind = kind;
  el.message.hidden = false;
}

function clearMessage() {
  el.message.hidden = true;
  el.messageText.textContent = '';
}

function setStatus(stateName, text) {
  el.status.dataset.state = stateName;
  el.statusText.textContent = text;
}

el.messageClose.addEventListener('click', clearMessage);

// Browsers give the camera only to secure origins (https://, or localhost on this machine):
// opened over plain HTTP from elsewhere, getUserMedia does not even exist. Say so up front.
const secureOrigin = () => window.isSecureContext && Boolean(navigator.mediaDevices && navigator.mediaDevices.getUserMedia);
const INSECURE_ORIGIN_MESSAGE = `This page was opened over plain HTTP (${location.origin}), which browsers do not `
  + 'treat as a secure origin, so they do not allow the camera here. Open it over https:// (start swapcast serve '
  + 'with --tls-cert and --tls-key, or put an HTTPS proxy in front), or at http://localhost on the server itself.';

function refuseInsecureOrigin() {
  if (window.isSecureContext) { // secure, yet no camera API: the browser itself lacks it
    showMessage('This browser offers no camera access to web pages (navigator.mediaDevices is missing). '
      + 'Open the page in a current Chrome, Firefox, Safari or Edge.');
    setStatus('error', 'Camera unavailable');
    return;
  }
  showMessage(INSECURE_ORIGIN_MESSAGE);
  setStatus('error', 'HTTPS needed');
}

function cameraErrorMessage(err) {
  switch (err && err.name) {
    case 'NotAllowedError':
    case 'PermissionDeniedError':
    case 'SecurityError':
      return 'Camera access was denied. Allow this site to use your camera (the camera icon in the address bar), then press Start camera again.';
    case 'NotFoundError':
    case 'DevicesNotFoundError':
    case 'OverconstrainedError':
      return 'No camera was found. Connect a camera and try again.';
    case 'NotReadableError':
    case 'TrackStartError':
      return 'The camera is busy: another application is using it. Close it and try again.';
    default:
      return `The camera could not be started: ${err && err.message ? err.message : err}`;
  }
}

const SIGN_IN_HINT = 'Open the address `swapcast serve` printed (it ends in #token=…), or ask your operator for a token.';

function sessionErrorMessage(err) {
  if (err instanceof ApiError) {
    if (err.status === 401) return `You are not signed in: ${err.reason}. ${SIGN_IN_HINT}`;
    if (err.status === 429) return `Too many requests: ${err.reason}`;
    if (err.status === 503) {
      return `The server is full right now — every live slot is in use (${err.reason}). Please try again in a minute.`;
    }
    if (err.status === 0) return err.reason;
    return `The server refused the session: ${err.reason}`;
  }
  return `The live session could not be started: ${err && err.message ? err.message : err}`;
}

function uploadErrorMessage(err) {
  if (err instanceof ApiError) {
    const prefix = {
      413: 'The upload is too large',
      415: 'That file is not a supported image',
      422: 'That photo cannot be used as a source face',
    }[err.status] || 'The photo could not be uploaded';
    return `${prefix}: ${err.reason}`;
  }
  return `The photo could not be uploaded: ${err && err.message ? err.message : err}`;
}

// --- faces -------------------------------------------------------------------------------

function renderFaces() {
  el.faceList.replaceChildren();
  for (const face of state.faces) {
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'face';
    button.setAttribute('role', 'radio');
    button.dataset.faceId = face.id;
    const selected = face.id === state.faceId;
    button.setAttribute('aria-checked', String(selected));
    button.tabIndex = selected || (!state.faceId && face === state.faces[0]) ? 0 : -1;
    const img = document.createElement('img');
    img.src = face.thumbnail_url; // a signed link, valid for minutes: <img> sends no token
    img.alt = '';
    img.addEventListener('error', refreshExpiredThumbnails, { once: true });
    const name = document.createElement('span');
    name.textContent = face.name || face.id;
    button.title = face.name || face.id;
    button.append(img, name);
    button.draggable = true; // dropped onto a person in the picture: they wear it
    button.addEventListener('dragstart', (event) => {
      event.dataTransfer.setData('application/x-swapcast-face', face.id);
      event.dataTransfer.effectAllowed = 'copy';
    });
    button.addEventListener('click', () => selectFace(face.id));
    button.addEventListener('keydown', onFaceKey);
    el.faceList.append(button);
  }
  el.faceList.setAttribute('aria-busy', 'false');
  el.start.disabled = state.busy || Boolean(state.live) || !state.faceId;
  renderFaceEdit();
}

/** The selected face's name and delete button, for the user's own uploads (not samples). */
function renderFaceEdit() {
  const face = state.faces.find((f) => f.id === state.faceId);
  const editable = Boolean(face && face.owner);
  el.faceEdit.hidden = !editable;
  if (editable && el.faceEdit.dataset.faceId !== face.id) {
    el.faceEdit.dataset.faceId = face.id;
    el.faceName.value = face.name || '';
  }
}

// Thumbnail links expire after minutes; a page left open fetches fresh ones, at most twice a minute.
let thumbnailsRefreshedAt = 0;
function refreshExpiredThumbnails() {
  if (performance.now() - thumbnailsRefreshedAt < 30_000) return;
  thumbnailsRefreshedAt = performance.now();
  loadFaces();
}

function onFaceKey(event) {
  const keys = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
  if (!(event.key in keys)) return;
  event.preventDefault();
  const index = state.faces.findIndex((f) => f.id === state.faceId);
  const next = state.faces[(index + keys[event.key] + state.faces.length) % state.faces.length];
  selectFace(next.id).then(() => el.faceList.querySelector(`[data-face-id="${CSS.escape(next.id)}"]`)?.focus());
}

async function selectFace(id) {
  const previous = state.faceId;
  if (id === previous) return;
  state.faceId = id;
  renderFaces();
  if (state.live && state.live.sessionId) {
    try {
      await state.live.update({ face_id: id });
    } catch (err) {
      state.faceId = previous;
      renderFaces();
      showMessage(`The source face could not be changed: ${err.reason || err.message}`);
    }
  }
}

async function loadFaces() {
  try {
    state.faces = await client.listFaces();
    if (!state.faceId && state.faces.length) state.faceId = state.faces[0].id;
    renderFaces();
    if (!state.faces.length) {
      el.faceList.innerHTML = '<p class="hint">No faces yet: upload a photo.</p>';
    }
  } catch (err) {
    el.faceList.innerHTML = '<p class="hint">Faces could not be loaded.</p>';
    const hint = err instanceof ApiError && err.status === 401 ? ` ${SIGN_IN_HINT}` : '';
    showMessage(`The face list could not be loaded: ${err.reason || err.message}.${hint}`);
  }
}

el.upload.addEventListener('change', async () => {
  const files = Array.from(el.upload.files || []); // several: photos of one person, merged into one face
  if (!files.length) return;
  clearMessage();
  el.uploadLabel.setAttribute('aria-busy', 'true');
  try {
    const face = await client.uploadFace(files, el.uploadName.value);
    el.uploadName.value = '';
    await loadFaces();
    await selectFace(face.id);
    const made = face.photos > 1 ? ` (from ${face.photos} photos)` : '';
    showMessage(`Added “${face.name || face.id}”${made} as the source face.`, 'info');
  } catch (err) {
    showMessage(uploadErrorMessage(err));
  } finally {
    el.uploadLabel.setAttribute('aria-busy', 'false');
    el.upload.value = '';
  }
});

el.faceEdit.addEventListener('submit', async (event) => {
  event.preventDefault();
  const faceId = el.faceEdit.dataset.faceId;
  clearMessage();
  try {
    const face = await client.renameFace(faceId, el.faceName.value);
    el.faceEdit.dataset.faceId = '';
    await loadFaces();
    showMessage(`Renamed to “${face.name}”.`, 'info');
  } catch (err) {
    showMessage(`The face could not be renamed: ${err.reason || err.message}`);
  }
});

el.faceDelete.addEventListener('click', async () => {
  const faceId = el.faceEdit.dataset.faceId;
  const face = state.faces.find((f) => f.id === faceId);
  clearMessage();
  try {
    await client.deleteFace(faceId);
    if (state.faceId === faceId) state.faceId = null;
    el.faceEdit.dataset.faceId = '';
    await loadFaces();
    showMessage(`Deleted “${face ? face.name : faceId}”.`, 'info');
  } catch (err) {
    showMessage(`The face could not be deleted: ${err.reason || err.message}`);
  }
});

// --- options -------------------------------------------------------------------------------

function currentOptions() {
  return {
    blend: Number(el.blend.value),
    mouth_mask: el.mouthMask.checked,
    face_selection: el.faceSelection.value,
  };
}

/** PATCH while live; on refusal show the reason and put the control back. */
async function patchLive(patch, revert) {
  if (!state.live || !state.live.sessionId) return;
  try {
    await state.live.update(patch);
  } catch (err) {
    if (revert) revert();
    showMessage(`That change was not applied: ${err.reason || err.message}`);
  }
}

el.swapEnabled.addEventListener('change', () => {
  const enabled = el.swapEnabled.checked;
  el.swapBadge.hidden = enabled;
  patchLive({ enabled }, () => {
    el.swapEnabled.checked = !enabled;
    el.swapBadge.hidden = !enabled;
  });
});

let blendTimer = null;
let blendSent = Number(el.blend.value);
function showBlend() {
  el.blendValue.textContent = `${Math.round(Number(el.blend.value) * 100)}%`;
}
function sendBlend() {
  clearTimeout(blendTimer);
  blendTimer = null;
  const value = Number(el.blend.value);
  if (value === blendSent) return;
  const before = blendSent;
  blendSent = value;
  patchLive({ options: { blend: value } }, () => {
    blendSent = before;
    el.blend.value = String(before);
    showBlend();
  });
}
el.blend.addEventListener('input', () => {
  showBlend();
  if (!blendTimer) blendTimer = setTimeout(sendBlend, 120); // at most ~8 PATCHes a second
});
el.blend.addEventListener('change', sendBlend);

el.mouthMask.addEventListener('change', () => {
  const value = el.mouthMask.checked;
  patchLive({ options: { mouth_mask: value } }, () => {
    el.mouthMask.checked = !value;
  });
});

let selectionBefore = el.faceSelection.value;
el.faceSelection.addEventListener('change', () => {
  const value = el.faceSelection.value;
  const before = selectionBefore;
  selectionBefore = value;
  patchLive({ options: { face_selection: value } }, () => {
    el.faceSelection.value = before;
    selectionBefore = before;
  });
});

// --- people in the picture (map faces: options.faces_map) ----------------------------------

const KEEP = 'keep';
const FACE_DRAG = 'application/x-swapcast-face';

/** The person's choice in the map: a face id, "keep", or "" (not mapped: the session's rule). */
const choiceOf = (personId) => state.facesMap[personId] || '';

function personOptions(select, personId) {
  const choices = [['', 'not mapped'], ...state.faces.map((f) => [f.id, f.name || f.id]), [KEEP, 'keep: stays themselves']];
  select.replaceChildren(...choices.map(([value, text]) => {
    const option = document.createElement('option');
    option.value = value;
    option.textContent = text;
    return option;
  }));
  select.value = choiceOf(personId);
}

function renderPeople() {
  const live = Boolean(state.live && state.live.sessionId);
  el.peoplePanel.hidden = !live || state.people.length === 0;
  const shown = new Map([...el.peopleList.children].map((li) => [li.dataset.personId, li]));
  const wanted = new Set(state.people.map((p) => p.id));
  for (const [id, li] of shown) if (!wanted.has(id)) li.remove();
  for (const person of state.people) {
    let li = shown.get(person.id);
    if (!li) {
      li = document.createElement('li');
      li.className = 'person';
      li.dataset.personId = person.id;
      const img = document.createElement('img');
      img.alt = `${person.id} as the camera shows them`;
      const who = document.createElement('span');
      who.className = 'who';
      const select = document.createElement('select');
      select.setAttribute('aria-label', `Face for ${person.id}`);
      select.dataset.personId = person.id;
      select.addEventListener('change', () => mapPerson(person.id, select.value));
      li.append(img, who, select);
      li.addEventListener('dragover', (event) => {
        if (![...event.dataTransfer.types].includes(FACE_DRAG) && ![...event.dataTransfer.types].includes('text/plain')) return;
        event.preventDefault();
        li.classList.add('drop-target');
      });
      li.addEventListener('dragleave', () => li.classList.remove('drop-target'));
      li.addEventListener('drop', (event) => {
        event.preventDefault();
        li.classList.remove('drop-target');
        const faceId = event.dataTransfer.getData(FACE_DRAG) || event.dataTransfer.getData('text/plain');
        if (faceId) mapPerson(person.id, faceId);
      });
      el.peopleList.append(li);
      personOptions(select, person.id);
    }
    const img = li.querySelector('img');
    if (person.thumbnail_url && img.dataset.src !== person.thumbnail_url) {
      img.dataset.src = person.thumbnail_url;
      img.src = person.thumbnail_url;
    }
    li.dataset.onScreen = String(Boolean(person.on_screen));
    li.dataset.wears = person.wears || '';
    const worn = state.faces.find((f) => f.id === person.wears);
    const wearing = worn ? worn.name || worn.id : person.wears === 'source' ? 'the selected face' : person.wears;
    li.querySelector('.who').textContent = `${person.id}${person.on_screen ? '' : ' (gone)'} · wears ${wearing}`;
    const select = li.querySelector('select');
    if (document.activeElement !== select && select.options.length !== state.faces.length + 2) personOptions(select, person.id);
    else if (document.activeElement !== select) select.value = choiceOf(person.id);
  }
}

/** PATCH the whole map with one person changed ("" takes them out of it); on refusal it goes back. */
async function mapPerson(personId, choice) {
  const before = { ...state.facesMap };
  const next = { ...state.facesMap };
  if (choice) next[personId] = choice;
  else delete next[personId];
  state.facesMap = next;
  renderPeople();
  await patchLive({ options: { faces_map: next } }, () => {
    state.facesMap = before;
    renderPeople();
  });
}

el.keepChip.addEventListener('dragstart', (event) => {
  event.dataTransfer.setData(FACE_DRAG, KEEP);
  event.dataTransfer.effectAllowed = 'copy';
});

el.keepUnmapped.addEventListener('change', () => {
  const value = el.keepUnmapped.checked;
  patchLive({ options: { unmapped: value ? KEEP : 'source' } }, () => {
    el.keepUnmapped.checked = !value;
  });
});

function followPeople(session) {
  state.people = Array.isArray(session.people) ? session.people : [];
  const map = session.options && session.options.faces_map;
  if (map && typeof map === 'object') state.facesMap = { ...map };
  if (session.options && document.activeElement !== el.keepUnmapped) el.keepUnmapped.checked = session.options.unmapped === KEEP;
  renderPeople();
}

// --- stats ---------------------------------------------------------------------------------

const fmt = (value, digits = 0, unit = '') =>
  value === null || value === undefined || Number.isNaN(value) ? '–' : `${Number(value).toFixed(digits)}${unit}`;

const STAGE_KEYS = ['decode', 'track', 'identity', 'prepare', 'run', 'paste', 'encode'];

function stageText(stats) {
  let stages = null;
  for (const key of ['stages_ms', 'stages']) {
    if (stats[key] && typeof stats[key] === 'object') stages = stats[key];
  }
  if (!stages) {
    stages = {};
    for (const key of STAGE_KEYS) {
      const value = stats[`${key}_ms`];
      if (typeof value === 'number') stages[key] = value;
    }
  }
  const parts = Object.entries(stages)
    .filter(([, v]) => typeof v === 'number')
    .map(([k, v]) => `${k.replace(/_ms$/, '')} ${v.toFixed(1)}`);
  return parts.length ? `${parts.join(' · ')} ms` : null;
}

function renderStats({ session, rtp, error }) {
  if (error || !session) return;
  followPeople(session);
  const s = session.stats || {};
  const now = performance.now();
  let fpsIn = typeof s.fps_in === 'number' ? s.fps_in : null;
  if (fpsIn === null && typeof s.frames_in === 'number' && state.lastFramesIn !== null) {
    fpsIn = ((s.frames_in - state.lastFramesIn) * 1000) / (now - state.lastPollAt);
  }
  state.lastFramesIn = typeof s.frames_in === 'number' ? s.frames_in : null;
  state.lastPollAt = now;

  el.stat.fpsIn.textContent = fmt(fpsIn, 0);
  el.stat.fpsOut.textContent = fmt(s.fps_out, 0);
  el.stat.latency.textContent =
    s.latency_p50_ms == null ? '–' : `${fmt(s.latency_p50_ms, 0)} / ${fmt(s.latency_p99_ms, 0)} ms`;
  el.stat.swap.textContent = fmt(s.swap_ms, 1, ' ms');
  el.stat.faces.textContent = typeof s.faces_seen === 'number' ? `${s.faces_swapped ?? 0} / ${s.faces_seen}` : '–';
  const stages = stageText(s);
  el.stat.stagesRow.hidden = !stages;
  el.stat.stages.textContent = stages || '–';
  const dropped = s.frames_dropped ?? null;
  const share = dropped !== null && s.frames_in ? ` (${Math.round((100 * dropped) / s.frames_in)}%)` : '';
  el.stat.dropped.textContent = dropped === null ? '–' : `${dropped}${share}`;
  const sent = rtp && rtp.sent;
  el.stat.sent.textContent = sent && sent.width
    ? `${sent.width}×${sent.height} ${(sent.codec || '').replace('video/', '')}`
    : '–';
  el.stats.hidden = !el.showStats.checked;
}

el.showStats.addEventListener('change', () => {
  el.stats.hidden = !el.showStats.checked || !state.live;
});

// --- start / stop --------------------------------------------------------------------------

function setBusy(busy) {
  state.busy = busy;
  el.start.disabled = busy || Boolean(state.live) || !state.faceId;
  el.stop.disabled = !busy && !state.live && !state.camera;
}

async function start() {
  if (state.busy || state.live) return;
  if (!secureOrigin()) {
    refuseInsecureOrigin();
    return;
  }
  const generation = ++state.generation;
  clearMessage();
  setBusy(true);
  setStatus('connecting', 'Starting camera…');
  try {
    const camera = await navigator.mediaDevices.getUserMedia({
      video: { width: { ideal: 640 }, height: { ideal: 480 }, frameRate: { ideal: 30 } },
      audio: false,
    });
    if (generation !== state.generation) {
      camera.getTracks().forEach((t) => t.stop()); // Stop was pressed meanwhile
      return;
    }
    state.camera = camera;
  } catch (err) {
    if (generation !== state.generation) return;
    state.camera = null;
    setBusy(false);
    setStatus('error', 'Camera unavailable');
    showMessage(cameraErrorMessage(err));
    return;
  }
  el.localVideo.srcObject = state.camera;
  el.localPlaceholder.hidden = true;
  setStatus('connecting', 'Connecting…');

  const live = new LiveSwap(client, {
    onTrack: (stream) => {
      el.remoteVideo.srcObject = stream;
      el.remoteVideo.play().catch(() => {});
    },
    onState: (connection) => {
      if (connection === 'connected') setStatus('live', 'Live');
      else if (connection === 'disconnected') setStatus('connecting', 'Reconnecting…');
    },
    onReconnecting: (attempt) => setStatus('connecting', `Reconnecting… (${attempt})`),
    onEnded: (reason) => {
      stop({ keepMessage: true });
      showMessage(`${reason} Press Start camera to try again.`);
      setStatus('error', 'Disconnected');
    },
  });
  state.live = live;
  try {
    await live.start(state.camera, { faceId: state.faceId, options: currentOptions() });
    if (!el.swapEnabled.checked) await live.update({ enabled: false });
    state.lastFramesIn = null;
    live.pollStats(renderStats, 1000);
    if (live.pc && live.pc.connectionState === 'connected') setStatus('live', 'Live');
  } catch (err) {
    if (state.live !== live) return; // stopped meanwhile
    await stop({ keepMessage: true });
    showMessage(sessionErrorMessage(err));
    setStatus('error', err instanceof ApiError && err.status === 503 ? 'Server full' : 'Not connected');
    return;
  } finally {
    if (state.live === live) setBusy(false);
  }
}

async function stop({ keepMessage = false } = {}) {
  state.generation++;
  const live = state.live;
  state.live = null;
  if (state.camera) state.camera.getTracks().forEach((t) => t.stop());
  state.camera = null;
  el.localVideo.srcObject = null;
  el.remoteVideo.srcObject = null;
  el.localPlaceholder.hidden = false;
  el.remotePlaceholder.hidden = false;
  el.stats.hidden = true;
  state.people = [];
  state.facesMap = {};
  renderPeople();
  setBusy(false);
  if (!keepMessage) {
    clearMessage();
    setStatus('idle', 'Idle');
  }
  if (live) await live.stop();
}

el.remoteVideo.addEventListener('playing', () => {
  el.remotePlaceholder.hidden = true;
});

el.start.addEventListener('click', start);
el.stop.addEventListener('click', () => stop());

// Leaving the page ends the session at once, even while the page unloads.
function teardownOnUnload() {
  if (state.live) state.live.stopOnUnload();
  state.live = null;
  if (state.camera) state.camera.getTracks().forEach((t) => t.stop());
  state.camera = null;
}
window.addEventListener('pagehide', teardownOnUnload);
window.addEventListener('beforeunload', teardownOnUnload);

// For tests and embedding: a read-only view of what is going on.
window.swapcast = {
  client,
  get live() {
    return state.live;
  },
  get faceId() {
    return state.faceId;
  },
  get people() {
    return state.people;
  },
};

showBlend();
loadFaces();
if (!secureOrigin()) refuseInsecureOrigin();
