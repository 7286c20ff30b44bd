// swapcast-client.js — a small client of the swapcast HTTP API (ES module, no build step).
//
//   import { SwapcastClient, LiveSwap } from '/web/swapcast-client.js';
//   const client = new SwapcastClient();              // same origin by default
//   const faces = await client.listFaces();           // [{id, name, thumbnail_url}]
//   const live = new LiveSwap(client, { onTrack: (stream) => video.srcObject = stream });
//   await live.start(cameraStream, { faceId: faces[0].id, options: { blend: 1 } });
//   await live.update({ options: { blend: 0.5 } });   // applied live (PATCH), no renegotiation
//   live.pollStats((stats) => ..., 1000);
//   await live.stop();                                 // DELETE + close
//
// A live swap survives the loss of its server node: when the connection fails or the
// swapped video stalls, LiveSwap offers again for the same session (through the gateway,
// which places it on a live node); the face and options are kept by the server, nothing
// is uploaded again. onReconnecting(attempt) reports it; onTrack fires with the new stream.
//
// Errors from the API are thrown as ApiError {status, reason}; `reason` is the server's own
// `{"error": "..."}` text when it sent one.
//
// Every API call carries the user's token (a JWT) as `Authorization: Bearer`. Pages get it
// from `#token=...` in their address (what `swapcast serve` prints) and keep it in
// localStorage: `new SwapcastClient({ token: pageToken() })`.

const API = '/api/v1';

