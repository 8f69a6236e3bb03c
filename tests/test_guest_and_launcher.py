import json

import pytest

from core.commands import output
from core.timeouts import Timeout
from fixtures import artifacts, vms
from fixtures.guest import ConsoleSession, GuestCommandFailed
from fixtures.launcher import (
    NON_ROOT_LIBVIRT,
    domain_xml,
    dra_hostdev_alias,
    hostdev_elements,
    hostdev_sources,
    metadata_dir,
    pci_resource_env_name,
)
from kubevirtci.provider import Node, NodePaths
from kubevirtci.releases import release_for


class ScriptedConsole:
    """A serial console that answers what the shell would, with input echo."""

    def __init__(self, logged_in=False):
        self.pending = "" if not logged_in else "[fedora@vm ~]$ "
        self.logged_in = logged_in
        self.sent = []

    def send(self, data):
        self.sent.append(data)
        self.pending += data  # echo
        if not self.logged_in and data == "\n":
            self.pending += "vm login: "
        elif data == "fedora\n" and "Password" not in self.pending:
            self.pending += "Password: "
        elif data == "secret\n":
            self.logged_in = True
            self.pending += "[fedora@vm ~]$ "
        elif data.startswith("printf 'BEGIN"):
            marker = data.split()[2].rstrip(";")
            code = 3 if "false" in data else 0
            self.pending += f"BEGIN-{marker}-\r\n1b36:0010\r\nEND-{marker}-{code}-\r\n$ "

    def receive(self, timeout):
        out, self.pending = self.pending, ""
        return out


def test_console_session_logs_in_and_returns_command_output():
    console = ScriptedConsole()
    session = ConsoleSession(console, "fedora", "secret")
    session.login()
    assert console.sent[:3] == ["\n", "fedora\n", "secret\n"]
    assert session.run("cat /sys/bus/pci/devices/*/vendor") == "1b36:0010\n"


@pytest.mark.parametrize("prompt", ["# \x1b[6n", "[fedora@vm ~]$ \x1b[?2004h"])
def test_a_prompt_followed_by_terminal_sequences_is_still_a_prompt(prompt):
    console = ScriptedConsole(logged_in=True)
    console.pending = f"BusyBox built-in shell (ash)\r\n{prompt}"
    ConsoleSession(console, "root", "").login()
    assert console.sent == ["\n"]  # a shell already: no user name typed


def test_console_session_reports_a_failing_command_with_its_exit_code():
    session = ConsoleSession(ScriptedConsole(logged_in=True), "u", "p")
    with pytest.raises(GuestCommandFailed, match="exited 3"):
        session.run("false")


DOMAIN_XML = """
<domain type='kvm'><devices>
  <hostdev mode='subsystem' type='pci' managed='no'>
    <source><address domain='0x0000' bus='0x00' slot='0x05' function='0x0'/></source>
    <alias name='ua-dra-hostdevice-nvme'/>
    <address type='pci' domain='0x0000' bus='0x09' slot='0x00' function='0x0'/>
  </hostdev>
  <hostdev mode='subsystem' type='pci' managed='no'>
    <source><address domain='0x0000' bus='0x00' slot='0x06' function='0x0'/></source>
    <alias name='ua-hostdevice-dp'/>
  </hostdev>
</devices></domain>
"""


def test_hostdev_source_addresses_by_alias():
    assert hostdev_sources(DOMAIN_XML) == {
        dra_hostdev_alias("hostDevice", "nvme"): "0000:00:05.0",
        "ua-hostdevice-dp": "0000:00:06.0",
    }


class LocalNode(Node):
    """A node whose files are a folder here: runs the command on this machine."""

    def __init__(self, root):
        self.name = "node01"
        self.paths = NodePaths(sysfs=f"{root}/sys", kubelet=f"{root}/kubelet",
                               cdi=(f"{root}/cdi",))

    def run(self, argv, stdin=None):
        return output(argv, Timeout.LOCAL_COMMAND, stdin=stdin)


