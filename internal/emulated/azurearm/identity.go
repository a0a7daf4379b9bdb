package azurearm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What an ARM client reads before its first ARM call.
//
// The cloud's endpoints: cloud-provider-azure, given resourceManagerEndpoint
// in its cloud config, reads {endpoint}/metadata/endpoints?api-version=2019-05-01
// once with Go's default HTTP client and takes the first entry of the JSON
// array (no cloud name configured): resourceManager, authentication.audiences[0]
// (read without a length check) and loginEndpoint
// (pkg/azclient/cloud.go, OverrideAzureCloudConfigAndEnvConfigFromMetadataService).
//
// Tokens: a managed identity asks its token endpoint for a token of the ARM
// audience. azidentity's ManagedIdentityCredential (through MSAL's
// managedidentity package) asks IMDS at 169.254.169.254
// (/metadata/identity/oauth2/token, header Metadata: true), or the endpoint
// named by IDENTITY_ENDPOINT with the secret of IDENTITY_HEADER when both
// are set (the App Service form, header X-IDENTITY-HEADER). The emulator
// answers both paths; its tokens name the identity that asked
// ("mi:<X-IDENTITY-HEADER>"), so that every recorded call says which writer
// made it. ARM itself checks only that a bearer token is present.

// audience is the ARM token audience of Azure's public cloud.
const audience = "https://management.core.windows.net/"

// BaseURL is the address req reached the emulator at, with a trailing
// slash: operation URLs (Location, Azure-AsyncOperation) are built on it,
// so a client polls the server it called.
func BaseURL(req *http.Request) string {
	scheme, host := req.URL.Scheme, req.Host
	if host == "" {
		host = req.URL.Host
	}
	if scheme == "" {
		scheme = "http"
		if req.TLS != nil {
			scheme = "https"
		}
	}
	return scheme + "://" + host + "/"
}

func (e *Emulator) metadata(req *http.Request) *reply {
	base := BaseURL(req)
	doc := []map[string]any{{
		"name":            "AzureCloud",
		"resourceManager": base,
		"authentication":  map[string]any{"audiences": []string{audience}, "loginEndpoint": base, "tenant": "common"},
		"suffixes":        map[string]any{"storage": "core.windows.net", "acrLoginServer": "azurecr.io"},
	}}
	b, _ := json.Marshal(doc)
	return jsonReply(http.StatusOK, b)
}

func (e *Emulator) token(req *http.Request) *reply {
	who := req.Header.Get("X-IDENTITY-HEADER")
	switch {
	case who != "":
	case strings.EqualFold(req.Header.Get("Metadata"), "true"):
		who = "imds"
	default:
		return errorReply(http.StatusBadRequest, "BadRequest", "Required metadata header not specified")
	}
	resource := req.URL.Query().Get("resource")
	if resource == "" {
		return errorReply(http.StatusBadRequest, "BadRequest", "resource is required")
	}
	e.mu.Lock()
	e.counters.Tokens++
	e.mu.Unlock()
	expires := time.Now().Add(24 * time.Hour).Unix()
	b, _ := json.Marshal(map[string]string{
		"access_token": "mi:" + who, "expires_on": strconv.FormatInt(expires, 10), "expires_in": "86400",
		"resource": resource, "token_type": "Bearer",
	})
	return jsonReply(http.StatusOK, b)
}

// clientOf names who made a request: the identity its token names (a
// managed identity's, "mi:", or Remote's, "id:"), else the SDK in its
// User-Agent.
func clientOf(req *http.Request) string {
	tok, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	for _, prefix := range []string{"mi:", "id:"} {
		if name, ok := strings.CutPrefix(tok, prefix); ok {
			return name
		}
	}
	ua := req.Header.Get("User-Agent")
	if i := strings.IndexByte(ua, ' '); i > 0 {
		ua = ua[:i]
	}
	return ua
}
