package sysfs

import (
	"strconv"
	"testing"
)

const procDevices = `Character devices:
  1 mem
 10 misc
245 hidraw
246 macvtap
247 mei
248 bsg
249 watchdog
250 ptp
251 pps
252 dax
253 dimmctl
254 ndctl

Block devices:
  7 loop
244 zram
253 virtblk
254 mdp
`

// Each kind gets the next free dynamic major, as drivers registering one after another
// would; a block major of the same number does not count against a character one.
func TestEachKindGetsTheNextFreeDynamicMajor(t *testing.T) {
	majors, err := FreeMajors(procDevices)
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]uint32{"nvme": 244, "generic": 243, "vfio": 242, "block": 252} {
		if majors[kind] != want {
			t.Errorf("%s: major %d, want %d", kind, majors[kind], want)
		}
	}
}

func TestTheExtendedDynamicRangeIsUsedWhenTheFirstIsFull(t *testing.T) {
	devices := "Character devices:\n"
	for major := 234; major <= 254; major++ {
		devices += " " + strconv.Itoa(major) + " x\n"
	}
	majors, err := FreeMajors(devices)
	if err != nil || majors["nvme"] != 511 || majors["vfio"] != 509 {
		t.Fatalf("got %v, %v; want 511 for nvme, 509 for vfio", majors, err)
	}
}