def test_host_device_diagnostics_show_the_function_and_what_is_prepared_for_the_claim(tmp_path):
    function = tmp_path / "sys/bus/pci/devices/0000:00:05.0"
    group = tmp_path / "sys/kernel/iommu_groups/5/devices"
    for folder in (function, group, tmp_path / "sys/bus/pci/drivers/vfio-pci",
                   tmp_path / "cdi", tmp_path / "kubelet/plugins/nvme.example.com"):
        folder.mkdir(parents=True)
    (function / "uevent").write_text("DRIVER=vfio-pci\nPCI_ID=1B36:0010\n")
    (function / "driver_override").write_text("(null)\n")
    (function / "driver").symlink_to("../../drivers/vfio-pci")
    (function / "iommu_group").symlink_to("../../../../kernel/iommu_groups/5")
    (group / "0000:00:05.0").symlink_to("../../../../bus/pci/devices/0000:00:05.0")
    (tmp_path / "cdi/nvme.example.com-uid-1.json").write_text('{"devices": ["uid-1"]}')
    (tmp_path / "cdi/nvme.example.com-uid-2.json").write_text('{"devices": ["uid-2"]}')
    (tmp_path / "kubelet/plugins/nvme.example.com/checkpoint.json").write_text('{"uid-1": {}}')
    (tmp_path / "kubelet/dra_manager_state").write_text('{"Entries": ["uid-1"]}')

    view = artifacts.node_device_view(LocalNode(tmp_path), ["0000:00:05.0"], ["uid-1"],
                                      "nvme.example.com")

    assert "== function 0000:00:05.0\nDRIVER=vfio-pci\nPCI_ID=1B36:0010" in view
    assert "driver: ../../drivers/vfio-pci" in view
    assert "iommu_group: ../../../../kernel/iommu_groups/5\n0000:00:05.0" in view
    assert "nvme.example.com-uid-1.json (claim uid-1)" in view
    assert "checkpoint.json (claim uid-1)" in view
    assert "uid-2" not in view  # another claim's spec
    assert '{"Entries": ["uid-1"]}' in view


def test_hostdev_elements_are_the_domains_hostdevs_each_whole():
    import xml.etree.ElementTree as ET

    elements = [ET.fromstring(e) for e in hostdev_elements(DOMAIN_XML)]
    assert [e.tag for e in elements] == ["hostdev", "hostdev"]
    assert elements[0].find("alias").get("name") == "ua-dra-hostdevice-nvme"
    assert elements[0].find("source/address").get("slot") == "0x05"


def test_hostdev_sources_read_elements_whatever_the_attribute_order_and_skip_other_types():
    xml = """<domain><devices>
      <hostdev type='pci' mode='subsystem'><alias name='ua-a'/>
        <source><address function="0x1" slot="0x1f" bus="0x0a" domain="0x0001"/></source>
      </hostdev>
      <hostdev mode='subsystem' type='mdev'><alias name='ua-b'/>
        <source><address uuid='0b2e-41'/></source></hostdev>
    </devices></domain>"""
    assert hostdev_sources(xml) == {"ua-a": "0001:0a:1f.1"}


class RecordingKube:
    def __init__(self):
        self.commands = []

    def exec(self, name, namespace, container, command):
        self.commands.append(command)
        return "<domain/>"


@pytest.mark.parametrize(("user", "connect"), [
    (107, ["-c", NON_ROOT_LIBVIRT]),  # v1.9.0's launcher: libvirt's session daemon
    (None, []),  # v1.8.x's launcher runs as root: libvirt's default URI
])
def test_domain_xml_is_read_from_the_libvirt_the_launcher_runs(user, connect):
    pod = {"metadata": {"name": "virt-launcher-vm-x", "namespace": "ns"},
           "spec": {"containers": [{"name": "compute", "securityContext": {"runAsUser": user}}]}}
    kube = RecordingKube()
    domain_xml(kube, pod, "vm", "ns")
    assert kube.commands == [["virsh", *connect, "dumpxml", "ns_vm"]]


def test_kubevirt_paths_and_env_names_follow_the_facts():
    late, early = release_for((1, 8, 3)), release_for((1, 8, 2))
    assert metadata_dir(late, "claim", "nvme", "dev") == \
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/nvme/dev"
    assert metadata_dir(late, "template", "gpu", "g") == \
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/g"
    # 1.8.0-1.8.2: by claim name, and template claims in any folder (podClaimName inside)
    assert metadata_dir(early, "claim", "nvme", "dev") == "/var/run/dra-device-attributes/nvme/dev"
    assert metadata_dir(early, "template", "gpu", "g") == "/var/run/dra-device-attributes/*/g"
    assert pci_resource_env_name("devices.kubevirt.io/nvme") == \
        "PCI_RESOURCE_DEVICES_KUBEVIRT_IO_NVME"


def test_a_metadata_reader_takes_the_first_object_of_a_version_it_decodes():
    from fixtures.launcher import DECODED_BY_1_37, metadata_object

    stream = ('{"apiVersion": "metadata.resource.k8s.io/v1beta1", "requests": []}\n'
              '{"apiVersion": "metadata.resource.k8s.io/v1alpha1", "requests": []}\n')
    assert metadata_object(stream, DECODED_BY_1_37)["apiVersion"] == \
        "metadata.resource.k8s.io/v1beta1"
    # KubeVirt 1.8 and 1.9 decode only v1alpha1: they skip the newer object.
    assert metadata_object(stream, ("metadata.resource.k8s.io/v1alpha1",))["apiVersion"] == \
        "metadata.resource.k8s.io/v1alpha1"
    with pytest.raises(AssertionError, match=r"it holds metadata\.resource\.k8s\.io/v1beta1"):
        metadata_object(stream.splitlines()[0], ("metadata.resource.k8s.io/v1alpha1",))


