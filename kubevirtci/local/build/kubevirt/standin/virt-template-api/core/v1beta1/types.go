// Package v1beta1 is a STAND-IN for kubevirt.io/virt-template-api/core/v1beta1 (see
// ../../../README.md): the VirtualMachineTemplate types KubeVirt's programs read.
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	api "kubevirt.io/virt-template-api/core"
)

// ConditionReady is the condition a usable template reports.
const ConditionReady = "Ready"

var (
	GroupVersion  = schema.GroupVersion{Group: api.GroupName, Version: "v1beta1"}
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	AddToScheme   = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &VirtualMachineTemplate{}, &VirtualMachineTemplateList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}

type VirtualMachineTemplateSpec struct {
	VirtualMachine *runtime.RawExtension `json:"virtualMachine"`
	Parameters     []Parameter           `json:"parameters,omitempty"`
	Message        string                `json:"message,omitempty"`
}

type Parameter struct {
	Name        string `json:"name"`
	DisplayName string `json:"displayName,omitempty"`
	Description string `json:"description,omitempty"`
	Value       string `json:"value,omitempty"`
	Generate    string `json:"generate,omitempty"`
	From        string `json:"from,omitempty"`
	Required    bool   `json:"required,omitempty"`
}

type VirtualMachineTemplateStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineTemplateSpec   `json:"spec"`
	Status            VirtualMachineTemplateStatus `json:"status,omitempty"`
}

type VirtualMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineTemplate `json:"items"`
}

func (in *VirtualMachineTemplate) DeepCopy() *VirtualMachineTemplate {
	if in == nil {
		return nil
	}
	out := new(VirtualMachineTemplate)
	in.DeepCopyInto(out)
	return out
}

func (in *VirtualMachineTemplate) DeepCopyInto(out *VirtualMachineTemplate) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.VirtualMachine != nil {
		out.Spec.VirtualMachine = in.Spec.VirtualMachine.DeepCopy()
	}
	out.Spec.Parameters = append([]Parameter(nil), in.Spec.Parameters...)
	out.Status.Conditions = nil
	for i := range in.Status.Conditions {
		c := metav1.Condition{}
		in.Status.Conditions[i].DeepCopyInto(&c)
		out.Status.Conditions = append(out.Status.Conditions, c)
	}
}

func (in *VirtualMachineTemplate) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *VirtualMachineTemplateList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &VirtualMachineTemplateList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range in.Items {
		out.Items = append(out.Items, *in.Items[i].DeepCopy())
	}
	return out
}
