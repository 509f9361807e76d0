"""`railyard observe`: a local Prometheus, with Railyard's alert rules, scraping a controller."""

from __future__ import annotations

import argparse
import shutil
import signal
import threading

from controller.cli.output import CliError, writable_dir


def observe(args) -> int:
    from emulation.processes.prometheus_local import DEPLOY, LocalPrometheus

    if not (DEPLOY / "alerts.yml").is_file():
        raise CliError(
            "observe",
            f"needs Railyard's scrape config and alert rules, which are not at {DEPLOY} (an installed wheel "
            "does not carry deploy/)",
            "run it from a clone of the repository, or point your own Prometheus at the controller with "
            "deploy/prometheus/alerts.yml (docs/metrics.md)",
        )
    if shutil.which("prometheus") is None:
        raise CliError("observe", "needs the prometheus binary on PATH", "apt-get install prometheus")
    data = writable_dir(args.data, "data")
    data.mkdir(parents=True, exist_ok=True)
    prometheus = LocalPrometheus([args.metrics], args.port, scrape_interval_s=5.0, workdir=data).start()
    print(f"Prometheus at {prometheus.url} scraping {args.metrics} (alerts: {prometheus.url}/alerts); Ctrl-C stops it")
    assert prometheus.proc is not None  # start() returned: the process is running
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0) and prometheus.proc.poll() is None:
            pass
    except KeyboardInterrupt:
        pass
    finally:
        prometheus.stop()
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`railyard observe`."""
    prometheus = sub.add_parser(
        "observe",
        help="run a local Prometheus (with Railyard's alert rules) scraping a controller; from a source checkout",
    )
    prometheus.add_argument("--metrics", default="127.0.0.1:8653", help="the controller's metrics HOST:PORT")
    prometheus.add_argument("--port", type=int, default=9090, help="Prometheus listen port on 127.0.0.1")
    prometheus.add_argument("--data", default=".state/prometheus", help="Prometheus data directory")
    prometheus.set_defaults(func=observe)