class _VMKube:
    """A namespace with one launcher pod on node01, and virt-handler on both nodes."""

    def __init__(self) -> None:
        self.execs: list[list[str]] = []

    def list(self, kind, namespace=None, label_selector=None):
        if kind != "Pod":
            return []
        if label_selector == "kubevirt.io=virt-handler":
            return [{"metadata": {"name": f"virt-handler-{n}", "namespace": "kubevirt"},
                     "spec": {"nodeName": n}} for n in ("node02", "node01")]
        return [{"metadata": {"name": "virt-launcher-vm-abc", "namespace": "ns", "labels": {
            "kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "vm"}},
            "spec": {"nodeName": "node01", "containers": [{"name": "compute"}]}}]

    def logs(self, pod, namespace, container=None, tail=500):
        return f"log of {namespace}/{pod}/{container}"

    def exec(self, pod, namespace, container, command):
        self.execs.append(command)
        return " ".join(command)


def test_a_failed_vm_test_keeps_libvirts_domain_log_and_its_nodes_virt_handler_log():
    out = artifacts.collect(_VMKube(), "ns", None)
    assert out["libvirt-vm.log"] == "cat /var/run/kubevirt-private/libvirt/qemu/log/ns_vm.log"
    assert out["virt-handler-node01.txt"] == "log of kubevirt/virt-handler-node01/virt-handler"
    assert out["domain-vm.xml"] == "virsh dumpxml ns_vm"


def test_without_kubevirt_no_vm_kinds_are_captured():
    class PodKube(_VMKube):
        def list(self, kind, namespace=None, label_selector=None):
            assert kind not in ("VirtualMachine", "VirtualMachineInstance"), kind
            return []

    out = artifacts.collect(PodKube(), "ns", None, kubevirt=False)
    assert "Pod.yaml" in out and "VirtualMachine.yaml" not in out


def test_a_sync_failure_reads_as_virt_launcher_wrote_it():
    # as virt-handler reports it: virt-launcher's error quoted with %q
    vmi = {"status": {"conditions": [
        {"type": "Ready", "status": "False", "message": "Guest VM is not reported as running"},
        {"type": "Synchronized", "status": "False", "reason": "Synchronizing with the Domain "
         "failed.", "message": 'server error. command SyncVMI failed: "failed to create DRA '
         'GPU host-devices: request \\"dev\\" has 2 devices but KubeVirt only supports '
         'exactly one device per request (count > 1 is not supported)"'}]}}
    message = vms.unsynchronized_message(vmi)
    assert message is not None and 'request "dev" has 2 devices' in message
    assert vms.unsynchronized_message({"status": {"conditions": [
        {"type": "Synchronized", "status": "True"}]}}) is None


class FolderKube:
    """``ls -1`` and ``cat`` in a launcher whose folders are a dict; a missing folder
    answers as ls does."""

    def __init__(self, tree):
        self.tree = tree
        self.commands = []

    def exec(self, name, namespace, container, command):
        self.commands.append(command)
        if command[:2] == ["ls", "-1"]:
            folder = command[2]
            if folder not in self.tree:
                return f"ls: cannot access '{folder}': No such file or directory\n"
            return "".join(f"{child}\n" for child in self.tree[folder])
        return json.dumps({"apiVersion": "metadata.resource.k8s.io/v1alpha1",
                           "path": command[1]})


def test_metadata_files_are_listed_without_a_shell_any_folder_segment_included():
    from fixtures.launcher import read_metadata_files

    root = "/var/run/dra-device-attributes"
    kube = FolderKube({"/": ["var"], "/var": ["run"], "/var/run": ["dra-device-attributes"],
                       root: ["vm-nvme-x1", "other"], f"{root}/vm-nvme-x1": ["g"],
                       f"{root}/vm-nvme-x1/g": ["nvme.example.com-metadata.json", "tmp"],
                       f"{root}/other": []})
    pod = {"metadata": {"name": "launcher", "namespace": "ns"}}
    documents = read_metadata_files(kube, pod, f"{root}/*/g")
    assert [d["path"] for d in documents] == [f"{root}/vm-nvme-x1/g/nvme.example.com-metadata.json"]
    assert all(c[0] != "sh" for c in kube.commands)  # no path went through a shell
