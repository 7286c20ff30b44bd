"""The queue's Lua scripts: every step that reads a job's state and then changes it (or adds
the next task) runs as one script, so two workers, a reclaimed task and a cancel racing each
other can never enqueue a step twice or resurrect a finished job.

Every script acknowledges (``XACK``) and deletes (``XDEL``) the stream entry it finishes in
the same atomic step as its effect: a worker dying between "done" and "acknowledged" cannot
leave a task that runs again with a different outcome. All keys are passed in ``KEYS`` and
share one hash tag, so the scripts run unchanged on Redis Cluster.
"""

from __future__ import annotations

# KEYS: job, jobs index, first stream, idempotency key, the owner's jobs index
# ARGV: job id, created, idempotency TTL (s), '1' to use the idempotency key, field/value pairs
CREATE = """
if ARGV[4] == '1' then
  local existing = redis.call('GET', KEYS[4])
  if existing then return existing end
  redis.call('SET', KEYS[4], ARGV[1], 'EX', ARGV[3])
end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
redis.call('XADD', KEYS[3], '*', 'job', ARGV[1], 'kind', 'split')
return ARGV[1]
"""

# KEYS: job.  ARGV: now.  Returns the job's state afterwards (nil: unknown job).
CANCEL = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return false end
if state == 'pending' or state == 'processing' then
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'updated', ARGV[1], 'finished', ARGV[1])
  return 'cancelled'
end
return state
"""

# Renew (idle 0) or give back (a large idle: reclaimable at once) a held entry, only while
# this consumer still holds it: a worker whose lease ran out must not take the entry back
# from the worker that reclaimed it.
# KEYS: stream.  ARGV: group, consumer, entry id, idle ms.  Returns 1 when still held.
LEASE = """
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #held == 0 then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'JUSTID')
return 1
"""

# The split finished: record the chunks and enqueue one task per chunk, once.
# KEYS: job, chunks hash, stream.
# ARGV: group, entry id, now, frames, duration_s, frame_s, has_audio, then one JSON per chunk.
# Returns 'ok', or the state that made it a no-op ('processing' = split already committed).
COMMIT_SPLIT = """
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[3], ARGV[2])
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'pending' then return state or 'missing' end
local n = #ARGV - 7
local job_id = redis.call('HGET', KEYS[1], 'id')
redis.call('HSET', KEYS[1], 'state', 'processing', 'split_done', '1', 'chunks_total', n, 'chunks_done', 0,
  'frames', ARGV[4], 'duration_s', ARGV[5], 'frame_s', ARGV[6], 'has_audio', ARGV[7], 'updated', ARGV[3])
for i = 1, n do
  redis.call('HSET', KEYS[2], i - 1, ARGV[7 + i])
  redis.call('XADD', KEYS[3], '*', 'job', job_id, 'kind', 'chunk', 'index', i - 1)
end
return 'ok'
"""

# A chunk is rendered: count it once; the chunk that completes the set enqueues the
# finalisation (so exactly one finalise task exists per job).
# KEYS: job, done-chunks set, stream.  ARGV: group, entry id, chunk index, now.
# Returns 'last', 'ok', 'duplicate' (counted before) or 'gone' (job no longer processing).
COMPLETE_CHUNK = """
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[3], ARGV[2])
if redis.call('HGET', KEYS[1], 'state') ~= 'processing' then return 'gone' end
if redis.call('SADD', KEYS[2], ARGV[3]) == 0 then return 'duplicate' end
local done = redis.call('HINCRBY', KEYS[1], 'chunks_done', 1)
redis.call('HSET', KEYS[1], 'updated', ARGV[4])
if done == tonumber(redis.call('HGET', KEYS[1], 'chunks_total')) then
  redis.call('XADD', KEYS[3], '*', 'job', redis.call('HGET', KEYS[1], 'id'), 'kind', 'finalise')
  return 'last'
end
return 'ok'
"""

# The job ends (completed or failed), only if it is still running; a failure also goes to
# the dead-letter stream; a job with a webhook gets its notify task.
# KEYS: job, stream, dead-letter stream.
# ARGV: group, entry id, new state, now, error, output path, task name, attempts, dead-letter cap.
# Returns 1 when this call ended the job, 0 when it had already ended (e.g. cancelled).
FINISH = """
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
local current = redis.call('HGET', KEYS[1], 'state')
if current ~= 'pending' and current ~= 'processing' then return 0 end
local job_id = redis.call('HGET', KEYS[1], 'id')
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'updated', ARGV[4], 'finished', ARGV[4])
if ARGV[3] == 'failed' then
  redis.call('HSET', KEYS[1], 'error', ARGV[5])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[9], '*', 'job', job_id, 'task', ARGV[7], 'error', ARGV[5],
    'attempts', ARGV[8], 'time', ARGV[4])
else
  redis.call('HSET', KEYS[1], 'output_path', ARGV[6])
end
local hook = redis.call('HGET', KEYS[1], 'webhook_url')
if hook and hook ~= '' then
  redis.call('XADD', KEYS[2], '*', 'job', job_id, 'kind', 'notify')
end
return 1
"""