export class ApiError extends Error {
  constructor(status, reason, body = null) {
    super(reason || `HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
    this.reason = reason || `HTTP ${status}`;
    this.body = body;
  }
}

async function readError(response) {
  let body = null;
  let reason = '';
  try {
    const text = await response.text();
    try {
      body = JSON.parse(text);
      reason = (body && (body.error || body.message)) || text;
    } catch {
      reason = text;
    }
  } catch {
    /* body unreadable */
  }
  reason = String(reason || response.statusText || '').trim();
  return new ApiError(response.status, reason || `HTTP ${response.status}`, body);
}

/** "me at home.jpg" -> "me at home", shortened to the server's 80-character limit. */
function fileStem(filename) {
  const base = filename.split(/[\\/]/).pop();
  const dot = base.lastIndexOf('.');
  return (dot > 0 ? base.slice(0, dot) : base).trim().slice(0, 80);
}

/** The request body of photos: one as itself, several as a multipart form (`image` each). */
function photoBody(photos) {
  if (photos.length === 1) {
    return { body: photos[0], headers: { 'Content-Type': photos[0].type || 'application/octet-stream' } };
  }
  const form = new FormData();
  for (const photo of photos) form.append('image', photo, photo.name || 'photo');
  return { body: form }; // the browser writes the multipart Content-Type with its boundary
}

const TOKEN_STORAGE = 'swapcast.token';

/** The page's API token: from `#token=...` (then removed from the address bar and kept
 *  in localStorage), else the one kept before; null when there is none. */
export function pageToken() {
  const match = /(?:^#|&)token=([^&]+)/.exec(window.location.hash || '');
  if (match) {
    const token = decodeURIComponent(match[1]);
    try {
      localStorage.setItem(TOKEN_STORAGE, token);
    } catch {
      /* storage disabled: the token lives as long as the page */
    }
    history.replaceState(null, '', window.location.pathname + window.location.search);
    return token;
  }
  try {
    return localStorage.getItem(TOKEN_STORAGE);
  } catch {
    return null;
  }
}

export class SwapcastClient {
  /** @param {{baseUrl?: string, token?: string|null, fetch?: typeof fetch}} [init] */
  constructor({ baseUrl = '', token = null, fetch: fetchImpl } = {}) {
    this.baseUrl = baseUrl.replace(/\/$/, '');
    this.token = token;
    this._fetch = fetchImpl || globalThis.fetch.bind(globalThis);
  }

  /** Authorization for API calls (and for WHEP, which takes the same token). */
  authHeaders() {
    return this.token ? { Authorization: `Bearer ${this.token}` } : {};
  }

  /** The WebSocket of session events and live stats (browsers cannot set its headers,
   *  so the token rides in the query). */
  eventsUrl() {
    const base = this.baseUrl || `${window.location.protocol}//${window.location.host}`;
    const ws = base.replace(/^http/, 'ws');
    return `${ws}${API}/events${this.token ? `?token=${encodeURIComponent(this.token)}` : ''}`;
  }

  url(path) {
    return `${this.baseUrl}${API}${path}`;
  }

  async request(method, path, { json, body, headers = {}, keepalive = false, signal } = {}) {
    const init = { method, headers: { Accept: 'application/json', ...this.authHeaders(), ...headers }, keepalive, signal };
    if (json !== undefined) {
      init.body = JSON.stringify(json);
      init.headers['Content-Type'] = 'application/json';
    } else if (body !== undefined) {
      init.body = body;
    }
    let response;
    try {
      response = await this._fetch(this.url(path), init);
    } catch (err) {
      if (err && err.name === 'AbortError') throw err;
      throw new ApiError(0, 'The swapcast server cannot be reached. Check that it is running.');
    }
    if (!response.ok) throw await readError(response);
    if (response.status === 204) return null;
    const type = response.headers.get('Content-Type') || '';
    return type.includes('json') ? response.json() : response.text();
  }

  // --- faces ---------------------------------------------------------------------------
  /** Each face's `thumbnail_url` is a short-lived signed link: an <img> loads it without
   *  the token, for minutes; list again for fresh links.
   *  @returns {Promise<Array<{id: string, name: string, owner: string, thumbnail_url: string}>>} */
  listFaces() {
    return this.request('GET', '/faces');
  }

  /** Upload a photo (File or Blob), or several photos of one person (an array or FileList:
   *  say a left and a right profile, merged into one face), as a new source face. One photo
   *  goes as the raw body with its own MIME type, several as a multipart form (a field
   *  `image` each). Named `name`, else after the (first) file, its name without the extension. */
  uploadFace(files, name = null) {
    const photos = files instanceof Blob ? [files] : Array.from(files);
    const label = (name || '').trim() || fileStem((photos[0] && photos[0].name) || '');
    const query = label ? `?name=${encodeURIComponent(label)}` : '';
    return this.request('POST', `/faces${query}`, photoBody(photos));
  }

  /** More photos of the person of one of the user's uploads: the face is made again from all. */
  addFacePhotos(faceId, files) {
    const photos = files instanceof Blob ? [files] : Array.from(files);
    return this.request('POST', `/faces/${encodeURIComponent(faceId)}/photos`, photoBody(photos));
  }

  /** Rename one of the user's uploads (samples cannot be renamed). */
  renameFace(faceId, name) {
    return this.request('PATCH', `/faces/${encodeURIComponent(faceId)}`, { json: { name } });
  }

  /** Delete one of the user's uploads (samples cannot be deleted). */
  deleteFace(faceId) {
    return this.request('DELETE', `/faces/${encodeURIComponent(faceId)}`);
  }

  // --- sessions ------------------------------------------------------------------------
  listSessions() {
    return this.request('GET', '/sessions');
  }

  /** Without `sdp`: a placed session ({session_id, offer_url}) that `offerSession` connects.
   *  With `sdp`: create and connect in one request ({session_id, sdp, type}). */
  createSession({ sdp, faceId, options = {} }) {
    const json = { face_id: faceId, options };
    if (sdp !== undefined) Object.assign(json, { sdp, type: 'offer' });
    return this.request('POST', '/sessions', { json });
  }

  /** Offer (or re-offer, after a failure) media for a session: {session_id, sdp, type}. */
  offerSession(id, sdp) {
    return this.request('POST', `/sessions/${encodeURIComponent(id)}/offer`, { json: { sdp, type: 'offer' } });
  }

  getSession(id) {
    return this.request('GET', `/sessions/${encodeURIComponent(id)}`);
  }

  /** @param {{enabled?: boolean, face_id?: string, options?: object}} patch */
  updateSession(id, patch) {
    return this.request('PATCH', `/sessions/${encodeURIComponent(id)}`, { json: patch });
  }

  deleteSession(id, { keepalive = false, timeoutMs = 5000 } = {}) {
    const signal = timeoutMs && AbortSignal.timeout ? AbortSignal.timeout(timeoutMs) : undefined;
    return this.request('DELETE', `/sessions/${encodeURIComponent(id)}`, { keepalive, signal });
  }

  /** Fire-and-forget DELETE that survives page unload (fetch keepalive). */
  deleteSessionOnUnload(id) {
    try {
      this._fetch(this.url(`/sessions/${encodeURIComponent(id)}`), {
        method: 'DELETE', keepalive: true, headers: this.authHeaders(),
      })
        .catch(() => {});
    } catch {
      /* the page is going away; nothing else to do */
    }
  }

  // --- operators (admin role): nodes, WHEP preview ------------------------------------
  /** Every node of the cluster: [{id, address, gpu, capacity, load, state, queue_delay_ms, stats, last_seen}]. */
  listNodes() {
    return this.request('GET', '/nodes');
  }

  /** Stop placing new sessions on a node (its own sessions go on); returns the node. */
  drainNode(id) {
    return this.request('POST', `/nodes/${encodeURIComponent(id)}/drain`);
  }

  /** Take a drained node back into placement; returns the node. */
  readyNode(id) {
    return this.request('POST', `/nodes/${encodeURIComponent(id)}/ready`);
  }

  /** WHEP: view a session's swapped video. POSTs a recvonly offer (application/sdp, same
   *  Bearer token) and returns {sdp, location}; `location` is what `whepStop` deletes. */
  async whepView(sessionId, sdp) {
    let response;
    try {
      response = await this._fetch(`${this.baseUrl}/whep/${encodeURIComponent(sessionId)}`, {
        method: 'POST',
        headers: { ...this.authHeaders(), 'Content-Type': 'application/sdp', Accept: 'application/sdp' },
        body: sdp,
      });
    } catch {
      throw new ApiError(0, 'The swapcast server cannot be reached. Check that it is running.');
    }
    if (!response.ok) throw await readError(response);
    const location = response.headers.get('Location');
    return { sdp: await response.text(), location: location ? new URL(location, response.url).href : null };
  }

  /** The session's newest swapped frame as a JPEG Blob (any protocol, RTMP included). */
  async sessionPreview(id) {
    let response;
    try {
      response = await this._fetch(this.url(`/sessions/${encodeURIComponent(id)}/preview.jpg`), {
        headers: this.authHeaders(), cache: 'no-store',
      });
    } catch {
      throw new ApiError(0, 'The swapcast server cannot be reached. Check that it is running.');
    }
    if (!response.ok) throw await readError(response);
    return response.blob();
  }

  /** End a WHEP viewer (the `location` whepView returned); a viewer already gone is fine. */
  async whepStop(location) {
    if (!location) return;
    try {
      const response = await this._fetch(location, { method: 'DELETE', headers: this.authHeaders() });
      if (!response.ok && response.status !== 404) throw await readError(response);
    } catch (err) {
      if (err instanceof ApiError) throw err;
      /* unreachable server: the viewer ends with its peer connection */
    }
  }
}

// --- WebRTC helpers ----------------------------------------------------------------------

/** Resolve when ICE gathering is complete (or after `timeoutMs`, with what was gathered). */
export function waitForIceGathering(pc, timeoutMs = 3000) {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      pc.removeEventListener('icegatheringstatechange', check);
      pc.removeEventListener('icecandidate', onCandidate);
      resolve();
    };
    const check = () => {
      if (pc.iceGatheringState === 'complete') done();
    };
    const onCandidate = (event) => {
      if (!event.candidate) done();
    };
    const timer = setTimeout(done, timeoutMs);
    pc.addEventListener('icegatheringstatechange', check);
    pc.addEventListener('icecandidate', onCandidate);
  });
}

