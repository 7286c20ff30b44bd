"""``swapcast bench …``: speed, quality and memory numbers, printed side by side."""

from __future__ import annotations

import argparse

from swapcast.commands.common import add_engine_flags, add_swap_flags


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("bench", help="benchmarks (engine, …)")
    benches = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    engine = benches.add_parser("engine", help="face engine: per-stage times, frames/s, batch throughput, jitter, identity")
    engine.add_argument("--frames", type=int, default=120, help="frames per resolution (default 120)")
    engine.add_argument("--report", metavar="DIR", help="write side-by-side swap pictures and report.json here")
    engine.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    engine.add_argument("--sessions", type=int, metavar="N",
                        help="instead: N concurrent 1280x720 sessions through the micro-batcher vs batching off, "
                             "then the 720p30 capacity ramp (1, 2, 4, ... sessions until p99 > 60 ms or frames drop)")
    engine.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="compute device (default auto); cuda fails when no CUDA device is present")
    engine.add_argument("--runner", choices=["auto", "onnxruntime", "torch", "tensorrt", "triton"],
                        help="the swap model's runner (default: engine.runner; triton: the server at engine.triton_url)")
    engine.add_argument("--seconds", type=float, default=6.0, help="with --sessions: seconds per measured run (default 6)")
    engine.add_argument("--max-sessions", type=int, default=64, metavar="N", help="with --sessions: cap of the capacity ramp (default 64)")
    engine.add_argument("--compare", choices=["mesh", "mesh3d", "inswapper"], metavar="SWAPPER",
                        help="also time this swapper on the same clips and print both side by side (e.g. --swapper mesh3d --compare mesh)")
    engine.add_argument("--processors", action="store_true",
                        help="cost per frame of each processor the --models folder holds (occluder, parser, enhancer, "
                             "content gate) instead")
    engine.add_argument("--trackers", type=lambda text: [n.strip() for n in text.split(",") if n.strip()], metavar="LIST",
                        help="compare tracker backends instead (mediapipe,graphs): tracking ms/frame at 1 and 4 sessions, landmark error")
    add_swap_flags(engine)
    add_engine_flags(engine)
    engine.set_defaults(run=_run_engine)
    webrtc = benches.add_parser("webrtc", help="live WebRTC sessions on loopback: fps out, latency, drops, CPU and memory per session")
    webrtc.add_argument("--sessions", type=_counts, default=[2], metavar="N[,N...]",
                        help="concurrent sessions (default 2; 1 session is always run first), or the counts to run one after the other: 1,2,4,8")
    webrtc.add_argument("--seconds", type=float, default=20.0, help="seconds measured per run (default 20)")
    webrtc.add_argument("--glass", action="store_true", help="also measure glass-to-glass latency through headless Chromium")
    webrtc.add_argument("--threads", choices=["budget", "legacy", "both"],
                        help="the node's thread profile (default: threads.profile); both = legacy, then budget, side by side")
    webrtc.add_argument("--processes", type=_counts, default=[1], metavar="N[,N...]",
                        help="node processes (default 1); N > 1 runs N nodes behind a gateway; 1,2 runs both, side by side")
    webrtc.add_argument("--gil", action="store_true", help="also sample how much of the time each node holds the GIL (needs py-spy)")
    webrtc.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    add_engine_flags(webrtc)
    webrtc.set_defaults(run=_run_webrtc)
    rtmp = benches.add_parser("rtmp", help="RTMP publishers -> swap -> players: fps, added latency, CPU per stream")
    rtmp.add_argument("--publishers", type=int, default=1, help="concurrent publishers (default 1); 1 is always run too")
    rtmp.add_argument("--seconds", type=float, default=15.0, help="seconds per run (default 15)")
    rtmp.add_argument("--on-air", choices=["swapcast", "ffmpeg", "gstreamer", "none"], default="swapcast",
                      help="then publish a clip (B-frames, AAC) to a key with a push destination: first-frame delay and "
                           "frames delivered there; the publisher (default swapcast's own client; none: skip)")
    rtmp.add_argument("--on-air-seconds", type=float, default=10.0, help="length of that clip (default 10)")
    rtmp.add_argument("--destination-delay-ms", type=float, default=300.0, metavar="MS",
                      help="the push destination accepts the publish this much later, as a platform a few round trips "
                           "away does (default 300)")
    rtmp.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    rtmp.set_defaults(run=_run_rtmp)
    cluster = benches.add_parser("cluster", help="registry placement latency (200 at once) and failover time after SIGKILL")
    cluster.add_argument("--rounds", type=int, default=3, help="failover rounds (default 3)")
    cluster.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    cluster.set_defaults(run=_run_cluster)
    keys = benches.add_parser("keys", help="a bogus-key WHIP and RTMP publish against stores of 10 to 100,000 keys: "
                                           "refusal latency, flood throughput, /healthz meanwhile")
    keys.add_argument("--counts", type=_counts, default=None, metavar="N,N", help="store sizes (default 10,1000,10000,100000)")
    keys.add_argument("--requests", type=int, default=200, help="bogus publishes per protocol and size (default 200)")
    keys.add_argument("--flood-s", type=float, default=3.0, help="seconds of the 4-client bogus-WHIP flood (default 3)")
    keys.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    add_engine_flags(keys)
    keys.set_defaults(run=_run_keys)
    offline = benches.add_parser("offline", help="swapcast swap on generated 640x480 and 720p one-face clips as a user runs it: "
                                                 "frames/s, marginal ms per frame, cores; old vs new with --baseline")
    offline.add_argument("--frames", type=int, default=300, help="frames of the long clip (default 300; a 30-frame clip is the short one)")
    offline.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the median is shown (default 2)")
    offline.add_argument("--baseline", metavar="DIR", help="a checkout of other code (git worktree add DIR COMMIT) to run "
                                                           "side by side, interleaved, with the output frames compared")
    offline.add_argument("--sizes", type=lambda text: [n.strip() for n in text.split(",") if n.strip()], metavar="LIST",
                         help="which sizes (default 640x480,1280x720)")
    offline.add_argument("--swapper", choices=["auto", "mesh", "mesh3d"], help="swap model (default: auto)")
    offline.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    offline.set_defaults(run=_run_offline)
    jobs = benches.add_parser("jobs", help="offline jobs on a local redis + 1 and 2 workers: frames/s, end-to-end time vs clip")
    jobs.add_argument("--seconds", type=float, default=60.0, help="length of the generated 720p clip (default 60)")
    jobs.add_argument("--cores-per-worker", type=int, metavar="N",
                      help="pin each worker to N cores of its own, as on separate N-core machines (default: all share)")
    jobs.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    add_engine_flags(jobs)
    jobs.set_defaults(run=_run_jobs)
    provenance = benches.add_parser("provenance", help="watermark cost: embed ms per 640x480 / 1280x720 frame, verify "
                                                       "time, and a live session's fps and latency with it off vs on")
    provenance.add_argument("--seconds", type=float, default=10.0, help="live run length, each of off and on (default 10)")
    provenance.add_argument("--no-live", dest="live", action="store_false", help="only the embed and verify numbers")
    provenance.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    add_engine_flags(provenance)
    provenance.set_defaults(run=_run_provenance)
    detect = benches.add_parser("detect", help="face detection recall and cost: old single BlazeFace pass vs the tile sweep "
                                               "(+HOG, mesh-verified), on composite group photos, tilted and turned faces, live")
    detect.add_argument("--groups", type=int, default=8, help="composite group photos (1280x886, 6-8 faces each; default 8)")
    detect.add_argument("--frames", type=int, default=48, help="frames of the live 640x480 clip (default 48)")
    detect.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    detect.add_argument("--no-progress", dest="progress", action="store_false", help="no progress (neither the bar nor the periodic lines)")
    detect.set_defaults(run=_run_detect)
    fuzz = benches.add_parser("fuzz", help="mutation fuzzing of a live node (HTTP API, SDP, uploads, RTMP): "
                                           "no 5xx, no hang, no traceback, threads and RSS bounded")
    fuzz.add_argument("--inputs", type=int, default=100_000, help="inputs to send (default 100000)")
    fuzz.add_argument("--seconds", type=float, default=600.0, help="stop after this long even if short of --inputs (default 600)")
    fuzz.add_argument("--seed", type=int, default=1, help="random seed: the same seed sends the same cases (default 1)")
    fuzz.add_argument("--report", metavar="DIR", help="write figures.json, the node log and one file per finding here")
    fuzz.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    fuzz.set_defaults(run=_run_fuzz)
    quality = benches.add_parser("quality", help="swap quality on the pose set (turned, tilted, small, relit, moving faces): "
                                                 "identity, recall, dlib, flicker, swappers side by side; and map faces "
                                                 "(two and three people, each their own source)")
    quality.add_argument("--report", metavar="DIR", help="write side-by-side pictures (target | swappers | source) and quality.json here")
    quality.add_argument("--swappers", default=None, metavar="A,B",
                         help="swappers to compare, comma-separated (default mesh,mesh3d; --realism: mesh3d; one not available is left out)")
    quality.add_argument("--quick", action="store_true", help="a few faces of each kind and one short clip: a smoke run")
    quality.add_argument("--only", default=None, metavar="A,B",
                         help="only these parts: still kinds yaw, roll, scale, light, clip motions pan, zoom, wobble, "
                              "yaw_sweep, and mapping (people clips, each person their own source) (default all)")
    quality.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    quality.add_argument("--no-progress", dest="progress", action="store_false", help="no progress (neither the bar nor the periodic lines)")
    quality.add_argument("--realism", action="store_true",
                         help="the realism part instead: degraded sources onto relit, turned, grouped and moving targets; "
                              "identity, tone, edge step, shading kept, detail kept, the target showing through, the mouth; "
                              "contact sheets and, per case, the face at full resolution (--swappers default mesh3d)")
    quality.add_argument("--half", choices=("tune", "held"), default="held",
                         help="realism: which half of the set (tune: the variants tuned on; held: the others; default held)")
    quality.add_argument("--baseline", metavar="DIR",
                         help="realism: also swap with the code of this checkout (old columns beside new, one run)")
    add_swap_flags(quality)
    quality.set_defaults(run=_run_quality)
    occlusion = benches.add_parser("occlusion", help="objects in front of moving faces (cup, microphone, gift, glasses): "
                                                     "occluder pixels kept, identity, edge flicker, ms; occlusion on vs off")
    occlusion.add_argument("--frames", type=int, default=24, help="frames per clip (default 24)")
    occlusion.add_argument("--quick", action="store_true", help="one face, the pan, two objects: a smoke run")
    occlusion.add_argument("--report", metavar="DIR", help="write pictures (input | on | off) and occlusion.json here")
    occlusion.add_argument("--json", action="store_true", help="print the summary as JSON at the end")
    occlusion.add_argument("--mode", choices=["auto", "objects"], default="auto",
                           help="the occlusion mode measured against off (objects: not the glasses a face wears; default auto)")
    occlusion.add_argument("--arrivals", choices=["tuning", "held-out", "all"],
                           help="the arrivals set instead: things coming in front of a turning, zooming head and staying "
                                "(cups, a phone, a face mask, hands of several skin tones); tuning or held-out half")
    add_engine_flags(occlusion)
    occlusion.set_defaults(run=_run_occlusion)


