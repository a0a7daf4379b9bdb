package ccm_test

import (
	"encoding/json"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
)

type armnetworkLB = armnetwork.LoadBalancer

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
