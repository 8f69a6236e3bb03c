// Package api is a STAND-IN for kubevirt.io/virt-template-api/core (see ../../README.md):
// the names of the template API group and resources.
package api

const (
	GroupName            = "template.kubevirt.io"
	SingularResourceName = "virtualmachinetemplate"
	PluralResourceName   = SingularResourceName + "s"
)
