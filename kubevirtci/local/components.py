"""Upstream programs of the hermetic cluster, built from Go modules at pinned versions
and cached outside the clone, keyed by version. A missing cache entry is rebuilt from
scratch; a failed build leaves no partial entry behind."""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from core.commands import CommandRunner, Runner, check, output
from core.errors import SuiteUsageError
from core.timeouts import Timeout

log = logging.getLogger("kdc.build")

if TYPE_CHECKING:
    from kubevirtci.local.kubevirt_module import BuildModule

BUILD_DIR = Path(__file__).resolve().parent / "build"
DRIVER_DIR = Path(__file__).resolve().parents[2] / "driver"
CACHE_ROOT = Path(os.environ.get("KDC_CACHE", Path.home() / ".cache" / "kdc"))

KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.0"  # what k8s.io/kubernetes v1.37.2 pins (build/dependencies.yaml)
CONTAINERD_VERSION = "v2.2.9"

_K8S_LDFLAGS = " ".join([
    "-s", "-w",
    f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}",
    "-X k8s.io/component-base/version.gitMajor=1",
    "-X k8s.io/component-base/version.gitMinor=37",
    "-X k8s.io/component-base/version.gitTreeState=clean",
    "-X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z",
    f"-X k8s.io/client-go/pkg/version.gitVersion={KUBERNETES_VERSION}",
])

# Debian packages the cluster needs at run time: (package, a file it installs).
APT_REQUIREMENTS = (
    ("runc", "/usr/sbin/runc"),
    ("containernetworking-plugins", "/usr/lib/cni/bridge"),
    ("iptables", "/usr/sbin/iptables"),
    ("busybox-static", "/bin/busybox"),
    ("iproute2", "/usr/sbin/ip"),
    # cgo for virt-handler: a C compiler, libc headers and the kernel's <linux/kvm.h>
    ("gcc", "/usr/bin/gcc"),
    ("libc6-dev", "/usr/include/stdio.h"),
    ("linux-libc-dev", "/usr/include/linux/kvm.h"),
    # Debian trixie roots for KubeVirt's node images and for what links their libraries
    ("mmdebstrap", "/usr/bin/mmdebstrap"),
)


@dataclass(frozen=True)
class Component:
    """A set of programs built together from one Go module."""

    name: str
    version: str
    module_dir: Path
    packages: tuple[str, ...]
    ldflags: str = "-s -w"
    tags: str = ""
    cgo: bool = False  # link C (against this host's libc); static Go programs otherwise

    @property
    def bin_dir(self) -> Path:
        return CACHE_ROOT / f"{self.name}-{self.version}" / "bin"

    def programs(self) -> list[str]:
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.packages]

    def cached(self) -> bool:
        return all((self.bin_dir / p).is_file() for p in self.programs())


KUBERNETES = Component(
    "kubernetes", KUBERNETES_VERSION, BUILD_DIR,
    ("k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
     "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kubelet",
     "k8s.io/kubernetes/cmd/kube-proxy"),
    ldflags=_K8S_LDFLAGS,
)
ETCD = Component("etcd", ETCD_VERSION, BUILD_DIR, ("./etcd",))
PAUSE = Component("pause", "kdc-1", BUILD_DIR, ("./pause",))
CONTAINERD = Component(
    "containerd", CONTAINERD_VERSION, BUILD_DIR / "containerd",
    ("github.com/containerd/containerd/v2/cmd/containerd",
     "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
     "github.com/containerd/containerd/v2/cmd/ctr"),
    ldflags=f"-s -w -X github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}",
    tags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs",
)
UPSTREAM = (KUBERNETES, ETCD, CONTAINERD, PAUSE)

# Not part of the cluster: a DRA driver nobody here wrote, which the suite is checked
# against (scripts/dra_example_driver.py), and Helm, which renders its upstream chart.
# Each builds in a module of its own, with that module's one Kubernetes release.
DRA_EXAMPLE_DRIVER = Component(
    "dra-example-driver", "v0.4.0", BUILD_DIR / "dra-example-driver",
    tuple(f"sigs.k8s.io/dra-example-driver/cmd/dra-example-{p}"
          for p in ("kubeletplugin", "controller", "webhook")),
)
# Sonobuoy, which runs the suite as a plugin inside the cluster (scripts/sonobuoy_run.py).
SONOBUOY_VERSION = "v0.57.5"
SONOBUOY = Component(
    "sonobuoy", SONOBUOY_VERSION, BUILD_DIR / "sonobuoy", ("github.com/vmware-tanzu/sonobuoy",),
    ldflags=f"-s -w -X github.com/vmware-tanzu/sonobuoy/pkg/buildinfo.Version={SONOBUOY_VERSION}",
)
HELM_VERSION = "v4.3.2"
HELM = Component(
    "helm", HELM_VERSION, BUILD_DIR / "helm", ("helm.sh/helm/v4/cmd/helm",),
    ldflags=f"-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION} "
            "-X helm.sh/helm/v4/internal/version.gitTreeState=clean",
)


