"""Helpers for tests that start ``dask scheduler`` and ``dask worker`` processes from the command line
on 127.0.0.1 (over plain TCP or over TLS with a CA made here)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from distributed import Client

DASK = [sys.executable, "-m", "dask"]


def scheduler_address(info: Path, timeout: float = 60) -> str:
    """The address in a ``--scheduler-file``, once the scheduler has written all of it.

    The scheduler creates the file before it writes its JSON, so a reader that only waits for the
    file to exist can read an empty or partial document: wait until it parses and names an address."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            return json.loads(info.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.1)
    raise AssertionError(f"the scheduler wrote no address to {info} within {timeout:.0f} s")


class Cluster:
    """A ``dask scheduler`` and ``dask worker`` processes on 127.0.0.1, each in its own folder;
    ``tls``: the TLS arguments (``--tls-ca-file``, ``--tls-cert``, ``--tls-key``) of the scheduler
    and the workers, the scheduler then listening on tls:// only."""

    def __init__(self, root: Path, tls: tuple[str, ...] = ()) -> None:
        self.root, self.tls, self.procs, self.address = root, tls, {}, ""

    def start_scheduler(self) -> None:
        info = self.root / "scheduler.json"
        host = "tls://127.0.0.1" if self.tls else "127.0.0.1"
        self._spawn("scheduler", [*DASK, "scheduler", "--host", host, "--port", "0", "--no-dashboard",
                                  "--scheduler-file", str(info), *self.tls])
        self.address = scheduler_address(info)

    def start_worker(self, name: str, *extra: str) -> None:
        """A worker (with its nanny) whose working and temporary directories are its own."""
        self._spawn(name, [*DASK, "worker", self.address, "--name", name, "--nthreads", "1", "--no-dashboard",
                           "--local-directory", str(self.root / name / "local"), *self.tls, *extra])

    def _spawn(self, name: str, command: list[str]) -> None:
        home = self.root / name
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TMPDIR": str(home / "tmp"), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
        with open(home / "log", "w") as log:
            self.procs[name] = subprocess.Popen(command, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)  # the process, its nanny and anything they started
        proc.wait(timeout=30)

    def client(self, security: Any = None) -> Client:
        return Client(self.address, timeout=30, security=security)

    def wait_for(self, names: set[str], security: Any = None) -> dict[str, str]:
        """Wait until exactly the workers ``names`` are connected; their addresses by name."""
        with self.client(security) as client:
            deadline = time.time() + 90
            while time.time() < deadline:
                workers = client.scheduler_info(n_workers=-1)["workers"]
                if {w["name"] for w in workers.values()} == names:
                    return {w["name"]: address for address, w in workers.items()}
                time.sleep(0.2)
        raise AssertionError(f"workers {names} did not connect")


@contextmanager
def dask_cluster(root: Path, tls: tuple[str, ...] = ()) -> Iterator[Cluster]:
    """A started scheduler (``Cluster``), every process of it SIGKILLed at the end."""
    cluster = Cluster(root, tls)
    try:
        cluster.start_scheduler()
        yield cluster
    finally:
        for name in list(cluster.procs)[::-1]:
            cluster.stop(name)


def tls_files(folder: Path) -> dict[str, Path]:
    """A self-signed CA and, signed by it, a certificate and key for 127.0.0.1 / localhost (for the
    scheduler and the workers) and another for the client, as PEM files in ``folder``: keys
    ``ca``, ``cert``, ``key``, ``client_cert``, ``client_key``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now, hour = datetime.datetime.now(datetime.UTC), datetime.timedelta(hours=1)

    def issue(name: str, key: Any, issuer: x509.Name, signer: Any, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - hour).not_valid_after(now + 24 * hour)
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            builder = builder.add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    def write(stem: str, cert: x509.Certificate, key: Any) -> tuple[Path, Path]:
        paths = folder / f"{stem}.pem", folder / f"{stem}-key.pem"
        paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        paths[1].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return paths

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test cluster CA")])
    ca = issue("test cluster CA", ca_key, ca_name, ca_key, ca=True)
    files = {"ca": write("ca", ca, ca_key)[0]}
    for stem, prefix in (("cluster", ""), ("client", "client_")):
        key = ec.generate_private_key(ec.SECP256R1())
        files[f"{prefix}cert"], files[f"{prefix}key"] = write(stem, issue(stem, key, ca_name, ca_key, ca=False), key)
    return files


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` until it holds; the seconds it took (AssertionError naming ``what`` after ``timeout``)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}, after {timeout:g} s")
        time.sleep(0.05)
    return time.monotonic() - start


def running_tasks(client: Client) -> list[str]:
    """The keys of the tasks running in a worker thread, on every worker (not the scheduler's view,
    which forgets a cancelled task at once while its thread may compute on)."""
    # a lambda: cloudpickle ships it by value (the workers cannot import this module)
    running = client.run(lambda dask_worker: [str(key) for key in dask_worker.active_threads.values()])
    return [key for keys in running.values() for key in keys]
