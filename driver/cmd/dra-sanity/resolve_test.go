package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestResolveReportsTheSpecsOwnEditsWithTheDevicesAsTheRuntimeAppliesThem(t *testing.T) {
	dir := t.TempDir()
	spec := `{"cdiVersion": "0.6.0", "kind": "example.com/gpu",
	  "containerEdits": {"env": ["SHARED=1"], "deviceNodes": [{"path": "/dev/gpuctl"}]},
	  "devices": [{"name": "gpu0", "containerEdits": {"env": ["GPU=gpu0"],
	    "deviceNodes": [{"path": "/dev/gpu0", "hostPath": "/dev/real-gpu0"}]}}]}`
	if err := os.WriteFile(filepath.Join(dir, "gpu.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	report, err := resolveDevices([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := report["devices"].(map[string]any)["example.com/gpu=gpu0"].(map[string]any)
	if env := got["env"]; !reflect.DeepEqual(env, []string{"SHARED=1", "GPU=gpu0"}) {
		t.Errorf("env: %v", env)
	}
	want := []map[string]string{{"path": "/dev/gpuctl", "hostPath": "/dev/gpuctl"},
		{"path": "/dev/gpu0", "hostPath": "/dev/real-gpu0"}}
	if nodes := got["deviceNodes"]; !reflect.DeepEqual(nodes, want) {
		t.Errorf("device nodes: %v", nodes)
	}
}
