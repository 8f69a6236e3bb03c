package main

import (
	"path/filepath"
	"testing"
)

func TestStatReportsADeviceNodesNumbersAndNamesWhatIsNotOne(t *testing.T) {
	dir := t.TempDir()
	got := statNodes([]string{"/dev/null", dir, filepath.Join(dir, "gone")})
	if null := got["/dev/null"]; null != (deviceNumber{Type: "char", Major: 1, Minor: 3}) {
		t.Errorf("/dev/null: %+v", null)
	}
	if got[dir].Type != "other" {
		t.Errorf("a directory: %+v", got[dir])
	}
	if gone := got[filepath.Join(dir, "gone")]; gone.Type != "missing" {
		t.Errorf("a missing path: %+v", gone)
	}
}