/** Put codecs of `mimeType` (e.g. 'video/H264') first; packetization-mode=1 first among them. */
export function preferCodec(transceiver, mimeType) {
  if (typeof transceiver.setCodecPreferences !== 'function' || !window.RTCRtpReceiver?.getCapabilities) {
    return false;
  }
  const caps = RTCRtpReceiver.getCapabilities(transceiver.receiver.track.kind);
  if (!caps) return false;
  const wanted = mimeType.toLowerCase();
  const score = (codec) => {
    if (codec.mimeType.toLowerCase() !== wanted) return 2;
    const fmtp = codec.sdpFmtpLine || '';
    // Constrained Baseline, packetization-mode=1: what every H.264 peer decodes.
    if (fmtp.includes('packetization-mode=1') && /profile-level-id=42e0/i.test(fmtp)) return 0;
    if (fmtp.includes('packetization-mode=1')) return 0.5;
    return 1;
  };
  const preferred = caps.codecs.filter((c) => c.mimeType.toLowerCase() === wanted);
  if (!preferred.length) return false;
  const ordered = [...caps.codecs].sort((a, b) => score(a) - score(b));
  try {
    transceiver.setCodecPreferences(ordered);
    return true;
  } catch {
    return false;
  }
}

/** Keep the camera's resolution (drop frame rate instead) and cap the bitrate. */
export async function tuneSender(sender, { maxBitrateKbps = 2500, degradationPreference = 'maintain-resolution' } = {}) {
  try {
    const params = sender.getParameters();
    if (!params.encodings || !params.encodings.length) params.encodings = [{}];
    params.encodings[0].maxBitrate = maxBitrateKbps * 1000;
    params.degradationPreference = degradationPreference;
    await sender.setParameters(params);
    return true;
  } catch (err) {
    console.warn('swapcast: could not tune the video sender', err);
    return false;
  }
}

