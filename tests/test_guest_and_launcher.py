import pytest

from fixtures import artifacts
from fixtures.guest import ConsoleSession, GuestCommandFailed
from fixtures.launcher import hostdev_sources, metadata_dir, pci_resource_env_name


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
    <alias name='dra-hostdevice-nvme'/>
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
        "dra-hostdevice-nvme": "0000:00:05.0",
        "ua-hostdevice-dp": "0000:00:06.0",
    }


def test_kubevirt_paths_and_env_names_follow_the_facts():
    assert metadata_dir("claim", "nvme", "dev") == \
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/nvme/dev"
    assert metadata_dir("template", "gpu", "g") == \
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/g"
    assert pci_resource_env_name("devices.kubevirt.io/nvme") == \
        "PCI_RESOURCE_DEVICES_KUBEVIRT_IO_NVME"


def test_metadata_stream_yields_the_newest_version_first():
    from fixtures.launcher import first_metadata_object

    stream = ('{"apiVersion": "metadata.resource.k8s.io/v1beta1", "requests": []}\n'
              '{"apiVersion": "metadata.resource.k8s.io/v1alpha1", "requests": []}\n')
    assert first_metadata_object(stream)["apiVersion"] == "metadata.resource.k8s.io/v1beta1"


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