KUBEVIRT_CONTROL_PLANE = ("virt-operator", "virt-api", "virt-controller", "virt-exportproxy")
# Programs of KubeVirt's own build: csv-generator goes into the operator image, the
# manifest-templator renders the operator manifest from the module's release template.
KUBEVIRT_TOOLS = ("csv-generator", "manifest-templator")
KUBEVIRT_NODE_PROGRAMS = ("virt-handler", "virt-chroot", "virt-launcher-monitor", "virt-probe",
                          "virt-tail", "virt-freezer")


def kubevirt_component(module: BuildModule) -> Component:
    """KubeVirt's control plane and manifest tools, from the code's build module (cached
    by the module's key, which covers a tree's sources)."""
    return Component(
        "kubevirt", f"{module.code.version}-{module.key}", module.folder,
        (*(f"kubevirt.io/kubevirt/cmd/{p}" for p in KUBEVIRT_CONTROL_PLANE),
         *(f"kubevirt.io/kubevirt/tools/{t}" for t in KUBEVIRT_TOOLS)),
        ldflags=module.code.ldflags,
    )


def kubevirt_node_component(module: BuildModule) -> Component:
    """KubeVirt's node-side programs from the same module: virt-handler (cgo: its node
    labeller reads <linux/kvm.h>) and the helpers its and the launcher's images carry.
    virt-launcher, which links libvirt, is built against the libvirt of its own image."""
    return Component(
        "kubevirt-node", f"{module.code.version}-{module.key}", module.folder,
        tuple(f"kubevirt.io/kubevirt/cmd/{p}" for p in KUBEVIRT_NODE_PROGRAMS),
        ldflags=module.code.ldflags, cgo=True,
    )


def driver_component(version: str) -> Component:
    """The project's own driver programs, keyed by the driver sources' content hash."""
    return Component(
        "nvme-dra-driver", version, DRIVER_DIR,
        ("./cmd/nvme-dra-driver", "./cmd/nvme-sysfs-emulator", "./cmd/dra-sanity",
         "./cmd/nri-emulated-pci", "./cmd/emulated-vfio-qemu"),
    )


def build(component: Component, runner: CommandRunner | None = None) -> Path:
    if component.cached():
        return component.bin_dir
    runner = runner or Runner()
    staging = component.bin_dir.with_name("bin.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    argv = ["go", "build", "-v", "-trimpath", "-ldflags", component.ldflags]
    if component.tags:
        argv += ["-tags", component.tags]
    argv += ["-o", str(staging) + "/", *component.packages]
    log.info(f"{component.name} {component.version}: building "
             f"{', '.join(component.programs())} (cold builds take minutes; package names "
             "stream below)")
    env = {**os.environ, "CGO_ENABLED": "1" if component.cgo else "0"}
    result = runner.run(argv, Timeout.GO_BUILD, env=env, cwd=component.module_dir,
                        label=f"build {component.name}")
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
    check(result, f"see the Go error above; `cd {component.module_dir} && go mod download` "
                  "checks that the module proxy is reachable")
    shutil.rmtree(component.bin_dir, ignore_errors=True)
    staging.rename(component.bin_dir)
    return component.bin_dir


def module_source(component: Component, module: str) -> Path:
    """The folder of ``module`` in the Go module cache at the version the component's
    build module pins (downloaded when absent). Upstream files that ship beside the
    code, such as a Helm chart, are read from there as they are."""
    downloaded = output(["go", "mod", "download", "-json", module], Timeout.GO_MODULES,
                        "check that the Go module proxy is reachable (`go env GOPROXY`)",
                        cwd=component.module_dir)
    return Path(json.loads(downloaded)["Dir"])


def check_host_packages(runner: CommandRunner | None = None,
                        extra: tuple[tuple[str, str], ...] = ()) -> None:
    """Install missing Debian packages when that is safe (root with apt), else say how;
    ``extra`` adds (package, path) pairs a recipe needs beyond the cluster's."""
    missing = [pkg for pkg, path in (*APT_REQUIREMENTS, *extra) if not Path(path).exists()]
    if not missing:
        return
    fix = f"run `apt-get install -y {' '.join(missing)}` as root"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SuiteUsageError(f"the hermetic cluster needs Debian packages {', '.join(missing)}",
                              fix)
    runner = runner or Runner()
    log.info(f"installing Debian packages {', '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    check(runner.run(["apt-get", "update", "-qq"], Timeout.APT, env=env, label="apt"), fix)
    check(runner.run(["apt-get", "install", "-y", "-qq", *missing], Timeout.APT, env=env,
                     label="apt"), fix)
