package pci

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// VFIODriver is the kernel driver that hands a PCI function to user space (QEMU).
const VFIODriver = "vfio-pci"

// Binder moves PCI functions between drivers through sysfs the way the kernel
// documents it: driver_override, unbind from the current driver, drivers_probe.
type Binder struct {
	Sysfs Sysfs
	// Settle is how long to wait for the driver link to change after a write: the
	// kernel changes it before the write returns, an emulated tree may lag.
	Settle time.Duration
}

func writeAttr(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// Bind makes “driver“ the function's driver; returns the driver it had before.
// Idempotent: binding to the driver already bound changes nothing.
func (b Binder) Bind(bdf, driver string) (string, error) {
	previous := b.Sysfs.BoundDriver(bdf)
	if previous == driver {
		return previous, nil
	}
	dir := b.Sysfs.DevicePath(bdf)
	override := driver
	if driver == "" {
		override = "\n" // clears the override
	}
	if err := writeAttr(filepath.Join(dir, "driver_override"), override); err != nil {
		return previous, fmt.Errorf("setting driver_override of %s: %w", bdf, err)
	}
	if previous != "" {
		if err := writeAttr(filepath.Join(dir, "driver", "unbind"), bdf); err != nil {
			return previous, fmt.Errorf("unbinding %s from %s: %w", bdf, previous, err)
		}
	}
	if driver == "" {
		return previous, b.await(bdf, "")
	}
	probe := filepath.Join(b.Sysfs.Root, "bus", "pci", "drivers_probe")
	if err := writeAttr(probe, bdf); err != nil {
		return previous, fmt.Errorf("probing %s for %s: %w", bdf, driver, err)
	}
	return previous, b.await(bdf, driver)
}

// Restore gives the function back to “original“ and clears the override.
func (b Binder) Restore(bdf, original string) error {
	if _, err := b.Bind(bdf, original); err != nil {
		return err
	}
	return writeAttr(filepath.Join(b.Sysfs.DevicePath(bdf), "driver_override"), "\n")
}

func (b Binder) await(bdf, driver string) error {
	deadline := time.Now().Add(b.Settle)
	for {
		if b.Sysfs.BoundDriver(bdf) == driver {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is bound to %q, expected %q", bdf, b.Sysfs.BoundDriver(bdf), driver)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
