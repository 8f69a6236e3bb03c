"""KubeVirt on the hermetic cluster: the build module derived from the code under test
(a release's own go.mod, or a tree), its named exceptions, and images as KubeVirt
defines them. The module proxy is stood in for: nothing here reaches the network."""

from pathlib import Path

import pytest

from core.commands import output
from core.errors import SuiteUsageError
from core.timeouts import Timeout
from kubevirtci import kubevirt_code
from kubevirtci.kubevirt_code import KubeVirtCode, release_code, tree_code
from kubevirtci.local import components, kubevirt_module
from kubevirtci.local.kubevirt import REGISTRY, build_notes, control_plane_images
from kubevirtci.local.kubevirt_module import BuildModule, go_mod_text

RELEASE_GO_MOD = """module kubevirt.io/kubevirt

go 1.24.0

require (
\tkubevirt.io/api v0.0.0-00010101000000-000000000000
\tkubevirt.io/virt-template-api v0.2.0
\tlibguestfs.org/libnbd v1.25.2-5-g48df7c4d2b
\tlibvirt.org/go/libvirt v1.11005.0
)

replace (
\tgithub.com/openshift/api => github.com/openshift/api v0.0.0-20210105115604-44119421ec6b
\tk8s.io/api => k8s.io/api v0.34.2 // a comment
\tkubevirt.io/api => ./staging/src/kubevirt.io/api
\tkubevirt.io/client-go => ./staging/src/kubevirt.io/client-go
)
"""


def code_of(folder: Path, go_mod: str = RELEASE_GO_MOD, **fields) -> KubeVirtCode:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "go.mod").write_text(go_mod)
    (folder / "go.sum").write_text("")
    return KubeVirtCode(fields.pop("version", "v1.8.4"), folder, "abc", "2026-06-15T00:00:00Z",
                        **fields)


@pytest.fixture
def proxy(monkeypatch):
    """The module proxy: serves everything but what a test lists as refused."""
    refused: set[str] = set()
    monkeypatch.setattr(kubevirt_module, "download",
                        lambda module, version: None if f"{module}@{version}" in refused
                        else {"Dir": "/x"})
    return refused


def test_a_release_module_keeps_its_requirements_and_version_replaces(tmp_path, proxy):
    code = code_of(tmp_path / "kv")
    mod = go_mod_text(code, kubevirt_module.exceptions_for(code))
    assert "\tkubevirt.io/kubevirt v1.8.4\n" in mod
    assert "\tkubevirt.io/client-go v1.8.4\n" in mod  # published at the same tag
    assert "k8s.io/api => k8s.io/api v0.34.2\n" in mod and "comment" not in mod
    assert "github.com/openshift/api => github.com/openshift/api v0.0.0-2021" in mod
    assert "./staging" not in mod
    assert "go 1.24.0" in mod


def test_an_exception_applies_only_where_the_proxy_refuses_what_the_release_asks(
        tmp_path, proxy):
    code = code_of(tmp_path / "kv")
    assert kubevirt_module.exceptions_for(code) == []  # all served: the real modules
    proxy.update({"kubevirt.io/virt-template-api@v0.2.0",
                  "libguestfs.org/libnbd@v1.25.2-5-g48df7c4d2b"})
    names = {e.module for e in kubevirt_module.exceptions_for(code)}
    assert names == {"kubevirt.io/virt-template-api", "libguestfs.org/libnbd"}
    mod = go_mod_text(code, kubevirt_module.exceptions_for(code))
    assert f"kubevirt.io/virt-template-api => {kubevirt_module.BUILD_DIR}/standin/" in mod
    assert f"libguestfs.org/libnbd => {kubevirt_module.BUILD_DIR}/placeholder/libnbd" in mod
    # a module the release does not require gets no exception
    assert "virt-template-client-go" not in mod


