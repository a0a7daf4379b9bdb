package aws

import (
	"reflect"
	"strings"
	"testing"
)

// TestAPIOnlyDescribes: the provider's whole view of AWS is API, and API
// has nothing but Describe operations: no write can be made through it.
func TestAPIOnlyDescribes(t *testing.T) {
	typ := reflect.TypeFor[API]()
	if typ.NumMethod() == 0 {
		t.Fatal("API has no method")
	}
	for i := range typ.NumMethod() {
		if m := typ.Method(i); !strings.HasPrefix(m.Name, "Describe") {
			t.Errorf("API has %s, which is not a Describe operation: zerodrop must never write AWS", m.Name)
		}
	}
	// The provider keeps AWS only as an API.
	pt := reflect.TypeFor[Provider]()
	for i := range pt.NumField() {
		f := pt.Field(i)
		if strings.Contains(f.Type.String(), "elasticloadbalancingv2.Client") || strings.Contains(f.Type.String(), "ec2.Client") {
			t.Errorf("Provider.%s is a %s: it must hold AWS only as API", f.Name, f.Type)
		}
	}
}
