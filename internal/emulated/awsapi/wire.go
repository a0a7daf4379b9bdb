package awsapi

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The two query protocols on the wire. Requests are the same for both: a
// form-encoded POST with Action and Version; they differ in how lists are
// keyed (awsquery "Names.member.1", ec2query "InstanceId.1"), in the
// response documents (awsquery wraps the output in <OpResult> with
// PascalCase members and <member> list items; ec2query puts camelCase
// members straight under <OpResponse> with <item> list items) and in the
// error documents (awsErrorResponse, ec2ErrorResponse).

const (
	elbNamespace = "http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/"
	ec2Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"
	// The API versions the SDKs send, which also say which service a
	// request is for.
	elbVersion = "2015-12-01"
	ec2Version = "2016-11-15"
)

// namespace is an awsquery API's XML namespace.
func namespace(api string) string {
	if api == apiClassic {
		return classicNamespace
	}
	return elbNamespace
}

// params reads a request's form below a prefix ("" at the top).
type params struct {
	v      url.Values
	prefix string
}

func (p params) get(name string) string { return p.v.Get(p.prefix + name) }

func (p params) has(name string) bool { _, ok := p.v[p.prefix+name]; return ok }

func (p params) int32(name string) (int32, bool) {
	n, err := strconv.ParseInt(p.get(name), 10, 32)
	return int32(n), err == nil
}

// sub is the structure under name ("HealthCheck." …).
func (p params) sub(name string) params { return params{v: p.v, prefix: p.prefix + name + "."} }

// items is a list of structures, keyed either way: name.member.N.* or
// name.N.*, N from 1 with no gap.
func (p params) items(name string) []params {
	var out []params
	for _, mid := range []string{".member.", "."} {
		for n := 1; ; n++ {
			pre := p.prefix + name + mid + strconv.Itoa(n) + "."
			if !p.hasPrefix(pre) {
				break
			}
			out = append(out, params{v: p.v, prefix: pre})
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// strings is a list of scalars, keyed name.member.N or name.N.
func (p params) strings(name string) []string {
	var out []string
	for _, mid := range []string{".member.", "."} {
		for n := 1; ; n++ {
			k := p.prefix + name + mid + strconv.Itoa(n)
			if _, ok := p.v[k]; !ok {
				break
			}
			out = append(out, p.v.Get(k))
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

func (p params) hasPrefix(pre string) bool {
	for k := range p.v {
		if strings.HasPrefix(k, pre) {
			return true
		}
	}
	return false
}

// apiError is a refused request, as the protocol answers it.
type apiError struct {
	status  int
	code    string
	message string
	// sender: the caller's fault (Type Sender) rather than the service's.
	sender bool
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...), sender: status < 500}
}

// awsErrorResponse is awsquery's error document:
// <ErrorResponse><Error><Type/><Code/><Message/></Error><RequestId/></ErrorResponse>.
type awsErrorResponse struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

// ec2ErrorResponse is ec2query's:
// <Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>.
type ec2ErrorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

func writeXML(w http.ResponseWriter, status int, doc []byte) {
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
	w.WriteHeader(status)
	_, _ = w.Write(doc)
}

func errorDocument(api string, e *apiError, requestID string) []byte {
	var doc any
	if api == apiEC2 {
		doc = ec2ErrorResponse{Code: e.code, Message: e.message, RequestID: requestID}
	} else {
		typ := "Sender"
		if !e.sender {
			typ = "Receiver"
		}
		doc = awsErrorResponse{Xmlns: namespace(api), Type: typ, Code: e.code, Message: e.message, RequestID: requestID}
	}
	b, _ := xml.Marshal(doc)
	return append([]byte(xml.Header), b...)
}

// resultDocument wraps an operation's output: awsquery
// <OpResponse><OpResult>out</OpResult><ResponseMetadata><RequestId/>…;
// ec2query <OpResponse><requestId/>out's members…</OpResponse>.
func resultDocument(api, op string, out any, requestID string) ([]byte, error) {
	var b strings.Builder
	b.WriteString(xml.Header)
	enc := xml.NewEncoder(&b)
	if api == apiEC2 {
		start := xml.StartElement{Name: xml.Name{Local: op + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: ec2Namespace}}}
		if err := enc.EncodeToken(start); err != nil {
			return nil, err
		}
		if err := enc.EncodeElement(requestID, xml.StartElement{Name: xml.Name{Local: "requestId"}}); err != nil {
			return nil, err
		}
		if out != nil {
			// The output's members go straight under the response
			// element: encode it as an element and keep its children.
			var inner strings.Builder
			if err := xml.NewEncoder(&inner).EncodeElement(out, xml.StartElement{Name: xml.Name{Local: "x"}}); err != nil {
				return nil, err
			}
			if err := enc.Flush(); err != nil {
				return nil, err
			}
			b.WriteString(innerXML(inner.String()))
		}
		if err := enc.EncodeToken(start.End()); err != nil {
			return nil, err
		}
	} else {
		start := xml.StartElement{Name: xml.Name{Local: op + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: namespace(api)}}}
		if err := enc.EncodeToken(start); err != nil {
			return nil, err
		}
		res := xml.StartElement{Name: xml.Name{Local: op + "Result"}}
		if out == nil {
			out = struct{}{}
		}
		if err := enc.EncodeElement(out, res); err != nil {
			return nil, err
		}
		meta := struct {
			RequestID string `xml:"RequestId"`
		}{requestID}
		if err := enc.EncodeElement(meta, xml.StartElement{Name: xml.Name{Local: "ResponseMetadata"}}); err != nil {
			return nil, err
		}
		if err := enc.EncodeToken(start.End()); err != nil {
			return nil, err
		}
	}
	if err := enc.Flush(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// innerXML strips the outer element of a marshalled document.
func innerXML(doc string) string {
	open := strings.IndexByte(doc, '>')
	end := strings.LastIndexByte(doc, '<')
	if open < 0 || end <= open || strings.HasSuffix(doc[:open], "/") {
		return ""
	}
	return doc[open+1 : end]
}
