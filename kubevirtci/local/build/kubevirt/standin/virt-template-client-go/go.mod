// STAND-IN for kubevirt.io/virt-template-client-go v0.2.0 (refused by the Go module
// proxy); see ../README.md.
module kubevirt.io/virt-template-client-go

go 1.24.0

require (
	k8s.io/apimachinery v0.34.2
	k8s.io/client-go v0.34.2
	kubevirt.io/virt-template-api v0.2.0
)
