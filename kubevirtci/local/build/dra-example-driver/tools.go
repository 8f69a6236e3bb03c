//go:build tools

// Package tools names the programs of kubernetes-sigs/dra-example-driver that this module
// builds: a DRA driver nobody here wrote, for checking the suite against it.
package tools

import (
	_ "sigs.k8s.io/dra-example-driver/cmd/dra-example-controller"
	_ "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"
	_ "sigs.k8s.io/dra-example-driver/cmd/dra-example-webhook"
)
