"""Runs the layers against one live node until the input count or the time is reached,
watching the node all along, and sums it up in figures (inputs per layer, statuses, 5xx,
hangs, log problems, threads and RSS start -> peak -> end) with a reproducer per finding."""

from __future__ import annotations

import asyncio
import collections
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from swapcast.benchmarks.fuzz.api import ApiLayer
from swapcast.benchmarks.fuzz.events import EventsLayer
from swapcast.benchmarks.fuzz.fixtures import Fixtures, refresh, set_up
from swapcast.benchmarks.fuzz.http_hold import HttpHoldLayer
from swapcast.benchmarks.fuzz.node import FuzzNode, build_request, send_raw
from swapcast.benchmarks.fuzz.outcome import Outcome
from swapcast.benchmarks.fuzz.oversize import BUSY_RSS_BOUND_MB, RtmpOversizeLayer
from swapcast.benchmarks.fuzz.rtmp import RECORDINGS, RtmpLayers, record
from swapcast.benchmarks.fuzz.sdp import SdpLayer, make_offers
from swapcast.benchmarks.fuzz.uploads import UploadLayer, verify_clips
from swapcast.benchmarks.fuzz.video_bombs import encode_clip

HTTP_WEIGHTS = {"http": 92, "upload": 4, "sdp": 2, "hold": 1, "events": 1}  # of the HTTP workers' cases (uploads and offers cost the node most; a hold lasts the header timeout)
RTMP_WEIGHTS = {"handshake": 20, "chunk": 25, "amf": 30, "play": 20, "flv": 2, "hold": 1, "oversize": 1}  # a publish costs the node a swap per frame  # of the RTMP workers' cases
HTTP_WORKERS, RTMP_WORKERS = 12, 10
THREAD_SLACK = 16  # threads the node may hold at the end above its start (pools grown on demand)
RSS_SLACK_MB = 600.0  # RSS growth allowed at the end (face caches, allocator high-water marks)
RECENT_S = 3.0  # cases sent this recently are the suspects of a new log problem


@dataclass
class FuzzFigures:
    inputs: int = 0
    by_layer: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, dict[str, int]] = field(default_factory=dict)  # layer -> status -> count
    problems: int = 0  # inputs that got a 5xx, hung, or broke a connection they should not have
    five_xx: int = 0
    hangs: int = 0
    log_problems: dict[str, int] = field(default_factory=dict)  # last line of each traceback -> count
    health_failures: int = 0
    node_alive: bool = True
    sessions_left: list[str] = field(default_factory=list)  # live sessions of any protocol after the run
    fixture_refreshes: int = 0  # times alice's face fell out of the face store and was made again
    threads: dict[str, int] = field(default_factory=dict)  # start, peak, end
    rss_mb: dict[str, float] = field(default_factory=dict)
    thread_names_end: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU used during the run: node, fuzzer
    findings: list[dict] = field(default_factory=list)  # {layer, label, problem, reproducer}
    details: dict[str, str] = field(default_factory=dict)  # "layer label" -> the latest such case's detail

    @property
    def failures(self) -> list[str]:
        """What fails the run: every check in words."""
        out = []
        if self.five_xx:
            out.append(f"{self.five_xx} 5xx answers")
        if self.hangs:
            out.append(f"{self.hangs} hangs")
        if others := self.problems - self.five_xx - self.hangs:
            out.append(f"{others} other problem(s): a connection held, an oversized message taken, ... (the findings)")
        if self.log_problems:
            out.append(f"{sum(self.log_problems.values())} tracebacks/errors in the node log")
        if self.health_failures:
            out.append(f"/healthz failed {self.health_failures} time(s)")
        if not self.node_alive:
            out.append("the node died")
        if self.sessions_left:
            out.append(f"{len(self.sessions_left)} session(s) still live after the run: {self.sessions_left[:5]}")
        if self.threads and self.threads["end"] > self.threads["start"] + THREAD_SLACK:
            out.append(f"threads {self.threads['start']} -> {self.threads['end']} (more than +{THREAD_SLACK})")
        if self.rss_mb and self.rss_mb["end"] > self.rss_mb["start"] + RSS_SLACK_MB:
            out.append(f"RSS {self.rss_mb['start']:.0f} -> {self.rss_mb['end']:.0f} MB (more than +{RSS_SLACK_MB:.0f})")
        return out

    def line(self) -> str:
        layers = ", ".join(f"{name} {count:,}" for name, count in sorted(self.by_layer.items()))
        return (f"fuzz: {self.inputs:,} inputs in {self.seconds:.0f} s ({layers}); 5xx {self.five_xx}, hangs {self.hangs}, "
                f"log problems {sum(self.log_problems.values())}, health failures {self.health_failures}, "
                f"node {'alive' if self.node_alive else 'DEAD'}; threads {self.threads.get('start')} -> "
                f"{self.threads.get('peak')} -> {self.threads.get('end')}, RSS {self.rss_mb.get('start', 0):.0f} -> "
                f"{self.rss_mb.get('peak', 0):.0f} -> {self.rss_mb.get('end', 0):.0f} MB; CPU node "
                f"{self.cpu_s.get('node', 0):.0f} s, fuzzer {self.cpu_s.get('fuzzer', 0):.0f} s")