/**
 * Play the swapped video as soon as it is decoded: the receiver's jitter buffer target (ms;
 * `playoutDelayHint`, in s, where a browser has only that). The server's frames come over
 * one network hop at a steady pace, so the browser's own buffering is latency for nothing.
 */
export function lowLatencyReceiver(receiver, targetMs = 0) {
  try {
    if ('jitterBufferTarget' in receiver) {
      receiver.jitterBufferTarget = targetMs;
      return true;
    }
    if ('playoutDelayHint' in receiver) {
      receiver.playoutDelayHint = targetMs / 1000;
      return true;
    }
  } catch (err) {
    console.warn('swapcast: could not lower the receiver\'s jitter buffer', err);
  }
  return false;
}

/**
 * One live swap: a peer connection to the server plus its API session.
 * Events (all optional): onTrack(stream), onState(state), onEnded(reason).
 */
export class LiveSwap {
  constructor(client, {
    onTrack, onState, onEnded, onReconnecting, iceServers = [], iceTransportPolicy = 'all', codec = 'video/H264',
    maxBitrateKbps = 2500, stallMs = 1000, maxReconnects = 8, jitterBufferTargetMs = 0,
  } = {}) {
    this.client = client;
    this.onTrack = onTrack || (() => {});
    this.onState = onState || (() => {});
    this.onEnded = onEnded || (() => {});
    this.onReconnecting = onReconnecting || (() => {});
    this.iceServers = iceServers;
    this.iceTransportPolicy = iceTransportPolicy; // 'relay': media only through TURN
    this.sessionIceServers = []; // from the server with the session: STUN, time-limited TURN
    this.codec = codec;
    this.maxBitrateKbps = maxBitrateKbps;
    this.stallMs = stallMs;
    this.maxReconnects = maxReconnects;
    this.jitterBufferTargetMs = jitterBufferTargetMs; // null: the browser's own choice
    this.pc = null;
    this.sessionId = null;
    this.remoteStream = null;
    this.reconnects = 0;
    this._camera = null;
    this._pollTimer = null;
    this._watchTimer = null;
    this._reconnecting = null;
    this._stopped = false;
    this._patches = Promise.resolve();
  }

  get active() {
    return Boolean(this.pc) && !this._stopped;
  }

