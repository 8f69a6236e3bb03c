"""The real KubeVirt on the hermetic cluster, built here: its programs from its Go module
(a release or a tree: ``kubevirt_module``), its control-plane images
assembled as its own image definitions assemble them (``cmd/*/BUILD.bazel``), and its
operator manifest rendered by its own ``manifest-templator`` from the module's release
template. Nothing of KubeVirt is changed; the operator derives every component's image
from its own image name, as it does from a registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from core.commands import output
from core.timeouts import Timeout
from kubevirtci.local import components, images, kubevirt_node
from kubevirtci.local.kubevirt_module import BuildModule

# virt-operator derives the component images from its own: <registry>/<prefix><name>:<tag>
# (pkg/virt-operator/util/config.go), so all share this path and the release as tag.
REGISTRY = "localhost/kubevirt"
NAMESPACE = "kubevirt"  # as KubeVirt's release manifests install it
# The control-plane images' user (the root BUILD.bazel's passwd_entry "nonroot-user").
NONROOT_PASSWD = b"nonroot-user:x:1001:1001:user:/home/nonroot-user:/bin/bash\n"


NODE_IMAGES_NOTE = (
    "KubeVirt's virt-handler and virt-launcher images are assembled on Debian trixie "
    "(libvirt 11.3, QEMU 10.0) instead of CentOS Stream; libvirt's virtqemud is built from "
    "Debian's unchanged libvirt source (Debian does not install it) and virt-launcher "
    "links the Go binding of Debian's libnbd source (the proxy refuses KubeVirt's pin)"
)


def build_notes(module: BuildModule) -> list[str]:
    """What the report header says of how this KubeVirt was built here."""
    return [NODE_IMAGES_NOTE,
            *(f"KubeVirt {module.code.version} build exception, {note}"
              for note in module.notes())]


def image_name(program: str, version: str) -> str:
    return f"{REGISTRY}/{program}:{version}"


def control_plane_images(version: str, bin_dir: Path) -> list[images.ImageSpec]:
    """virt-operator, virt-api, virt-controller and virt-exportproxy as
    cmd/<program>/BUILD.bazel builds them: /etc/passwd with the non-root user 1001,
    /.version, the program in /usr/bin (the operator's image also carries
    csv-generator), user 1001, on a minimal root."""
    specs = []
    for program in components.KUBEVIRT_CONTROL_PLANE:
        files = {f"/usr/bin/{program}": bin_dir / program}
        if program == "virt-operator":
            files["/usr/bin/csv-generator"] = bin_dir / "csv-generator"
        specs.append(images.ImageSpec(
            image_name(program, version), files=files,
            contents={"/etc/passwd": NONROOT_PASSWD, "/.version": f"{version}\n".encode()},
            entrypoint=[f"/usr/bin/{program}"], user="1001",
        ))
    return specs


def operator_manifest(version: str, bin_dir: Path, module_dir: Path, work: Path
                      ) -> list[dict[str, Any]]:
    """kubevirt-operator.yaml as KubeVirt's hack/build-manifests.sh renders it (two
    passes of its manifest-templator), for images under REGISTRY tagged ``version``."""
    templator = str(bin_dir / "manifest-templator")
    work.mkdir(parents=True, exist_ok=True)
    files_pass = work / f"kubevirt-operator-{version}.yaml.in"
    files_pass.write_text(_run([
        templator, "--process-files",
        f"--generated-manifests-dir={module_dir / 'manifests' / 'generated'}/",
        f"--input-file={module_dir / 'manifests' / 'release' / 'kubevirt-operator.yaml.in'}",
    ]))
    rendered = _run([
        templator, "--process-vars", f"--namespace={NAMESPACE}",
        f"--container-prefix={REGISTRY}", f"--container-tag={version}", "--image-prefix=",
        "--image-pull-policy=IfNotPresent", "--verbosity=2",
        f"--kubevirt-logo-path={module_dir / 'assets' / 'kubevirt_logo.png'}",
        f"--input-file={files_pass}",
    ])
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def _run(argv: list[str]) -> str:
    return output(argv, Timeout.KUBEVIRT_RENDER,
                  "check the KubeVirt build module and the module cache (`go mod download`)")


def build(module: BuildModule, emulated_qemu: Path) -> tuple[list[Path], list[dict[str, Any]]]:
    """Build the KubeVirt code of ``module`` (cached by content): the OCI archives of its
    images under REGISTRY tagged with its version, and its operator manifest."""
    version = module.code.version
    bin_dir = components.build(components.kubevirt_component(module))
    folder = components.CACHE_ROOT / f"kubevirt-images-{version}-{module.key}"
    archives = []
    for spec in control_plane_images(version, bin_dir):
        archive = folder / (spec.name.rsplit("/", 1)[-1].replace(":", "-") + ".tar")
        if not archive.is_file():
            partial = archive.with_suffix(".partial")
            images.write_oci_archive(spec, partial)
            partial.rename(archive)
        archives.append(archive)
    archives += kubevirt_node.image_archives(module, lambda p: image_name(p, version),
                                             emulated_qemu)
    return archives, operator_manifest(version, bin_dir, module.code.source, folder)
