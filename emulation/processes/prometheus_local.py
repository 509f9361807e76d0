"""A local Prometheus (the Debian package) scraping a running controller, with
Railyard's alert rules: `railyard observe`, and the dashboards' tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from emulation.processes import end

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def tls_config(pki: Path, server_name: str) -> dict:
    """The scrape's tls_config with the files of a `railyard certs init` directory."""
    return {
        "ca_file": str(pki / "ca.crt"),
        "cert_file": str(pki / "prometheus.crt"),
        "key_file": str(pki / "prometheus.key"),
        "server_name": server_name,
    }


class LocalPrometheus:
    def __init__(
        self,
        targets: list[str],
        port: int,
        scrape_interval_s: float = 1.0,
        workdir: Path | None = None,
        pki: Path | None = None,
    ) -> None:
        self.targets = targets
        # With `pki` (from `railyard certs init`): scrape over HTTPS with its
        # CA and prometheus certificate (deploy/prometheus/prometheus-tls.yml).
        self.pki = pki
        self.port = port
        self.scrape_interval_s = scrape_interval_s
        self._own_workdir = workdir is None  # made here, so removed by stop()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="railyard-prometheus-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalPrometheus:
        config = yaml.safe_load((DEPLOY / ("prometheus.yml" if self.pki is None else "prometheus-tls.yml")).read_text())
        if self.pki is not None:
            config["scrape_configs"][0]["tls_config"] = tls_config(self.pki, server_name="localhost")
        interval = f"{self.scrape_interval_s:g}s"
        config["global"].update(scrape_interval=interval, evaluation_interval=interval)
        config["scrape_configs"][0]["static_configs"] = [{"targets": self.targets}]
        shutil.copy(DEPLOY / "alerts.yml", self.workdir / "alerts.yml")
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        with open(self.workdir / "prometheus.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={self.workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1d",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited; see {self.workdir / 'prometheus.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        raise TimeoutError("prometheus did not become ready")

    def query(self, expr: str) -> dict:
        """The instant-query API's JSON answer (status, data.result, or error)."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())

    def stop(self) -> None:
        end(self.proc)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
