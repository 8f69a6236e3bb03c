"""KubeVirt's node images as its image definitions assemble them, on a Debian root."""

import gzip
import io
import json
import struct
import tarfile
from pathlib import Path

import pytest

from core.errors import SuiteUsageError
from kubevirtci.local import debian, images, kubevirt_node

# The shape of cmd/virt-launcher/BUILD.bazel's image rules (v1.9.0 sets the user).
LAUNCHER_BUILD = """oci_image(
    name = "version-container",
    base = "//rpm:launcherbase",
)

oci_image(
    name = "virt-launcher-image",
    base = ":version-container",
    entrypoint = ["/usr/bin/virt-launcher"],
    user = "{user}",
)
"""


def _fake_tree(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "root"
    for folder in ("usr/bin", "etc/libvirt", "dev", "var/lib/apt/lists", "usr/share/OVMF"):
        (root / folder).mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n"
                                     "debian-user:x:64055:64055::/:/bin/false\n")
    (root / "etc/group").write_text("root:x:0:\nkvm:x:103:\n")
    (root / "etc/libvirt/libvirt.conf").write_text("#uri_default = \"qemu:///system\"\n")
    (root / "usr/bin/bash").write_bytes(b"ELF")
    (root / "dev/null").write_text("")
    (root / "var/lib/apt/lists/index").write_text("")
    (root / "var/run").symlink_to("/run")
    module, bins = tmp_path / "module", tmp_path / "bin"
    for name in ("virt-launcher/node-labeller/node-labeller.sh", "virt-launcher/qemu",
                 "virt-launcher/nsswitch.conf", "virt-launcher/qemu.conf",
                 "virt-launcher/virtqemud.conf", "virt-handler/nsswitch.conf"):
        (module / "cmd" / name).parent.mkdir(parents=True, exist_ok=True)
        (module / "cmd" / name).write_text(name)
    (module / "cmd/virt-launcher/BUILD.bazel").write_text(LAUNCHER_BUILD.format(user=107))
    bins.mkdir()
    for program in ("virt-launcher", "libvirt-hook-client", "container-disk", "virtqemud",
                    "virt-handler", "virt-chroot", "passt-repair", "emulated-vfio-qemu",
                    *kubevirt_node.LAUNCHER_HELPERS):
        (bins / program).write_bytes(program.encode())
    return {"root": root, "module": module, "bin": bins}


def _layer_members(spec: images.ImageSpec, tmp_path: Path) -> dict[str, tarfile.TarInfo]:
    archive = images.write_oci_archive(spec, tmp_path / "image.tar")
    with tarfile.open(archive) as outer:
        index = json.load(outer.extractfile("index.json"))
        digest = index["manifests"][0]["digest"].split(":")[1]
        manifest = json.load(outer.extractfile(f"blobs/sha256/{digest}"))
        layer = manifest["layers"][0]["digest"].split(":")[1]
        data = gzip.decompress(outer.extractfile(f"blobs/sha256/{layer}").read())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_the_launcher_image_overlays_kubevirts_files_on_the_debian_root(tmp_path):
    tree = _fake_tree(tmp_path)
    spec = kubevirt_node.launcher_image(
        "localhost/kubevirt/virt-launcher:v1.9.0", "v1.9.0", tree["root"], tree["module"],
        tree["bin"], tree["bin"], tree["bin"] / "virtqemud", tree["bin"] / "emulated-vfio-qemu")
    assert spec.user == "107" and spec.entrypoint == ["/usr/bin/virt-launcher"]
    members = _layer_members(spec, tmp_path)
    assert "usr/bin/bash" in members  # from the root
    assert not any(n.startswith(("dev/", "var/lib/apt/lists/")) for n in members)
    # KubeVirt's users replace Debian's; /var/run is relative (the handler reads it
    # through /proc/<pid>/root).
    assert members["var/run"].linkname == "../run"
    assert [n for n in members if n == "etc/passwd"] == ["etc/passwd"]
    passwd = spec.contents["/etc/passwd"].decode().splitlines()
    assert passwd[0] == "qemu:x:107:107::/home/qemu:/bin/bash"
    assert "debian-user:x:64055:64055::/:/bin/false" in passwd  # Debian's own stay
    assert b'\nuri_default = "qemu:///system"' in spec.contents["/etc/libvirt/libvirt.conf"]
    for hook in (members["etc/libvirt/hooks/qemu"], members["etc/libvirt/hooks"]):
        assert (hook.uid, hook.gid, hook.mode) == (107, 107, 0o755)
    for program in ("virt-launcher", "container-disk", "node-labeller.sh", "virt-probe"):
        assert f"usr/bin/{program}" in members
    assert "usr/sbin/virtqemud" in members and "usr/lib64/qemu-kvm" in members
    # EMULATED: the VFIO hop comes before Debian's QEMU on the PATH.
    assert members["usr/local/bin/qemu-system-x86_64"].size == len(b"emulated-vfio-qemu")
    assert members["usr/share/OVMF/OVMF_CODE.fd"].linkname == "OVMF_CODE_4M.fd"
    capability = members["usr/bin/virt-launcher-monitor"].pax_headers[
        "SCHILY.xattr.security.capability"].encode("utf-8", "surrogateescape")
    magic, permitted, _, _, _ = struct.unpack("<IIIII", capability)
    assert magic == 0x02000001 and permitted == 1 << 10  # cap_net_bind_service+ep