class _Run:
    def __init__(self, node: FuzzNode, fixtures: Fixtures, layers: dict, target: int, deadline: float,
                 report_dir: Path | None, progress: bool) -> None:
        self.node, self.fixtures, self.layers = node, fixtures, layers
        self.target, self.deadline = target, deadline
        self.report_dir = report_dir
        self.progress = progress
        self.figures = FuzzFigures()
        self.recent: collections.deque[tuple[float, Outcome, bytes]] = collections.deque()
        self._finding_keys: collections.Counter = collections.Counter()
        self.started = time.monotonic()

    @property
    def done(self) -> bool:
        return self.figures.inputs >= self.target or time.monotonic() >= self.deadline or not self.node.alive()

    def record(self, outcome: Outcome, sent: bytes = b"") -> None:
        f = self.figures
        f.inputs += outcome.inputs
        f.by_layer[outcome.layer] = f.by_layer.get(outcome.layer, 0) + outcome.inputs
        counts = f.statuses.setdefault(outcome.layer, {})
        counts[str(outcome.status)] = counts.get(str(outcome.status), 0) + 1
        now = time.monotonic()
        if outcome.detail:
            f.details[f"{outcome.layer} {outcome.label}"] = outcome.detail
        self.recent.append((now, outcome, sent or outcome.reproducer))
        while self.recent and self.recent[0][0] < now - RECENT_S:
            self.recent.popleft()
        if outcome.problem is not None:
            f.problems += 1
            if outcome.status == "hung":
                f.hangs += 1
            elif isinstance(outcome.status, int) and outcome.status >= 500:
                f.five_xx += 1
            self.finding(outcome.layer, outcome.label, outcome.problem, outcome.reproducer)

    def finding(self, layer: str, label: str, problem: str, reproducer: bytes) -> None:
        key = (layer, label, problem[:60])
        self._finding_keys[key] += 1
        if self._finding_keys[key] > 3:  # three reproducers of one kind are enough
            return
        entry = {"layer": layer, "label": label, "problem": problem}
        if self.report_dir is not None and reproducer:
            path = self.report_dir / "findings" / f"{len(self.figures.findings):04d}-{layer}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(reproducer)
            entry["reproducer"] = str(path)
        self.figures.findings.append(entry)

    async def http_worker(self, seed: int) -> None:
        rng = random.Random(seed)
        names, weights = zip(*HTTP_WEIGHTS.items())
        while not self.done:
            layer = self.layers[rng.choices(names, weights)[0]]
            self.record(await layer.once(rng))

    async def rtmp_worker(self, seed: int) -> None:
        rng = random.Random(seed)
        names, weights = zip(*RTMP_WEIGHTS.items())
        while not self.done:
            kind = rng.choices(names, weights)[0]
            if kind == "oversize":
                self.record(await self.layers["oversize"].once(rng))
            else:
                self.record(await self.layers["rtmp"].once(rng, kind))

    async def monitor(self) -> None:
        """Every 2 s: health, threads, RSS, new log problems (blamed on the cases sent just
        before), a progress line; every 10 s, housekeeping (undo a fuzzed drain, end sessions)."""
        f = self.figures
        last_housekeeping = time.monotonic()
        while not self.done:
            await asyncio.sleep(2)
            if not self.node.alive():
                break
            self.sample("peak")
            health = await send_raw(self.node.http_port, build_request(b"GET", b"/healthz", [], b""), timeout=10)
            if health.status != 200:
                f.health_failures += 1
                self.finding("health", "/healthz", f"/healthz answered {health.status or health.error}", b"")
            self.check_log()
            if time.monotonic() - last_housekeeping > 10:
                last_housekeeping = time.monotonic()
                await self.housekeeping()
            if self.progress:
                rate = f.inputs / max(time.monotonic() - self.started, 1e-6)
                print(f"  {f.inputs:,} inputs ({rate:.0f}/s), 5xx {f.five_xx}, hangs {f.hangs}, log problems "
                      f"{sum(f.log_problems.values())}, threads {self.node.threads()}, RSS {self.node.rss_mb():.0f} MB",
                      file=sys.stderr, flush=True)

    def check_log(self) -> None:
        for problem in self.node.new_log_problems():
            last = problem.strip().splitlines()[-1][:200] if problem.strip() else "?"
            summary = next((line for line in problem.splitlines()[1:] if line and not line.startswith(" ")), last)
            self.figures.log_problems[summary[:200]] = self.figures.log_problems.get(summary[:200], 0) + 1
            suspects = b"\n\n".join(f"--- {o.layer} {o.label} ({o.status})\n".encode() + sent
                                    for _, o, sent in list(self.recent)[-20:] if sent)
            self.finding("log", "node log", problem[:2000], suspects)

    def sample(self, which: str) -> None:
        threads, rss = self.node.threads(), self.node.rss_mb()
        f = self.figures
        if which == "peak":
            f.threads["peak"] = max(f.threads.get("peak", 0), threads)
            f.rss_mb["peak"] = max(f.rss_mb.get("peak", 0.0), rss)
        else:
            f.threads[which], f.rss_mb[which] = threads, rss
            f.threads["peak"] = max(f.threads.get("peak", 0), threads)
            f.rss_mb["peak"] = max(f.rss_mb.get("peak", 0.0), rss)

    async def housekeeping(self) -> None:
        admin = [(b"Authorization", b"Bearer " + self.fixtures.admin.encode())]
        await send_raw(self.node.http_port, build_request(b"POST", b"/api/v1/nodes/self/ready", admin, b""))
        try:
            if await refresh(self.node, self.fixtures):
                self.figures.fixture_refreshes += 1
        except RuntimeError as exc:  # a face upload slower than the read timeout on a loaded machine: next time
            print(f"  fixture refresh failed, tried again in 10 s: {exc}", file=sys.stderr, flush=True)
        for session_id in list(self.fixtures.pools.get("session", []))[1:]:  # the first: the fixture
            await send_raw(self.node.http_port, build_request(b"DELETE", f"/api/v1/sessions/{session_id}".encode(), admin, b""))

    async def live_sessions(self) -> list[str]:
        """Ids of the sessions the node still lists (an admin sees all) that have media: a
        placed session without any is a record, not a leak."""
        admin = [(b"Authorization", b"Bearer " + self.fixtures.admin.encode())]
        answer = await send_raw(self.node.http_port, build_request(b"GET", b"/api/v1/sessions", admin, b""))
        try:
            sessions = json.loads(answer.body)
        except ValueError:
            return [f"unreadable session list ({answer.status})"]
        return [f"{s.get('protocol')}:{s.get('id')}" for s in sessions if s.get("state") != "placed"]

    async def settle(self, timeout: float = 50.0) -> None:
        """After the run: end what is left, then wait until no swap thread is left (an RTMP
        stream outlives its publisher for a 30 s resume window) and the thread count holds."""
        await self.housekeeping()
        deadline = time.monotonic() + timeout
        previous = None
        while time.monotonic() < deadline:
            names = self.node.thread_names()
            threads = sum(names.values())
            if threads == previous and not any(name.startswith("swap-") for name in names):
                break
            previous = threads
            await asyncio.sleep(3)


