// Package virttemplate is a STAND-IN for kubevirt.io/virt-template-client-go/virttemplate
// (see ../../README.md): a real REST client for template.kubevirt.io/v1beta1.
package virttemplate

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"kubevirt.io/virt-template-api/core/v1beta1"
)

type TemplateV1beta1Interface interface {
	RESTClient() rest.Interface
}

type templateV1beta1 struct{ client rest.Interface }

func (c *templateV1beta1) RESTClient() rest.Interface { return c.client }

type Clientset struct{ templateV1beta1 *templateV1beta1 }

func (c *Clientset) TemplateV1beta1() TemplateV1beta1Interface { return c.templateV1beta1 }

func NewForConfig(c *rest.Config) (*Clientset, error) {
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	config := rest.CopyConfig(c)
	config.GroupVersion = &v1beta1.GroupVersion
	config.APIPath = "/apis"
	config.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(config)
	if err != nil {
		return nil, err
	}
	return &Clientset{templateV1beta1: &templateV1beta1{client: client}}, nil
}
