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
`

func TestTheNextDynamicMajorIsTheHighestFreeCharacterMajor(t *testing.T) {
	major, err := FreeDynamicMajor(procDevices)
	if err != nil || major != 244 {
		t.Fatalf("got %d, %v; want 244 (a block major of the same number does not count)", major, err)
	}
}

func TestTheExtendedDynamicRangeIsUsedWhenTheFirstIsFull(t *testing.T) {
	devices := "Character devices:\n"
	for major := 234; major <= 254; major++ {
		devices += " " + strconv.Itoa(major) + " x\n"
	}
	major, err := FreeDynamicMajor(devices)
	if err != nil || major != 511 {
		t.Fatalf("got %d, %v; want 511", major, err)
	}
}