def _job_video(workdir: Path) -> bytes:
    """A 1 s 64x64 H.264 MP4 for job uploads (its own folder: the verifier's clips are made beside)."""
    folder = workdir / "job-upload"
    folder.mkdir(exist_ok=True)
    return encode_clip("h264", folder, seconds=1.0).read_bytes()


async def _fuzz(node: FuzzNode, workdir: Path, inputs: int, seconds: float, seed: int, report_dir: Path | None,
                progress: bool) -> FuzzFigures:
    fixtures = await set_up(node)
    recordings = [r for r in [await record(name) for name in RECORDINGS] if r is not None]
    if not recordings:
        raise RuntimeError("the RTMP layers need ffmpeg to record a publish (apt-get install ffmpeg)")
    offers = await make_offers()
    camera = next((r for r in recordings if r.name == "camera"), None)
    if camera is None:
        raise RuntimeError("the RTMP oversize layer needs ffmpeg's camera recording (testsrc at 320x240)")
    layers = {"http": ApiLayer(node, fixtures, offers["browser"]), "sdp": SdpLayer(node, fixtures, offers),
              "upload": UploadLayer(node, fixtures, _job_video(workdir), verify_clips(workdir)), "rtmp": RtmpLayers(node, fixtures, recordings),
              "oversize": RtmpOversizeLayer(node, fixtures, camera, BUSY_RSS_BOUND_MB), "hold": HttpHoldLayer(node),
              "events": EventsLayer(node)}
    run = _Run(node, fixtures, layers, inputs, time.monotonic() + seconds, report_dir, progress)
    node.new_log_problems()  # set-up is not under test
    run.sample("start")
    cpu_node, cpu_fuzzer = node.cpu_s(), time.process_time()
    rng = random.Random(seed)
    workers = [run.http_worker(rng.randrange(2**32)) for _ in range(HTTP_WORKERS)]
    workers += [run.rtmp_worker(rng.randrange(2**32)) for _ in range(RTMP_WORKERS)]
    await asyncio.gather(run.monitor(), *workers)
    run.figures.seconds = time.monotonic() - run.started
    run.figures.node_alive = node.alive()
    if run.figures.node_alive:
        run.figures.cpu_s = {"node": node.cpu_s() - cpu_node, "fuzzer": time.process_time() - cpu_fuzzer}
    if run.figures.node_alive:
        await run.settle()
        run.sample("end")
        run.figures.thread_names_end = node.thread_names()
        run.figures.sessions_left = await run.live_sessions()
        health = await send_raw(node.http_port, build_request(b"GET", b"/healthz", [], b""), timeout=10)
        if health.status != 200:
            run.figures.health_failures += 1
        run.check_log()
    return run.figures