def test_every_exception_says_why(proxy):
    for exception in kubevirt_module.REFUSED:
        assert exception.reason and exception.name
        target = exception.replacement
        assert target.startswith("v") or (kubevirt_module.BUILD_DIR / target).is_dir()


def test_a_tree_is_built_with_replaces_to_its_folders(tmp_path, proxy):
    tree = tmp_path / "kubevirt"
    code = code_of(tree, tree=True, version="v1.9.0-3-gabc")
    mod = go_mod_text(code, [])
    assert f"kubevirt.io/kubevirt => {tree}\n" in mod
    assert f"kubevirt.io/api => {tree}/staging/src/kubevirt.io/api\n" in mod
    assert f"kubevirt.io/client-go => {tree}/staging/src/kubevirt.io/client-go\n" in mod
    assert "\tkubevirt.io/kubevirt v0.0.0-00010101000000-000000000000\n" in mod
    assert "k8s.io/api => k8s.io/api v0.34.2" in mod


def test_the_launcher_links_a_newer_libvirt_binding_only_where_the_old_one_clashes(tmp_path):
    module = tmp_path / "module"
    module.mkdir()
    (module / "go.mod").write_text("replace (\n\tlibguestfs.org/libnbd => /placeholder\n)\n")
    (module / "go.sum").write_text("sums\n")
    v1_8 = BuildModule(code_of(tmp_path / "v1.8"), module, ())
    modfile = v1_8.launcher_modfile(Path("/src/golang"), tmp_path / "work")
    text = modfile.read_text()
    assert "libguestfs.org/libnbd => /src/golang" in text and "/placeholder" not in text
    assert "replace libvirt.org/go/libvirt => libvirt.org/go/libvirt v1.12003.0" in text
    assert (tmp_path / "work" / "launcher.sum").read_text() == "sums\n"
    assert any("freeCallbackId" in note for note in v1_8.notes())
    v1_9 = BuildModule(code_of(tmp_path / "v1.9", RELEASE_GO_MOD.replace(
        "v1.11005.0", "v1.12003.0")), module, ())
    assert v1_9.launcher_libvirt_binding() is None
    v1_7 = BuildModule(code_of(tmp_path / "v1.7", RELEASE_GO_MOD.replace(
        "\tlibguestfs.org/libnbd v1.25.2-5-g48df7c4d2b\n", "")), module, ())
    assert v1_7.launcher_libvirt_binding() is None  # no libnbd, nothing to clash with


def test_the_header_names_each_stand_in_with_its_reason(tmp_path):
    standin = kubevirt_module.REFUSED[0]
    module = BuildModule(code_of(tmp_path / "kv", version="v1.9.0"), tmp_path, (standin,))
    notes = build_notes(module)
    assert any("STAND-IN" in note and "kubevirt.io/virt-template-api v0.2.0" in note
               for note in notes)


def test_a_release_the_proxy_does_not_serve_is_one_message_with_the_fix(monkeypatch):
    monkeypatch.setattr(kubevirt_code, "download", lambda module, version: None)
    with pytest.raises(SuiteUsageError, match=r"does not serve kubevirt\.io/kubevirt@v1\.10\.0"
                       ) as err:
        release_code("v1.10.0")
    assert "go list -m -versions" in err.value.fix
    with pytest.raises(SuiteUsageError, match="not a release tag"):
        release_code("main")


def _git(tree: Path, *argv: str) -> None:
    output(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *argv],
           Timeout.GIT)


