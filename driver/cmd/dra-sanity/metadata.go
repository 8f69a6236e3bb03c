package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/api/operation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/dynamic-resource-allocation/api/metadata/install"
	metadatav1alpha1 "k8s.io/dynamic-resource-allocation/api/metadata/v1alpha1"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
)

// streamObject is what one object of a KEP-5304 metadata stream holds, read on its own
// as a consumer that knows only its version would read it.
type streamObject struct {
	APIVersion      string `json:"apiVersion"`
	Kind            string `json:"kind"`
	Decodes         bool   `json:"decodes"`
	Error           string `json:"error,omitempty"`
	ValidationError string `json:"validationError,omitempty"`
}

// metadataReport is the decoding of one metadata file: each object of the stream, and
// what the upstream consumer decoder (devicemetadata.DecodeMetadataFromStream) makes
// of the whole stream, converted to v1alpha1 for the suite to compare.
type metadataReport struct {
	Objects         []streamObject                   `json:"objects"`
	DecodedVersion  string                           `json:"decodedVersion,omitempty"`
	DecodeError     string                           `json:"decodeError,omitempty"`
	ValidationError string                           `json:"validationError,omitempty"`
	Metadata        *metadatav1alpha1.DeviceMetadata `json:"metadata,omitempty"`
}

func decodeMetadata(data []byte) (metadataReport, error) {
	report := metadataReport{Objects: []streamObject{}}
	scheme := install.NewScheme()
	deserializer := runtimeserializer.NewCodecFactory(scheme).UniversalDeserializer()
	stream := json.NewDecoder(bytes.NewReader(data))
	for {
		var raw json.RawMessage
		if err := stream.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			return report, fmt.Errorf("not a stream of JSON objects: %w", err)
		}
		var meta runtime.TypeMeta
		_ = json.Unmarshal(raw, &meta)
		object := streamObject{APIVersion: meta.APIVersion, Kind: meta.Kind}
		decoded, _, err := deserializer.Decode(raw, nil, nil)
		if err != nil {
			object.Error = err.Error()
		} else {
			object.Decodes = true
			if err := validate(decoded); err != nil {
				object.ValidationError = err.Error()
			}
		}
		report.Objects = append(report.Objects, object)
	}
	var validation error
	var gvk schema.GroupVersionKind
	dest := &metadatav1alpha1.DeviceMetadata{}
	err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(bytes.NewReader(data)), dest,
		devicemetadata.DecodeMetadataWithValidationResult(&validation),
		devicemetadata.DecodeMetadataStoreGVKResult(&gvk))
	if err != nil {
		report.DecodeError = err.Error()
		return report, nil
	}
	report.DecodedVersion = gvk.GroupVersion().String()
	if validation != nil {
		report.ValidationError = validation.Error()
	}
	report.Metadata = dest
	return report, nil
}

// validate runs the declarative validation of the object's own version.
func validate(obj runtime.Object) error {
	create := operation.Operation{Type: operation.Create}
	switch o := obj.(type) {
	case *metadatav1alpha1.DeviceMetadata:
		return metadatav1alpha1.Validate_DeviceMetadata(context.Background(), create, nil, o, nil).ToAggregate()
	case *metadatav1beta1.DeviceMetadata:
		return metadatav1beta1.Validate_DeviceMetadata(context.Background(), create, nil, o, nil).ToAggregate()
	}
	return fmt.Errorf("no validation for %T", obj)
}

// metadataCommand decodes each named metadata file and prints the reports by path.
func metadataCommand(paths []string) {
	reports := map[string]any{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		var report metadataReport
		if err == nil {
			report, err = decodeMetadata(data)
		}
		if err != nil {
			reports[path] = map[string]string{"readError": err.Error()}
			continue
		}
		reports[path] = report
	}
	emit(reports)
}