def _counts(text: str) -> list[int]:
    """``4`` or ``1,2,4,8`` (a 0 reaches the benchmark, which refuses it with its reason)."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count or counts like 1,2,4 (got {text!r})") from None
    if not counts or min(counts) < 0:
        raise argparse.ArgumentTypeError(f"counts cannot be negative (got {text!r})")
    return counts


def _run_engine(args: argparse.Namespace) -> int:
    from gpu import threads
    from swapcast.benchmarks.engine import run_engine_benchmark
    from swapcast.commands.common import config_from_args

    config = config_from_args(args)
    threads.apply(config.threads.budget(config.engine.runner_threads))  # the node's pools, as `serve` sizes them
    return run_engine_benchmark(
        config, frames=args.frames, report_dir=args.report, as_json=args.json,
        sessions=args.sessions, device=args.device, seconds=args.seconds, max_sessions=args.max_sessions,
        compare=args.compare, trackers=args.trackers, processors=args.processors, runner=args.runner,
    )


def _run_occlusion(args: argparse.Namespace) -> int:
    from gpu import threads
    from swapcast.benchmarks.occlusion import run_occlusion_command
    from swapcast.commands.common import config_from_args

    config = config_from_args(args)
    threads.apply(config.threads.budget(config.engine.runner_threads))
    return run_occlusion_command(config, frames=args.frames, quick=args.quick, report=args.report, as_json=args.json,
                                 mode=args.mode, arrivals=args.arrivals)


def _run_provenance(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.provenance import run_provenance_benchmark
    from swapcast.commands.common import config_from_args

    if not args.seconds > 0:
        from gpu.errors import SwapcastError

        raise SwapcastError("--seconds must be more than 0")
    return run_provenance_benchmark(config_from_args(args), args.seconds, live=args.live, as_json=args.json)


def _run_cluster(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.cluster import run_cluster_benchmark

    return run_cluster_benchmark(rounds=args.rounds, as_json=args.json)


def _run_keys(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.keys import run_keys_benchmark
    from swapcast.commands.common import config_from_args

    return run_keys_benchmark(config_from_args(args), counts=args.counts, requests=args.requests,
                              flood_s=args.flood_s, as_json=args.json)


def _run_offline(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.offline import run_offline_benchmark

    return run_offline_benchmark(frames=args.frames, rounds=args.rounds, baseline=args.baseline, sizes=args.sizes,
                                 swapper=args.swapper, as_json=args.json)


def _run_jobs(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.jobs import run_jobs_benchmark
    from swapcast.commands.common import config_from_args

    return run_jobs_benchmark(config_from_args(args), seconds=args.seconds, as_json=args.json,
                              cores_per_worker=args.cores_per_worker)


def _run_quality(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.quality import run_quality_benchmark
    from swapcast.commands.common import config_from_args

    default = "mesh3d" if args.realism else "mesh,mesh3d"
    swappers = tuple(name.strip() for name in (args.swappers or default).split(",") if name.strip())
    if args.realism:
        from swapcast.benchmarks.realism import run_realism_benchmark

        return run_realism_benchmark(config_from_args(args), args.report, half=args.half, swappers=swappers,
                                     baseline=args.baseline, as_json=args.json, quick=args.quick)
    return run_quality_benchmark(config_from_args(args), args.report, swappers=swappers, quick=args.quick,
                                 as_json=args.json, progress=args.progress,
                                 only=tuple(part.strip() for part in (args.only or "").split(",") if part.strip()))


def _run_fuzz(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.fuzz import run_fuzz_benchmark

    return run_fuzz_benchmark(args.inputs, args.seconds, args.seed, args.report, args.json)


def _run_rtmp(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.rtmp import run_rtmp_benchmark

    return run_rtmp_benchmark(args.publishers, args.seconds, args.json, on_air=args.on_air, on_air_seconds=args.on_air_seconds,
                              destination_delay_ms=args.destination_delay_ms)


def _run_webrtc(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.webrtc import run_webrtc_benchmark
    from swapcast.commands.common import config_from_args

    sessions = args.sessions[0] if len(args.sessions) == 1 else args.sessions
    return run_webrtc_benchmark(config_from_args(args), sessions, args.seconds, glass=args.glass,
                                threads=args.threads, processes=args.processes, gil=args.gil, as_json=args.json)


def _run_detect(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.detection import run_detection_benchmark
    from swapcast.commands.common import config_from_args

    return run_detection_benchmark(config_from_args(args), groups=args.groups, live_frames=args.frames,
                                   as_json=args.json, progress=args.progress)
