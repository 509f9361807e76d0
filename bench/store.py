"""PlaceJob over gRPC on the etcd intent store against SQLite, in one run.

The same seeded request stream as bench-placement (8 to 1024 GPUs on the
16,384-GPU spec, releases once full) goes to the real daemon twice: on its
SQLite store, then as the elected replica on a three-member etcd cluster
on loopback (Debian's etcd-server). Each mutation is one etcd transaction,
guarded by the revision and the leadership fence.

    make bench-store  ->  bench/results/store.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

from bench import write_result
from bench.placement import SPEC, requests, run_api
from emulation.processes.etcd_local import LocalEtcd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default=str(SPEC), help="fabric spec (default: large.yaml, 16,384 GPUs)")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench/results/store.json")
    args = parser.parse_args()
    spec = Path(args.spec)
    stream = requests(args.requests, args.seed)
    result: dict = {
        "benchmark": "store",
        "host": platform.node(),
        "load_average_at_start": os.getloadavg(),
        "spec": spec.name,
        "requests": args.requests,
        "seed": args.seed,
    }
    with tempfile.TemporaryDirectory(prefix="railyard-bench-") as tmp:
        result["sqlite"] = run_api(spec, stream, args.seed, Path(tmp, "sqlite"))
        with LocalEtcd(members=3, workdir=Path(tmp, "etcd")) as etcd:
            result["etcd"] = run_api(spec, stream, args.seed, Path(tmp, "etcd-replica"), store=etcd.store_url("bench"))
    for store in ("sqlite", "etcd"):
        print(store, json.dumps(result[store]["place_job_rpc"]), flush=True)
    sqlite, etcd = result["sqlite"]["place_job_rpc"], result["etcd"]["place_job_rpc"]
    result["etcd_over_sqlite"] = {q: etcd[q] / sqlite[q] for q in ("p50_ms", "p99_ms") if sqlite[q]}
    result["load_average_at_end"] = os.getloadavg()
    print("etcd / sqlite:", json.dumps(result["etcd_over_sqlite"]))
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