  /** Create the session (face and options are checked before the camera is offered),
   *  then connect it. */
  async start(cameraStream, { faceId, options = {} } = {}) {
    if (!cameraStream.getVideoTracks()[0]) throw new Error('The camera stream has no video track.');
    this._stopped = false;
    this._camera = cameraStream;
    const placed = await this.client.createSession({ faceId, options });
    this.sessionId = placed.session_id;
    this.sessionIceServers = placed.ice_servers || [];
    if (this._stopped) {
      this.client.deleteSession(placed.session_id).catch(() => {});
      throw new Error('stopped');
    }
    try {
      return await this._connect();
    } catch (err) {
      if (!this._stopped) await this.stop();
      throw err;
    }
  }

  /** One peer connection for the session: offer the camera, wait for ICE gathering,
   *  POST the offer, apply the answer, then watch that swapped video keeps coming. */
  async _connect() {
    this._closePeer();
    const pc = new RTCPeerConnection({
      iceServers: [...this.iceServers, ...this.sessionIceServers],
      iceTransportPolicy: this.iceTransportPolicy,
    });
    this.pc = pc;
    const camera = this._camera;
    const transceiver = pc.addTransceiver(camera.getVideoTracks()[0], {
      direction: 'sendrecv',
      streams: [camera],
      sendEncodings: [{ maxBitrate: this.maxBitrateKbps * 1000 }],
    });
    this.codecPreferred = preferCodec(transceiver, this.codec);
    if (this.jitterBufferTargetMs !== null) lowLatencyReceiver(transceiver.receiver, this.jitterBufferTargetMs);
    this.transceiver = transceiver;
    pc.addEventListener('track', (event) => {
      if (this.pc !== pc) return;
      this.remoteStream = event.streams[0] || new MediaStream([event.track]);
      this.onTrack(this.remoteStream, event.track);
    });
    pc.addEventListener('connectionstatechange', () => this._onConnectionState(pc));

    await pc.setLocalDescription(await pc.createOffer());
    await waitForIceGathering(pc);
    if (this._stopped || this.pc !== pc) throw new Error('stopped');
    const answer = await this.client.offerSession(this.sessionId, pc.localDescription.sdp);
    if (this._stopped || this.pc !== pc) throw new Error('stopped');
    await pc.setRemoteDescription({ type: answer.type || 'answer', sdp: answer.sdp });
    await tuneSender(transceiver.sender, { maxBitrateKbps: this.maxBitrateKbps });
    this._watch(pc);
    return answer;
  }

  _onConnectionState(pc) {
    if (pc !== this.pc || this._stopped) return;
    const state = pc.connectionState;
    this.onState(state);
    if (state === 'failed' || state === 'closed') this._reconnect(`connection ${state}`);
  }

  /** Reconnect when no new swapped frame was decoded for `stallMs` (a dead node's
   *  connection can take many seconds to be declared failed; frames stop at once). */
  _watch(pc) {
    clearInterval(this._watchTimer);
    let lastFrames = -1;
    let lastChange = performance.now();
    this._watchTimer = setInterval(async () => {
      if (pc !== this.pc || this._stopped) return;
      let frames = 0;
      try {
        (await pc.getStats()).forEach((s) => {
          if (s.type === 'inbound-rtp' && s.kind === 'video') frames = s.framesDecoded || 0;
        });
      } catch {
        return;
      }
      const now = performance.now();
      if (frames !== lastFrames) {
        if (frames > 0) this.reconnects = 0; // media flows again: a later failure starts a new count
        lastFrames = frames;
        lastChange = now;
      } else if (frames > 0 && now - lastChange > this.stallMs) {
        this._reconnect('swapped video stalled');
      }
    }, 250);
  }

  /** Offer again for the same session, with backoff, until it works or `maxReconnects`. */
  _reconnect(why) {
    if (this._stopped || this._reconnecting) return this._reconnecting;
    clearInterval(this._watchTimer);
    this._reconnecting = (async () => {
      while (!this._stopped) {
        this.reconnects += 1;
        if (this.reconnects > this.maxReconnects) {
          this._reconnecting = null;
          this._end(`The connection to the server was lost (${why}).`);
          return;
        }
        this.onReconnecting(this.reconnects, why);
        try {
          // fresh TURN credentials: the session's first ones may have expired by now
          const session = await this.client.getSession(this.sessionId).catch(() => null);
          if (session && session.ice_servers) this.sessionIceServers = session.ice_servers;
          await this._connect();
          this._reconnecting = null;
          return;
        } catch (err) {
          if (err instanceof ApiError && err.status === 404) {
            this._reconnecting = null;
            this._end('The server ended this session.');
            return;
          }
          await new Promise((resolve) => setTimeout(resolve, Math.min(250 * 2 ** (this.reconnects - 1), 3000)));
        }
      }
      this._reconnecting = null;
    })();
    return this._reconnecting;
  }