@pytest.fixture
def tree(tmp_path) -> Path:
    """A KubeVirt-shaped checkout at tag v1.9.0."""
    root = tmp_path / "kubevirt"
    for staging in kubevirt_code.STAGING.values():
        (root / staging).mkdir(parents=True)
        (root / staging / "go.mod").write_text("module x\n")
    (root / "go.mod").write_text("module kubevirt.io/kubevirt\n\ngo 1.26.0\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "dra.go").write_text("package dra\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    _git(root, "tag", "v1.9.0")
    return root


def test_a_tree_is_stamped_from_git_describe_and_marked_dirty_with_its_content(tree):
    clean = tree_code(tree)
    assert clean.version == "v1.9.0" and not clean.dirty and clean.tree
    assert "gitTreeState=clean" in clean.ldflags
    (tree / "pkg" / "dra.go").write_text("package dra // changed\n")
    dirty = tree_code(tree)
    assert dirty.dirty and dirty.version == f"v1.9.0-dirty-{dirty.content_hash[:12]}"
    assert dirty.content_hash != clean.content_hash
    assert "gitTreeState=dirty" in dirty.ldflags
    (tree / "pkg" / "dra.go").write_text("package dra // changed again\n")
    assert tree_code(tree).version != dirty.version  # each edit builds apart


def test_a_folder_that_is_not_a_kubevirt_tree_is_named_with_the_fix(tmp_path, tree):
    with pytest.raises(SuiteUsageError, match=r"has no go\.mod"):
        tree_code(tmp_path / "empty")
    (tree / "staging/src/kubevirt.io/client-go/go.mod").unlink()
    with pytest.raises(SuiteUsageError, match=r"lacks staging/src/kubevirt\.io/client-go"):
        tree_code(tree)


def test_control_plane_images_carry_what_kubevirts_image_definitions_do(tmp_path):
    specs = {s.name: s for s in control_plane_images("v1.9.0", tmp_path)}
    assert sorted(specs) == [f"{REGISTRY}/{p}:v1.9.0"
                             for p in ("virt-api", "virt-controller", "virt-exportproxy",
                                       "virt-operator")]
    operator = specs[f"{REGISTRY}/virt-operator:v1.9.0"]
    assert set(operator.files) == {"/usr/bin/virt-operator", "/usr/bin/csv-generator"}
    assert operator.user == "1001" and operator.entrypoint == ["/usr/bin/virt-operator"]
    assert operator.contents["/etc/passwd"].startswith(b"nonroot-user:x:1001:1001:")
    assert operator.contents["/.version"] == b"v1.9.0\n"


def test_the_operator_derives_component_images_from_its_own_path():
    # pkg/virt-operator/util/config.go: ^(.*)/(.*)virt-operator([@:].*)?$ needs a path.
    assert "/" in REGISTRY and not REGISTRY.endswith("/")


def test_node_programs_build_from_the_same_module_with_cgo(tmp_path):
    module = BuildModule(code_of(tmp_path / "kv", version="v1.9.0"),
                         tmp_path / "kubevirt-module" / "v1.9.0-0123456789ab", ())
    node, control_plane = (components.kubevirt_node_component(module),
                           components.kubevirt_component(module))
    assert node.cgo and node.module_dir == control_plane.module_dir == module.folder
    assert "virt-handler" in node.programs() and "virt-launcher" not in node.programs()
    assert "gitVersion=v1.9.0" in node.ldflags
    assert node.version == control_plane.version == "v1.9.0-0123456789ab"


def test_a_refused_download_is_named_once_by_module_and_version():
    stderr = (
        "go: downloading k8s.io/kube-openapi v0.0.0-2024\n"
        "kubevirt.io/client-go/api: kubevirt.io/client-go@v1.6.1: reading "
        "https://proxy.golang.org/kubevirt.io/client-go/@v/v1.6.1.zip: 403 Forbidden\n"
        "kubevirt.io/client-go/log: kubevirt.io/client-go@v1.6.1: reading "
        "https://proxy.golang.org/kubevirt.io/client-go/@v/v1.6.1.zip: 403 Forbidden\n"
        "libguestfs.org/libnbd: module libguestfs.org/libnbd: reading "
        "https://proxy.golang.org/libguestfs.org/libnbd/@v/list: 403 Forbidden\n")
    assert kubevirt_module.refused_modules(stderr) == ["kubevirt.io/client-go@v1.6.1"]
