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
// Errors from the API are thrown as ApiError {status, reason}; `reason` is the server's own
// `{"error": "..."}` text when it sent one.

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

export class SwapcastClient {
  /** @param {{baseUrl?: string, fetch?: typeof fetch}} [init] */
  constructor({ baseUrl = '', fetch: fetchImpl } = {}) {
    this.baseUrl = baseUrl.replace(/\/$/, '');
    this._fetch = fetchImpl || globalThis.fetch.bind(globalThis);
  }

  url(path) {
    return `${this.baseUrl}${API}${path}`;
  }

  async request(method, path, { json, body, headers = {}, keepalive = false, signal } = {}) {
    const init = { method, headers: { Accept: 'application/json', ...headers }, keepalive, signal };
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
  /** @returns {Promise<Array<{id: string, name: string, thumbnail_url: string}>>} */
  listFaces() {
    return this.request('GET', '/faces');
  }

  /** Upload a photo (File or Blob) as a new source face; raw body with its own MIME type. */
  uploadFace(file) {
    const type = file.type || 'application/octet-stream';
    return this.request('POST', '/faces', { body: file, headers: { 'Content-Type': type } });
  }

  // --- sessions ------------------------------------------------------------------------
  listSessions() {
    return this.request('GET', '/sessions');
  }

  createSession({ sdp, faceId, options = {} }) {
    return this.request('POST', '/sessions', {
      json: { sdp, type: 'offer', face_id: faceId, options },
    });
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
      this._fetch(this.url(`/sessions/${encodeURIComponent(id)}`), { method: 'DELETE', keepalive: true })
        .catch(() => {});
    } catch {
      /* the page is going away; nothing else to do */
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
 * One live swap: a peer connection to the server plus its API session.
 * Events (all optional): onTrack(stream), onState(state), onEnded(reason).
 */
export class LiveSwap {
  constructor(client, { onTrack, onState, onEnded, iceServers = [], codec = 'video/H264', maxBitrateKbps = 2500 } = {}) {
    this.client = client;
    this.onTrack = onTrack || (() => {});
    this.onState = onState || (() => {});
    this.onEnded = onEnded || (() => {});
    this.iceServers = iceServers;
    this.codec = codec;
    this.maxBitrateKbps = maxBitrateKbps;
    this.pc = null;
    this.sessionId = null;
    this.remoteStream = null;
    this._pollTimer = null;
    this._disconnectTimer = null;
    this._stopped = false;
    this._patches = Promise.resolve();
  }

  get active() {
    return Boolean(this.pc) && !this._stopped;
  }

  /** Offer the camera's video track, wait for ICE gathering, POST, apply the answer. */
  async start(cameraStream, { faceId, options = {} } = {}) {
    const pc = new RTCPeerConnection({ iceServers: this.iceServers });
    this.pc = pc;
    this._stopped = false;
    const track = cameraStream.getVideoTracks()[0];
    if (!track) throw new Error('The camera stream has no video track.');

    const transceiver = pc.addTransceiver(track, {
      direction: 'sendrecv',
      streams: [cameraStream],
      sendEncodings: [{ maxBitrate: this.maxBitrateKbps * 1000 }],
    });
    this.codecPreferred = preferCodec(transceiver, this.codec);
    this.transceiver = transceiver;

    pc.addEventListener('track', (event) => {
      this.remoteStream = event.streams[0] || new MediaStream([event.track]);
      this.onTrack(this.remoteStream, event.track);
    });
    pc.addEventListener('connectionstatechange', () => this._onConnectionState());

    await pc.setLocalDescription(await pc.createOffer());
    await waitForIceGathering(pc);
    if (this._stopped) throw new Error('stopped');

    let answer;
    try {
      answer = await this.client.createSession({ sdp: pc.localDescription.sdp, faceId, options });
    } catch (err) {
      this._closePeer();
      throw err;
    }
    this.sessionId = answer.session_id;
    if (this._stopped) {
      // stop() ran while the offer was in flight: drop the session we just got.
      this.client.deleteSession(this.sessionId).catch(() => {});
      throw new Error('stopped');
    }
    await pc.setRemoteDescription({ type: answer.type || 'answer', sdp: answer.sdp });
    await tuneSender(transceiver.sender, { maxBitrateKbps: this.maxBitrateKbps });
    return answer;
  }

  _onConnectionState() {
    const pc = this.pc;
    if (!pc || this._stopped) return;
    const state = pc.connectionState;
    this.onState(state);
    clearTimeout(this._disconnectTimer);
    if (state === 'failed') {
      this._end('The connection to the server failed.');
    } else if (state === 'disconnected') {
      // Often recovers by itself; give it a few seconds before giving up.
      this._disconnectTimer = setTimeout(() => {
        if (this.pc && this.pc.connectionState === 'disconnected') this._end('The connection to the server was lost.');
      }, 5000);
    }
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
    clearTimeout(this._disconnectTimer);
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