def test_the_launcher_image_runs_as_the_user_its_release_defines(tmp_path):
    package = tmp_path / "virt-launcher"
    package.mkdir()
    (package / "BUILD.bazel").write_text(LAUNCHER_BUILD.format(user=107))
    assert kubevirt_node.bazel_image_user(package, "virt-launcher-image") == "107"
    # v1.8.x sets no user: the image, and the node labeller, run as root.
    (package / "BUILD.bazel").write_text(LAUNCHER_BUILD.replace('    user = "{user}",\n', ""))
    assert kubevirt_node.bazel_image_user(package, "virt-launcher-image") == ""
    with pytest.raises(SuiteUsageError, match="no image 'virt-handler-image'"):
        kubevirt_node.bazel_image_user(package, "virt-handler-image")


def test_the_handler_image_runs_as_root_with_passt_repair(tmp_path):
    tree = _fake_tree(tmp_path)
    spec = kubevirt_node.handler_image(
        "localhost/kubevirt/virt-handler:v1.9.0", "v1.9.0", tree["root"], tree["module"],
        tree["bin"], tree["bin"] / "passt-repair")
    members = _layer_members(spec, tmp_path)
    assert spec.user == "" and spec.entrypoint == ["/usr/bin/virt-handler"]
    assert members["usr/bin/passt-repair"].mode == 0o744
    assert {"usr/bin/virt-handler", "usr/bin/virt-chroot", ".version"} <= set(members)


def test_the_source_of_a_binary_rebuild_is_its_source_version(tmp_path):
    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(
        "Package: libnbd0\nStatus: install ok installed\nSource: libnbd (1.22.2-1)\n"
        "Version: 1.22.2-1+b1\n\nPackage: libvirt0\nStatus: install ok installed\n"
        "Source: libvirt\nVersion: 11.3.0-3+deb13u3\n\n"
        "Package: acl\nStatus: install ok installed\nVersion: 2.3.2-2\n")
    assert debian.installed_source(tmp_path, "libnbd0") == ("libnbd", "1.22.2-1")
    assert debian.installed_source(tmp_path, "libvirt0") == ("libvirt", "11.3.0-3+deb13u3")
    assert debian.installed_source(tmp_path, "acl") == ("acl", "2.3.2-2")


def test_a_root_recipe_is_cached_under_a_key_of_its_content():
    other = debian.RootRecipe("virt-handler", (*kubevirt_node.HANDLER_ROOT.packages, "gdb"))
    assert kubevirt_node.HANDLER_ROOT.path != other.path
    assert kubevirt_node.HANDLER_ROOT.path.name.startswith("debian-trixie-virt-handler-")
