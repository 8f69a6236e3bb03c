"""The suite's common core: errors, named timeouts, the Kubernetes client, driver
profiles and waits. Used by fixtures/, kubevirtci/ and reports/; imports none of them."""