  async _end(reason) {
    if (this._stopped) return;
    await this.stop();
    this.onEnded(reason);
  }

  /** PATCH the live session: {enabled}, {face_id}, {options: {...}}; no renegotiation.
   *  PATCHes are sent one at a time, in order: the last change made is the one that stays,
   *  and two changes to different options never race on the server. */
  update(patch) {
    if (!this.sessionId) return Promise.reject(new Error('No live session.'));
    const id = this.sessionId;
    const run = () => this.client.updateSession(id, patch);
    const result = this._patches.then(run, run);
    this._patches = result.catch(() => {});
    return result;
  }

  /** Poll the server's session stats (and the browser's RTP stats) every `intervalMs`. */
  pollStats(callback, intervalMs = 1000) {
    this.stopPolling();
    let busy = false;
    const tick = async () => {
      if (busy || !this.sessionId || this._stopped) return;
      busy = true;
      try {
        const [session, rtp] = await Promise.all([this.client.getSession(this.sessionId), this.rtpStats()]);
        if (!this._stopped) callback({ session, rtp });
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) {
          this._end('The server ended this session.');
        } else if (!this._stopped) {
          callback({ error: err });
        }
      } finally {
        busy = false;
      }
    };
    this._pollTimer = setInterval(tick, intervalMs);
    tick();
    return () => this.stopPolling();
  }

  stopPolling() {
    clearInterval(this._pollTimer);
    this._pollTimer = null;
  }

  /** The browser's side: what it sends (outbound) and receives (inbound) on video. */
  async rtpStats() {
    if (!this.pc) return {};
    const report = await this.pc.getStats();
    const out = {};
    const codecs = {};
    report.forEach((s) => {
      if (s.type === 'codec') codecs[s.id] = s.mimeType;
    });
    report.forEach((s) => {
      if (s.kind !== 'video') return;
      if (s.type === 'outbound-rtp') {
        out.sent = {
          fps: s.framesPerSecond ?? null,
          width: s.frameWidth ?? null,
          height: s.frameHeight ?? null,
          codec: codecs[s.codecId] || null,
          limitation: s.qualityLimitationReason || null,
        };
      } else if (s.type === 'inbound-rtp') {
        out.received = {
          fps: s.framesPerSecond ?? null,
          width: s.frameWidth ?? null,
          height: s.frameHeight ?? null,
          codec: codecs[s.codecId] || null,
          framesDropped: s.framesDropped ?? 0,
          jitterBufferMs: s.jitterBufferEmittedCount
            ? (1000 * s.jitterBufferDelay) / s.jitterBufferEmittedCount
            : null,
        };
      }
    });
    return out;
  }

  _closePeer() {
    clearInterval(this._watchTimer);
    if (this.pc) {
      try {
        this.pc.getSenders().forEach((s) => s.track && s.replaceTrack(null).catch(() => {}));
        this.pc.close();
      } catch {
        /* already closed */
      }
    }
    this.pc = null;
  }

  /** Tear down: stop polling, DELETE the session, then close the peer connection (closing
   *  first would let the server end the session on its own and answer the DELETE with 404). */
  async stop() {
    this._stopped = true;
    this.stopPolling();
    const id = this.sessionId;
    this.sessionId = null;
    try {
      if (id) await this.client.deleteSession(id);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) console.warn('swapcast: DELETE session failed', err);
    } finally {
      this._closePeer();
    }
  }

  /** For pagehide/beforeunload: synchronous-enough teardown that survives unloading. */
  stopOnUnload() {
    this._stopped = true;
    this.stopPolling();
    if (this.sessionId) this.client.deleteSessionOnUnload(this.sessionId);
    this.sessionId = null;
    this._closePeer();
  }
}
