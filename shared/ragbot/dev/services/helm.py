"""helm, built by ``go install`` from the Go module proxy into ``<cache>/bin``, for test_helm_chart.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ragbot.dev.services.config import ServicesConfig
from ragbot.dev.services.host import ServiceError, log, need_command

MODULE = "helm.sh/helm/v3/cmd/helm"


def same_minor(reported: str, wanted: str) -> bool:
    """Whether ``helm version --short`` ("v3.22.0+gabc") is the wanted version's minor ("v3.22")."""
    return reported.strip().startswith(wanted.rsplit(".", 1)[0])


@dataclass
class Helm:
    """One helm per version in the cache (CI keeps it); nothing runs."""

    config: ServicesConfig
    name: str = "helm"

    @property
    def binary(self) -> Path:
        return self.config.cache_dir / "bin" / "helm"

    def ready(self) -> bool:
        if not os.access(self.binary, os.X_OK):
            return False
        done = subprocess.run(
            [str(self.binary), "version", "--short"], capture_output=True, text=True, check=False
        )
        return done.returncode == 0 and same_minor(done.stdout, self.config.helm_version)

    def install(self) -> None:
        if self.ready():
            return
        if shutil.which("go") is None:
            need_command("go", "golang-go")
        version, target = self.config.helm_version, self.binary.parent
        log(f"helm: go install {MODULE}@{version} into {target} (a few minutes, once)")
        target.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOBIN": str(target), "GOFLAGS": "-mod=mod"}
        if subprocess.run(["go", "install", f"{MODULE}@{version}"], env=env, check=False).returncode != 0:
            raise ServiceError(f"go install {MODULE}@{version} failed")

    def start(self) -> None:
        self.install()

    def stop(self) -> None:
        """Nothing runs."""

    def status(self) -> str:
        return f"{self.name:<6} {self.binary}: {'present' if self.ready() else 'missing'}"
