// Module-graph placeholder for libguestfs.org/libnbd, whose pinned pseudo-version the
// Go module proxy refuses. It provides no package: only virt-launcher imports libnbd,
// and its build points this replace at the Go binding in Debian's libnbd source instead.
// A control-plane build that imported it would fail to compile, never run a fake.
module libguestfs.org/libnbd

go 1.24.0
