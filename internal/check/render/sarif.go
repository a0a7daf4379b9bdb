package render

import (
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"zerodrop.dev/zerodrop/internal/check/rules"
	"zerodrop.dev/zerodrop/internal/version"
)

// RepositoryURL is where the module path zerodrop.dev/zerodrop points: SARIF's
// informationUri, and the base of each rule's helpUri (its docs/rules page).
const RepositoryURL = "https://zerodrop.dev/zerodrop"

// SARIF 2.1.0 (OASIS), the subset code-scanning services read.
const (
	sarifVersion = "2.1.0"
	sarifSchema  = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)

type sarifLog struct {
	Version string     `json:"version"`
	Schema  string     `json:"$schema"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool    sarifTool     `json:"tool"`
	Results []sarifResult `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	Version        string      `json:"version"`
	InformationURI string      `json:"informationUri"`
	Rules          []sarifRule `json:"rules"`
}

type sarifRule struct {
	ID                   string       `json:"id"`
	Name                 string       `json:"name"`
	ShortDescription     sarifText    `json:"shortDescription"`
	HelpURI              string       `json:"helpUri"`
	Help                 sarifText    `json:"help"`
	DefaultConfiguration sarifDefault `json:"defaultConfiguration"`
}

type sarifDefault struct {
	Level string `json:"level"`
}

type sarifText struct {
	Text string `json:"text"`
}

type sarifResult struct {
	RuleID    string          `json:"ruleId"`
	RuleIndex int             `json:"ruleIndex"`
	Level     string          `json:"level"`
	Message   sarifText       `json:"message"`
	Locations []sarifLocation `json:"locations"`
	// RelatedLocations holds the chart template of a helm template
	// "# Source:" comment, the file a user edits.
	RelatedLocations []sarifLocation `json:"relatedLocations,omitempty"`
	// Suppressions marks a finding suppressed by zerodrop.dev/ignore.
	Suppressions []sarifSuppression `json:"suppressions,omitempty"`
}

type sarifSuppression struct {
	Kind          string `json:"kind"`
	Justification string `json:"justification"`
}

type sarifLocation struct {
	ID               *int           `json:"id,omitempty"`
	PhysicalLocation sarifPhysical  `json:"physicalLocation"`
	LogicalLocations []sarifLogical `json:"logicalLocations,omitempty"`
	Message          *sarifText     `json:"message,omitempty"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifact `json:"artifactLocation"`
	Region           *sarifRegion  `json:"region,omitempty"`
}

type sarifArtifact struct {
	URI string `json:"uri"`
	// URIBaseID is %SRCROOT% for a relative path: code scanning resolves
	// it from the repository root.
	URIBaseID string `json:"uriBaseId,omitempty"`
}

// srcRoot is the conventional uriBaseId of the source tree's root.
const srcRoot = "%SRCROOT%"

type sarifRegion struct {
	StartLine int `json:"startLine"`
}

type sarifLogical struct {
	Name               string `json:"name"`
	FullyQualifiedName string `json:"fullyQualifiedName"`
	Kind               string `json:"kind"`
}

// SARIF prints one run with every rule in tool.driver.rules, so that results
// can refer to them by index, and one result per finding.
func SARIF(w io.Writer, rep rules.Report) error {
	run := sarifRun{
		Tool: sarifTool{Driver: sarifDriver{
			Name: "zerodrop", Version: version.String(), InformationURI: RepositoryURL,
		}},
		Results: make([]sarifResult, 0, len(rep.Findings)),
	}
	index := map[string]int{}
	for i, r := range rules.All {
		index[r.ID] = i
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{
			ID:                   r.ID,
			Name:                 r.ID,
			ShortDescription:     sarifText{Text: r.Title},
			HelpURI:              RepositoryURL + "/docs/rules/" + r.ID + ".md",
			Help:                 sarifText{Text: r.Title + ". See docs/rules/" + r.ID + ".md in the zerodrop repository."},
			DefaultConfiguration: sarifDefault{Level: level(r.Severity)},
		})
	}
	rep.ResolveLines()
	for _, f := range rep.Findings {
		art := sarifArtifact{URI: fileURI(f.Source.File)}
		if !f.Source.Cluster && !filepath.IsAbs(f.Source.File) {
			art.URIBaseID = srcRoot
		}
		loc := sarifLocation{
			PhysicalLocation: sarifPhysical{ArtifactLocation: art},
			LogicalLocations: []sarifLogical{{Name: objectName(f.Object), FullyQualifiedName: f.Object, Kind: "resource"}},
		}
		if f.Line > 0 {
			loc.PhysicalLocation.Region = &sarifRegion{StartLine: f.Line}
		}
		res := sarifResult{
			RuleID:    f.Rule,
			RuleIndex: index[f.Rule],
			Level:     level(f.Severity),
			Message:   sarifText{Text: f.Message + ". Fix: " + f.Fix + "."},
			Locations: []sarifLocation{loc},
		}
		if t := f.Source.Template; t != "" {
			// The template's own line is unknown: the rendered text is not
			// the template's. Its path starts with the chart's name, not
			// with a directory of the repository, so it has no uriBaseId.
			id := 1
			res.RelatedLocations = []sarifLocation{{
				ID:               &id,
				PhysicalLocation: sarifPhysical{ArtifactLocation: sarifArtifact{URI: fileURI(t)}},
				Message:          &sarifText{Text: "rendered from the Helm chart template " + t + " (the # Source: comment before the object)"},
			}}
		}
		if f.Suppressed {
			res.Suppressions = []sarifSuppression{{Kind: "inSource", Justification: f.Reason}}
		}
		run.Results = append(run.Results, res)
	}
	return encode(w, sarifLog{Version: sarifVersion, Schema: sarifSchema, Runs: []sarifRun{run}})
}

func level(s rules.Severity) string {
	if s == rules.Error {
		return "error"
	}
	return "warning"
}

// fileURI turns a path into a URI reference: relative paths stay relative
// (resolved against the checkout by code-scanning services), absolute ones
// become file URIs.
func fileURI(p string) string {
	slash := filepath.ToSlash(p)
	if filepath.IsAbs(p) {
		if !strings.HasPrefix(slash, "/") { // a Windows drive letter
			slash = "/" + slash
		}
		return (&url.URL{Scheme: "file", Path: slash}).String()
	}
	return (&url.URL{Path: slash}).String()
}

func objectName(object string) string {
	if i := strings.LastIndexByte(object, '/'); i >= 0 {
		return object[i+1:]
	}
	return object
}