def run_fuzz(inputs: int = 2000, seconds: float = 600.0, seed: int = 1, report_dir: Path | None = None,
             progress: bool = False) -> FuzzFigures:
    """One fuzz run against a fresh node; the figures (``.failures`` lists what went wrong)."""
    workdir = Path(tempfile.mkdtemp(prefix="swapcast-fuzz-"))
    node = FuzzNode(workdir)
    try:
        node.start()
        return asyncio.run(_fuzz(node, workdir, inputs, seconds, seed, report_dir, progress))
    finally:
        node.stop()
        if report_dir is not None:
            report_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy(node.log_path, report_dir / "node.log")
        shutil.rmtree(workdir, ignore_errors=True)


def run_fuzz_benchmark(inputs: int, seconds: float, seed: int, report: str | None, as_json: bool) -> int:
    report_dir = Path(report) if report else None
    print(f"fuzz: a live node, {inputs:,} inputs or {seconds:g} s, seed {seed}", file=sys.stderr)
    figures = run_fuzz(inputs, seconds, seed, report_dir, progress=True)
    print(figures.line())
    for failure in figures.failures:
        print(f"  FAIL: {failure}")
    for finding in figures.findings[:20]:
        print(f"  finding [{finding['layer']}] {finding['label']}: {finding['problem'][:300]}"
              + (f" (reproducer: {finding['reproducer']})" if "reproducer" in finding else ""))
    for case, detail in sorted(figures.details.items()):
        print(f"  {case}: {detail}")
    if report_dir is not None:
        (report_dir / "figures.json").write_text(json.dumps(asdict(figures), indent=2, default=str))
    if as_json:
        print(json.dumps(asdict(figures), default=str))
    return 1 if figures.failures else 0
