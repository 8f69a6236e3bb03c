package sysfs

// The identity of QEMU's NVMe controller (QEMU 10.0, hw/nvme/ctrl.c), which is what
// kubevirtci's --nvme adds to its nodes, what the kernel recording shows and what the
// EMULATED VFIO hop gives the guest.
const (
	VendorID = 0x1b36 // Red Hat, Inc. (QEMU)
	DeviceID = 0x0010 // QEMU NVM Express Controller
	// QEMUModel is the model number QEMU's NVMe controller reports (it has no property
	// to change it).
	QEMUModel = "QEMU NVMe Ctrl"
)
