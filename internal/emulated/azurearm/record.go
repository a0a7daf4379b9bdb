package azurearm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// Call is one request the emulator answered, as a reader of the record sees
// it: who made it, what it named, and for a write what it changed.
type Call struct {
	Time       time.Time
	Client     string // the identity of its token (see identity.go), else its SDK
	Method     string
	Kind       string // the route: loadBalancer, backendAddressPool, …
	Resource   string // resource group/[parent/]name
	APIVersion string
	Status     int
	// Error is the ARM error code and message of a refused request.
	Error string
	// Changes lists what a write changed in the stored document, one line
	// per changed leaf: "+ path = value", "- path = value",
	// "~ path: old -> new". Children in arrays are named by their name.
	// ETags and provisioning states are left out.
	Changes []string
}

// Write reports whether the call was a write that ARM accepted.
func (c Call) Write() bool {
	return (c.Method == http.MethodPut || c.Method == http.MethodDelete) && c.Status < 300
}

func (c Call) String() string {
	s := fmt.Sprintf("%s %s %s %s/%s → %d", c.Client, c.Method, c.APIVersion, c.Kind, c.Resource, c.Status)
	if c.Error != "" {
		s += " " + c.Error
	}
	if c.Write() {
		s += fmt.Sprintf(" (%d changes)", len(c.Changes))
	}
	return s
}

// maxCalls bounds the record: the oldest calls go first.
const maxCalls = 100_000

func (e *Emulator) record(req *http.Request, t target, rep *reply, before, after []byte) {
	c := Call{
		Time: time.Now(), Client: clientOf(req), Method: req.Method, Kind: t.kind,
		Resource: strings.Trim(t.rg+"/"+t.parent+"/"+t.name, "/"), APIVersion: t.apiVersion, Status: rep.status,
	}
	c.Resource = strings.ReplaceAll(c.Resource, "//", "/")
	if t.kind == "" {
		c.Resource = req.URL.Path
	}
	if c.Write() {
		c.Changes = diffJSON(before, after)
	}
	if rep.status >= http.StatusBadRequest {
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(rep.body, &body)
		c.Error = body.Error.Code + ": " + body.Error.Message
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.appendCall(c)
}

// appendCall adds c to the record; e.mu is held.
func (e *Emulator) appendCall(c Call) {
	if len(e.calls) >= maxCalls {
		e.calls = slices.Delete(e.calls, 0, len(e.calls)/10)
	}
	e.calls = append(e.calls, c)
}

// Superseded reports whether the call is the end of a write's operation
// that a later write to the same load balancer superseded.
func (c Call) Superseded() bool {
	return c.Kind == kOperation && strings.HasPrefix(c.Error, superseded+":")
}

// Calls returns the calls recorded since the n-th (0: all); n is where the
// next reading starts.
func (e *Emulator) Calls(since int) (calls []Call, next int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if since > len(e.calls) {
		since = len(e.calls)
	}
	return slices.Clone(e.calls[since:]), len(e.calls)
}

// diffJSON lists the leaves that differ between two JSON documents.
func diffJSON(before, after []byte) []string {
	a, b := map[string]string{}, map[string]string{}
	flatten(decode(before), "", a)
	flatten(decode(after), "", b)
	var out []string
	for k, v := range a {
		w, ok := b[k]
		switch {
		case !ok:
			out = append(out, "- "+k+" = "+v)
		case v != w:
			out = append(out, "~ "+k+": "+v+" -> "+w)
		}
	}
	for k, w := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "+ "+k+" = "+w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][2:] < out[j][2:] })
	return out
}

func decode(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

// flatten writes every leaf of v under its path. Array elements that carry
// a name are keyed by it, so that a reordering is no change.
func flatten(v any, path string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if k == "etag" || k == "provisioningState" {
				continue
			}
			flatten(c, strings.TrimPrefix(path+"."+k, "."), out)
		}
	case []any:
		for i, c := range x {
			key := fmt.Sprint(i)
			if m, ok := c.(map[string]any); ok {
				if n, ok := m["name"].(string); ok {
					key = n
				}
			}
			flatten(c, path+"["+key+"]", out)
		}
	case nil:
		if path != "" {
			out[path] = "null"
		}
	default:
		b, _ := json.Marshal(x)
		out[path] = string(b)
	}
}
