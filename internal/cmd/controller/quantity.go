package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// quantityBytes is a flag holding a Kubernetes quantity ("1280Mi", as a
// container's memory limit is written) as bytes; empty is zero. It is the
// int64 it sets, so the flag's value is that variable's address.
type quantityBytes int64

func (q *quantityBytes) String() string {
	if q == nil || *q == 0 {
		return ""
	}
	return resource.NewQuantity(int64(*q), resource.BinarySI).String()
}

func (q *quantityBytes) Set(s string) error {
	if s == "" {
		*q = 0
		return nil
	}
	v, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if v.Sign() < 0 {
		return fmt.Errorf("%q: negative", s)
	}
	*q = quantityBytes(v.Value())
	return nil
}

func (q *quantityBytes) Type() string { return "quantity" }
