"""What a conformance run does before its first test, seen from a real pytest process:
bad input is one line and no cluster work; ``--collect-only`` builds and writes nothing."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT = 120  # seconds: a run that refuses its input ends at once


def run_suites(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "suites"), "--rootdir", str(ROOT),
         "-c", str(ROOT / "pyproject.toml"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)


def test_a_kubeconfig_that_is_not_yaml_is_one_error_line_not_a_traceback(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nclusters: [\n  - a: : b\n")
    result = run_suites("--provider", "existing", "--kubeconfig", str(kubeconfig),
                        "--artifacts-dir", str(tmp_path / "out"), cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 4, output  # pytest's usage error
    assert "INTERNALERROR" not in output and "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "is not valid YAML at line 3" in errors[0], output
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_collect_only_builds_nothing_and_writes_no_bundle(tmp_path):
    out = tmp_path / "out"
    result = run_suites("--collect-only", "-q", "--artifacts-dir", str(out), cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "tests collected" in output
    assert "[build]" not in output and "[local]" not in output  # no cluster, no build
    assert "certification bundle" not in output and not (out / "bundle").exists()
