package sysfs

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Majors are the device numbers' majors the EMULATED kernel gives its drivers, by kind
// of node: nvme (controllers), generic (ng<N>n1), vfio (groups), all character, and
// block (namespaces; a real kernel gives NVMe namespaces blkext, 259).
type Majors map[string]uint32

// characterKinds are the kinds of character node, in the order they ask for a major.
var characterKinds = []string{"nvme", "generic", "vfio"}

// FreeMajors picks, from /proc/devices, majors no driver of this kernel answers to, as
// the kernel would hand the next drivers asking for dynamic ones (fs/char_dev.c
// find_dynamic_major: 254 down to 234, then 511 down to 384; block/genhd.c
// __register_blkdev: 254 down to 1): nothing can open the EMULATED nodes, and no node of
// the host's own disks is ever shown under an EMULATED name.
func FreeMajors(procDevices string) (Majors, error) {
	used := map[string]map[uint64]bool{"Character devices:": {}, "Block devices:": {}}
	section := ""
	scanner := bufio.NewScanner(strings.NewReader(procDevices))
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if _, ok := used[line]; ok {
			section = line
			continue
		}
		if fields := strings.Fields(line); section != "" && len(fields) > 0 {
			if major, err := strconv.ParseUint(fields[0], 10, 32); err == nil {
				used[section][major] = true
			}
		}
	}
	majors := Majors{}
	char := used["Character devices:"]
	for _, kind := range characterKinds {
		major, err := highestFree(char, [][2]uint64{{254, 234}, {511, 384}})
		if err != nil {
			return nil, fmt.Errorf("EMULATION: no dynamic character major is free in /proc/devices for %s", kind)
		}
		char[uint64(major)] = true
		majors[kind] = major
	}
	block, err := highestFree(used["Block devices:"], [][2]uint64{{254, 1}})
	if err != nil {
		return nil, fmt.Errorf("EMULATION: no dynamic block major is free in /proc/devices")
	}
	majors["block"] = block
	return majors, nil
}

func highestFree(used map[uint64]bool, spans [][2]uint64) (uint32, error) {
	for _, span := range spans {
		for major := span[0]; major >= span[1]; major-- {
			if !used[major] {
				return uint32(major), nil
			}
		}
	}
	return 0, fmt.Errorf("none free")
}
