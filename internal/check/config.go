package check

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"zerodrop.dev/zerodrop/internal/check/rules"
	"zerodrop.dev/zerodrop/internal/check/timing"
)

// ConfigFile is read from the working directory when --config is not given.
const ConfigFile = ".zerodrop.yaml"

// fail-on levels.
const (
	failOnError   = "error"
	failOnWarning = "warning"
	failOnNone    = "none"
)

// fileConfig is .zerodrop.yaml:
//
//	disable: [ZD301, ZD303]   # or [all]
//	enable: [ZD201]           # applied after disable
//	failOn: warning           # error (default), warning or none
//	providers:
//	  azure: {registrationSeconds: 20, deregistrationSeconds: 25}
type fileConfig struct {
	disable, enable []string
	failOn          string
	providers       map[timing.Provider]timing.Overrides
}

// loadConfig reads path, or ConfigFile when path is empty and it exists.
// Every error names file:line.
func loadConfig(path string) (*fileConfig, error) {
	explicit := path != ""
	if !explicit {
		path = ConfigFile
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return &fileConfig{}, nil
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	return cfg, nil
}

// lineError is an error at a line of the config file; it prints as
// "LINE: message" after the file name and a colon.
func lineError(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%d: %s", n.Line, fmt.Sprintf(format, args...))
}

func parseConfig(data []byte) (*fileConfig, error) {
	cfg := &fileConfig{providers: map[timing.Provider]timing.Overrides{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// yaml.v3 says "yaml: line N: …": keep its line in front.
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if n, tail, ok := strings.Cut(rest, ": "); ok {
				return nil, fmt.Errorf("%s: %s", n, tail)
			}
		}
		return nil, fmt.Errorf("1: %s", msg)
	}
	if len(doc.Content) == 0 {
		return cfg, nil // empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, lineError(root, "want a mapping of disable, enable, failOn and providers")
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		var err error
		switch key.Value {
		case "disable":
			cfg.disable, err = ruleList(val, true)
		case "enable":
			cfg.enable, err = ruleList(val, false)
		case "failOn":
			cfg.failOn = val.Value
			if val.Kind != yaml.ScalarNode || checkFailOn(val.Value) != nil {
				err = lineError(val, "failOn: want error, warning or none")
			}
		case "providers":
			err = parseProviders(val, cfg.providers)
		default:
			err = lineError(key, "unknown key %q (want disable, enable, failOn or providers)", key.Value)
		}
		if err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func ruleList(n *yaml.Node, allowAll bool) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, lineError(n, "want a list of rule IDs")
	}
	var ids []string
	for _, e := range n.Content {
		id := strings.ToUpper(e.Value)
		if e.Kind != yaml.ScalarNode || !knownRule(id, allowAll) {
			return nil, lineError(e, "unknown rule %q", e.Value)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func parseProviders(n *yaml.Node, out map[timing.Provider]timing.Overrides) error {
	if n.Kind != yaml.MappingNode {
		return lineError(n, "providers: want a mapping of provider to timings")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, val := n.Content[i], n.Content[i+1]
		p, err := timing.ParseProvider(name.Value)
		if err != nil {
			return lineError(name, "%v", err)
		}
		if val.Kind != yaml.MappingNode {
			return lineError(val, "providers.%s: want registrationSeconds and deregistrationSeconds", p)
		}
		ov := timing.NoOverrides
		for j := 0; j+1 < len(val.Content); j += 2 {
			k, v := val.Content[j], val.Content[j+1]
			secs, err := strconv.Atoi(v.Value)
			if v.Kind != yaml.ScalarNode || err != nil || secs < 0 {
				return lineError(v, "providers.%s.%s: want whole seconds, 0 or more", p, k.Value)
			}
			switch k.Value {
			case "registrationSeconds":
				ov.Registration = secs
			case "deregistrationSeconds":
				ov.Deregistration = secs
			default:
				return lineError(k, "providers.%s: unknown key %q (want registrationSeconds or deregistrationSeconds)", p, k.Value)
			}
		}
		out[p] = ov
	}
	return nil
}

func knownRule(id string, allowAll bool) bool {
	if allowAll && id == "ALL" {
		return true
	}
	_, ok := rules.ByID(id)
	return ok
}

func checkFailOn(v string) error {
	switch v {
	case failOnError, failOnWarning, failOnNone:
		return nil
	}
	return fmt.Errorf("--fail-on %q: want error, warning or none", v)
}

// applyConfig merges the file into the options; flags win over the file.
func applyConfig(o *options, cfg *fileConfig) error {
	for _, list := range [][]string{o.disable, o.enable} {
		for _, id := range list {
			if !knownRule(strings.ToUpper(id), true) {
				return fmt.Errorf("unknown rule %q", id)
			}
		}
	}
	o.disabled = map[string]bool{}
	set := func(ids []string, off bool) {
		for _, id := range ids {
			id = strings.ToUpper(id)
			if id == "ALL" {
				for _, r := range rules.All {
					o.disabled[r.ID] = off
				}
				continue
			}
			o.disabled[id] = off
		}
	}
	set(cfg.disable, true)
	set(cfg.enable, false)
	set(o.disable, true)
	set(o.enable, false)
	if o.failOn == "" {
		o.failOn = cmp.Or(cfg.failOn, failOnError)
	}
	if ov, ok := cfg.providers[o.provider]; ok {
		if o.overrides.Registration < 0 {
			o.overrides.Registration = ov.Registration
		}
		if o.overrides.Deregistration < 0 {
			o.overrides.Deregistration = ov.Deregistration
		}
	}
	return checkFailOn(o.failOn)
}

// filter drops the findings of disabled rules.
func filter(rep rules.Report, disabled map[string]bool) rules.Report {
	if len(disabled) == 0 {
		return rep // nothing to drop: no copy of a large report
	}
	kept := make([]rules.Finding, 0, len(rep.Findings))
	for _, f := range rep.Findings {
		if !disabled[f.Rule] {
			kept = append(kept, f)
		}
	}
	rep.Findings = kept
	return rep
}

// fails reports whether a finding that is not suppressed reaches failOn.
func fails(rep rules.Report, failOn string) bool {
	for _, f := range rep.Findings {
		if f.Suppressed {
			continue
		}
		if failOn == failOnWarning || (failOn == failOnError && f.Severity == rules.Error) {
			return true
		}
	}
	return false
}
