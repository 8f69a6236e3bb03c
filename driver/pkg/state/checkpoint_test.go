package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCheckpointRoundTripsWithItsVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "checkpoint.json")
	cp, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Put("uid-a", PreparedClaim{Namespace: "ns", Name: "c"}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !strings.Contains(string(data), `"version": "`+Version+`"`) {
		t.Fatalf("the file must carry its version: %s", data)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp")); len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Get("uid-a"); !ok || got.Name != "c" {
		t.Fatalf("reloaded %+v", again.Claims)
	}
}

func TestUnreadableCheckpointsAreReportedWithTheReason(t *testing.T) {
	for content, reason := range map[string]string{
		"{not json": "is corrupt",
		`{"version": "something/v2", "claims": {}}`: `has version "something/v2"`,
	} {
		path := filepath.Join(t.TempDir(), "checkpoint.json")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: got %v, want ErrUnreadable saying %q", content, err, reason)
		}
	}
}

func TestACheckpointFromBeforeVersionsIsRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := os.WriteFile(path, []byte(`{"claims": {"uid-a": {"namespace": "ns", "name": "c"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := cp.Get("uid-a"); !ok || got.Name != "c" || cp.Version != Version {
		t.Fatalf("read %+v", cp)
	}
}

func TestSetAsideKeepsTheUnreadableFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	aside, err := SetAside(path, time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if kept, _ := os.ReadFile(aside); string(kept) != "{not json" || !strings.HasSuffix(aside, ".unreadable-20261203T180000Z") {
		t.Fatalf("aside %s holds %q", aside, kept)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("the original path must be free for the rebuilt checkpoint")
	}
}
