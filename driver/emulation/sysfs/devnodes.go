package sysfs

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// The numbers of /dev/vfio/vfio, VFIO's container, as the kernel gives them: a misc
// device (major 10) with VFIO_MINOR 196 (Documentation/admin-guide/devices.txt).
const (
	MiscMajor = 10
	VFIOMinor = 196
)

// FreeDynamicMajor is the character major the kernel would hand the next driver that
// asks for a dynamic one, as vfio does for its groups (fs/char_dev.c find_dynamic_major:
// 254 down to 234, then 511 down to 384), given /proc/devices: the EMULATED group nodes
// get numbers no driver of this kernel answers to.
func FreeDynamicMajor(procDevices string) (uint32, error) {
	used := map[uint64]bool{}
	scanner := bufio.NewScanner(strings.NewReader(procDevices))
	inCharacter := false
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		switch {
		case line == "Character devices:":
			inCharacter = true
		case line == "" || strings.HasSuffix(line, "devices:"):
			inCharacter = false
		case inCharacter:
			fields := strings.Fields(line)
			if major, err := strconv.ParseUint(fields[0], 10, 32); err == nil {
				used[major] = true
			}
		}
	}
	for _, span := range [][2]uint64{{254, 234}, {511, 384}} {
		for major := span[0]; major >= span[1]; major-- {
			if !used[major] {
				return uint32(major), nil
			}
		}
	}
	return 0, fmt.Errorf("no dynamic character major is free in /proc/devices")
}
